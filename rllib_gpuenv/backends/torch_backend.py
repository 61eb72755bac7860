"""The torch backend: the shared physics on whole tensors, on any torch device.

Branch-free (``torch.where`` instead of masks and indexing), so on a GPU a step is a fixed
sequence of kernel launches with no host synchronisation.
"""

from __future__ import annotations

import torch

from rllib_gpuenv.backends.base import Backend, EnvBuffers, StepOutputs, StepParams
from rllib_gpuenv.physics import FORCE_MAG, euler_step, is_terminated, step_reward
from rllib_gpuenv.rng import bits_to_uniform, reset_bits


def initial_states(episode: torch.Tensor, seed32: int, low: float, high: float) -> torch.Tensor:
    """(4, N) float64 initial states of each env's episode ``episode[i]`` (see ``rng.py``)."""
    env_index = torch.arange(episode.shape[0], device=episode.device, dtype=torch.int64)
    columns = [
        bits_to_uniform(reset_bits(seed32, env_index, episode, k).double(), low, high)
        for k in range(4)
    ]
    return torch.stack(columns)


class TorchBackend(Backend):
    name = "torch"

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, params: StepParams, fresh: bool) -> StepOutputs:
        b = buffers
        resetting = b.prev_done
        force = torch.where(actions == 1, FORCE_MAG, -FORCE_MAG).to(self.dtype)

        x, x_dot, theta, theta_dot = b.state
        for _ in range(params.substeps):
            x, x_dot, theta, theta_dot = euler_step(
                x, x_dot, theta, theta_dot, force, torch.cos(theta), torch.sin(theta), params.dt
            )
        stepped = torch.stack((x, x_dot, theta, theta_dot))

        # NEXT_STEP autoreset: envs whose episode ended last step start the next one instead.
        # On the CPU only compute initial states when some env needs one (the check is free
        # there); on a GPU always compute them rather than synchronise to ask.
        if b.state.device.type != "cpu" or bool(resetting.any()):
            b.episode += resetting
            initial = initial_states(b.episode, params.seed32, params.low, params.high)
            stepped = torch.where(resetting, initial.to(self.dtype), stepped)
        b.state.copy_(stepped)

        not_resetting = ~resetting
        terminated = is_terminated(x, theta) & not_resetting
        steps = torch.where(resetting, 0, b.steps + 1).to(torch.int32)
        truncated = (steps >= params.max_steps) & not_resetting
        reward = torch.where(
            resetting, 0.0, step_reward(terminated, params.sutton_barto)
        ).to(torch.float32)
        b.steps.copy_(steps)
        b.ep_return.copy_(torch.where(resetting, 0.0, b.ep_return + reward))
        done = terminated | truncated
        b.prev_done.copy_(done)

        return StepOutputs(
            obs=stepped.to(torch.float32),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_return=torch.where(done, b.ep_return, 0.0),
            final_length=torch.where(done, steps, 0),
            final_mask=done,
        )
