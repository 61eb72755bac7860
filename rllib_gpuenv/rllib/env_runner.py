"""``DeviceEnvRunner``: RLlib rollouts that never leave the device.

RLlib's stock runner asks the env for host numpy, splits every step into per-env episode
objects in Python, and converts actions back to numpy. This runner keeps the vector env and
the whole actor-critic module on one device and collects a rollout into preallocated
``(T, N)`` tensors: per step one module forward pass and one ``env.step`` on the device, no
per-env Python, no host round trip. At the end it computes GAE on the device and returns a
ready training batch (``DevicePPO`` feeds it to the learner without touching it).

Plug it in with ``config.env_runners(env_runner_cls=DeviceEnvRunner)``;
``DevicePPOConfig`` does that for you.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import logging
import math

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.framework import get_device
from ray.rllib.utils.metrics import (
    EPISODE_DURATION_SEC_MEAN,
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
)

from rllib_gpuenv.devices import resolve_device
from rllib_gpuenv.envs import env_definition, make_vector_env
from rllib_gpuenv.rllib.gae import compute_gae
from rllib_gpuenv.wrappers import CheckDevice, DeviceEnv

logger = logging.getLogger(__name__)

ADVANTAGES = "advantages"
VALUE_TARGETS = "value_targets"


@dataclasses.dataclass
class PlayedSteps:
    """What an evaluation ``sample`` returns: RLlib only counts the env steps of what it gets back."""

    steps: int

    def env_steps(self) -> int:
        return self.steps

    agent_steps = env_steps


def runner_device(requested, worker_index: int, num_gpus_per_env_runner: float, config=None) -> torch.device:
    """The device an env runner works on.

    ``"auto"``: the GPU Ray assigned to a remote runner (``num_gpus_per_env_runner > 0``); the
    local runner (``num_env_runners=0``) takes the GPU too when there is one, unlike RLlib's
    stock runner; otherwise the CPU. Anything else must exist (``resolve_device``).
    """
    if requested not in (None, "auto"):
        return resolve_device(requested)
    if not torch.cuda.is_available():
        if worker_index and num_gpus_per_env_runner:
            logger.warning("Ray assigned a GPU to env runner %d, but torch sees no CUDA device: using the CPU", worker_index)
        return torch.device("cpu")
    if worker_index and num_gpus_per_env_runner:
        return get_device(config, num_gpus_per_env_runner)
    if not worker_index:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")  # a remote runner without GPUs (Ray hides them from it)


def make_device_env(env_spec, num_envs: int, device: torch.device, env_config: dict) -> gym.vector.VectorEnv:
    """A vector env whose inputs and outputs are tensors on ``device``.

    This package's envs (``GPUCartPole-v1``, ...) are built directly on the device; any other
    gymnasium id is vectorised by gymnasium and wrapped in ``DeviceEnv``.
    """
    env_config = {k: v for k, v in dict(env_config or {}).items() if k not in ("num_envs", "device", "output")}
    if isinstance(env_spec, str) and ":" in env_spec:  # "module:Env-v0": the module registers it (as gymnasium does)
        importlib.import_module(env_spec.split(":", 1)[0])
    if isinstance(env_spec, str) and env_definition(env_spec) is not None:
        return make_vector_env(env_spec, num_envs, device=device, output="torch", reuse_outputs=True, validate_actions=False, **env_config)
    if not isinstance(env_spec, str):
        raise ValueError(f"the device env runner needs a gymnasium env id, got {env_spec!r}")
    return DeviceEnv(gym.make_vec(env_spec, num_envs=num_envs, vectorization_mode="sync", **env_config), device)


class DeviceEnvRunner(SingleAgentEnvRunner):
    """An RLlib env runner whose env, module and rollout buffer share one device."""

    def make_env(self) -> None:
        config = self.config
        requested = getattr(config, "env_runner_device", "auto")
        if config.in_evaluation and getattr(config, "eval_env_runner_device", None) is not None:
            requested = config.eval_env_runner_device
        self._device = runner_device(requested, self.worker_index or 0, config.num_gpus_per_env_runner, config)
        env = make_device_env(config.env, config.num_envs_per_env_runner, self._device, config.env_config)
        if env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP) != AutoresetMode.NEXT_STEP:
            raise ValueError(f"the device env runner needs NEXT_STEP autoreset, {env} has {env.metadata['autoreset_mode']}")
        if getattr(config, "check_devices", False):
            env = CheckDevice(env, self._device)
        self.env = env
        self.num_envs = env.num_envs
        self._obs = None
        # (return, length) of this runner's share of the last metrics_num_episodes_for_smoothing episodes
        window = math.ceil(config.metrics_num_episodes_for_smoothing / max(1, config.num_env_runners))
        self._recent_episodes: collections.deque = collections.deque(maxlen=max(1, window))
        role = "evaluation env runner" if config.in_evaluation else "env runner"
        logger.info("%s %d: %d envs of %s on %s", role, self.worker_index or 0, self.num_envs, config.env, self._device)

    def make_module(self) -> None:
        # The whole actor-critic (not RLlib's inference-only copy): GAE needs the values here.
        spec = self.config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=False)
        self.module = spec.build().to(self._device)
        if getattr(self.config, "check_devices", False):
            CheckDevice(self.module, self._device)
        self._action_dist_cls = self.module.get_exploration_action_dist_cls()

    def _reset(self) -> None:
        seed = None if self.config.seed is None else self.config.seed + (self.worker_index or 0)
        self._obs, _ = self.env.reset(seed=seed)
        self._prev_done = torch.zeros(self.num_envs, dtype=torch.bool, device=self._device)

    def _distribution(self, logits: torch.Tensor, explore: bool):
        dist = self._action_dist_cls.from_logits(logits)
        return dist if explore else dist.to_deterministic()

    def sample(self, *, num_timesteps=None, num_episodes=None, explore=None, random_actions=False, force_reset=False, **kwargs):
        """Collect ``rollout_length`` steps of every env; return a ready PPO batch (a dict of tensors).

        Rows whose step was a NEXT_STEP reset (the action was ignored) get ``loss_mask`` False.
        Asked for a number of episodes or timesteps (what RLlib's evaluation does), the runner
        plays that much from fresh episodes instead, logs the episode metrics and returns no batch.
        """
        explore = self.config.explore if explore is None else explore
        if num_episodes is not None or num_timesteps is not None:
            return self._evaluate(num_episodes, num_timesteps, explore)
        T, N, device = self.config.rollout_length, self.num_envs, self._device
        if self._obs is None or force_reset:
            self._reset()
        obs = torch.empty((T, *self._obs.shape), dtype=self._obs.dtype, device=device)
        actions = torch.empty((T, N), dtype=torch.int64, device=device)
        logp = torch.empty((T, N), device=device)
        dist_inputs = None
        values = torch.empty((T + 1, N), device=device)
        rewards = torch.empty((T, N), device=device)
        terminated = torch.empty((T, N), dtype=torch.bool, device=device)
        truncated = torch.empty((T, N), dtype=torch.bool, device=device)
        mask = torch.empty((T, N), dtype=torch.bool, device=device)
        ended = torch.zeros((T, N), dtype=torch.bool, device=device)
        ended_return = torch.zeros((T, N), device=device)
        ended_length = torch.zeros((T, N), dtype=torch.int32, device=device)

        with torch.no_grad():
            for t in range(T):
                obs[t] = self._obs
                out = self.module.forward_train({Columns.OBS: obs[t]})
                logits = out[Columns.ACTION_DIST_INPUTS]
                if dist_inputs is None:
                    dist_inputs = torch.empty((T, *logits.shape), device=device)
                dist_inputs[t] = logits
                values[t] = self.module.compute_values({Columns.OBS: obs[t]}, embeddings=out.get(Columns.EMBEDDINGS))
                dist = self._distribution(logits, explore)
                actions[t] = dist.sample()
                logp[t] = dist.logp(actions[t]) if explore else 0.0
                self._obs, rewards[t], terminated[t], truncated[t], info = self.env.step(actions[t])
                mask[t] = ~self._prev_done
                self._prev_done = terminated[t] | truncated[t]
                if "episode" in info:
                    ended[t] = info["_episode"]
                    ended_return[t] = info["episode"]["r"]
                    ended_length[t] = info["episode"]["l"]
            values[T] = self.module.compute_values({Columns.OBS: self._obs})

        advantages, value_targets = compute_gae(rewards, values, terminated, truncated, self.config.gamma, self.config.lambda_)
        valid = advantages[mask]
        advantages = (advantages - valid.mean()) / valid.std().clamp_min(1e-4)

        batch = {
            Columns.OBS: obs.flatten(0, 1),
            Columns.ACTIONS: actions.flatten(),
            Columns.ACTION_LOGP: logp.flatten(),
            Columns.ACTION_DIST_INPUTS: dist_inputs.flatten(0, 1),
            ADVANTAGES: advantages.flatten(),
            VALUE_TARGETS: value_targets.flatten(),
            Columns.LOSS_MASK: mask.flatten(),
        }
        self._log_metrics(T * N, ended_return[ended], ended_length[ended])
        if self.worker_index:  # a remote runner: the batch travels through Ray's object store
            batch = {k: v.cpu() for k, v in batch.items()}
        return batch

    def _evaluate(self, num_episodes: int | None, num_timesteps: int | None, explore: bool) -> list[PlayedSteps]:
        """Play fresh episodes in all envs at once until ``num_episodes`` have ended (or
        ``num_timesteps`` env steps have passed); log their metrics on the device's behalf.

        Checks the episode count on the host only every ``CHECK_EVERY`` steps.
        """
        CHECK_EVERY = 16
        self._reset()
        returns, lengths, steps = [], [], 0
        ended_count = torch.zeros((), dtype=torch.int64, device=self._device)
        with torch.no_grad():
            while True:
                logits = self.module.forward_inference({Columns.OBS: self._obs})[Columns.ACTION_DIST_INPUTS]
                self._obs, _, _, _, info = self.env.step(self._distribution(logits, explore).sample())
                steps += self.num_envs
                if "episode" in info:
                    ended = info["_episode"]
                    returns.append(info["episode"]["r"][ended])
                    lengths.append(info["episode"]["l"][ended])
                    ended_count += ended.sum()
                if num_timesteps is not None and steps >= num_timesteps:
                    break
                if num_episodes is not None and steps % (CHECK_EVERY * self.num_envs) == 0 and int(ended_count) >= num_episodes:
                    break
        self._obs = None  # the next training rollout starts from fresh episodes
        returns = torch.cat(returns) if returns else torch.zeros(0)
        lengths = torch.cat(lengths) if lengths else torch.zeros(0, dtype=torch.int32)
        if num_episodes is not None:
            returns, lengths = returns[:num_episodes], lengths[:num_episodes]
        self._log_metrics(steps, returns, lengths, windowed=False)
        return [PlayedSteps(steps)]

    def _log_metrics(self, num_steps: int, returns: torch.Tensor, lengths: torch.Tensor, windowed: bool = True) -> None:
        """RLlib's standard counters and episode metrics, from the on-device episode stats.

        ``episode_return_mean`` is the mean of this runner's last
        ``metrics_num_episodes_for_smoothing / num_env_runners`` episodes, as RLlib documents
        that setting (RLlib 2.60's own runner clears its window on every reduce, so there it is
        the mean of the episodes that ended in the iteration, and one lucky iteration passes a
        stop criterion). The runner keeps the window on the host. One small host transfer per
        rollout: the returns and lengths of the episodes that ended in it. Not ``windowed``
        (evaluation), it reports just the given episodes.
        """
        self._increase_sampled_metrics(num_steps, len(returns))
        if windowed:
            window = self._recent_episodes.maxlen
            self._recent_episodes.extend(zip(returns[-window:].tolist(), lengths[-window:].tolist()))
            returns, lengths = zip(*self._recent_episodes) if self._recent_episodes else ((), ())
        else:
            returns, lengths = returns.tolist(), lengths.tolist()
        if returns:
            self._log_episode_summary(returns, lengths)

    def _log_episode_summary(self, returns, lengths) -> None:
        """The keys RLlib's runner logs per episode (``_log_episode_metrics``), logged once
        for the whole window: its mean, min and max. RLlib reduces each runner's values to
        one mean (min, max) anyway, so the results are the same, at 9 calls instead of 9
        per episode."""
        win = self._recent_episodes.maxlen  # RLlib's: metrics_num_episodes_for_smoothing / runners
        mean_return = sum(returns) / len(returns)
        for key, value in (
            (EPISODE_LEN_MEAN, sum(lengths) / len(lengths)),
            (EPISODE_RETURN_MEAN, mean_return),
            (EPISODE_DURATION_SEC_MEAN, 0.0),  # per-episode wall time is not tracked
            (("agent_episode_return_mean", DEFAULT_AGENT_ID), mean_return),
            (("module_episode_return_mean", DEFAULT_MODULE_ID), mean_return),
        ):
            self.metrics.log_value(key, value, window=win)
        for key, reduce, value in (
            (EPISODE_LEN_MIN, "min", min(lengths)),
            (EPISODE_RETURN_MIN, "min", min(returns)),
            (EPISODE_LEN_MAX, "max", max(lengths)),
            (EPISODE_RETURN_MAX, "max", max(returns)),
        ):
            self.metrics.log_value(key, value, reduce=reduce, window=win)

    def get_metrics(self):
        return self.metrics.reduce()
