"""What a backend is given and what it returns: device buffers and the step's outputs."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import torch


@dataclass
class EnvBuffers:
    """All per-environment state of a CartPole vector env, as tensors on its device.

    ``state`` is the physics, structure-of-arrays: one row per component, so that consecutive
    envs are consecutive in memory (vector lanes on a CPU, coalesced loads on a GPU); the env
    shows it as ``(N, 4)``. The rest is bookkeeping for autoreset, time limits, seeding and
    episode statistics. Backends update these in place.
    """

    state: torch.Tensor  # (4, N) float32 or float64: x, x_dot, theta, theta_dot
    steps: torch.Tensor  # (N,) int32, steps taken in the current episode (its length so far)
    prev_done: torch.Tensor  # (N,) bool, episode ended on the previous step -> reset now
    episode: torch.Tensor  # (N,) int64, episode counter, the RNG counter for initial states
    ep_return: torch.Tensor  # (N,) float32, return so far in the current episode

    @classmethod
    def allocate(cls, num_envs: int, dtype: torch.dtype, device: torch.device) -> "EnvBuffers":
        def zeros(*shape, dt):
            return torch.zeros(shape, dtype=dt, device=device)

        return cls(
            state=zeros(4, num_envs, dt=dtype),
            steps=zeros(num_envs, dt=torch.int32),
            prev_done=zeros(num_envs, dt=torch.bool),
            episode=zeros(num_envs, dt=torch.int64),
            ep_return=zeros(num_envs, dt=torch.float32),
        )

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


class StepOutputs(NamedTuple):
    """One step's results; ``final_*`` hold the return/length of episodes that ended now."""

    obs: torch.Tensor  # (4, N) float32, like ``EnvBuffers.state``; the env returns ``obs.T``
    reward: torch.Tensor  # (N,) float32
    terminated: torch.Tensor  # (N,) bool
    truncated: torch.Tensor  # (N,) bool
    final_return: torch.Tensor  # (N,) float32, 0 where no episode ended
    final_length: torch.Tensor  # (N,) int32, 0 where no episode ended
    final_mask: torch.Tensor  # (N,) bool, an episode ended at this step

    @classmethod
    def allocate(cls, num_envs: int, device: torch.device) -> "StepOutputs":
        def empty(*shape, dt):
            return torch.empty(shape, dtype=dt, device=device)

        return cls(
            obs=empty(4, num_envs, dt=torch.float32),
            reward=empty(num_envs, dt=torch.float32),
            terminated=empty(num_envs, dt=torch.bool),
            truncated=empty(num_envs, dt=torch.bool),
            final_return=empty(num_envs, dt=torch.float32),
            final_length=empty(num_envs, dt=torch.int32),
            final_mask=empty(num_envs, dt=torch.bool),
        )

    def clone(self) -> "StepOutputs":
        return StepOutputs(*(t.clone() for t in self))


@dataclass(frozen=True)
class StepParams:
    """The per-env-instance constants a step needs (plain Python numbers)."""

    seed32: int
    low: float
    high: float
    max_steps: int
    substeps: int
    sutton_barto: int
    dt: float
    exact_math: int  # 1: libm trig and IEEE arithmetic (float64); 0: fast approximations


class Backend:
    """How the physics runs. Subclasses implement ``step``; ``reset`` is shared."""

    name: str = ""

    def __init__(self, num_envs: int, device: torch.device, dtype: torch.dtype):
        self.num_envs = num_envs
        self.device = device
        self.dtype = dtype

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, params: StepParams, fresh: bool) -> StepOutputs:
        """Advance every env. ``fresh``: the caller keeps the outputs, so they must not be
        overwritten by a later step; otherwise a backend may reuse one set of output buffers."""
        raise NotImplementedError

    def reset(self, buffers: EnvBuffers, params: StepParams) -> None:
        """Draw every env's initial state for its current episode counter (a one-off, in torch)."""
        from rllib_gpuenv.backends.torch_backend import initial_states

        buffers.state.copy_(
            initial_states(buffers.episode, params.seed32, params.low, params.high)
        )
