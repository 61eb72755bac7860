"""PPO fed with device rollouts: ``DevicePPOConfig`` and ``DevicePPO``.

RLlib's PPO with one change: where its training data comes from. The env runners return
rollouts (``Rollout``: ``(T, N)`` tensors, from RLlib's inference-only module) and the training
step hands them to the learners flattened env-major; the learner computes values in one batched
pass and GAE on its device (``DevicePPOTorchLearner``), then runs RLlib's own PPO update (loss,
epochs, minibatches). Weight sync is RLlib's (the actor only). When runner and learner share a
device nothing is copied; remote runners' rollouts travel through Ray as usual.

With colocated learners (``num_learners >= 1`` and no env runners, ``colocated.py``) each
learner samples its own envs and updates on them, its gradients all-reduced with the others':
the training step asks every learner for one such step and gathers their metrics. Nothing but
metrics reaches the driver, and no weights are synced (the learners sample with what they train).
"""

from __future__ import annotations

from ray.rllib.algorithms.ppo import PPO, PPOConfig
from ray.rllib.core import ALL_MODULES
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

from rllib_gpuenv.rllib.device_algorithm import DeviceAlgorithm
from rllib_gpuenv.rllib.device_config import DeviceRolloutsConfig, divisor_near
from rllib_gpuenv.rllib.learner import rollout_batch
from rllib_gpuenv.rllib.rollout import Rollout
from rllib_gpuenv.rllib.sampling import sample_rollouts


class DevicePPOConfig(DeviceRolloutsConfig, PPOConfig):
    """PPO with ``DeviceEnvRunner``; the train batch follows from the rollout shape.

    ``train_batch_size_per_learner`` is set for you: ``rollout_length × num_envs_per_env_runner``
    with colocated learners (each trains on its own envs), else the env runners' batch
    ``rollout_length × num_envs_per_env_runner × max(1, num_env_runners)`` over
    ``max(1, num_learners)``. Setting another value, or a minibatch size that does not divide
    it, is an error that says what would fit.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DevicePPO)
        self._init_device_rollouts()
        self._train_batch_size_per_learner = None  # derived in validate()
        self._derived_train_batch_size = None  # what validate() derived (re-derived when the shape changes)
        self.minibatch_size = 512
        self.num_epochs = 10
        self.lean_update = True  # the learner's epochs × minibatches loop without RLlib's per-minibatch machinery
        self.cuda_graphs = True  # on a GPU, the lean update's gradient step captured once, replayed (update_graph.py)

    def get_default_learner_class(self):
        from rllib_gpuenv.rllib.learner import DevicePPOTorchLearner

        return DevicePPOTorchLearner

    def validate(self) -> None:
        self._validate_device_rollouts()
        if not self.in_evaluation:  # evaluation runners play episodes; they make no training batches
            self._derive_train_batch_size()
        super().validate()

    def _derive_train_batch_size(self) -> None:
        if self.colocated_learners:
            expected = self.rollout_length * self.num_envs_per_env_runner
            shape = f"rollout_length={self.rollout_length} × num_envs_per_env_runner={self.num_envs_per_env_runner} (its own)"
        else:
            learners, envs = max(1, self.num_learners), self.num_envs_per_env_runner * max(1, self.num_env_runners)
            if envs % learners:
                raise ValueError(
                    f"num_envs_per_env_runner × runners = {envs} envs do not split over {learners} learners "
                    f"(each learner takes whole envs' rollouts): make it a multiple of {learners}"
                )
            expected = self.device_batch_size // learners
            shape = (
                f"rollout_length={self.rollout_length} × num_envs_per_env_runner={self.num_envs_per_env_runner} × "
                f"{max(1, self.num_env_runners)} runner(s) / {learners} learner(s)"
            )
        if self._train_batch_size_per_learner in (None, self._derived_train_batch_size):
            self._train_batch_size_per_learner = self._derived_train_batch_size = expected
        elif self._train_batch_size_per_learner != expected:
            raise ValueError(
                f"train_batch_size_per_learner={self.train_batch_size_per_learner}, but each learner trains on "
                f"{shape} = {expected} env steps: leave it unset, or change those"
            )
        if self.minibatch_size is None or expected % self.minibatch_size:
            problem = "is larger than" if (self.minibatch_size or 0) > expected else "does not divide"
            raise ValueError(
                f"minibatch_size={self.minibatch_size} {problem} the per-learner batch of {expected} env steps: "
                f"use a divisor such as {divisor_near(expected, self.minibatch_size or 512)}"
            )


class DevicePPO(DeviceAlgorithm, PPO):
    """RLlib PPO whose training step consumes device rollouts: the env runners', or with
    colocated learners each learner's own."""

    @classmethod
    def get_default_config(cls) -> DevicePPOConfig:
        return DevicePPOConfig()

    def training_step(self) -> None:
        if self.config.colocated_learners:
            return self._colocated_step()
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            rollouts, runner_metrics = sample_rollouts(self.env_runner_group, self.config.sample_timeout_s)
            if not rollouts:
                return
            self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
            rollout = Rollout.concat_envs(rollouts)

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            self.metrics.aggregate(self.update_learners(rollout), key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self.sync_runner_weights()

    def _colocated_step(self) -> None:
        """Every learner samples its envs and updates on them at once (sampling and update are one timer here)."""
        sampled = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            answers = self.call_learners(
                _sample_and_update, **self._update_settings(sampled_lifetime=sampled + self.config.device_batch_size)
            )
        self.metrics.aggregate([runner for runner, _ in answers], key=ENV_RUNNER_RESULTS)
        self.metrics.aggregate([learner for _, learner in answers], key=LEARNER_RESULTS)

    def update_learners(self, rollout: Rollout) -> list:
        """RLlib's PPO update (its loss, epochs and minibatches) on one rollout: the local
        learner takes it whole, remote learners a share of its envs each."""
        learners = self.config.num_learners
        if learners <= 1:
            data = {"batch": rollout_batch(rollout)}
        else:
            data = {"batches": [rollout_batch(r) for r in rollout.split_envs(learners)]}
        sampled = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME))
        return self.learner_group.update(**data, rollout_length=rollout.length, **self._update_settings(sampled))

    def _update_settings(self, sampled_lifetime: int) -> dict:
        """What every PPO update is told: the counts its schedules follow, epochs, minibatches."""
        return {
            "timesteps": {
                NUM_ENV_STEPS_SAMPLED_LIFETIME: sampled_lifetime,
                NUM_MODULE_STEPS_TRAINED_LIFETIME: self.metrics.peek(
                    (LEARNER_RESULTS, ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), default=0
                ),
            },
            "num_epochs": self.config.num_epochs,
            "minibatch_size": self.config.minibatch_size,
            "shuffle_batch_per_epoch": self.config.shuffle_batch_per_epoch,
        }


def _sample_and_update(learner, **update_settings):
    return learner.sample_and_update(**update_settings)
