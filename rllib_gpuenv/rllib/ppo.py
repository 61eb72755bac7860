"""PPO fed with device batches: ``DevicePPOConfig`` and ``DevicePPO``.

The only change to RLlib's PPO is where the training data comes from: the env runners return
ready batches (advantages already computed on their device, see ``DeviceEnvRunner``) and the
training step hands them to the LearnerGroup as a ``batch``, bypassing the episode-based
learner connectors. When runner and learner share a device nothing is copied; remote runners'
batches travel through Ray as usual. The loss is RLlib's own PPO loss; the learner
(``DevicePPOTorchLearner``) only makes the optimizer step cheaper.
"""

from __future__ import annotations

import ray
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
from rllib_gpuenv.rllib.resources import check_cluster_fits


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
        self.eval_env_runner_device = None  # None: where the training env runners are
        self.learner_device = None  # None: RLlib's own choice from num_gpus_per_learner
        self.rollout_length = 32
        self.check_devices = False
        # CartPole-ready defaults: one local runner on the default device, 64 envs.
        self.num_env_runners = 0
        self.num_envs_per_env_runner = 64
        self._train_batch_size_per_learner = None  # derived in validate()
        self._derived_train_batch_size = None  # what validate() derived (re-derived when the shape changes)
        self.minibatch_size = 512
        self.num_epochs = 10

    def get_default_learner_class(self):
        from rllib_gpuenv.rllib.learner import DevicePPOTorchLearner

        return DevicePPOTorchLearner

    def device_rollouts(self, *, device=NotProvided, rollout_length=NotProvided, check_devices=NotProvided) -> "DevicePPOConfig":
        """Where env runners work (``"auto"``, ``"cpu"``, ``"cuda:N"``), steps per env per
        rollout, and whether to check every env/module tensor's device (debugging)."""
        return self._set_provided(env_runner_device=device, rollout_length=rollout_length, check_devices=check_devices)

    def devices(self, *, learner=NotProvided, env_runners=NotProvided, evaluation=NotProvided) -> "DevicePPOConfig":
        """One device per role, as rlstructures does: e.g. the learner on ``"cuda:0"``, the
        training env runners on ``"cuda:1"``, the evaluation env runners on ``"cuda:2"``.

        Each is ``"auto"``, ``"cpu"`` or ``"cuda[:N]"``; on one GPU, or on the CPU, the roles
        share it. The learner's device applies to the local learner (``num_learners=0``); Ray
        assigns remote learners their GPUs (``num_gpus_per_learner``).
        """
        return self._set_provided(learner_device=learner, env_runner_device=env_runners, eval_env_runner_device=evaluation)

    def _set_provided(self, **settings) -> "DevicePPOConfig":
        """Set the attributes whose value was given (RLlib's ``NotProvided`` convention)."""
        for name, value in settings.items():
            if value is not NotProvided:
                setattr(self, name, value)
        return self

    @property
    def device_batch_size(self) -> int:
        """Env steps one iteration collects: rollout_length × envs per runner × runners."""
        return self.rollout_length * self.num_envs_per_env_runner * max(1, self.num_env_runners)

    def validate(self) -> None:
        if not isinstance(self.rollout_length, int) or self.rollout_length < 1:
            raise ValueError(f"rollout_length must be a positive integer, got {self.rollout_length!r}")
        from rllib_gpuenv.devices import resolve_device

        for device in (self.env_runner_device, self.eval_env_runner_device):
            if device not in (None, "auto"):
                resolve_device(device)  # an unknown or absent device fails here, clearly
        self._place_learner()
        if not self.in_evaluation:  # evaluation runners play episodes; they make no training batches
            self._derive_train_batch_size()
        super().validate()

    def _derive_train_batch_size(self) -> None:
        learners = max(1, self.num_learners)
        total = self.device_batch_size
        if total % learners:
            raise ValueError(f"the batch of {total} env steps (rollout_length × envs × runners) does not split over {learners} learners")
        expected = total // learners
        if self._train_batch_size_per_learner in (None, self._derived_train_batch_size):
            self._train_batch_size_per_learner = self._derived_train_batch_size = expected
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

    def _place_learner(self) -> None:
        """Turn ``learner_device`` into RLlib's ``num_gpus_per_learner`` and ``local_gpu_idx``."""
        if self.learner_device is None:
            return
        from rllib_gpuenv.devices import resolve_device

        device = resolve_device(self.learner_device)
        if self.num_learners > 0:
            raise ValueError(
                f"learner_device={self.learner_device!r} places the local learner, but num_learners={self.num_learners} "
                "asks for remote learners, whose GPUs Ray assigns: set num_gpus_per_learner instead, or num_learners=0"
            )
        if device.type == "cuda":
            self.num_gpus_per_learner = self.num_gpus_per_learner or 1
            self.local_gpu_idx = device.index if device.index is not None else torch.cuda.current_device()
        else:
            self.num_gpus_per_learner = 0


def _divisor_near(n: int, target: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: abs(d - target))


class DevicePPO(PPO):
    """RLlib PPO whose training step consumes the device env runners' ready batches."""

    @classmethod
    def get_default_config(cls) -> DevicePPOConfig:
        return DevicePPOConfig()

    @classmethod
    def default_resource_request(cls, config):
        """RLlib's request for a Tune trial, once it is sure the cluster can grant it."""
        if ray.is_initialized():  # Tune asks here, in the driver, before it schedules the trial
            check_cluster_fits(cls.get_default_config().update_from_dict(config))
        return super().default_resource_request(config)

    def setup(self, config) -> None:
        check_cluster_fits(config, main_process_here=True)  # before any actor waits for resources
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

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            self.metrics.aggregate(self.update_learners(columns), key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self._sync_whole_module()

    def restore_env_runners(self, env_runner_group):
        """After RLlib restarts a failed runner (syncing only the actor), give it the critic too."""
        restored = super().restore_env_runners(env_runner_group)
        if restored and env_runner_group is self.env_runner_group:
            self._sync_whole_module()
        return restored

    def update_learners(self, columns: dict) -> list:
        """RLlib's PPO update (its loss, epochs and minibatches) on one ready device batch."""
        num_steps = len(columns["obs"])
        return self.learner_group.update(
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

    def _sample_batches(self):
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            runner = group.local_env_runner
            return [runner.sample()], [runner.get_metrics()]
        results = group.foreach_env_runner(lambda runner: (runner.sample(), runner.get_metrics()), local_env_runner=False)
        return [r[0] for r in results], [r[1] for r in results]
