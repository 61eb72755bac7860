"""DQN fed with device rollouts, its replay buffer on the learner's device: ``DeviceDQN``.

RLlib's DQN (its module with dueling heads and epsilon-greedy exploration, its learner with
double Q, the n-step TD loss and target-network updates) with one change: where the training
data comes from and where it is kept. Each iteration the env runners' rollouts become n-step
transitions (``n_step_transitions``, vectorised over the whole rollout) in a replay buffer of
preallocated tensors on the learner's device (``DeviceReplayBuffer``); minibatches are drawn
there, and one call of RLlib's learner update runs all of a sampling round's gradient steps.
An iteration runs rounds until it has ``min_sample_timesteps_per_iteration`` env steps, as
RLlib's DQN does; the target network follows every ``target_network_update_freq`` env steps
sampled, checked (by RLlib's learner) once per update call, so at most once per round.

A step that ended its episode by termination does not bootstrap; a truncated one does, from
the real final observation (NEXT_STEP autoreset keeps it, see ``rollout.py``); an n-step window
stops at the episode's end and at the rollout's end (a shorter window, bootstrapped with
``gamma ** n`` of its own length, as RLlib's ``n_step`` column says).
"""

from __future__ import annotations

import torch
from ray.rllib.algorithms.dqn import DQN, DQNConfig
from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    REPLAY_BUFFER_RESULTS,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from rllib_gpuenv.rllib import action_sampling
from rllib_gpuenv.rllib.checkpointing import ResumesExactly
from rllib_gpuenv.rllib.device_config import DeviceRolloutsConfig
from rllib_gpuenv.rllib.learner import FusedAdamLearnerMixin
from rllib_gpuenv.rllib.replay_buffer import DeviceReplayBuffer
from rllib_gpuenv.rllib.resources import ChecksResources
from rllib_gpuenv.rllib.rollout import Rollout
from rllib_gpuenv.rllib.sampling import sample_rollouts

N_STEP = "n_step"
WEIGHTS = "weights"
REPLAY_BUFFER_STATE = "device_replay_buffer"
SCHEDULES_STATE = "device_dqn_schedules"


class DeviceDQNTorchLearner(FusedAdamLearnerMixin, DQNTorchLearner):
    """RLlib's DQN learner (loss, double Q, target updates) with fused Adam."""


class DeviceDQNTorchRLModule(DefaultDQNTorchRLModule):
    """RLlib's DQN module, with an epsilon-greedy draw that reads nothing back from the GPU.

    RLlib draws the random action with ``torch.multinomial``, which waits for the GPU on every
    call (``action_sampling``). The rule is RLlib's: with probability epsilon a uniform
    action among those whose Q-value is not 0 (a masked action's Q of -inf counts as 0), else
    the greedy one.
    """

    def _forward_exploration(self, batch: dict, t: int) -> dict:
        qf_outs = self.compute_q_values(batch)
        q = qf_outs[QF_PREDS]
        epsilon = self.epsilon_schedule.update(t)
        random_actions = action_sampling.uniform_among(torch.nan_to_num(q, neginf=0.0) != 0.0)
        explore = torch.rand(q.shape[:-1], device=q.device) < epsilon
        output = {Columns.ACTIONS: torch.where(explore, random_actions, q.argmax(dim=-1))}
        if Columns.STATE_OUT in qf_outs:
            output[Columns.STATE_OUT] = qf_outs[Columns.STATE_OUT]
        return output


