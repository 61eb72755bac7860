"""``DevicePPOTorchLearner``: RLlib's PPO learner, fed rollouts, with a cheaper optimizer step.

The loss, the minibatch loop and the metrics are RLlib's own (``PPOTorchLearner``). Three
additions:

* **Advantages on the learner.** ``DevicePPO`` hands the learner rollouts (``rollout.py``),
  flattened env-major; before the minibatch loop the learner computes every value in one
  batched pass of its critic and GAE on its device. The env runners then need only RLlib's
  inference-only module (the actor), and weight sync is RLlib's own. Against values computed
  on the runner at every step: benchmarks/RESULTS.md ("PPO's values and GAE").
* **A cheaper optimizer step.** ``torch.optim.Adam`` defaults to one loop over the parameters
  in Python; the fused implementation does the whole step in one kernel (one launch instead
  of dozens on a GPU; benchmarks/RESULTS.md, "Reward vs wall time", has the CPU figures). RLlib tests every
  gradient tensor for NaN/inf twice, one host sync per tensor; here one check covers all of
  them, and only when it fails does RLlib's own handling (warn, zero the NaNs) run.
* **Envs of its own** when the learners are colocated with their envs (``colocated.py``): it
  samples them, computes their advantages and updates, its gradients all-reduced with the
  other learners' (``sample_and_update``).

Its state holds PPO's adaptive KL coefficient besides RLlib's (module, optimizer), which RLlib's
learner leaves out: a restored run goes on with the coefficient it had, not ``kl_coeff``.
"""

from __future__ import annotations

import torch
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_KL_KEY,
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
)
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.numpy import SMALL_NUMBER

from rllib_gpuenv.rllib.colocated import ColocatedEnvs
from rllib_gpuenv.rllib.gae import compute_gae
from rllib_gpuenv.rllib.lean_update import LeanUpdate
from rllib_gpuenv.rllib.rollout import Rollout

ADVANTAGES = "advantages"
VALUE_TARGETS = "value_targets"
KL_COEFFS = "kl_coeffs"
# SAME_STEP rollouts only: the rows (truncations) that bootstrap from NEXT_OBS, not from the next row's OBS
BOOTSTRAP_FROM_NEXT_OBS = "bootstrap_from_next_obs"


def explained_variance(targets: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """RLlib's ``explained_variance`` (1 - Var[targets - values] / Var[targets], at least -1)
    without the host tensor it makes, which a CUDA graph cannot capture."""
    return (1 - (targets - values).var(dim=0) / (targets.var(dim=0) + SMALL_NUMBER)).clamp_min(-1.0)


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
    if rollout.next_observations is not None:  # SAME_STEP autoreset: the row after a truncation is another episode's
        columns[BOOTSTRAP_FROM_NEXT_OBS] = rows(rollout.truncated)
    return MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=rollout.num_env_steps)


class LocalLearnerDevice:
    """A learner in a process without Ray takes its GPU without starting Ray.

    RLlib's ``TorchLearner.build`` asks Ray which GPUs it was given (``get_device``, through
    ``ray.get_runtime_context()``) whenever the learner has a GPU. Where Ray is not running, as
    in the main job (``in_process.py``), that call starts a local Ray cluster (8 s on the 2-core
    CPU; the main job's build took 15-18 s on the H100 leases), only for RLlib to return
    ``config.local_gpu_idx``, as it does for any learner outside a Ray worker. Here the learner
    takes that device directly."""

    def build(self) -> None:
        import ray
        from ray.rllib.core.learner.torch import torch_learner

        if ray.is_initialized() or not self.config.num_gpus_per_learner:
            return super().build()  # a Ray worker (or a driver with Ray): RLlib asks Ray, as it should
        device = torch.device(self.config.local_gpu_idx)
        asks_ray = torch_learner.get_device
        torch_learner.get_device = lambda config, num_gpus_requested=1: device
        try:
            return super().build()
        finally:
            torch_learner.get_device = asks_ray


