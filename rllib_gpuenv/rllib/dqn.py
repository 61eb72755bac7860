"""DQN fed with device rollouts, its replay buffer on the learner's device: ``DeviceDQN``.

RLlib's DQN (its module with dueling heads and epsilon-greedy exploration, its learner with
double Q, the n-step TD loss and target-network updates) with one change: where the training
data comes from and where it is kept (``device_replay.py``, shared with ``DeviceSAC``). The
target network follows every ``target_network_update_freq`` env steps sampled, checked (by
RLlib's learner) once per update call, so at most once per sampling round. Its gradient steps
run through the lean update loop (``lean_update.py``) with RLlib's DQN loss written out in
``lean_loss``.
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
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics import TD_ERROR_KEY

from rllib_gpuenv.rllib import action_sampling
from rllib_gpuenv.rllib.colocated import ColocatedEnvs
from rllib_gpuenv.rllib.device_algorithm import DeviceAlgorithm
from rllib_gpuenv.rllib.device_config import DeviceRolloutsConfig
from rllib_gpuenv.rllib.device_replay import (
    N_STEP,
    WEIGHTS,
    DeviceReplayAlgorithm,
    DeviceReplayConfig,
    DeviceReplayLearner,
    is_prioritized,
)
from rllib_gpuenv.rllib.lean_update import LeanUpdate
from rllib_gpuenv.rllib.learner import FusedAdamLearnerMixin, LocalLearnerDevice


class DeviceDQNTorchLearner(
    LocalLearnerDevice, ColocatedEnvs, DeviceReplayLearner, LeanUpdate, FusedAdamLearnerMixin, DQNTorchLearner
):
    """RLlib's DQN learner (loss, double Q, target updates) with fused Adam and the lean update
    loop (``lean_update.py``), its replay buffer (or its shard of it) on its device, and,
    colocated, envs of its own."""

    lean_loss_of = DQNTorchLearner

    def lean_update_applies(self) -> bool:
        return super().lean_update_applies() and self.config.num_atoms == 1  # distributional DQN: RLlib's update

    @staticmethod
    def q_and_target(config, batch: dict, fwd_out: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The Q-values of the taken actions, and their n-step TD targets (detached): from the
        target network, its action chosen by the online network with double Q."""
        q_selected = torch.nan_to_num(fwd_out[QF_PREDS].gather(-1, batch[Columns.ACTIONS].long().unsqueeze(-1)), neginf=0.0)
        q_target_next = fwd_out[QF_TARGET_NEXT_PREDS]
        chooser = fwd_out[QF_NEXT_PREDS] if config.double_q else q_target_next
        q_next_best = torch.nan_to_num(q_target_next.gather(-1, chooser.argmax(-1, keepdim=True)), neginf=0.0)
        q_selected, q_next_best = q_selected.squeeze(-1), q_next_best.squeeze(-1)
        not_terminated = 1.0 - batch[Columns.TERMINATEDS].float()
        return q_selected, (batch[Columns.REWARDS] + config.gamma ** batch[N_STEP] * not_terminated * q_next_best).detach()

    @torch.no_grad()
    def replay_td_errors(self, batch: dict) -> torch.Tensor:
        config = self.config.get_config_for_module(DEFAULT_MODULE_ID)
        q_selected, target = self.q_and_target(config, batch, self.module[DEFAULT_MODULE_ID]._forward_train(batch))
        return (q_selected - target).abs()

    def lean_loss(self, module_id, config, batch, fwd_out, metrics, coefficients, row_values=()):
        """RLlib's DQN loss (``DQNTorchLearner.compute_loss_for_module``, one atom): the n-step TD
        target from the target network (its action chosen by the online network with double Q),
        the Huber or squared error, weighted; a masked Q-value (-inf) counts as 0. Its per-row
        value: the absolute TD error (``TD_ERROR_KEY``, prioritized replay's priority)."""
        q_selected, target = self.q_and_target(config, batch, fwd_out)
        error = torch.nn.functional.huber_loss if config.td_error_loss_fn == "huber" else torch.nn.functional.mse_loss
        total = (batch[WEIGHTS] * error(q_selected, target, reduction="none")).mean()
        wanted = TD_ERROR_KEY in row_values
        td_error = (q_selected.detach() - target).abs() if metrics or wanted else None
        rows = {TD_ERROR_KEY: td_error} if wanted else {}
        if not metrics:
            return total, rows
        with torch.no_grad():
            return total, {
                QF_LOSS_KEY: total.detach(),
                QF_MEAN_KEY: q_selected.mean(),
                QF_MAX_KEY: q_selected.max(),
                QF_MIN_KEY: q_selected.min(),
                TD_ERROR_MEAN_KEY: td_error.mean(),
                **rows,
            }


