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

import logging

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.framework import get_device

from rllib_gpuenv.devices import resolve_device
from rllib_gpuenv.registration import ENV_ID
from rllib_gpuenv.rllib.gae import compute_gae
from rllib_gpuenv.wrappers import CheckDevice, DeviceEnv

logger = logging.getLogger(__name__)

ADVANTAGES = "advantages"
VALUE_TARGETS = "value_targets"


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

    ``GPUCartPole-v1`` is built directly on the device; any other gymnasium id is vectorised
    by gymnasium and wrapped in ``DeviceEnv``.
    """
    env_config = {k: v for k, v in dict(env_config or {}).items() if k not in ("num_envs", "device", "output")}
    if env_spec in (ENV_ID, f"rllib_gpuenv:{ENV_ID}"):
        from rllib_gpuenv.vector_env import CartPoleVectorEnv

        return CartPoleVectorEnv(num_envs, device=device, output="torch", reuse_outputs=True, validate_actions=False, **env_config)
    if not isinstance(env_spec, str):
        raise ValueError(f"the device env runner needs a gymnasium env id, got {env_spec!r}")
    return DeviceEnv(gym.make_vec(env_spec, num_envs=num_envs, vectorization_mode="sync", **env_config), device)


class DeviceEnvRunner(SingleAgentEnvRunner):
    """An RLlib env runner whose env, module and rollout buffer share one device."""

    def make_env(self) -> None:
        config = self.config
        self._device = runner_device(
            getattr(config, "env_runner_device", "auto"), self.worker_index or 0, config.num_gpus_per_env_runner, config
        )
        env = make_device_env(config.env, config.num_envs_per_env_runner, self._device, config.env_config)
        if env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP) != AutoresetMode.NEXT_STEP:
            raise ValueError(f"the device env runner needs NEXT_STEP autoreset, {env} has {env.metadata['autoreset_mode']}")
        if getattr(config, "check_devices", False):
            env = CheckDevice(env, self._device)
        self.env = env
        self.num_envs = env.num_envs
        self._obs = None
        logger.info("env runner %d: %d envs of %s on %s", self.worker_index or 0, self.num_envs, config.env, self._device)

    def make_module(self) -> None:
        # The whole actor-critic (not RLlib's inference-only copy): GAE needs the values here.
        spec = self.config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=False)
        self.module = spec.build().to(self._device)
        if getattr(self.config, "check_devices", False):
            CheckDevice(self.module, self._device)
        self._action_dist_cls = self.module.get_exploration_action_dist_cls()

    def sample(self, *, num_timesteps=None, num_episodes=None, explore=None, random_actions=False, force_reset=False, **kwargs):
        """Collect ``rollout_length`` steps of every env; return a ready PPO batch (a dict of tensors).

        Rows whose step was a NEXT_STEP reset (the action was ignored) get ``loss_mask`` False.
        """
        if num_episodes is not None:
            raise ValueError("the device env runner samples fixed-length rollouts; num_episodes is not supported")
        explore = self.config.explore if explore is None else explore
        T, N, device = self.config.rollout_length, self.num_envs, self._device
        if self._obs is None or force_reset:
            seed = None if self.config.seed is None else self.config.seed + (self.worker_index or 0)
            self._obs, _ = self.env.reset(seed=seed)
            self._prev_done = torch.zeros(N, dtype=torch.bool, device=device)
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
                dist = self._action_dist_cls.from_logits(logits)
                if not explore:
                    dist = dist.to_deterministic()
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
        self._log_metrics(T * N, ended, ended_return, ended_length)
        if self.worker_index:  # a remote runner: the batch travels through Ray's object store
            batch = {k: v.cpu() for k, v in batch.items()}
        return batch

    def _log_metrics(self, num_steps, ended, ended_return, ended_length) -> None:
        """RLlib's standard counters and episode metrics, from the on-device episode stats.

        One small host transfer per rollout: the most recent episodes' returns and lengths
        (as many as RLlib's smoothing window keeps).
        """
        window = max(1, self.config.metrics_num_episodes_for_smoothing // max(1, self.config.num_env_runners))
        returns = ended_return[ended][-window:].tolist()
        lengths = ended_length[ended][-window:].tolist()
        num_episodes = int(ended.sum())
        self._increase_sampled_metrics(num_steps, num_episodes)
        for ret, length in zip(returns, lengths):
            self._log_episode_metrics(length, ret, 0.0)  # per-episode wall time is not tracked

    def get_metrics(self):
        return self.metrics.reduce()
