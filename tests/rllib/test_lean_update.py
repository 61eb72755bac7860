"""The lean update computes what RLlib's update computes: from the same learner state and batch,
the same weights, loss metrics, counters and KL coefficient, for discrete and continuous actions,
RLlib's PPO defaults (adaptive KL, value clip) and gradient clipping; and RLlib's update is kept
where the lean one would not match (a loss of the user's own). In this process, without a Ray
cluster (``rllib/in_process.py``)."""

import copy

import pytest
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from rllib_gpuenv.experiments import cartpole_config
from rllib_gpuenv.rllib import DeviceDQNConfig, DevicePPOConfig, DevicePPOTorchLearner
from rllib_gpuenv.rllib.dqn import WEIGHTS, n_step_transitions
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
)


def rllib_defaults(env: str) -> DevicePPOConfig:
    """PPO's settings at RLlib's defaults (adaptive KL loss, value clip 10), gradients clipped."""
    return (
        DevicePPOConfig()
        .environment(env)
        .devices(learner="cpu", env_runners="cpu")
        .debugging(seed=0)
        .env_runners(num_envs_per_env_runner=16)
        .device_rollouts(rollout_length=32)
        .training(minibatch_size=128, num_epochs=2, grad_clip=0.5, entropy_coeff=0.01)
    )


def updates(learner, rollouts, lean: bool) -> tuple[dict, list[dict]]:
    """Weights and the metrics of each update, after ``rollouts`` updates from the learner's state now."""
    learner.config.lean_update = lean
    results = []
    for rollout in rollouts:
        result = learner.update(
            batch=rollout_batch(rollout),
            rollout_length=rollout.length,
            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: rollout.num_env_steps},
            num_epochs=learner.config.num_epochs,
            minibatch_size=learner.config.minibatch_size,
            shuffle_batch_per_epoch=False,  # RLlib's order: the minibatches in the batch's order
        )
        results.append({key: float(stats.peek()) for key, stats in result["default_policy"].items() if key in COMPARED})
    weights = {k: v.detach().clone() for k, v in learner.module["default_policy"].state_dict().items()}
    return weights, results


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(lambda: cartpole_config(device="cpu", seed=0), id="main-job-settings"),
        pytest.param(lambda: rllib_defaults("GPUCartPole-v1"), id="rllib-defaults-discrete"),
        # Pendulum's squared value errors are far above RLlib's clip of 10, which would leave the critic untrained
        pytest.param(lambda: rllib_defaults("GPUPendulum-v1").training(vf_clip_param=float("inf")), id="continuous"),
    ],
)
def test_lean_update_equals_rllibs_update(config):
    algo = config().build_algo()
    try:
        learner = algo.learner_group._learner
        rollouts = [algo.env_runner.sample() for _ in range(3)]
        assert learner.lean_update_applies()
        learner.curr_kl_coeffs_per_module["default_policy"]  # created on first use: in the saved state from here on
        start = copy.deepcopy(learner.get_state())
        start_weights = {k: p.detach().clone() for k, p in learner.module["default_policy"].named_parameters()}
        rllib_weights, rllib_results = updates(learner, rollouts, lean=False)
        learner.set_state(copy.deepcopy(start))
        lean_weights, lean_results = updates(learner, rollouts, lean=True)
    finally:
        algo.stop()
    for name, weight in rllib_weights.items():
        torch.testing.assert_close(lean_weights[name], weight, rtol=1e-4, atol=1e-5, msg=name)
    assert [n for n, w in start_weights.items() if not (lean_weights[n] != w).any()] == []  # every parameter trained
    for rllib_result, lean_result in zip(rllib_results, lean_results):
        assert set(lean_result) == set(rllib_result)
        for key, value in rllib_result.items():
            assert lean_result[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


def dqn_updates(lean: bool, double_q: bool, loss: str) -> tuple[dict, list[dict]]:
    """Weights and metrics after three updates of 16 minibatches (the target network updated
    between them) of a new DeviceDQN learner, on transitions from its own env runner."""
    config = DeviceDQNConfig().environment("GPUCartPole-v1").devices(learner="cpu", env_runners="cpu").debugging(seed=0)
    config.training(double_q=double_q, td_error_loss_fn=loss, target_network_update_freq=256).lean_update = lean
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        assert learner.lean_update_applies() == lean
        results = []
        for i in range(3):
            batch = n_step_transitions(algo.env_runner.sample(), config.n_step, config.gamma)
            batch[WEIGHTS] = torch.ones(len(batch["obs"]))
            batch = {k: v.repeat_interleave(9, dim=0)[:2048] for k, v in batch.items()}  # 16 minibatches of 128
            result = learner.update_on_draws(batch, {NUM_ENV_STEPS_SAMPLED_LIFETIME: 256 * (i + 1)})
            results.append({k: float(v.peek()) for k, v in result["default_policy"].items() if k in COMPARED})
        return {k: v.detach().clone() for k, v in learner.module["default_policy"].state_dict().items()}, results
    finally:
        algo.stop()


@pytest.mark.parametrize("double_q, loss", [(True, "huber"), (False, "mse")])
def test_dqn_lean_update_equals_rllibs_update(double_q, loss):
    rllib_weights, rllib_results = dqn_updates(False, double_q, loss)
    lean_weights, lean_results = dqn_updates(True, double_q, loss)
    for name, weight in rllib_weights.items():
        torch.testing.assert_close(lean_weights[name], weight, rtol=1e-4, atol=1e-5, msg=name)
    for rllib_result, lean_result in zip(rllib_results, lean_results):
        assert set(lean_result) == set(rllib_result) and "qf_loss" in lean_result
        for key, value in rllib_result.items():
            assert lean_result[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


def test_a_loss_of_the_users_own_keeps_rllibs_update():
    class MyLearner(DevicePPOTorchLearner):
        calls = 0

        def compute_loss_for_module(self, **kwargs):
            MyLearner.calls += 1
            return PPOTorchLearner.compute_loss_for_module(self, **kwargs)

    config = cartpole_config(device="cpu", seed=0).training(learner_class=MyLearner)
    config.env_runners(num_envs_per_env_runner=16).device_rollouts(rollout_length=32).training(minibatch_size=128)
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        assert not learner.lean_update_applies()
        algo.train()
        assert MyLearner.calls == config.num_epochs * 4  # every minibatch through the user's loss
    finally:
        algo.stop()
