"""``Rollout``: T steps of N envs as ``(T, N, ...)`` tensors, what every algorithm here consumes.

The device env runner fills one per ``sample()``; it does not know which algorithm it serves.
PPO turns a rollout into values and advantages on its learner (``ppo.py``), DQN into n-step
transitions for its replay buffer (``dqn.py``).

With NEXT_STEP autoreset (gymnasium's, which every env here follows), ``obs[t + 1]`` is always
the observation step ``t`` led to, also when the episode ended there: on the step after a
``terminated`` or ``truncated`` one, the env only resets (its action is ignored, reward 0, no
flags). So ``next_obs`` is ``obs`` shifted by one with ``last_obs`` appended, a truncation
bootstraps from it, and the reset rows are masked out by ``valid``.

With SAME_STEP autoreset, a step that ends an episode returns the next episode's first
observation, so ``obs[t + 1]`` is not what it led to: the runner keeps that in
``next_observations`` (the real final observation where an episode ended), every step is
valid, and ``next_obs()`` returns it. An env that shows no final observation on a truncation
has that step masked out and the step before it truncated instead (``autoreset.py``).
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class Rollout:
    """One rollout of ``T`` steps of ``N`` envs, on the runner's device (or the CPU, in transit).

    Attributes:
        obs: ``(T, N, *obs_shape)`` the observation each action was chosen on.
        actions: ``(T, N, *action_shape)`` the actions the module chose, as sampled (a ``Box``
            action before it is unsquashed or clipped to the space for the env).
        logp: ``(T, N)`` log-probability of each action under the module's distribution
            (0 where the module chose without one, or without exploring).
        dist_inputs: ``(T, N, D)`` the action distribution's inputs, or None where the module
            returned actions directly (DQN's epsilon-greedy).
        rewards, terminated, truncated: ``(T, N)`` what the env returned for each action.
        valid: ``(T, N)`` False on NEXT_STEP reset rows (the env ignored the action), and on
            SAME_STEP truncations the env showed no final observation for (``autoreset.py``).
        last_obs: ``(N, *obs_shape)`` the observation after the last step.
        next_observations: ``(T, N, *obs_shape)`` under SAME_STEP autoreset, the observation each
            step led to (the episode's real final one where it ended); None under NEXT_STEP,
            where that is ``obs`` shifted by one.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    logp: torch.Tensor
    dist_inputs: torch.Tensor | None
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor
    last_obs: torch.Tensor
    next_observations: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_envs(self) -> int:
        return self.rewards.shape[1]

    @property
    def num_env_steps(self) -> int:
        return self.length * self.num_envs

    def next_obs(self) -> torch.Tensor:
        """``(T, N, *obs_shape)``: the observation each step led to (see the module doc)."""
        if self.next_observations is not None:
            return self.next_observations
        return torch.cat([self.obs[1:], self.last_obs.unsqueeze(0)])

    def to(self, device: torch.device | str) -> Rollout:
        return Rollout(
            **{
                f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                for f in dataclasses.fields(self)
            }
        )

    def split_envs(self, parts: int) -> list[Rollout]:
        """``parts`` rollouts of whole envs (one per learner), in env order; ``parts`` divides ``num_envs``."""
        chunks = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            chunks[f.name] = (None,) * parts if value is None else torch.chunk(value, parts, dim=_env_dim(f.name))
        return [Rollout(**{name: chunks[name][i] for name in chunks}) for i in range(parts)]

    @staticmethod
    def concat_envs(rollouts: list[Rollout]) -> Rollout:
        """Rollouts of the same length from several runners side by side: ``(T, sum N, ...)``."""
        if len(rollouts) == 1:
            return rollouts[0]
        values = {}
        for f in dataclasses.fields(Rollout):
            parts = [getattr(r, f.name) for r in rollouts]
            values[f.name] = None if parts[0] is None else torch.cat(parts, dim=_env_dim(f.name))
        return Rollout(**values)


def _env_dim(field: str) -> int:
    """The env dimension of a ``Rollout`` field: ``last_obs`` is ``(N, ...)``, the rest ``(T, N, ...)``."""
    return 0 if field == "last_obs" else 1
