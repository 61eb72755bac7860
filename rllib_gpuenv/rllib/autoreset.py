"""One ``env.step`` of a device vector env, in any autoreset convention, as rollout rows.

A gymnasium vector env resets a finished episode by itself, in the way its
``metadata["autoreset_mode"]`` names (``gymnasium.vector.AutoresetMode``); the device env runner
reads each step through ``StepReader`` and so trains on the env's real episodes whichever it is:

* **NEXT_STEP** (gymnasium's default; this package's envs): the step that ends an episode
  returns its real final observation; the next step only resets (its action is ignored, reward
  0, no flags). That reset row is not trained on (``valid`` False), and ``obs[t + 1]`` is what
  step ``t`` led to, so nothing else is needed.
* **SAME_STEP with a final observation** (gymnasium 1.x: ``infos["final_obs"]`` and its mask
  ``infos["_final_obs"]``; Brax's and gymnax's style, with the final observation kept): the step
  that ends an episode returns the next episode's first observation, and every step is a real
  one. The rollout keeps what each step led to (``Rollout.next_observations``): the real final
  observation where an episode ended, the returned one elsewhere. PPO bootstraps a truncation
  from the final observation's value, DQN stores it as the transition's next observation.
* **SAME_STEP without a final observation** (no ``"final_obs"`` in the step's infos: Isaac
  Lab's style, where ``time_outs`` truncate): a terminated step needs no next observation (it
  bootstraps from zero; its rollout row holds the step's own observation, never used). A
  truncated step's next observation was never shown, and bootstrapping from the reset
  observation's value (the next episode's) would be wrong, so the runner does not train on that
  last step: it is masked out (``valid`` False, as a NEXT_STEP reset row is) and the step before
  it becomes the truncation, bootstrapped from the observation the env did show, ``obs[t]``.
  Every target stays exact; the cost is one transition per truncated episode (its reward still
  counts in the reported return). Where the truncated step is a rollout's first, the previous
  rollout already bootstrapped its last step from that observation, the same target.

Episode returns and lengths come from the env's ``infos["episode"]`` for this package's envs
(and ``DeviceEnv``'s); for any other env the reader keeps them itself, on the device: the sum of
the rewards and the number of steps the env played, up to the step that ended the episode.
"""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode

MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)


def autoreset_mode(env: gym.vector.VectorEnv) -> AutoresetMode:
    """The env's ``metadata["autoreset_mode"]``: NEXT_STEP or SAME_STEP (an enum member or its value),
    else an error naming the choices."""
    choices = " or ".join(f"gymnasium.vector.AutoresetMode.{m.name}" for m in MODES)
    name = type(env.unwrapped).__name__
    declared = (env.metadata or {}).get("autoreset_mode")
    if declared is None:
        raise ValueError(
            f"{name} declares no metadata['autoreset_mode']: set it to {choices} (the device env runner needs to know "
            "how the env resets a finished episode to train on its real episodes)"
        )
    try:
        mode = AutoresetMode(getattr(declared, "value", declared))
    except ValueError:
        raise ValueError(f"{name}'s metadata['autoreset_mode'] is {declared!r}: it must be {choices}") from None
    if mode not in MODES:
        raise ValueError(
            f"{name} has metadata['autoreset_mode']={mode}: its envs never reset a finished episode themselves, and "
            f"the device env runner resets no single env: make it {choices}"
        )
    return mode


class StepRows(NamedTuple):
    """What the runner keeps of one step (all ``(N, ...)`` tensors on the env's device)."""

    obs: torch.Tensor  # what the next action is chosen on
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor  # trained on (a NEXT_STEP reset row, or a truncated step without its final obs: not)
    next_obs: torch.Tensor | None  # SAME_STEP: the observation the step led to (the real final one at an end)
    cut_before: torch.Tensor | None  # SAME_STEP without final obs: envs whose previous step now ends the episode
    played: torch.Tensor  # the env played the step's action (False on NEXT_STEP reset rows)
    episodes: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # (ended, returns, lengths) of real episodes


