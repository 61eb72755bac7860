"""Scripted torch vector envs, one per autoreset convention, whose every step is known.

Env ``i``'s episode ``e`` (counted from 0) lasts ``length(i, e) = 2 + (i + e) % 3`` steps and
ends by termination if ``i + e`` is even, by truncation if odd. The observation is ``(e, k)``
after ``k`` steps of episode ``e``, so the real final one is ``(e, length)``; step ``k``
(``1..length``) earns ``10 * e + k``. The envs are torch ``VectorEnv``s: they take actions as
tensors on their device (every action's type and device is recorded in ``action_devices``)
and return tensors there, with no episode statistics: the runner keeps them.

* ``ScriptedNextStep``: NEXT_STEP; the step after an episode's end only resets (reward 0, no flags).
* ``ScriptedSameStep``: SAME_STEP; an episode's last step returns the next one's first
  observation ``(e + 1, 0)``, the real final one in ``infos["final_obs"]`` / ``infos["_final_obs"]``
  (only on steps where some episode ended, as gymnasium's vector envs do).
* ``ScriptedSameStepNoFinalObs``: SAME_STEP without a final observation (Isaac Lab's style,
  ``infos["time_outs"]`` marks truncations).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space


def episode_length(i: int, e: int) -> int:
    return 2 + (i + e) % 3


def terminates(i: int, e: int) -> bool:
    return (i + e) % 2 == 0


def reward(e: int, k: int) -> float:
    return 10.0 * e + k


def episodes(i: int, count: int) -> list[tuple[float, int, bool]]:
    """(return, length, terminated) of env ``i``'s first ``count`` episodes."""
    return [
        (sum(reward(e, k) for k in range(1, episode_length(i, e) + 1)), episode_length(i, e), terminates(i, e))
        for e in range(count)
    ]


class ScriptedTorchEnv(gym.vector.VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
    final_obs = False

    def __init__(self, num_envs: int = 4, device="cpu"):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.single_observation_space = gym.spaces.Box(0.0, 1000.0, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.action_devices: set[tuple[type, torch.device]] = set()
        index = torch.arange(num_envs, device=self.device)
        self._index = index

    def reset(self, *, seed=None, options=None):
        self._episode = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._k = torch.zeros_like(self._episode)
        self._pending = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return self._obs(), {}

    def _obs(self) -> torch.Tensor:
        return torch.stack([self._episode, self._k], dim=1).float()

    def step(self, actions):
        self.action_devices.add((type(actions), getattr(actions, "device", None)))
        ongoing = ~self._pending
        if self.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP:  # reset rows: only the reset
            self._episode = torch.where(self._pending, self._episode + 1, self._episode)
            self._k = torch.where(self._pending, 0, self._k + 1)
        else:
            self._k = self._k + 1
        rewards = torch.where(ongoing, 10.0 * self._episode + self._k, 0.0).float()
        done = ongoing & (self._k == 2 + (self._index + self._episode) % 3)
        terminated = done & ((self._index + self._episode) % 2 == 0)
        truncated = done & ~terminated
        info = {}
        if self.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP:
            self._pending = done
            return self._obs(), rewards, terminated, truncated, info
        final = self._obs()
        self._episode = torch.where(done, self._episode + 1, self._episode)
        self._k = torch.where(done, 0, self._k)
        if self.final_obs and bool(done.any()):
            info = {"final_obs": torch.where(done[:, None], final, 0.0), "_final_obs": done}
        elif not self.final_obs:
            info = {"time_outs": truncated}
        return self._obs(), rewards, terminated, truncated, info


class ScriptedNextStep(ScriptedTorchEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}


class ScriptedSameStep(ScriptedTorchEnv):
    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
    final_obs = True


class ScriptedSameStepNoFinalObs(ScriptedTorchEnv):
    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}


class ScriptedNoMode(ScriptedTorchEnv):
    metadata = {}


# A vector entry point only: gym.make / make_vec(sync) could not build it.
if "ScriptedNextStep-v0" not in gym.registry:
    gym.register("ScriptedNextStep-v0", vector_entry_point=ScriptedNextStep)


MODES = {"next_step": ScriptedNextStep, "same_step": ScriptedSameStep, "same_step_no_final_obs": ScriptedSameStepNoFinalObs}


def expected_rows(mode: str, i: int, steps: int, rollout_length: int) -> tuple[list[dict], list[tuple[float, int]]]:
    """What the runner's rollouts hold for env ``i``'s first ``steps`` steps from a reset, in
    rollouts of ``rollout_length`` (``obs``, ``reward``, ``terminated``, ``truncated``, ``valid``
    and ``next_obs``, what ``Rollout.next_obs()`` gives), and the (return, length) of every
    episode that ended in them.

    ``next_obs`` is the real observation the step led to, the final one where an episode ended;
    without a final observation, a terminated step holds its own observation instead, and a
    truncated one is not trained on (``valid`` False), the step before it becoming the
    truncation (not across rollouts: the earlier one is gone)."""
    rows, ended = [], []
    e, k, pending = 0, 0, False
    for t in range(steps):
        before = (float(e), float(k))
        if mode == "next_step" and pending:
            e, k, pending = e + 1, 0, False
            rows.append(dict(obs=before, reward=0.0, terminated=False, truncated=False, valid=False, next_obs=(e, 0)))
            continue
        k += 1
        done = k == episode_length(i, e)
        term, trunc = done and terminates(i, e), done and not terminates(i, e)
        row = dict(obs=before, reward=reward(e, k), terminated=term, truncated=trunc, valid=True, next_obs=(e, k))
        if done:
            ended.append((sum(reward(e, j) for j in range(1, k + 1)), k))
            if mode == "next_step":
                pending = True
            else:
                e, k = e + 1, 0
                if mode == "same_step_no_final_obs":
                    row["next_obs"] = before
                    if trunc:
                        row["valid"] = False
                        if t % rollout_length:
                            rows[-1]["truncated"] = True
        rows.append(row)
    for row in rows:
        row["next_obs"] = tuple(float(x) for x in row["next_obs"])
    return rows, ended
