"""What a backend is: a way to execute the core step (``core/step.py``) of one bound env."""

from __future__ import annotations

import torch

from rllib_gpuenv.core.buffers import EnvBuffers, StepConstants, StepOutputs
from rllib_gpuenv.core.step import BoundEnv


class Backend:
    """How the step runs. Subclasses implement ``step``; ``reset`` (a one-off) is shared."""

    name: str = ""

    def __init__(self, env: BoundEnv, num_envs: int, device: torch.device, dtype: torch.dtype):
        self.env = env
        self.num_envs = num_envs
        self.device = device
        self.dtype = dtype

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, constants: StepConstants, fresh: bool) -> StepOutputs:
        """Advance every env. ``fresh``: the caller keeps the outputs, so they must not be
        overwritten by a later step; otherwise a backend may reuse one set of output buffers."""
        raise NotImplementedError

    def reset(self, buffers: EnvBuffers, constants: StepConstants) -> None:
        """Draw every env's initial state for its current episode counter."""
        buffers.state.copy_(self.env.initial_states(buffers.episode, constants))
