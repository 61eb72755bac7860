"""PPO fed with device rollouts: ``DevicePPOConfig`` and ``DevicePPO``.

RLlib's PPO with one change: where its training data comes from. The env runners return
rollouts (``Rollout``: ``(T, N)`` tensors, from RLlib's inference-only module) and the training
step hands them to the learners flattened env-major; the learner computes values in one batched
pass and GAE on its device (``DevicePPOTorchLearner``), then runs RLlib's own PPO update (loss,
epochs, minibatches). Weight sync is RLlib's (the actor only). When runner and learner share a
device nothing is copied; remote runners' rollouts travel through Ray as usual.
"""

from __future__ import annotations

import torch
from ray.rllib.algorithms.ppo import PPO, PPOConfig
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
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

from rllib_gpuenv.rllib.checkpointing import ResumesExactly
from rllib_gpuenv.rllib.device_config import DeviceRolloutsConfig, divisor_near
from rllib_gpuenv.rllib.resources import ChecksResources
from rllib_gpuenv.rllib.rollout import Rollout
from rllib_gpuenv.rllib.sampling import sample_rollouts


class DevicePPOConfig(DeviceRolloutsConfig, PPOConfig):
    """PPO with ``DeviceEnvRunner``; the train batch follows from the rollout shape.

    ``train_batch_size_per_learner = rollout_length × num_envs_per_env_runner ×
    max(1, num_env_runners) / max(1, num_learners)``, set for you; setting another value, or
    a minibatch size that does not divide it, is an error that says what would fit.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DevicePPO)
        self._init_device_rollouts()
        self._train_batch_size_per_learner = None  # derived in validate()
        self._derived_train_batch_size = None  # what validate() derived (re-derived when the shape changes)
        self.minibatch_size = 512
        self.num_epochs = 10

    def get_default_learner_class(self):
        from rllib_gpuenv.rllib.learner import DevicePPOTorchLearner

        return DevicePPOTorchLearner

    def validate(self) -> None:
        self._validate_device_rollouts()
        if not self.in_evaluation:  # evaluation runners play episodes; they make no training batches
            self._derive_train_batch_size()
        super().validate()

    def _derive_train_batch_size(self) -> None:
        learners = max(1, self.num_learners)
        total = self.device_batch_size
        if self.num_envs_per_env_runner * max(1, self.num_env_runners) % learners:
            raise ValueError(
                f"num_envs_per_env_runner × runners = {self.num_envs_per_env_runner * max(1, self.num_env_runners)} "
                f"envs do not "
                f"split over {learners} learners (each learner takes whole envs' rollouts): make it a multiple of {learners}"
            )
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
                f"use a divisor such as {divisor_near(expected, self.minibatch_size or 512)}"
            )


def rollout_batch(rollout: Rollout) -> MultiAgentBatch:
    """A rollout as rows, env-major (row ``i * T + t`` is env ``i``'s step ``t``), so that a
    learner can rebuild each env's trajectory for GAE from any whole-env shard."""

    def rows(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1).reshape(-1, *x.shape[2:])

    columns = {
        Columns.OBS: rows(rollout.obs),
        Columns.NEXT_OBS: rows(rollout.next_obs()),
        Columns.ACTIONS: rows(rollout.actions),
        Columns.ACTION_LOGP: rows(rollout.logp),
        Columns.ACTION_DIST_INPUTS: rows(rollout.dist_inputs),
        Columns.REWARDS: rows(rollout.rewards),
        Columns.TERMINATEDS: rows(rollout.terminated),
        Columns.TRUNCATEDS: rows(rollout.truncated),
        Columns.LOSS_MASK: rows(rollout.valid),
    }
    return MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=rollout.num_env_steps)


def split_envs(rollout: Rollout, parts: int) -> list[Rollout]:
    """``parts`` rollouts of whole envs (one per remote learner)."""
    fields = ("obs", "actions", "logp", "dist_inputs", "rewards", "terminated", "truncated", "valid")
    chunks = {name: torch.chunk(getattr(rollout, name), parts, dim=1) for name in fields}
    last = torch.chunk(rollout.last_obs, parts, dim=0)
    return [Rollout(**{name: chunks[name][i] for name in fields}, last_obs=last[i]) for i in range(parts)]


class DevicePPO(ResumesExactly, ChecksResources, PPO):
    """RLlib PPO whose training step consumes the device env runners' rollouts."""

    @classmethod
    def get_default_config(cls) -> DevicePPOConfig:
        return DevicePPOConfig()

    def training_step(self) -> None:
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            rollouts, runner_metrics = sample_rollouts(self.env_runner_group, self.config.sample_timeout_s)
            if not rollouts:
                return
            self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
            rollout = Rollout.concat_envs(rollouts)

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            self.metrics.aggregate(self.update_learners(rollout), key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)

    def update_learners(self, rollout: Rollout) -> list:
        """RLlib's PPO update (its loss, epochs and minibatches) on one rollout: the local
        learner takes it whole, remote learners a share of its envs each."""
        learners = self.config.num_learners
        data = (
            {"batch": rollout_batch(rollout)}
            if learners <= 1
            else {"batches": [rollout_batch(r) for r in split_envs(rollout, learners)]}
        )
        return self.learner_group.update(
            **data,
            rollout_length=rollout.length,
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