def schedule_value(scheduler, t: torch.Tensor) -> torch.Tensor:
    """RLlib's ``Scheduler`` value at step ``t``, a tensor (float64, on ``t``'s device), computed
    on the device with the same float64 operations RLlib's ``PiecewiseSchedule`` runs in
    Python: the very same value, without a Python number that a recorded rollout would freeze."""
    if not scheduler.use_schedule:
        return torch.full((), float(scheduler.get_current_value()), dtype=torch.float64, device=t.device)
    endpoints = scheduler._schedule.endpoints
    value = torch.full((), float(scheduler._schedule.outside_value), dtype=torch.float64, device=t.device)
    for (l_t, left), (r_t, right) in reversed(list(zip(endpoints[:-1], endpoints[1:]))):  # the first interval wins
        alpha = (t - l_t).to(torch.float64) / (r_t - l_t)
        value = torch.where((l_t <= t) & (t < r_t), left + alpha * (right - left), value)
    return value


class DeviceDQNTorchRLModule(DefaultDQNTorchRLModule):
    """RLlib's DQN module, with an epsilon-greedy draw that reads nothing back from the GPU.

    RLlib draws the random action with ``torch.multinomial``, which waits for the GPU on every
    call (``action_sampling``). The rule is RLlib's: with probability epsilon a uniform
    action among those whose Q-value is not 0 (a masked action's Q of -inf counts as 0), else
    the greedy one. The step count may be a device tensor (``explores_with_device_step``): the
    runner's recorded rollout (``rollout_graph.py``) passes one, which it sets before each replay.
    """

    explores_with_device_step = True

    def setup(self) -> None:
        """RLlib's, after the check that the actions are ``Discrete`` for an env whose space the
        config could not know (a gymnasium id, your own env): RLlib would fail later, naming a
        deprecation that has nothing to do with it."""
        from gymnasium import spaces

        if not isinstance(self.action_space, spaces.Discrete):
            raise _needs_discrete_actions("the env", self.action_space)
        super().setup()

    # RLlib centres the dueling advantages with a mean that skips -inf (a masked action); its MLP
    # heads' outputs are finite, so here the plain mean, the same value to the bit. A subclass
    # whose advantage head masks actions with -inf sets this False and gets RLlib's.
    finite_advantages = True

    def _qf_forward_helper(self, batch: dict, encoder, head) -> dict:
        """RLlib's, but for dueling heads with one atom the advantages are centred with one
        ``mean`` where RLlib's ``nan_to_num(neginf=nan).nanmean`` takes six ops, in each of a
        gradient step's three forward passes and at every rollout step (on a CPU a 64x64
        network's gradient step 0.76 -> 0.69 ms; RESULTS.md, "DQN's gradient step beside plain
        torch")."""
        if not (self.finite_advantages and self.uses_dueling and self.num_atoms == 1):
            return super()._qf_forward_helper(batch, encoder, head)
        encoder_outs = encoder(batch)
        advantages = head["af"](encoder_outs[ENCODER_OUT])
        values = head["vf"](encoder_outs[ENCODER_OUT])
        output = {QF_PREDS: (advantages - advantages.mean(dim=-1, keepdim=True)) + values}  # RLlib's order
        if Columns.STATE_OUT in encoder_outs:
            output[Columns.STATE_OUT] = encoder_outs[Columns.STATE_OUT]
        return output

    def _forward_train(self, batch: dict) -> dict:
        """RLlib's, except that with double Q the online network's Q-values of the next
        observations are computed without gradients: the loss takes only their argmax. RLlib
        runs them in one batch with the observations, with gradients, and the backward pass then
        goes through twice the rows (a gradient step 1.3x plain torch's at 256x256; RESULTS.md,
        "DQN's gradient step beside plain torch"). A distributional or stateful module: RLlib's."""
        if self.inference_only or not self.uses_double_q or self.num_atoms > 1 or Columns.STATE_IN in batch:
            return super()._forward_train(batch)
        output = {QF_PREDS: self.compute_q_values({Columns.OBS: batch[Columns.OBS]})[QF_PREDS]}
        with torch.no_grad():
            next_obs = {Columns.OBS: batch[Columns.NEXT_OBS]}
            output[QF_NEXT_PREDS] = self.compute_q_values(next_obs)[QF_PREDS]
            output[QF_TARGET_NEXT_PREDS] = self.forward_target(next_obs)[QF_PREDS]
        return output

    def _forward_exploration(self, batch: dict, t: int | torch.Tensor) -> dict:
        qf_outs = self.compute_q_values(batch)
        q = qf_outs[QF_PREDS]
        epsilon = schedule_value(self.epsilon_schedule, t) if isinstance(t, torch.Tensor) else self.epsilon_schedule.update(t)
        random_actions = action_sampling.uniform_among(torch.nan_to_num(q, neginf=0.0) != 0.0)
        explore = torch.rand(q.shape[:-1], device=q.device) < epsilon
        output = {Columns.ACTIONS: torch.where(explore, random_actions, q.argmax(dim=-1))}
        if Columns.STATE_OUT in qf_outs:
            output[Columns.STATE_OUT] = qf_outs[Columns.STATE_OUT]
        return output


