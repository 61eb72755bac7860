"""Generalised Advantage Estimation on (T, N) tensors, on whatever device they live on."""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lambda_: float,
    next_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets for a rollout of T steps of N envs.

    Args:
        rewards, terminated, truncated: (T, N), the results of step t.
        values: (T + 1, N), V(obs_t) for t = 0..T; the last row bootstraps the rollout's end.
        next_values: (T, N), the value of the observation step t led to, where that is not
            ``obs[t + 1]`` (SAME_STEP autoreset: the real final observation of an episode that
            ended at t); default ``values[1:]``.

    With NEXT_STEP autoreset, the observation after a done step is the episode's real final
    observation, so ``values[t + 1]`` is the right bootstrap for a truncated episode, and a
    termination bootstraps with zero. No advantage flows back across a done step.
    """
    if next_values is None:
        next_values = values[1:]
    not_terminated = (~terminated).to(values.dtype)
    decay = (~(terminated | truncated)).to(values.dtype) * (gamma * lambda_)  # γλ, or 0 after a done step
    deltas = rewards + gamma * next_values * not_terminated - values[:-1]
    advantages = torch.empty_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):  # one op a step: on a CPU the loop is op dispatch
        running = torch.addcmul(deltas[t], decay[t], running, out=advantages[t])
    return advantages, advantages + values[:-1]