class FusedAdamLearnerMixin:
    """Fused Adam and one finite-gradient check per update, for any RLlib torch learner.

    Every plain Adam the learner registers (RLlib's default optimizer, SAC's four) is registered
    fused instead, with the same settings: one kernel per step for all its parameters, where
    torch's default on a CPU loops over them in Python."""

    def register_optimizer(self, *, optimizer, params, **kwargs) -> None:
        if type(optimizer) is torch.optim.Adam and not optimizer.defaults.get("fused"):
            settings = {k: v for k, v in optimizer.defaults.items() if k not in ("foreach", "fused")}
            optimizer = torch.optim.Adam(params, **settings, fused=True)
        super().register_optimizer(optimizer=optimizer, params=params, **kwargs)

    def apply_gradients(self, gradients_dict) -> None:
        if self._grad_scalers is not None or self._lr_scheduler_classes is not None:
            return super().apply_gradients(gradients_dict)  # RLlib's path for grad scalers, torch lr schedulers
        grads = [g for g in gradients_dict.values() if g is not None]
        # A gradient's norm is finite when all its values are (or overflows, where RLlib's path
        # changes nothing): one read of each, where isfinite over all of them took five passes
        # and a copy, 4 % of a 256x256 network's step on a CPU.
        if grads and not torch.stack(torch._foreach_norm(grads, 2.0)).isfinite().all():
            return super().apply_gradients(gradients_dict)  # RLlib's NaN/inf handling: warn, zero them
        for pid, grad in gradients_dict.items():
            self._params[pid].grad = grad
        for module_id, optimizer_names in self._module_optimizers.items():
            for optimizer_name in optimizer_names:
                self.get_optimizer(module_id, optimizer_name).step()


