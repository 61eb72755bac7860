"""Choosing a torch device, and checking that a request fits the device before allocating."""

from __future__ import annotations

import logging
import os

import torch

logger = logging.getLogger(__name__)


def available_devices() -> list[str]:
    """Devices torch can use here, e.g. ``['cpu', 'cuda:0']``."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return devices


def parse_device(device: str | torch.device) -> torch.device:
    """``device`` as torch reads it, not checked against this machine (a remote worker's may differ)."""
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"unknown device {device!r}: use 'auto', 'cpu' or 'cuda[:N]' (available here: {', '.join(available_devices())})"
        ) from err


def canonical_device(device: str | torch.device | None) -> torch.device:
    """``device`` as torch reports a tensor's made there (``"cpu:0"`` → ``cpu``, ``"cuda"`` → the
    current GPU's ``cuda:N``; ``"auto"``/None as ``resolve_device``), so that it compares equal to
    ``tensor.device``; not checked against this machine's devices."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return resolve_device(device)
    dev = parse_device(device)
    if dev.type == "cpu":
        return torch.device("cpu")  # a CPU tensor's device has no index, whatever index was asked for
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return dev


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"``/None → the current GPU if there is one, else the CPU; others are validated.

    The result is the device torch reports for a tensor made there (``"cuda"`` → ``cuda:<current>``,
    ``"cpu:0"`` → ``cpu``), so that it compares equal to ``tensor.device``. Asking for a GPU that is
    not there is an error that lists what is available (never a silent fallback, never a hang).
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dev = parse_device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device!r} asked for, but this machine has no CUDA GPU that torch can "
                f"use (available: {', '.join(available_devices())}); use device='cpu' or 'auto'"
            )
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} asked for, but only {torch.cuda.device_count()} GPU(s) are "
                f"visible (available: {', '.join(available_devices())})"
            )
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise ValueError(
            f"device {device!r} is not supported: use 'auto', 'cpu' or 'cuda[:N]' "
            f"(available here: {', '.join(available_devices())})"
        )
    return torch.device("cpu")


def free_memory_bytes(device: torch.device) -> int:
    """Memory that a new allocation on ``device`` can still take."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not a POSIX system: do not guess
        return 1 << 62


def check_fits(num_items: int, bytes_per_item: int, device: torch.device, what: str) -> None:
    """Raise a clear error, before allocating, if ``num_items`` of something cannot fit."""
    need = num_items * bytes_per_item
    free = free_memory_bytes(device)
    if need > free:
        raise MemoryError(
            f"{what}={num_items:,} needs about {need / 2**30:.2f} GiB on {device}, but only "
            f"{free / 2**30:.2f} GiB is free there: use at most {free // bytes_per_item:,}"
        )
