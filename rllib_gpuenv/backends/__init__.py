"""Interchangeable ways to execute the core step of any env: torch, numba CPU, numba CUDA."""

from __future__ import annotations

import importlib.util

import torch

from rllib_gpuenv.backends.base import Backend
from rllib_gpuenv.core.devices import resolve_device
from rllib_gpuenv.core.step import BoundEnv

BACKENDS = ("torch", "numba-cpu", "numba-cuda")


def _numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None


def available_backends(device: torch.device) -> list[str]:
    """Backends that can run on ``device`` on this machine."""
    names = ["torch"]
    if not _numba_installed():
        return names
    if device.type == "cpu":
        names.append("numba-cpu")
    from rllib_gpuenv.backends.numba_cuda import SIMULATED, cuda_available

    if cuda_available() and (device.type == "cuda") != SIMULATED:
        names.append("numba-cuda")
    return names


def runs_only_on_the_cpu(name: str) -> bool:
    """Whether backend ``name`` runs nowhere but on the CPU (numba-cpu), so that a device left
    to choose ("auto") is the CPU for its envs and for the runner that steps them."""
    return name == "numba-cpu"


def backend_device(name: str, device: str | torch.device | None) -> torch.device:
    """The device an env on backend ``name`` runs on. ``"auto"`` (or None) is the GPU if there
    is one, the CPU for a backend that ``runs_only_on_the_cpu``."""
    if runs_only_on_the_cpu(name) and (device is None or (isinstance(device, str) and device == "auto")):
        return torch.device("cpu")
    return resolve_device(device)


def make_backend(
    name: str,
    env: BoundEnv,
    num_envs: int,
    device: torch.device,
    dtype: torch.dtype,
    threads_per_block: int | None = None,
    num_threads: int | None = None,
) -> Backend:
    """Build a backend by name; ``"auto"`` picks numba-cuda on a GPU, numba-cpu on the CPU (and
    ignores the other backend's settings, so that one config runs on either)."""
    if name == "auto":
        if device.type == "cpu":  # never the CUDA simulator (slow), so numba.cuda is not imported (~0.5 s)
            name = "numba-cpu" if _numba_installed() else "torch"
        else:
            name = "numba-cuda" if "numba-cuda" in available_backends(device) else "torch"
        threads_per_block = threads_per_block if name == "numba-cuda" else None
        num_threads = num_threads if name == "numba-cpu" else None
    if name not in BACKENDS:
        raise ValueError(
            f"unknown backend {name!r}: choose one of 'auto', {', '.join(map(repr, BACKENDS))} "
            f"(usable on {device} here: {', '.join(available_backends(device))})"
        )
    if threads_per_block is not None and name != "numba-cuda":
        raise ValueError(f"threads_per_block is a numba-cuda setting, but backend={name!r}: leave it unset")
    if num_threads is not None and name != "numba-cpu":
        raise ValueError(f"num_threads is a numba-cpu setting, but backend={name!r}: leave it unset")
    if name == "torch":
        from rllib_gpuenv.backends.torch_backend import TorchBackend

        return TorchBackend(env, num_envs, device, dtype)
    if not _numba_installed():
        raise ValueError(f"backend {name!r} needs numba: `pip install numba` (or use backend='torch')")
    if name == "numba-cpu":
        from rllib_gpuenv.backends.numba_cpu import NumbaCPUBackend

        return NumbaCPUBackend(env, num_envs, device, dtype, num_threads)
    from rllib_gpuenv.backends.numba_cuda import DEFAULT_THREADS_PER_BLOCK, NumbaCUDABackend

    return NumbaCUDABackend(env, num_envs, device, dtype, threads_per_block or DEFAULT_THREADS_PER_BLOCK)


__all__ = ["BACKENDS", "Backend", "available_backends", "make_backend"]