class DeviceDQNConfig(DeviceRolloutsConfig, DQNConfig):
    """DQN with ``DeviceEnvRunner`` and a replay buffer on the learner's device.

    ``replay_buffer_config["capacity"]`` sizes the buffer (transitions); ``training_intensity``
    is, as in RLlib, the number of env steps trained per env step sampled (None: one
    minibatch of ``train_batch_size_per_learner`` per sampling round). ``checkpoint_replay_buffer``
    puts the buffer's transitions into checkpoints (default: only its counters, so a restored
    run samples ``num_steps_sampled_before_learning_starts`` env steps into the empty buffer
    before it learns again, as a new run does).
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DeviceDQN)
        self._init_device_rollouts()
        self.checkpoint_replay_buffer = False
        # Defaults: the settings of configs/gpu_cartpole_dqn.yaml, which solve GPUCartPole-v1
        # (a last-100 mean of 475) on a CPU; RLlib's own defaults for everything else (double Q,
        # dueling heads, hard target updates, the Huber loss). A test keeps the two the same.
        self.num_envs_per_env_runner = 16
        self.rollout_length = 16  # 256 env steps per sampling round, 3 in 16 n-step windows cut short
        self.lr = 1e-3
        self.n_step = 3
        self.train_batch_size_per_learner = 128
        self.training_intensity = 8  # 16 minibatches of 128 per round of 256 env steps
        self.target_network_update_freq = 500  # env steps: every other round, every 32 minibatches
        self.num_steps_sampled_before_learning_starts = 1000
        self.replay_buffer_config = {
            "type": "EpisodeReplayBuffer",
            "capacity": 10_000,
        }  # uniform, as the device buffer samples
        self.epsilon = [[0, 1.0], [5_000, 0.01]]
        self.learner_device = "auto"  # the replay buffer's device too: the GPU if there is one
        self._model_config = {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"}

    def get_default_learner_class(self):
        return DeviceDQNTorchLearner

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=DeviceDQNTorchRLModule, model_config=self.model_config)

    def device_replay(self, *, checkpoint_replay_buffer: bool | None = None) -> DeviceDQNConfig:
        """Whether checkpoints hold the replay buffer's transitions."""
        if checkpoint_replay_buffer is not None:
            self.checkpoint_replay_buffer = bool(checkpoint_replay_buffer)
        return self

    def validate(self) -> None:
        self._validate_device_rollouts()
        if self.num_learners > 0:
            raise ValueError(
                f"num_learners={self.num_learners}: DeviceDQN keeps its replay buffer with the local learner, on its device; "
                "use num_learners=0 and place that learner with devices(learner=...) or num_gpus_per_learner"
            )
        capacity = self.replay_buffer_config.get("capacity")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"replay_buffer_config['capacity'] must be a positive integer, got {capacity!r}")
        if isinstance(self.n_step, (tuple, list)) or self.n_step < 1:
            raise ValueError(f"n_step must be a positive integer for DeviceDQN, got {self.n_step!r}")
        self.rollout_fragment_length = self.rollout_length  # what RLlib's n-step check reads
        super().validate()

    @property
    def updates_per_round(self) -> int:
        """Gradient steps per sampling round: ``training_intensity`` env steps trained per env
        step sampled, in minibatches of ``train_batch_size_per_learner`` (at least one)."""
        if not self.training_intensity:
            return 1
        return max(1, round(self.training_intensity * self.device_batch_size / self.train_batch_size_per_learner))


@torch.no_grad()
def n_step_transitions(rollout: Rollout, n: int, gamma: float) -> dict[str, torch.Tensor]:
    """The rollout's valid steps as n-step transitions, flat: ``obs``, ``actions``, the
    discounted reward sum, the observation to bootstrap from, whether the window ended in a
    termination, and its length (see the module doc). Vectorised over the rollout; the only
    Python loop is over the ``n`` window offsets."""
    T, N = rollout.length, rollout.num_envs
    device = rollout.rewards.device
    next_obs = rollout.next_obs()
    ret = torch.zeros(T, N, dtype=torch.float32, device=device)
    steps = torch.zeros(T, N, dtype=torch.int64, device=device)
    terminated = torch.zeros(T, N, dtype=torch.bool, device=device)
    alive = rollout.valid.clone()  # still collecting rewards for the transition starting at t
    for k in range(n):
        inside = T - k  # windows starting at t < T - k reach step t + k
        live = alive[:inside]
        ret[:inside] += torch.where(live, (gamma**k) * rollout.rewards[k:], 0.0)
        steps[:inside] += live.long()
        ended = rollout.terminated[k:] | rollout.truncated[k:]
        terminated[:inside] |= live & rollout.terminated[k:]
        alive[:inside] = live & ~ended
        alive[inside:] = False
    last = torch.arange(T, device=device).unsqueeze(1) + steps - 1  # the step each window ended on
    bootstrap = next_obs[last.clamp_min(0), torch.arange(N, device=device).unsqueeze(0)]
    keep = rollout.valid.reshape(-1)
    return {
        Columns.OBS: rollout.obs.reshape(T * N, *rollout.obs.shape[2:])[keep],
        Columns.ACTIONS: rollout.actions.reshape(T * N, *rollout.actions.shape[2:])[keep],
        Columns.REWARDS: ret.reshape(-1)[keep],
        Columns.NEXT_OBS: bootstrap.reshape(T * N, *rollout.obs.shape[2:])[keep],
        Columns.TERMINATEDS: terminated.reshape(-1)[keep],
        N_STEP: steps.reshape(-1)[keep],
    }