class DevicePPOTorchLearner(LocalLearnerDevice, ColocatedEnvs, LeanUpdate, FusedAdamLearnerMixin, PPOTorchLearner):
    """``PPOTorchLearner`` that computes values and advantages of rollouts itself, updates on
    them with the lean loop (``lean_update.py``; RLlib's ``update`` where that does not apply),
    and samples its own envs when colocated with them."""

    lean_loss_of = PPOTorchLearner

    def sample_and_update(self, **update_kwargs) -> tuple[dict, dict]:
        """One colocated step: a rollout of this learner's envs, then ``update`` on it (the
        gradients all-reduced with the other learners'). Returns the envs' and the update's metrics."""
        self.use_cpu_share()
        envs = self.colocated_envs()
        rollout = envs.sample()
        runner_metrics = envs.get_metrics()
        return runner_metrics, self.update(batch=rollout_batch(rollout), rollout_length=rollout.length, **update_kwargs)

    def update(self, batch=None, *, training_data: TrainingData | None = None, rollout_length: int | None = None, **kwargs):
        """RLlib's update; with ``rollout_length``, the batch holds env-major rollout rows (see
        ``rollout_batch``) and gets its advantages and value targets first."""
        self.use_cpu_share()
        if rollout_length is None:
            return super().update(batch=batch, training_data=training_data, **kwargs)
        batch = batch if training_data is None else training_data.batch
        columns = self._with_advantages(batch, rollout_length)
        if self.lean_update_applies():
            if not self.config.use_kl_loss:  # only the KL term reads the sampling policy's outputs
                del columns[Columns.ACTION_DIST_INPUTS]
            return self.lean_update(
                columns,
                timesteps=kwargs.get("timesteps"),
                num_epochs=kwargs.get("num_epochs", 1),
                minibatch_size=kwargs.get("minibatch_size"),
                shuffle=kwargs.get("shuffle_batch_per_epoch", False),
                env_steps=batch.env_steps(),
            )
        batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=batch.env_steps())
        return super().update(batch=batch, **kwargs)

    def lean_coefficients(self, module_id) -> dict:
        coefficients = {"entropy_coeff": self.entropy_coeff_schedulers_per_module[module_id].get_current_value()}
        if self.config.get_config_for_module(module_id).use_kl_loss:
            coefficients["kl_coeff"] = self.curr_kl_coeffs_per_module[module_id]  # adapted after every update
        return coefficients

    def lean_loss(self, module_id, config, batch, fwd_out, metrics, coefficients, row_values=()):
        """RLlib's PPO loss (``PPOTorchLearner.compute_loss_for_module``), term for term: the
        clipped surrogate, the squared value error clipped at ``vf_clip_param``, the entropy
        bonus and, with ``use_kl_loss``, the adaptive KL term; means over the valid steps. It has
        no per-row values (``row_values``: prioritized replay's, which PPO does not use)."""
        module = self.module[module_id].unwrapped()
        weights = batch[Columns.LOSS_MASK] / batch[Columns.LOSS_MASK].sum()  # a mean over the valid steps

        def mean(x: torch.Tensor) -> torch.Tensor:
            return (x * weights).sum()

        dist_class = module.get_train_action_dist_cls()
        logits = fwd_out[Columns.ACTION_DIST_INPUTS]
        if dist_class is TorchCategorical:  # the same terms as RLlib's (torch's) Categorical, in fewer ops
            log_probs = torch.log_softmax(logits, dim=-1)
            logp = log_probs.gather(-1, batch[Columns.ACTIONS].long().unsqueeze(-1)).squeeze(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
        else:
            dist = dist_class.from_logits(logits)
            logp, entropy = dist.logp(batch[Columns.ACTIONS]), dist.entropy()
        ratio = torch.exp(logp - batch[Columns.ACTION_LOGP])
        advantages = batch[ADVANTAGES]
        surrogate = torch.min(advantages * ratio, advantages * ratio.clamp(1 - config.clip_param, 1 + config.clip_param))
        if config.use_critic:
            values = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))
            vf_loss = (values - batch[VALUE_TARGETS]).pow(2)
            vf_loss_clipped = vf_loss.clamp(0, config.vf_clip_param)
        else:
            values = vf_loss = vf_loss_clipped = torch.zeros((), device=surrogate.device)
        total = mean(-surrogate + config.vf_loss_coeff * vf_loss_clipped - coefficients["entropy_coeff"] * entropy)
        kl = torch.zeros((), device=surrogate.device)
        if config.use_kl_loss:
            previous = module.get_exploration_action_dist_cls().from_logits(batch[Columns.ACTION_DIST_INPUTS])
            kl = mean(previous.kl(dist_class.from_logits(logits)))
            total = total + coefficients["kl_coeff"] * kl
        if not metrics:
            return total, {}
        with torch.no_grad():
            return total, {
                POLICY_LOSS_KEY: -mean(surrogate),
                VF_LOSS_KEY: mean(vf_loss_clipped) if config.use_critic else vf_loss,
                LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: mean(vf_loss) if config.use_critic else vf_loss,
                LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(batch[VALUE_TARGETS], values),
                ENTROPY_KEY: mean(entropy),
                LEARNER_RESULTS_KL_KEY: kl.detach(),
            }

    @torch.no_grad()
    def _with_advantages(self, batch: MultiAgentBatch, T: int) -> dict[str, torch.Tensor]:
        columns = batch.policy_batches[DEFAULT_MODULE_ID]
        config = self.config.get_config_for_module(DEFAULT_MODULE_ID)
        tensors = {k: torch.as_tensor(v).to(self._device) for k, v in columns.items()}
        module = self.module[DEFAULT_MODULE_ID].unwrapped()  # under DDP (num_learners > 1) the module inside
        n = len(tensors[Columns.OBS]) // T
        obs = tensors[Columns.OBS]
        last_obs = tensors[Columns.NEXT_OBS].reshape(n, T, *obs.shape[1:])[:, -1]
        values = module.compute_values({Columns.OBS: torch.cat([obs, last_obs])})
        values = torch.cat([values[: n * T].reshape(n, T), values[n * T :].reshape(n, 1)], dim=1).T  # (T + 1, n)

        def time_major(key):
            return tensors[key].reshape(n, T).T

        next_values = None
        if BOOTSTRAP_FROM_NEXT_OBS in tensors:  # SAME_STEP: a truncation bootstraps from its real final observation
            final_values = module.compute_values({Columns.OBS: tensors[Columns.NEXT_OBS]}).reshape(n, T).T
            next_values = torch.where(time_major(BOOTSTRAP_FROM_NEXT_OBS), final_values, values[1:])
            del tensors[BOOTSTRAP_FROM_NEXT_OBS]
        advantages, targets = compute_gae(
            time_major(Columns.REWARDS),
            values,
            time_major(Columns.TERMINATEDS),
            time_major(Columns.TRUNCATEDS),
            config.gamma,
            config.lambda_,
            next_values=next_values,
        )
        valid = time_major(Columns.LOSS_MASK)
        normalised = (advantages - advantages[valid].mean()) / advantages[valid].std().clamp_min(1e-4)
        tensors[ADVANTAGES] = normalised.T.reshape(-1)
        tensors[VALUE_TARGETS] = targets.T.reshape(-1)
        del tensors[Columns.NEXT_OBS], tensors[Columns.REWARDS], tensors[Columns.TERMINATEDS], tensors[Columns.TRUNCATEDS]
        return tensors

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(KL_COEFFS, components, not_components):
            state[KL_COEFFS] = {mid: float(coeff) for mid, coeff in self.curr_kl_coeffs_per_module.items()}
        return state

    def set_state(self, state: dict) -> None:
        super().set_state({k: v for k, v in state.items() if k != KL_COEFFS})
        for mid, coeff in state.get(KL_COEFFS, {}).items():
            self.curr_kl_coeffs_per_module[mid].data.fill_(coeff)
