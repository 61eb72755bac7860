"""DQN fed with device rollouts, its replay buffer on the learner's device: ``DeviceDQN``.

RLlib's DQN (its module with dueling heads and epsilon-greedy exploration, its learner with
double Q, the n-step TD loss and target-network updates) with one change: where the training
data comes from and where it is kept. Each sampling round the rollouts become n-step
transitions (``n_step_transitions``, vectorised over the whole rollout) in a replay buffer of
preallocated tensors on the learner's device (``DeviceReplayBuffer``); minibatches are drawn
there, and one call of RLlib's learner update runs all of a sampling round's gradient steps.
An iteration runs rounds until it has ``min_sample_timesteps_per_iteration`` env steps, as
RLlib's DQN does; the target network follows every ``target_network_update_freq`` env steps
sampled, checked (by RLlib's learner) once per update call, so at most once per round.

The buffer lives with the learner (``DeviceDQNTorchLearner.replay_round``). With several learners
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

import torch
from ray.rllib.algorithms.dqn import DQN, DQNConfig
from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS
from ray.rllib.algorithms.dqn.dqn_learner import (
    QF_LOSS_KEY,
    QF_MAX_KEY,
    QF_MEAN_KEY,
    QF_MIN_KEY,
    QF_NEXT_PREDS,
    QF_TARGET_NEXT_PREDS,
    TD_ERROR_MEAN_KEY,
)
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
from rllib_gpuenv.rllib.colocated import ColocatedEnvs, LearnerCalls
from rllib_gpuenv.rllib.device_config import DeviceRolloutsConfig
from rllib_gpuenv.rllib.in_process import InProcess
from rllib_gpuenv.rllib.lean_update import LeanUpdate
from rllib_gpuenv.rllib.learner import FusedAdamLearnerMixin
from rllib_gpuenv.rllib.replay_buffer import DeviceReplayBuffer
from rllib_gpuenv.rllib.resources import ChecksResources
from rllib_gpuenv.rllib.rollout import Rollout
from rllib_gpuenv.rllib.sampling import sample_rollouts

N_STEP = "n_step"
WEIGHTS = "weights"
REPLAY_BUFFER_STATE = "device_replay_buffer"
SCHEDULES_STATE = "device_dqn_schedules"


class DeviceDQNTorchLearner(ColocatedEnvs, LeanUpdate, FusedAdamLearnerMixin, DQNTorchLearner):
    """RLlib's DQN learner (loss, double Q, target updates) with fused Adam and the lean update
    loop (``lean_update.py``), its replay buffer (or its shard of it) on its device, and,
    colocated, envs of its own."""

    lean_loss_of = DQNTorchLearner

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
            self._replay = DeviceReplayBuffer(capacity, {k: v[0] for k, v in transitions.items()}, self._device, seed)
            if self._pending_replay_state is not None:
                self._replay.set_state(self._pending_replay_state)
                self._pending_replay_state = None
        return self._replay

    def _update_from_replay(self, timesteps: dict) -> dict:
        minibatch = self.config.train_batch_size_per_learner
        batch = self._replay.sample(self.config.updates_per_round * minibatch)
        batch[WEIGHTS] = torch.ones(len(batch[Columns.REWARDS]), device=self._replay.device)
        return self.update_on_draws(batch, timesteps)

    def update_on_draws(self, batch: dict[str, torch.Tensor], timesteps: dict) -> dict:
        """One update, a gradient step per ``train_batch_size_per_learner`` rows of ``batch``
        (transitions drawn from the buffer), in order: the draws are already random."""
        minibatch = self.config.train_batch_size_per_learner
        if self.lean_update_applies():
            return self.lean_update(batch, timesteps=timesteps, num_epochs=1, minibatch_size=minibatch, shuffle=False)
        results = self.update(
            batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(batch)}, env_steps=len(batch[WEIGHTS])),
            timesteps=timesteps,
            num_epochs=1,
            minibatch_size=minibatch,
            shuffle_batch_per_epoch=False,
        )
        for module_results in results.values():
            module_results.pop("td_error", None)  # per-sample TD errors (no priorities here)
        return results

    def lean_update_applies(self) -> bool:
        return super().lean_update_applies() and self.config.num_atoms == 1  # distributional DQN: RLlib's update

    def lean_loss(self, module_id, config, batch, fwd_out, metrics, coefficients):
        """RLlib's DQN loss (``DQNTorchLearner.compute_loss_for_module``, one atom): the n-step TD
        target from the target network (its action chosen by the online network with double Q),
        the Huber or squared error, weighted; a masked Q-value (-inf) counts as 0."""
        q_selected = torch.nan_to_num(fwd_out[QF_PREDS].gather(-1, batch[Columns.ACTIONS].long().unsqueeze(-1)), neginf=0.0)
        q_target_next = fwd_out[QF_TARGET_NEXT_PREDS]
        chooser = fwd_out[QF_NEXT_PREDS] if config.double_q else q_target_next
        q_next_best = torch.nan_to_num(q_target_next.gather(-1, chooser.argmax(-1, keepdim=True)), neginf=0.0)
        q_selected, q_next_best = q_selected.squeeze(-1), q_next_best.squeeze(-1)
        not_terminated = 1.0 - batch[Columns.TERMINATEDS].float()
        target = (batch[Columns.REWARDS] + config.gamma ** batch[N_STEP] * not_terminated * q_next_best).detach()
        error = torch.nn.functional.huber_loss if config.td_error_loss_fn == "huber" else torch.nn.functional.mse_loss
        total = (batch[WEIGHTS] * error(q_selected, target, reduction="none")).mean()
        if not metrics:
            return total, {}
        with torch.no_grad():
            return total, {
                QF_LOSS_KEY: total.detach(),
                QF_MEAN_KEY: q_selected.mean(),
                QF_MAX_KEY: q_selected.max(),
                QF_MIN_KEY: q_selected.min(),
                TD_ERROR_MEAN_KEY: (q_selected - target).abs().mean(),
            }

    def get_replay_state(self, with_contents: bool) -> dict | None:
        return None if self._replay is None else self._replay.get_state(with_contents=with_contents)

    def set_replay_state(self, state: dict) -> None:
        if self._replay is not None:
            self._replay.set_state(state)
        else:
            self._pending_replay_state = state


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
        self.gamma = 0.98  # with 0.99 Q diverged on most seeds (the file's comment)
        self.target_network_update_freq = 750  # env steps: every third round, every 48 minibatches
        self.num_steps_sampled_before_learning_starts = 1000
        self.replay_buffer_config = {
            "type": "EpisodeReplayBuffer",
            "capacity": 10_000,
        }  # uniform, as the device buffer samples
        self.epsilon = [[0, 1.0], [5_000, 0.01]]
        self.learner_device = "auto"  # the replay buffer's device too: the GPU if there is one
        self.lean_update = True  # the learner's minibatch loop without RLlib's per-minibatch machinery
        self.cuda_graphs = True  # on a GPU, the lean update's gradient step captured once, replayed (update_graph.py)
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
        self._check_discrete_actions()
        envs = self.num_envs_per_env_runner * max(1, self.num_env_runners)
        if not self.colocated_learners and envs % max(1, self.num_learners):
            raise ValueError(
                f"num_envs_per_env_runner × runners = {envs} envs do not split over {self.num_learners} learners "
                f"(each learner's replay shard takes whole envs' rollouts): make it a multiple of {self.num_learners}"
            )
        capacity = self.replay_buffer_config.get("capacity")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"replay_buffer_config['capacity'] must be a positive integer, got {capacity!r}")
        if isinstance(self.n_step, (tuple, list)) or self.n_step < 1:
            raise ValueError(f"n_step must be a positive integer for DeviceDQN, got {self.n_step!r}")
        minibatch = self.train_batch_size_per_learner  # RLlib's "auto" has no meaning here
        if isinstance(minibatch, bool) or not isinstance(minibatch, int) or minibatch < 1:
            raise ValueError(
                f"train_batch_size_per_learner is DeviceDQN's minibatch (transitions per gradient step): a positive integer, "
                f"got {minibatch!r}"
            )
        self.rollout_fragment_length = self.rollout_length  # what RLlib's n-step check reads
        super().validate()

    def _check_discrete_actions(self) -> None:
        """DQN scores each of a finite set of actions. For an env of this package, whose action
        space is known without building it, a continuous one is named here; RLlib would fail
        inside its module's construction with an unrelated deprecation message."""
        from gymnasium import spaces

        from rllib_gpuenv.envs import env_definition

        definition = env_definition(self.env) if isinstance(self.env, str) else None
        if definition is None:
            return
        space = definition.action_space(definition.params())  # the kind of space does not depend on the parameters
        if not isinstance(space, spaces.Discrete):
            raise ValueError(
                f"the env {definition.id} has {space} actions, but DeviceDQN needs Discrete ones (it takes the action "
                f"of highest Q-value): train it with DevicePPO"
            )

    @property
    def updates_per_round(self) -> int:
        """Gradient steps per sampling round: ``training_intensity`` env steps trained per env
        step sampled, in minibatches of ``train_batch_size_per_learner`` on each learner (at
        least one)."""
        if not self.training_intensity:
            return 1
        trained_per_step = self.train_batch_size_per_learner * max(1, self.num_learners)
        return max(1, round(self.training_intensity * self.device_batch_size / trained_per_step))


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


class DeviceDQN(LearnerCalls, ResumesExactly, ChecksResources, InProcess, DQN):
    """RLlib DQN whose training step consumes device rollouts through replay buffers on the learners' devices."""

    @classmethod
    def get_default_config(cls) -> DeviceDQNConfig:
        return DeviceDQNConfig()

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