class DeviceDQN(ResumesExactly, ChecksResources, DQN):
    """RLlib DQN whose training step consumes device rollouts through a device replay buffer."""

    @classmethod
    def get_default_config(cls) -> DeviceDQNConfig:
        return DeviceDQNConfig()

    def setup(self, config) -> None:
        super().setup(config)
        self.local_replay_buffer = None  # RLlib's episode buffer: not used, the device one is made on the first rollout
        self._device_buffer: DeviceReplayBuffer | None = None
        self._pending_buffer_state: dict | None = None
        self._learning_starts_at = config.num_steps_sampled_before_learning_starts  # env steps sampled, lifetime

    def _buffer_for(self, transitions: dict[str, torch.Tensor]) -> DeviceReplayBuffer:
        if self._device_buffer is None:
            device = self.learner_group._learner._device
            example = {k: v[0] for k, v in transitions.items()}
            self._device_buffer = DeviceReplayBuffer(
                self.config.replay_buffer_config["capacity"], example, device, self.config.seed
            )
            if self._pending_buffer_state is not None:
                self._device_buffer.set_state(self._pending_buffer_state)
                self._pending_buffer_state = None
        return self._device_buffer

    def training_step(self) -> None:
        config = self.config
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            rollouts, runner_metrics = sample_rollouts(self.env_runner_group, config.sample_timeout_s)
            if not rollouts:
                return
            self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        learner_device = self.learner_group._learner._device
        for rollout in rollouts:
            transitions = n_step_transitions(rollout.to(learner_device), config.n_step, config.gamma)
            self._buffer_for(transitions).add(transitions)
        buffer = self._device_buffer
        self.metrics.log_dict({"size": buffer.size, "added_lifetime": buffer.added}, key=REPLAY_BUFFER_RESULTS, window=1)

        sampled = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
        if sampled < self._learning_starts_at:
            return
        minibatch = config.train_batch_size_per_learner
        batch = buffer.sample(config.updates_per_round * minibatch)
        batch[WEIGHTS] = torch.ones(len(batch[Columns.REWARDS]), device=buffer.device)
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            results = self.learner_group.update(
                batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(batch)}, env_steps=len(batch[WEIGHTS])),
                timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: sampled, NUM_AGENT_STEPS_SAMPLED_LIFETIME: sampled},
                num_epochs=1,
                minibatch_size=minibatch,
                shuffle_batch_per_epoch=False,  # the draws are already random and independent
            )
            for result in results:
                for module_results in result.values():
                    module_results.pop("td_error", None)  # per-sample TD errors (no priorities here)
            self.metrics.aggregate(results, key=LEARNER_RESULTS)
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)

    def get_state(self, *args, **kwargs) -> dict:
        """RLlib's state, the buffer's (see ``checkpoint_replay_buffer``) and where the schedules
        stand: when learning starts, and when the learner last updated the target network (RLlib's
        learner keeps that out of its state, so a restored one would update it at once)."""
        state = super().get_state(*args, **kwargs)
        if self._device_buffer is not None:
            state[REPLAY_BUFFER_STATE] = self._device_buffer.get_state(with_contents=self.config.checkpoint_replay_buffer)
        state[SCHEDULES_STATE] = {
            "learning_starts_at": self._learning_starts_at,
            "target_updated_at": self._target_updates().copy(),
        }
        return state

    def _target_updates(self) -> dict:
        """The learner's env-step count of its last target update, per module (a local learner's;
        remote learners keep theirs, which RLlib does not checkpoint: empty here)."""
        learner = self.learner_group._learner if self.learner_group.is_local else None
        return learner.last_update_ts_by_mid if learner is not None else {}

    def set_state(self, state: dict) -> None:
        buffer_state, schedules = state.get(REPLAY_BUFFER_STATE), state.get(SCHEDULES_STATE)
        super().set_state({k: v for k, v in state.items() if k not in (REPLAY_BUFFER_STATE, SCHEDULES_STATE)})
        if schedules is not None:
            self._learning_starts_at = schedules["learning_starts_at"]
            self._target_updates().update(schedules["target_updated_at"])
        if buffer_state is not None:
            if self._device_buffer is not None:
                self._device_buffer.set_state(buffer_state)
            else:
                self._pending_buffer_state = buffer_state
            if "columns" not in buffer_state:  # restored empty: refill it first, as a new run does
                sampled = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
                self._learning_starts_at = sampled + self.config.num_steps_sampled_before_learning_starts
