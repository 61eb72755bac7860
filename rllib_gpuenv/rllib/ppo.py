"""PPO fed with device batches: ``DevicePPOConfig`` and ``DevicePPO``.

The only change to RLlib's PPO is where the training data comes from: the env runners return
ready batches (advantages already computed on their device, see ``DeviceEnvRunner``) and the
training step hands them to the LearnerGroup as a ``batch``, bypassing the episode-based
learner connectors. When runner and learner share a device nothing is copied; remote runners'
batches travel through Ray as usual. The loss is RLlib's own PPO loss.
"""

from __future__ import annotations

import torch
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.algorithms.ppo import PPO, PPOConfig
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner


class DevicePPOConfig(PPOConfig):
    """PPO with ``DeviceEnvRunner``; the train batch follows from the rollout shape.

    ``train_batch_size_per_learner = rollout_length × num_envs_per_env_runner ×
    max(1, num_env_runners) / max(1, num_learners)``, set for you; setting another value, or
    a minibatch size that does not divide it, is an error that says what would fit.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DevicePPO)
        self.env_runner_cls = DeviceEnvRunner
        self.env_runner_device = "auto"
        self.rollout_length = 32
        self.check_devices = False
        # CartPole-ready defaults: one local runner on the default device, 64 envs.
        self.num_env_runners = 0
        self.num_envs_per_env_runner = 64
        self._train_batch_size_per_learner = None  # derived in validate()
        self.minibatch_size = 512
        self.num_epochs = 10

    def device_rollouts(self, *, device=NotProvided, rollout_length=NotProvided, check_devices=NotProvided) -> "DevicePPOConfig":
        """Where env runners work (``"auto"``, ``"cpu"``, ``"cuda:N"``), steps per env per
        rollout, and whether to check every env/module tensor's device (debugging)."""
        if device is not NotProvided:
            self.env_runner_device = device
        if rollout_length is not NotProvided:
            self.rollout_length = rollout_length
        if check_devices is not NotProvided:
            self.check_devices = check_devices
        return self

    @property
    def device_batch_size(self) -> int:
        """Env steps one iteration collects: rollout_length × envs per runner × runners."""
        return self.rollout_length * self.num_envs_per_env_runner * max(1, self.num_env_runners)

    def validate(self) -> None:
        if not isinstance(self.rollout_length, int) or self.rollout_length < 1:
            raise ValueError(f"rollout_length must be a positive integer, got {self.rollout_length!r}")
        if self.env_runner_device not in (None, "auto"):
            from rllib_gpuenv.devices import resolve_device

            resolve_device(self.env_runner_device)  # an unknown or absent device fails here, clearly
        learners = max(1, self.num_learners)
        total = self.device_batch_size
        if total % learners:
            raise ValueError(f"the batch of {total} env steps (rollout_length × envs × runners) does not split over {learners} learners")
        expected = total // learners
        if self._train_batch_size_per_learner is None:
            self._train_batch_size_per_learner = expected
        elif self._train_batch_size_per_learner != expected:
            raise ValueError(
                f"train_batch_size_per_learner={self.train_batch_size_per_learner}, but each iteration collects "
                f"rollout_length={self.rollout_length} × num_envs_per_env_runner={self.num_envs_per_env_runner} × "
                f"{max(1, self.num_env_runners)} runner(s) = {total} env steps: leave it unset, or change those"
            )
        if self.minibatch_size is None or expected % self.minibatch_size:
            raise ValueError(
                f"minibatch_size={self.minibatch_size} does not divide the per-learner batch of {expected} env steps: "
                f"use a divisor such as {_divisor_near(expected, self.minibatch_size or 512)}"
            )
        super().validate()


def _divisor_near(n: int, target: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: abs(d - target))


class DevicePPO(PPO):
    """RLlib PPO whose training step consumes the device env runners' ready batches."""

    @classmethod
    def get_default_config(cls) -> DevicePPOConfig:
        return DevicePPOConfig()

    def setup(self, config) -> None:
        super().setup(config)
        self._sync_whole_module()

    def set_state(self, state) -> None:
        super().set_state(state)  # restores the learner, and syncs only the actor to runners
        self._sync_whole_module()

    def _sync_whole_module(self) -> None:
        """Runners compute values for GAE, so they need the critic too, not only the actor."""
        if self.env_runner_group is not None and self.learner_group is not None:
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=False)

    def training_step(self) -> None:
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            batches, runner_metrics = self._sample_batches()
            if not batches:
                return
            self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
            columns = {k: torch.cat([b[k] for b in batches]) if len(batches) > 1 else batches[0][k] for k in batches[0]}
            num_steps = len(columns["obs"])

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            learner_results = self.learner_group.update(
                batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=num_steps),
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)),
                    NUM_MODULE_STEPS_TRAINED_LIFETIME: self.metrics.peek(
                        (LEARNER_RESULTS, ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), default=0
                    ),
                },
                num_epochs=self.config.num_epochs,
                minibatch_size=self.config.minibatch_size,
                shuffle_batch_per_epoch=self.config.shuffle_batch_per_epoch,
            )
            self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self._sync_whole_module()

    def _sample_batches(self):
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            runner = group.local_env_runner
            return [runner.sample()], [runner.get_metrics()]
        results = group.foreach_env_runner(lambda runner: (runner.sample(), runner.get_metrics()), local_env_runner=False)
        return [r[0] for r in results], [r[1] for r in results]
