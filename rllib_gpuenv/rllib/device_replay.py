"""Off-policy training from device rollouts, with the replay buffer on the learner's device.

What ``DeviceDQN`` and ``DeviceSAC`` share, written once: three mixins, one for the config, one
for the learner and one for the algorithm, which sit in front of RLlib's DQN- or SAC-classes.
The algorithm keeps RLlib's module, loss and target-network updates; these change where the
training data comes from and where it is kept.

Each sampling round the rollouts become n-step transitions (``n_step_transitions``, vectorised
over the whole rollout) in a replay buffer of preallocated tensors on the learner's device
(``DeviceReplayBuffer``); minibatches are drawn there, and one call of the learner's update runs
all of a sampling round's gradient steps. An iteration runs rounds until it has
``min_sample_timesteps_per_iteration`` env steps, as RLlib's DQN and SAC do.

With ``replay_buffer_config["type"]`` RLlib's ``PrioritizedEpisodeReplayBuffer``, the buffer
draws in proportion to priorities (``PrioritizedDeviceReplayBuffer``, RLlib's ``alpha`` and
``beta``) and the loss weighs each draw by its importance-sampling weight. The drawn
transitions' absolute TD errors become their priorities after the round's update. As in RLlib's
DQN they come from the loss, each minibatch's from its own gradient step, under the networks
that step started from: the lean update hands them out (its ``row_outputs``, written inside a
captured CUDA graph too), so they cost no forward pass of their own. Where RLlib's update runs
instead (its log keeps only the last minibatch's), one batched pass without gradients computes
them under the networks the update left (``replay_td_errors``).

The buffer lives with the learner (``DeviceReplayLearner.replay_round``). With several learners
it is sharded, ``capacity / num_learners`` transitions each: colocated learners fill their shards
from their own envs; in the separate layout each learner gets whole envs' share of the env
runners' rollouts. Every learner draws its minibatches from its own shard and the gradients
are all-reduced, so only rollouts (separate layout) or nothing but metrics (colocated) cross
processes; a central buffer would send every minibatch through Ray instead.

A step that ended its episode by termination does not bootstrap; a truncated one does, from
the real final observation (``Rollout.next_obs()``, in any autoreset mode: the next row under
NEXT_STEP, the env's ``infos["final_obs"]`` under SAME_STEP; without one, the runner ends the
episode a step earlier, see ``autoreset.py``); an n-step window stops at the episode's end and at
the rollout's end (a shorter window, bootstrapped with ``gamma ** n`` of its own length, as
RLlib's ``n_step`` column says).
"""

from __future__ import annotations

import difflib
import logging
import math

import torch
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
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
    TD_ERROR_KEY,
    TIMERS,
)
from ray.util import log_once

from rllib_gpuenv.rllib.lean_update import LeanUpdate
from rllib_gpuenv.rllib.replay_buffer import WEIGHTS, DeviceReplayBuffer, PrioritizedDeviceReplayBuffer
from rllib_gpuenv.rllib.rollout import Rollout
from rllib_gpuenv.rllib.sampling import sample_rollouts

N_STEP = "n_step"
REPLAY_BUFFER_STATE = "device_replay_buffer"
SCHEDULES_STATE = "device_dqn_schedules"  # the name checkpoints of DeviceDQN have always used
UNIFORM_BUFFER_TYPES = ("EpisodeReplayBuffer", "MultiAgentEpisodeReplayBuffer")
PRIORITIZED_BUFFER_TYPES = ("PrioritizedEpisodeReplayBuffer", "MultiAgentPrioritizedEpisodeReplayBuffer")
PRIORITY_DEFAULTS = {"alpha": 0.6, "beta": 0.4}  # RLlib's DQN and SAC configs' own
BUFFER_SETTINGS = ("type", "capacity", *PRIORITY_DEFAULTS)  # what the device buffers read of replay_buffer_config

logger = logging.getLogger(__name__)


def buffer_type_name(replay_buffer_config: dict) -> str:
    """The buffer class's name, given by name (dotted or not) or as the class."""
    buffer_type = replay_buffer_config.get("type")
    name = buffer_type if isinstance(buffer_type, str) else getattr(buffer_type, "__name__", repr(buffer_type))
    return name.rsplit(".", 1)[-1]


