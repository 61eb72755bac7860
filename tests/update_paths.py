"""One learner state, several update paths, the same outcome: the helpers of the lean-update
tests (tests/rllib/test_lean_update.py on a CPU, tests/test_gpu.py for the captured step)."""

import copy

import pytest
import torch
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from rllib_gpuenv.bench import update
from rllib_gpuenv.bench.update import CAPTURED, LEAN, RLLIB  # noqa: F401 (the paths, for the tests)
from rllib_gpuenv.rllib import DeviceDQNConfig, DevicePPOConfig, DeviceSACConfig
from rllib_gpuenv.rllib.device_replay import WEIGHTS, n_step_transitions
from rllib_gpuenv.rllib.learner import rollout_batch

COMPARED = (
    "policy_loss",
    "vf_loss",
    "vf_loss_unclipped",
    "vf_explained_var",
    "entropy",
    "mean_kl_loss",
    "total_loss",
    "curr_kl_coeff",
    "num_module_steps_trained",
    "module_train_batch_size_mean",
    "qf_loss",
    "qf_mean",
    "qf_max",
    "qf_min",
    "td_error_mean",
    "gradients_default_optimizer_global_norm",
    "alpha_loss",
    "alpha_value",
    "logps",
    "qf_twin_loss",
    "gradients_qf_global_norm",
    "gradients_policy_global_norm",
)
STATIC = "ours: static-buffer step"  # the step a GPU captures, run uncaptured on a CPU


def use(learner, path: str) -> None:
    """Make ``learner`` update through ``path``: one of ``bench update``'s (RLLIB, LEAN, CAPTURED)
    or STATIC, the captured path's step on a CPU."""
    update.use(learner, CAPTURED if path == STATIC else path)
    learner.graph_step_devices = ("cuda", "cpu") if path == STATIC else ("cuda",)


def rllib_defaults(env: str, device: str = "cpu") -> DevicePPOConfig:
    """PPO's settings at RLlib's defaults (adaptive KL loss, value clip 10), gradients clipped."""
    return (
        DevicePPOConfig()
        .environment(env)
        .devices(learner=device, env_runners=device)
        .debugging(seed=0)
        .env_runners(num_envs_per_env_runner=16)
        .device_rollouts(rollout_length=32)
        .training(minibatch_size=128, num_epochs=2, grad_clip=0.5, entropy_coeff=0.01)
    )


def updates(learner, rollouts, path: str, shuffle: bool = False, minibatch_sizes=None) -> tuple[dict, list[dict]]:
    """Weights and the metrics of each update, after ``rollouts`` updates from the learner's state
    now (in minibatches of the config's size, or of ``minibatch_sizes``, one per update)."""
    use(learner, path)
    torch.manual_seed(0)
    results = []
    for i, rollout in enumerate(rollouts):
        result = learner.update(
            batch=rollout_batch(rollout),
            rollout_length=rollout.length,
            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: rollout.num_env_steps},
            num_epochs=learner.config.num_epochs,
            minibatch_size=learner.config.minibatch_size if minibatch_sizes is None else minibatch_sizes[i],
            shuffle_batch_per_epoch=shuffle,  # False: RLlib's order, the minibatches in the batch's order
        )
        results.append({key: float(stats.peek()) for key, stats in result["default_policy"].items() if key in COMPARED})
    weights = {k: v.detach().clone() for k, v in learner.module["default_policy"].state_dict().items()}
    return weights, results


def ppo_runs(config: DevicePPOConfig, paths, rollouts: int = 3, **update_options) -> tuple[dict, dict, object]:
    """``updates`` (with ``update_options``) through each of ``paths`` from one learner state;
    also the weights before and the learner (its algorithm stopped)."""
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        sampled = [algo.env_runner.sample() for _ in range(rollouts)]
        assert learner.lean_update_applies()
        learner.curr_kl_coeffs_per_module["default_policy"]  # created on first use: in the saved state from here on
        start = copy.deepcopy(learner.get_state())
        start_weights = {k: p.detach().clone() for k, p in learner.module["default_policy"].named_parameters()}
        runs = {}
        for path in paths:
            learner.set_state(copy.deepcopy(start))
            assert learner._step_graph is None  # a graph would step the optimizer state the restore replaced
            runs[path] = updates(learner, sampled, path, **update_options)
        return runs, start_weights, learner
    finally:
        algo.stop()


def storage(learner) -> dict[str, int]:
    """Where each tensor a captured step reads or writes lives: the module's parameters and
    buffers (target networks included) and the optimizers' state. A replayed graph uses these
    addresses, so an update that replaced one of them would leave the graph on stale memory."""
    where = {f"module.{k}": v.data_ptr() for k, v in learner.module["default_policy"].state_dict(keep_vars=True).items()}
    for i, optimizer in enumerate(learner._optimizer_parameters):
        for j, state in enumerate(optimizer.state.values()):
            where |= {f"optimizer{i}.{j}.{k}": v.data_ptr() for k, v in state.items() if torch.is_tensor(v)}
    return where


def dqn_updates(
    path: str, double_q: bool, loss: str, clip_by: str = "global_norm", device: str = "cpu"
) -> tuple[dict, list[dict], object]:
    """``replay_updates`` of a new DeviceDQN learner, its target network updated between them."""
    config = DeviceDQNConfig().environment("GPUCartPole-v1").devices(learner=device, env_runners=device).debugging(seed=0)
    clip = {"global_norm": 2.0, "norm": 1.0, "value": 0.05}[clip_by]  # each clips some steps' gradients
    config.training(double_q=double_q, td_error_loss_fn=loss, target_network_update_freq=256, train_batch_size_per_learner=128)
    config.training(grad_clip=clip, grad_clip_by=clip_by)
    return replay_updates(config, path)