class StepReader:
    """Reads a vector env's steps in its autoreset convention (see the module doc); holds which
    envs ended their episode last step and, for envs without statistics, the running returns."""

    def __init__(self, env: gym.vector.VectorEnv, env_keeps_statistics: bool):
        self.mode = autoreset_mode(env)
        self.same_step = self.mode == AutoresetMode.SAME_STEP
        self.env_keeps_statistics = env_keeps_statistics
        self.prev_done: torch.Tensor | None = None

    def reset(self, num_envs: int, device: torch.device) -> None:
        self.prev_done = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self._return = torch.zeros(num_envs, dtype=torch.float32, device=device)
        self._length = torch.zeros(num_envs, dtype=torch.int32, device=device)

    def carried(self) -> dict[str, torch.Tensor]:
        """What the reader carries from one step to the next (``rollout_graph.py`` copies it in)."""
        return {"prev_done": self.prev_done, "return": self._return, "length": self._length}

    def set_carried(self, tensors: dict[str, torch.Tensor]) -> None:
        self.prev_done, self._return, self._length = tensors["prev_done"], tensors["return"], tensors["length"]

    def episodes_so_far(self) -> dict:
        """The running return and length of every env's episode (kept for envs without statistics),
        as host copies: with ``prev_done``, what a resumed runner needs to go on exactly."""
        return {"return": self._return.cpu().clone(), "length": self._length.cpu().clone()}

    def resume(self, prev_done: torch.Tensor, episodes_so_far: dict | None, device: torch.device) -> None:
        """Go on from a checkpoint's ``prev_done`` and ``episodes_so_far()`` (zeros where it has none)."""
        self.reset(len(prev_done), device)
        self.prev_done = prev_done.to(device)
        if episodes_so_far is not None:
            self._return, self._length = episodes_so_far["return"].to(device), episodes_so_far["length"].to(device)

    def step(self, obs_before, obs, rewards, terminated, truncated, info: dict) -> StepRows:
        """Rows for the step taken on ``obs_before`` (a copy the env cannot overwrite) that returned the rest."""
        terminated, truncated = terminated.bool(), truncated.bool()
        done = terminated | truncated
        next_obs = cut = None
        if not self.same_step:
            played = valid = ~self.prev_done
        else:
            played = torch.ones_like(done)
            final = info.get("final_obs") if isinstance(info, dict) else None
            if final is not None:
                if not isinstance(final, torch.Tensor):
                    raise TypeError(
                        f"infos['final_obs'] is a {type(final).__name__}: the device env runner needs a tensor of all "
                        "envs' observations (any value where infos['_final_obs'] is False)"
                    )
                mask = info.get("_final_obs", done)
                next_obs = torch.where(_rows(mask.bool(), obs), final.to(obs.dtype), obs)
                valid = played
            else:  # no final observation: the step's own obs stands in (used only where it ends in a termination)
                next_obs = torch.where(_rows(done, obs), obs_before.to(obs.dtype), obs)
                cut = truncated & ~terminated
                valid = ~cut
        self.prev_done = done
        return StepRows(
            obs, rewards, terminated, truncated, valid, next_obs, cut, played, self._episodes(rewards, done, played, info)
        )

    def _episodes(self, rewards, done, played, info):
        if self.env_keeps_statistics:
            if "episode" not in info:
                return None  # copies: the env may reuse its output buffers next step
            return info["_episode"].clone(), info["episode"]["r"].clone(), info["episode"]["l"].clone()
        returns = self._return + torch.where(played, rewards.to(torch.float32), 0.0)
        lengths = self._length + played.to(torch.int32)
        ended = done & played
        self._return = torch.where(ended, 0.0, returns)
        self._length = torch.where(ended, 0, lengths)
        return ended, returns, lengths


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` (N,) shaped to broadcast over ``like`` (N, ...)."""
    return mask.reshape(mask.shape + (1,) * (like.dim() - 1))
