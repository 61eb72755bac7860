"""The tensors of a vector env, sized from its definition: its per-env state and a step's outputs."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import torch


def envs_last(shape: tuple[int, ...], num_envs: int, dtype: torch.dtype, device: torch.device, envs_first_memory: bool):
    """A zeroed ``(*shape, N)`` tensor (envs last, as env code indexes it), laid out in memory with
    each env's ``shape`` block contiguous where ``envs_first_memory`` (a CPU kernel touching one
    env's array stays in a few cache lines) or element by element across envs (coalesced loads on
    a GPU, whole-row ops for torch)."""
    if envs_first_memory:
        return torch.zeros((num_envs, *shape), dtype=dtype, device=device).movedim(0, -1)
    return torch.zeros((*shape, num_envs), dtype=dtype, device=device)


@dataclass
class EnvBuffers:
    """All per-environment state of a vector env, as tensors on its device.

    ``state`` is the physics, structure-of-arrays: one row per component, so that consecutive
    envs are consecutive in memory (vector lanes on a CPU, coalesced loads on a GPU); the env
    shows it as ``(N, S)``. The rest is bookkeeping for autoreset, time limits, seeding and
    episode statistics. Backends update these in place.
    """

    state: torch.Tensor  # (S, N) float32 or float64, in gymnasium's state order
    steps: torch.Tensor  # (N,) int32, steps taken in the current episode (its length so far)
    prev_done: torch.Tensor  # (N,) bool, episode ended on the previous step -> reset now
    episode: torch.Tensor  # (N,) int64, episode counter, the RNG counter for initial states
    ep_return: torch.Tensor  # (N,) the env's dtype, return so far in the current episode
    array: torch.Tensor | None = None  # (*array_shape, N) the env's dtype: the env's own array, if any

    @classmethod
    def allocate(
        cls,
        state_size: int,
        num_envs: int,
        dtype: torch.dtype,
        device: torch.device,
        array_shape: tuple[int, ...] = (),
        envs_first_memory: bool = False,
    ) -> EnvBuffers:
        def zeros(*shape, dt):
            return torch.zeros(shape, dtype=dt, device=device)

        return cls(
            state=zeros(state_size, num_envs, dt=dtype),
            steps=zeros(num_envs, dt=torch.int32),
            prev_done=zeros(num_envs, dt=torch.bool),
            episode=zeros(num_envs, dt=torch.int64),
            ep_return=zeros(num_envs, dt=dtype),
            array=envs_last(array_shape, num_envs, dtype, device, envs_first_memory) if array_shape else None,
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every buffer the env has, by name (no ``array`` for envs without one)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


class StepOutputs(NamedTuple):
    """One step's results; ``final_*`` hold the return/length of episodes that ended now."""

    obs: torch.Tensor  # (*obs_shape, N) float32, envs last; the env returns it with envs first
    reward: torch.Tensor  # (N,) float32
    terminated: torch.Tensor  # (N,) bool
    truncated: torch.Tensor  # (N,) bool
    final_return: torch.Tensor  # (N,) the env's dtype, 0 where no episode ended
    final_length: torch.Tensor  # (N,) int32, 0 where no episode ended
    final_mask: torch.Tensor  # (N,) bool, an episode ended at this step

    @classmethod
    def allocate(
        cls,
        obs_shape: tuple[int, ...],
        num_envs: int,
        dtype: torch.dtype,
        device: torch.device,
        envs_first_memory: bool = False,
    ) -> StepOutputs:
        """``envs_first_memory``: array observations laid out env by env (see ``envs_last``)."""

        def empty(*shape, dt):
            return torch.empty(shape, dtype=dt, device=device)

        image = envs_first_memory and len(obs_shape) > 1
        return cls(
            obs=envs_last(obs_shape, num_envs, torch.float32, device, image),
            reward=empty(num_envs, dt=torch.float32),
            terminated=empty(num_envs, dt=torch.bool),
            truncated=empty(num_envs, dt=torch.bool),
            final_return=empty(num_envs, dt=dtype),
            final_length=empty(num_envs, dt=torch.int32),
            final_mask=empty(num_envs, dt=torch.bool),
        )

    def clone(self) -> StepOutputs:
        return StepOutputs(*(t.clone() for t in self))


class StepConstants(NamedTuple):
    """What a step needs besides the buffers, set by ``reset``: the seed, the initial-state
    bounds per component and the time limit."""

    seed32: int
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    max_steps: int


def bytes_per_env(state_size: int, obs_size: int, action_size: int, dtype: torch.dtype) -> int:
    """A generous estimate of device memory per env: buffers, outputs, fresh copies of the
    outputs, actions, and the temporaries of the torch backend's elementwise ops and its kept hash
    of every initial-state number (int64, ``core.step.DrawConstants``). ``state_size`` and
    ``obs_size`` count every number, an env's array and array observation included."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_copy = state_size * itemsize + 4 + 1 + 8 + itemsize + obs_size * 4 + 4 + 1 + 1 + itemsize + 4 + 1
    return 3 * per_copy + 12 * state_size * itemsize + 8 * state_size + 8 * action_size
