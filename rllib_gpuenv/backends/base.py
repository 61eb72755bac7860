"""What a backend is: a way to execute the core step (``core/step.py``) of one bound env."""

from __future__ import annotations

import torch

from rllib_gpuenv.core.buffers import EnvBuffers, StepConstants, StepOutputs
from rllib_gpuenv.core.step import BoundEnv, DrawConstants


class Backend:
    """How the step runs. Subclasses implement ``step``; ``reset`` (a one-off) is shared."""

    name: str = ""
    # An env's array (and an array observation) in memory env by env (``buffers.envs_last``):
    # what a CPU kernel wants; a GPU kernel and torch want it element by element across envs.
    envs_first_memory: bool = False

    def __init__(self, env: BoundEnv, num_envs: int, device: torch.device, dtype: torch.dtype):
        self.env = env
        self.num_envs = num_envs
        self.device = device
        self.dtype = dtype

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, constants: StepConstants, fresh: bool) -> StepOutputs:
        """Advance every env. ``fresh``: the caller keeps the outputs, so they must not be
        overwritten by a later step; otherwise a backend may reuse one set of output buffers."""
        raise NotImplementedError

    def load(self, buffers: EnvBuffers, constants: StepConstants, actions: torch.Tensor) -> None:
        """Get ready to step ``buffers`` with actions like ``actions``: a backend that compiles
        does so here, when the env is made, rather than in its first step (the env's build then
        holds the wait, as a jit-compiled env's does, and a step that cannot compile fails early)."""

    def reset(self, buffers: EnvBuffers, constants: StepConstants) -> None:
        """Draw every env's initial state for its current episode counter."""
        numbers, array = self.env.initial_states(buffers.episode, constants, self._draw_constants(constants))
        buffers.state.copy_(numbers)
        if array is not None:
            buffers.array.copy_(array)

    def _draw_constants(self, constants: StepConstants) -> DrawConstants | None:
        """What drawing initial states on tensors may keep between draws; None: made per draw
        (a kernel backend draws on tensors only at ``reset``)."""
        return None

    def kernel_tensors(self, buffers: EnvBuffers) -> dict[str, torch.Tensor]:
        """The buffers a kernel takes by name: every kernel has an ``array`` argument, which an
        env without an array gets as a placeholder it never reads."""
        tensors = buffers.tensors()
        if "array" not in tensors:
            tensors["array"] = torch.zeros((1, 1), dtype=self.dtype, device=self.device)
        return tensors
