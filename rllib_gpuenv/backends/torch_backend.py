"""The torch backend: the core step on whole tensors, on any torch device.

Branch-free (``torch.where`` instead of masks and indexing), so on a GPU a step is a fixed
sequence of kernel launches with no host synchronisation.
"""

from __future__ import annotations

import torch

from rllib_gpuenv.backends.base import Backend
from rllib_gpuenv.core import ops
from rllib_gpuenv.core.buffers import EnvBuffers, StepConstants, StepOutputs
from rllib_gpuenv.core.step import DrawConstants, draw_constants, draw_key


class TorchBackend(Backend):
    name = "torch"
    _draw: DrawConstants | None = None  # this seed's hash of every env, kept between steps

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, constants: StepConstants, fresh: bool) -> StepOutputs:
        b = buffers
        resetting = b.prev_done
        state, array = b.state, b.array
        # NEXT_STEP autoreset: envs whose episode ended last step start the next one. On the CPU
        # initial states are drawn only when some env needs one; on a GPU always, rather than
        # wait for the GPU to answer.
        if not ops.host_reads_are_free(state.device) or bool(resetting.any()):
            b.episode += resetting
            initial, initial_array = self.env.initial_states(b.episode, constants, self._draw_constants(constants))
            state = torch.where(resetting, initial.to(self.dtype), state)
            if array is not None:
                array = torch.where(resetting, initial_array.to(self.dtype), array)
        action = self.env.action_items(actions, self.dtype)
        with ops.tensor_float(self.dtype):
            new_state, obs, reward, terminated, truncated, steps, ep_return = self.env.advance(
                resetting, action, self.env.state_items(state, array), b.steps, b.ep_return, constants.max_steps
            )
        size = self.env.definition.state_size
        b.state.copy_(torch.stack(new_state[:size]))
        if array is not None:
            b.array.copy_(new_state[size])
        b.steps.copy_(steps)
        b.ep_return.copy_(ep_return)
        done = terminated | truncated
        b.prev_done.copy_(done)
        return StepOutputs(
            obs=self.env.observation(obs),
            reward=reward.to(torch.float32),
            terminated=terminated,
            truncated=truncated,
            final_return=torch.where(done, b.ep_return, 0.0),
            final_length=torch.where(done, b.steps, 0),
            final_mask=done,
        )

    def _draw_constants(self, constants: StepConstants) -> DrawConstants:
        """Made at ``reset`` for its seed, reused by every step's draw."""
        if self._draw is None or self._draw.key != draw_key(constants, self.num_envs, self.device):
            self._draw = draw_constants(constants, self.num_envs, self.device)
        return self._draw