def sac_updates(
    path: str, grad_clip: float | None = None, device: str = "cpu", env: str = "GPUPendulum-v1"
) -> tuple[dict, list[dict], object]:
    """``replay_updates`` of a new DeviceSAC learner (Pendulum's Box actions, or ``env``'s;
    minibatches of 128), its target networks moved after each update."""
    config = DeviceSACConfig().environment(env).devices(learner=device, env_runners=device).debugging(seed=0)
    config.training(train_batch_size_per_learner=128, grad_clip=grad_clip, grad_clip_by="global_norm")
    return replay_updates(config, path)


def noiseless_gaussians(monkeypatch) -> None:
    """Gaussian draws without noise (every sample the mean): SAC's updates then draw no random
    numbers, so a captured step, which draws at other generator offsets than an eager one, must
    give the eager step's weights exactly, as PPO's and DQN's do."""
    from torch.distributions import normal

    def mean(self, sample_shape=()):
        return self.loc.expand(self._extended_shape(torch.Size(sample_shape))).detach()

    def zeros(shape, dtype, device):
        return torch.zeros(shape, dtype=dtype, device=device)

    monkeypatch.setattr(normal, "_standard_normal", zeros)  # Normal.rsample's noise
    monkeypatch.setattr(normal.Normal, "sample", mean)


def replay_updates(config, path: str) -> tuple[dict, list[dict], object]:
    """Weights and metrics after three updates of 16 minibatches of 128 of a new learner of
    ``config`` (DeviceDQN's or DeviceSAC's), on transitions from its own env runner; and the
    learner, with ``storage`` after its first update and after its last (``learner.storages``),
    its weights before the first (``learner.start_weights``) and, but on RLlib's path (whose TD
    errors come from an extra forward pass, with its own random draws in SAC's), the TD errors
    each update handed out for prioritized replay (``learner.td_errors``)."""
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        use(learner, path)
        assert learner.lean_update_applies() == (path != RLLIB)
        learner.start_weights = {k: v.detach().clone() for k, v in learner.module["default_policy"].state_dict().items()}
        torch.manual_seed(0)  # SAC's losses draw actions: each path the same ones
        results, learner.td_errors = [], []
        for i in range(3):
            batch = n_step_transitions(algo.env_runner.sample(), config.n_step, config.gamma)
            batch[WEIGHTS] = torch.ones(len(batch["obs"]), device=batch["obs"].device)
            batch = {k: v.repeat_interleave(9, dim=0)[:2048] for k, v in batch.items()}  # 16 minibatches of 128
            td_errors = None if path == RLLIB else torch.full_like(batch[WEIGHTS], float("nan"))
            result = learner.update_on_draws(batch, {NUM_ENV_STEPS_SAMPLED_LIFETIME: 256 * (i + 1)}, td_errors)
            learner.td_errors += [] if td_errors is None else [td_errors]
            results.append({k: float(v.peek()) for k, v in result["default_policy"].items() if k in COMPARED})
            learner.storages = [*getattr(learner, "storages", [])[:1], storage(learner)]
        return {k: v.detach().clone() for k, v in learner.module["default_policy"].state_dict().items()}, results, learner
    finally:
        algo.stop()


def assert_same_td_errors(learner, other, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """The two learners of ``replay_updates`` handed out the same TD errors, one for every row."""
    assert len(learner.td_errors) == 3
    for mine, theirs in zip(learner.td_errors, other.td_errors, strict=True):
        assert torch.isfinite(mine).all() and (mine >= 0).all()
        torch.testing.assert_close(theirs, mine, rtol=rtol, atol=atol)


def assert_same(runs: dict, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Every path's weights and metrics are the first path's."""
    (reference_weights, reference_results), *_ = runs.values()
    for path, (weights, results) in runs.items():
        for name, weight in reference_weights.items():
            torch.testing.assert_close(weights[name], weight, rtol=rtol, atol=atol, msg=f"{path}: {name}")
        for reference_result, result in zip(reference_results, results):
            assert set(result) == set(reference_result), path
            for key, value in reference_result.items():
                assert result[key] == pytest.approx(value, rel=rtol, abs=atol), f"{path}: {key}"


def train_with_own_gradient_postprocessing(path: str, device: str) -> None:
    """One iteration of the main job's PPO settings, smaller (16 envs × 32 steps, minibatches of 128), on ``device``,
    set to update through ``path``, by a learner whose own gradient postprocessing zeroes every
    gradient: it ran on every gradient step, no step graph was made, and no weight moved."""
    from rllib_gpuenv.experiments import cartpole_config
    from rllib_gpuenv.rllib import DevicePPOTorchLearner

    class OwnPostprocessing(DevicePPOTorchLearner):
        calls = 0

        def postprocess_gradients_for_module(self, **kwargs):
            OwnPostprocessing.calls += 1
            return {ref: grad.zero_() for ref, grad in kwargs["module_gradients_dict"].items()}

    config = cartpole_config(device=device, seed=0).training(learner_class=OwnPostprocessing, minibatch_size=128)
    config.env_runners(num_envs_per_env_runner=16).device_rollouts(rollout_length=32)
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        use(learner, path)
        before = {name: w.clone() for name, w in learner.module["default_policy"].state_dict().items()}
        assert learner.lean_update_applies()
        algo.train()
        assert OwnPostprocessing.calls == config.num_epochs * 4 and learner._step_graph is None
        after = learner.module["default_policy"].state_dict()
        assert all(torch.equal(w, after[name]) for name, w in before.items())  # zero gradients: Adam moves nothing
    finally:
        algo.stop()