def is_prioritized(replay_buffer_config: dict) -> bool:
    return buffer_type_name(replay_buffer_config) in PRIORITIZED_BUFFER_TYPES


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


class DeviceReplayConfig:
    """Mixin for the config of an off-policy device algorithm (with ``DeviceRolloutsConfig``).

    ``replay_buffer_config["capacity"]`` sizes the buffer (transitions), its ``type`` says how it
    draws: uniformly (``EpisodeReplayBuffer``, DeviceSAC's default) or by priority
    (``PrioritizedEpisodeReplayBuffer``, with RLlib's ``alpha`` and ``beta``: DeviceDQN's default, as
    RLlib's DQN has it); ``training_intensity``
    is, as in RLlib, the number of env steps trained per env step sampled (None: one
    minibatch of ``train_batch_size_per_learner`` per sampling round). ``checkpoint_replay_buffer``
    puts the buffer's transitions into checkpoints (default: only its counters, so a restored
    run samples ``num_steps_sampled_before_learning_starts`` env steps into the empty buffer
    before it learns again, as a new run does).
    """

    def _init_device_replay(self) -> None:
        self.checkpoint_replay_buffer = False
        self.replay_buffer_config = {"type": "EpisodeReplayBuffer", "capacity": 10_000}  # uniform; each algorithm sets its own

    def device_replay(self, *, checkpoint_replay_buffer=NotProvided):
        """Whether checkpoints hold the replay buffer's transitions."""
        if checkpoint_replay_buffer is not NotProvided and checkpoint_replay_buffer is not None:
            self.checkpoint_replay_buffer = bool(checkpoint_replay_buffer)
        return self

    def _validate_device_replay(self) -> None:
        name = self.algo_class.__name__
        envs = self.num_envs_per_env_runner * max(1, self.num_env_runners)
        # (an evaluation config trains nothing: its copy says separate layout even where training is colocated)
        if not self.colocated_learners and not self.in_evaluation and envs % max(1, self.num_learners):
            raise ValueError(
                f"num_envs_per_env_runner × runners = {envs} envs do not split over {self.num_learners} learners "
                f"(each learner's replay shard takes whole envs' rollouts): make it a multiple of {self.num_learners}"
            )
        for key in self.replay_buffer_config:  # a misspelt one was dropped in silence
            near = difflib.get_close_matches(str(key), BUFFER_SETTINGS, n=1, cutoff=0.6)
            if key not in BUFFER_SETTINGS and near:
                raise ValueError(
                    f"replay_buffer_config[{key!r}] is no setting of {name}'s buffer: did you mean {near[0]!r}? (it takes "
                    f"{', '.join(BUFFER_SETTINGS[:2])}, and {' and '.join(BUFFER_SETTINGS[2:])} for prioritized replay)"
                )
        type_name = buffer_type_name(self.replay_buffer_config)
        if type_name not in UNIFORM_BUFFER_TYPES + PRIORITIZED_BUFFER_TYPES:
            raise ValueError(
                f"replay_buffer_config['type'] is {type_name}, but {name}'s buffer lives on the learner's device and "
                f"draws uniformly or by priority: set it to 'EpisodeReplayBuffer' (uniform) or "
                f"'PrioritizedEpisodeReplayBuffer' (by priority, with 'alpha' and 'beta')"
            )
        if type_name in PRIORITIZED_BUFFER_TYPES:
            for key in ("alpha", "beta"):
                value = self.replay_buffer_config.get(key, PRIORITY_DEFAULTS[key])
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                    raise ValueError(f"replay_buffer_config['{key}'] must be a number >= 0, got {value!r}")
        capacity = self.replay_buffer_config.get("capacity")
        if capacity is None:
            raise ValueError(
                f"replay_buffer_config has no 'capacity' (RLlib's training(replay_buffer_config=...) replaces the whole "
                f"dict when its 'type' changes): give it, e.g. {{'type': '{type_name}', 'capacity': 10000}}"
            )
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"replay_buffer_config['capacity'] must be a positive integer, got {capacity!r}")
        if isinstance(self.n_step, (tuple, list)) or self.n_step < 1:
            raise ValueError(f"n_step must be a positive integer for {name}, got {self.n_step!r}")
        if self.n_step > self.rollout_length:  # RLlib's own check asks for rollout_fragment_length, unused here
            raise ValueError(
                f"n_step={self.n_step} is longer than rollout_length={self.rollout_length}: an n-step return is summed "
                f"within one rollout: set device_rollouts(rollout_length={self.n_step}) or more, or n_step <= "
                f"{self.rollout_length}"
            )
        intensity = self.training_intensity
        if intensity is not None and (
            isinstance(intensity, bool) or not isinstance(intensity, (int, float)) or not intensity > 0
        ):
            raise ValueError(
                f"training_intensity is env steps trained per env step sampled: a number > 0 (or None: one "
                f"minibatch a round), got {intensity!r}"
            )
        minibatch = self.train_batch_size_per_learner  # RLlib's "auto" has no meaning here
        if isinstance(minibatch, bool) or not isinstance(minibatch, int) or minibatch < 1:
            raise ValueError(
                f"train_batch_size_per_learner is {name}'s minibatch (transitions per gradient step): a positive "
                f"integer, got {minibatch!r}"
            )
        shard = -(-capacity // max(1, self.num_learners))  # what each learner keeps (DeviceReplayLearner)
        if shard < minibatch:  # every gradient step would draw the same transitions again, some twice
            each = f" each of {self.num_learners} learners keeps {shard} of them," if self.num_learners > 1 else ""
            raise ValueError(
                f"replay_buffer_config['capacity'] is {capacity} transitions;{each} fewer than one minibatch of "
                f"train_batch_size_per_learner={minibatch}: give the buffer at least "
                f"{minibatch * max(1, self.num_learners)} ({name}'s default is "
                f"{type(self)().replay_buffer_config['capacity']:,}, replay's usual 10^4-10^6), or a smaller minibatch"
            )
        if intensity is not None:
            asked = intensity * self.device_batch_size / (minibatch * max(1, self.num_learners))
            key = f"training_intensity_{intensity}_{self.device_batch_size}_{minibatch}_{self.num_learners}"
            if abs(self.updates_per_round - asked) > 0.1 * asked and log_once(key):  # whole minibatches a round
                logger.warning(
                    "training_intensity=%s asks for %.3g gradient steps per sampling round of %d env steps; a round "
                    "runs whole minibatches of %d, so it runs %d (an intensity of %.3g): to train less per env step, "
                    "sample more per round (more envs, a longer rollout) or take a smaller minibatch",
                    intensity,
                    asked,
                    self.device_batch_size,
                    minibatch,
                    self.updates_per_round,
                    self.updates_per_round * minibatch * max(1, self.num_learners) / self.device_batch_size,
                )
        # RLlib's n-step check reads rollout_fragment_length; the device check accepts this value again
        self.rollout_fragment_length = self._derived_rollout_fragment_length = self.rollout_length

    @property
    def updates_per_round(self) -> int:
        """Gradient steps per sampling round: ``training_intensity`` env steps trained per env
        step sampled, in minibatches of ``train_batch_size_per_learner`` on each learner (at
        least one)."""
        if not self.training_intensity:
            return 1
        trained_per_step = self.train_batch_size_per_learner * max(1, self.num_learners)
        return max(1, math.floor(self.training_intensity * self.device_batch_size / trained_per_step + 0.5))  # 2.5: 3


class DeviceReplayLearner:
    """Mixin for an RLlib torch learner of the DQN family: its replay buffer (or its shard of it)
    on its device, filled from rollouts, and the updates drawn from it."""

    _replay: DeviceReplayBuffer | None = None
    _pending_replay_state: dict | None = None

    def replay_round(self, *, rollouts: list[Rollout] | None, learn: bool, timesteps: dict) -> tuple:
        """One sampling round: ``rollouts`` (this learner's share; None: a rollout of its own
        envs) become n-step transitions in its buffer; if ``learn``, ``updates_per_round``
        minibatches are drawn there for one update. Returns the envs' metrics (None when the
        rollouts were given), the update's (None without one) and the buffer's size and adds."""
        self.use_cpu_share()
        runner_metrics = None
        if rollouts is None:
            envs = self.colocated_envs()
            rollouts, runner_metrics = [envs.sample()], envs.get_metrics()
        for rollout in rollouts:
            transitions = n_step_transitions(rollout.to(self._device), self.config.n_step, self.config.gamma)
            self._replay_for(transitions).add(transitions)
        results = self._update_from_replay(timesteps) if learn else None
        return runner_metrics, results, {"size": self._replay.size, "added_lifetime": self._replay.added}

    def _replay_for(self, transitions: dict[str, torch.Tensor]) -> DeviceReplayBuffer:
        if self._replay is None:
            config = self.config
            capacity = -(-config.replay_buffer_config["capacity"] // max(1, config.num_learners))  # this learner's shard
            seed = None if config.seed is None else config.seed + self._learner_index
            example = {k: v[0] for k, v in transitions.items()}
            replay = config.replay_buffer_config
            if is_prioritized(replay):
                priorities = {key: replay.get(key, default) for key, default in PRIORITY_DEFAULTS.items()}
                self._replay = PrioritizedDeviceReplayBuffer(capacity, example, self._device, seed, **priorities)
            else:
                self._replay = DeviceReplayBuffer(capacity, example, self._device, seed)
            if self._pending_replay_state is not None:
                self._replay.set_state(self._pending_replay_state)
                self._pending_replay_state = None
        return self._replay

    def _update_from_replay(self, timesteps: dict) -> dict:
        minibatch = self.config.train_batch_size_per_learner
        batch = self._replay.sample(self.config.updates_per_round * minibatch)
        if not isinstance(self._replay, PrioritizedDeviceReplayBuffer):
            return self.update_on_draws(batch, timesteps)
        td_errors = torch.empty_like(batch[WEIGHTS])
        results = self.update_on_draws(batch, timesteps, td_errors=td_errors)
        self._replay.update_priorities(td_errors)
        return results

    def replay_td_errors(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The absolute TD error of each of ``batch``'s transitions under the networks as they are
        now, without gradients: the priorities prioritized replay gives them (the learner's
        algorithm supplies it)."""
        raise NotImplementedError(f"{type(self).__name__} has no TD errors for prioritized replay")

    def update_on_draws(self, batch: dict[str, torch.Tensor], timesteps: dict, td_errors: torch.Tensor | None = None) -> dict:
        """One update, a gradient step per ``train_batch_size_per_learner`` rows of ``batch``
        (transitions drawn from the buffer), in order: the draws are already random. The lean
        loop where the learner has one (``LeanUpdate``) and it applies, else RLlib's update.
        ``td_errors``, if given, receives each row's absolute TD error: from the loss of the
        row's gradient step in the lean loop, from ``replay_td_errors`` after RLlib's update."""
        minibatch = self.config.train_batch_size_per_learner
        if isinstance(self, LeanUpdate) and self.lean_update_applies():
            row_outputs = None if td_errors is None else {TD_ERROR_KEY: td_errors}
            return self.lean_update(
                batch, timesteps=timesteps, num_epochs=1, minibatch_size=minibatch, shuffle=False, row_outputs=row_outputs
            )
        results = self.update(
            batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(batch)}, env_steps=len(batch[WEIGHTS])),
            timesteps=timesteps,
            num_epochs=1,
            minibatch_size=minibatch,
            shuffle_batch_per_epoch=False,
        )
        for module_results in results.values():
            module_results.pop(TD_ERROR_KEY, None)  # the last minibatch's per-row TD errors: not a metric
        if td_errors is not None:
            td_errors.copy_(self.replay_td_errors(batch))
        return results

    def get_replay_state(self, with_contents: bool) -> dict | None:
        return None if self._replay is None else self._replay.get_state(with_contents=with_contents)

    def set_replay_state(self, state: dict) -> None:
        if self._replay is not None:
            self._replay.set_state(state)
        else:
            self._pending_replay_state = state


class DeviceReplayAlgorithm:
    """Mixin for RLlib's ``DQN`` (or its subclass ``SAC``): a training step that consumes device
    rollouts through replay buffers on the learners' devices (with ``LearnerCalls``)."""

    def setup(self, config) -> None:
        # Before RLlib's setup: its last step runs ``on_algorithm_init``, which may restore a
        # checkpoint (``rllib train --restore``) and with it when learning starts.
        self._learning_starts_at = config.num_steps_sampled_before_learning_starts  # env steps sampled, lifetime
        super().setup(config)
        self.local_replay_buffer = None  # RLlib's episode buffer: not used, the learners keep theirs

    def training_step(self) -> None:
        config = self.config
        colocated = config.colocated_learners
        if colocated:  # every learner samples its own envs in its round
            shares = [{"rollouts": None}] * config.num_learners
            sampled = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
            sampled += config.device_batch_size
        else:
            with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
                rollouts, runner_metrics = sample_rollouts(self.env_runner_group, config.sample_timeout_s)
                if not rollouts:
                    return
                self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
            shares = [{"rollouts": share} for share in self._shares(rollouts)]
            sampled = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
        learn = sampled >= self._learning_starts_at
        timesteps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: sampled, NUM_AGENT_STEPS_SAMPLED_LIFETIME: sampled}
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            answers = self.call_learners(_replay_round, shares, learn=learn, timesteps=timesteps)
        if colocated:
            self.metrics.aggregate([runner for runner, _, _ in answers], key=ENV_RUNNER_RESULTS)
        replay = {key: sum(r[key] for _, _, r in answers) for key in ("size", "added_lifetime")}
        self.metrics.log_dict(replay, key=REPLAY_BUFFER_RESULTS, window=1)
        if not learn:
            return
        self.metrics.aggregate([results for _, results, _ in answers], key=LEARNER_RESULTS)
        if not colocated:
            with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
                self.sync_runner_weights()

    def _shares(self, rollouts: list[Rollout]) -> list[list[Rollout]]:
        """Each learner's share of the env runners': all of them for the local learner, whole envs'
        parts for remote ones."""
        learners = self.config.num_learners
        if learners == 0:
            return [rollouts]
        return [[part] for part in Rollout.concat_envs(rollouts).split_envs(learners)]

    def get_state(self, *args, **kwargs) -> dict:
        """RLlib's state, the buffers' (every learner's shard; see ``checkpoint_replay_buffer``)
        and where the schedules stand: when learning starts, and when the learners last updated
        the target network (RLlib's learner keeps that out of its state, so a restored one would
        update it at once)."""
        state = super().get_state(*args, **kwargs)
        with_contents = self.config.checkpoint_replay_buffer
        shards = self.call_learners(_get_replay_state, with_contents=with_contents)
        if any(shard is not None for shard in shards):
            state[REPLAY_BUFFER_STATE] = shards
        state[SCHEDULES_STATE] = {
            "learning_starts_at": self._learning_starts_at,
            "target_updated_at": self.call_learners(_get_target_updates)[0],
        }
        return state

    def set_state(self, state: dict) -> None:
        shards, schedules = state.get(REPLAY_BUFFER_STATE), state.get(SCHEDULES_STATE)
        super().set_state({k: v for k, v in state.items() if k not in (REPLAY_BUFFER_STATE, SCHEDULES_STATE)})
        if schedules is not None:
            self._learning_starts_at = schedules["learning_starts_at"]
            self.call_learners(_set_target_updates, updates=schedules["target_updated_at"])
        if shards is None:
            return
        shards = [shards] if isinstance(shards, dict) else shards  # a checkpoint from before the buffer was sharded
        if len(shards) != max(1, self.config.num_learners):
            raise ValueError(
                f"the checkpoint holds {len(shards)} replay buffer shard(s), one per learner, but this run has "
                f"num_learners={self.config.num_learners}: restore it with as many learners"
            )
        self.call_learners(_set_replay_state, [{"state": shard} for shard in shards])
        if any(
            shard is not None and "columns" not in shard for shard in shards
        ):  # restored empty: refill first, as a new run does
            sampled = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
            self._learning_starts_at = sampled + self.config.num_steps_sampled_before_learning_starts


def _replay_round(learner, **kwargs):
    return learner.replay_round(**kwargs)


def _get_replay_state(learner, with_contents: bool):
    return learner.get_replay_state(with_contents)


def _set_replay_state(learner, state: dict | None) -> None:
    if state is not None:
        learner.set_replay_state(state)


def _get_target_updates(learner) -> dict:
    return dict(learner.last_update_ts_by_mid)


def _set_target_updates(learner, updates: dict) -> None:
    learner.last_update_ts_by_mid.update(updates)