class DeviceDQNConfig(DeviceReplayConfig, DeviceRolloutsConfig, DQNConfig):
    """DQN with ``DeviceEnvRunner`` and a replay buffer on the learner's device (its settings:
    ``DeviceReplayConfig``)."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DeviceDQN)
        self._init_device_rollouts()
        self._init_device_replay()
        # Defaults: the settings of configs/gpu_cartpole_dqn.yaml, which solve GPUCartPole-v1
        # (a last-100 mean of 475) on a CPU; RLlib's own defaults for everything else (double Q,
        # dueling heads, hard target updates, the Huber loss). A test keeps the two the same.
        self.num_envs_per_env_runner = 16
        self.rollout_length = 16  # 256 env steps per sampling round, 3 in 16 n-step windows cut short
        self.lr = 1e-3
        self.n_step = 3
        self.train_batch_size_per_learner = 256  # on a CPU a step costs little more than one of 128 rows (the file's comment)
        self.training_intensity = 8  # 8 minibatches of 256 per round of 256 env steps
        self.gamma = 0.98  # with 0.99 Q diverged on most seeds (the file's comment)
        self.target_network_update_freq = 750  # env steps: every third round, every 24 minibatches
        self.num_steps_sampled_before_learning_starts = 1000
        self.epsilon = [[0, 1.0], [5_000, 0.01]]
        # RLlib's DQN default, prioritized replay with its alpha and beta: on seeds 0-31 it reached 475
        # sooner than the uniform buffer the other settings were tuned with (benchmarks/RESULTS.md)
        self.replay_buffer_config = {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 10_000, "alpha": 0.6, "beta": 0.4}
        self.learner_device = "auto"  # the replay buffer's device too: the GPU if there is one
        self.lean_update = True  # the learner's minibatch loop without RLlib's per-minibatch machinery
        self.cuda_graphs = True  # on a GPU, the lean update's gradient step captured once, replayed (update_graph.py)
        self._model_config = {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"}

    def get_default_learner_class(self):
        return DeviceDQNTorchLearner

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=DeviceDQNTorchRLModule, model_config=self.model_config)

    def validate(self) -> None:
        self._validate_device_rollouts()
        self._check_discrete_actions()
        self._validate_device_replay()
        if is_prioritized(self.replay_buffer_config) and self.num_atoms > 1:
            raise ValueError(
                f"prioritized replay gives each transition its TD error as priority, and distributional DQN "
                f"(num_atoms={self.num_atoms}) has none: set num_atoms=1, or replay_buffer_config['type'] to "
                f"'EpisodeReplayBuffer'"
            )
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
            raise _needs_discrete_actions(f"the env {definition.id}", space)


def _needs_discrete_actions(env: str, space) -> ValueError:
    return ValueError(
        f"{env} has {space} actions, but DeviceDQN needs Discrete ones (it takes the action of highest Q-value): "
        "train it with DevicePPO or DeviceSAC"
    )


class DeviceDQN(DeviceAlgorithm, DeviceReplayAlgorithm, DQN):
    """RLlib DQN whose training step consumes device rollouts through replay buffers on the learners' devices."""

    @classmethod
    def get_default_config(cls) -> DeviceDQNConfig:
        return DeviceDQNConfig()
