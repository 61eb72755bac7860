"""The lean update computes what RLlib's update computes: from the same learner state and batch,
the same weights, loss metrics, counters and KL coefficient, for discrete and continuous actions,
RLlib's PPO defaults (adaptive KL, value clip) and gradient clipping; and RLlib's update is kept
where the lean one would not match (a loss of the user's own). So does the step a GPU captures
as a CUDA graph (``update_graph.py``), run here uncaptured on its static buffers; the capture
itself is checked on a GPU (tests/test_gpu.py). In this process, without a Ray cluster
(``rllib/in_process.py``)."""

import pytest
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

from rllib_gpuenv.experiments import cartpole_config
from rllib_gpuenv.rllib import DevicePPOTorchLearner
from tests.update_paths import (
    LEAN,
    RLLIB,
    STATIC,
    assert_same,
    assert_same_td_errors,
    dqn_updates,
    noiseless_gaussians,
    ppo_runs,
    rllib_defaults,
    sac_updates,
    storage,
    train_with_own_gradient_postprocessing,
    updates,
    use,
)


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
    runs, start_weights, learner = ppo_runs(config(), (RLLIB, LEAN, STATIC))
    assert learner._step_graph is not None and learner._step_graph_failure is None  # STATIC ran through it
    assert [n for n, w in start_weights.items() if not (runs[LEAN][0][n] != w).any()] == []  # every parameter trained
    assert_same(runs)


def test_the_static_step_shuffles_as_the_lean_update_does():
    runs, _, learner = ppo_runs(cartpole_config(device="cpu", seed=0), (LEAN, STATIC), rollouts=2, shuffle=True)
    graph = learner._step_graph
    assert graph.steps_warm == 2 * learner.config.num_epochs * 4 and graph.graph is None  # uncaptured on a CPU
    assert_same(runs)


def test_updates_keep_in_place_every_tensor_a_captured_step_reads():
    """What replaying a graph relies on: after its first update, a learner's parameters, target
    networks and optimizer state stay where they are, through target-network syncs (DQN) and
    KL-coefficient changes (PPO, RLlib's defaults), while their values change."""
    _, _, dqn = dqn_updates(STATIC, double_q=True, loss="huber")
    first, last = dqn.storages
    assert first == last and any("target" in name for name in first)
    assert dqn.last_update_ts_by_mid["default_policy"] > 0  # it did sync them

    algo = rllib_defaults("GPUCartPole-v1").build_algo()
    try:
        learner = algo.learner_group._learner
        use(learner, STATIC)
        rollouts = [algo.env_runner.sample() for _ in range(3)]
        updates(learner, rollouts[:1], STATIC)
        first, kl = storage(learner), float(learner.curr_kl_coeffs_per_module["default_policy"])
        updates(learner, rollouts[1:], STATIC)
        assert storage(learner) == first and float(learner.curr_kl_coeffs_per_module["default_policy"]) != kl
    finally:
        algo.stop()


def test_shapes_that_keep_changing_end_the_static_step_and_change_nothing(caplog):
    sizes = [512, 256] * 3  # a new graph for each update after the first: changes 1, 2, 3, then eager
    with caplog.at_level("WARNING", logger="rllib_gpuenv.rllib.lean_update"):
        runs, _, learner = ppo_runs(cartpole_config(device="cpu", seed=0), (LEAN, STATIC), 6, minibatch_sizes=sizes)
    assert learner._step_graph is None and learner._step_graph_failure == "the update's shapes changed 4 times"
    assert "no longer captured as a CUDA graph" in caplog.text
    assert_same(runs)


@pytest.mark.parametrize(
    "double_q, loss, clip_by", [(True, "huber", "global_norm"), (False, "mse", "norm"), (True, "huber", "value")]
)
def test_dqn_lean_update_equals_rllibs_update(double_q, loss, clip_by):
    runs = {path: dqn_updates(path, double_q, loss, clip_by) for path in (RLLIB, LEAN, STATIC)}
    assert runs[STATIC][2]._step_graph is not None
    assert "qf_loss" in runs[LEAN][1][0]
    assert ("gradients_default_optimizer_global_norm" in runs[STATIC][1][0]) == (clip_by == "global_norm")
    assert_same({path: run[:2] for path, run in runs.items()})
    assert_same_td_errors(runs[LEAN][2], runs[STATIC][2])


def test_dqn_runs_its_next_observations_without_gradients(monkeypatch):
    """DeviceDQN's module computes the online network's Q-values of the next observations (double
    Q) without gradients, as the loss takes only their argmax; RLlib's module runs them through
    the backward pass too. The same updates either way."""
    from ray.rllib.algorithms.dqn.dqn_learner import QF_NEXT_PREDS, QF_PREDS, QF_TARGET_NEXT_PREDS
    from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule

    from rllib_gpuenv.rllib.dqn import DeviceDQNTorchRLModule

    ours = dqn_updates(LEAN, True, "huber")
    module = ours[2].module["default_policy"]
    out = module._forward_train({"obs": torch.randn(8, 4), "new_obs": torch.randn(8, 4)})
    assert out[QF_PREDS].requires_grad and not out[QF_NEXT_PREDS].requires_grad
    assert not out[QF_TARGET_NEXT_PREDS].requires_grad and out[QF_NEXT_PREDS].shape == (8, 2)
    monkeypatch.setattr(DeviceDQNTorchRLModule, "_forward_train", DefaultDQNTorchRLModule._forward_train)
    rllibs = dqn_updates(LEAN, True, "huber")
    assert (
        rllibs[2]
        .module["default_policy"]
        ._forward_train({"obs": torch.randn(8, 4), "new_obs": torch.randn(8, 4)})[QF_NEXT_PREDS]
        .requires_grad
    )
    assert_same({"ours": ours[:2], "RLlib's module": rllibs[:2]})


@pytest.mark.parametrize("actions", [2, 3, 6])
def test_dqn_centres_its_advantages_as_rllib_does(actions):
    """DeviceDQN's module centres the dueling advantages with ``mean`` where RLlib's takes a
    ``nanmean`` that skips masked (-inf) actions: on finite advantages the same Q-values and
    gradients to the bit. A subclass whose head masks with -inf (``finite_advantages = False``)
    gets RLlib's centring, the masked action staying at -inf."""
    import gymnasium as gym
    from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS
    from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule

    from rllib_gpuenv.rllib import DeviceDQNConfig

    config = DeviceDQNConfig()
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(actions)
    spec.model_config = config.model_config
    torch.manual_seed(actions)
    module = spec.build()
    obs = torch.randn(256, 4) * 3
    heads = {"af": module.af, "vf": module.vf}

    def q_and_grads(helper):
        module.zero_grad()
        q = helper(module, {"obs": obs}, module.encoder, heads)[QF_PREDS]
        q.pow(2).sum().backward()
        return q.detach(), [p.grad.clone() for p in module.parameters()]

    ours, rllibs = q_and_grads(type(module)._qf_forward_helper), q_and_grads(DefaultDQNTorchRLModule._qf_forward_helper)
    assert torch.equal(ours[0], rllibs[0]) and all(torch.equal(a, b) for a, b in zip(ours[1], rllibs[1]))

    class MaskedHead(torch.nn.Module):
        def forward(self, features):
            return module.af(features).index_fill(-1, torch.tensor([0]), float("-inf"))

    heads["af"] = MaskedHead()
    module.finite_advantages = False
    masked = type(module)._qf_forward_helper(module, {"obs": obs}, module.encoder, heads)[QF_PREDS]
    rllibs_masked = DefaultDQNTorchRLModule._qf_forward_helper(module, {"obs": obs}, module.encoder, heads)[QF_PREDS]
    assert torch.equal(masked, rllibs_masked)
    assert masked[:, 0].eq(float("-inf")).all() and masked[:, 1:].isfinite().all()


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


@pytest.mark.parametrize("path", [LEAN, STATIC])
def test_gradient_postprocessing_of_the_users_own_runs_in_the_lean_update(path):
    """The lean update clips gradients in place in a few ops; a learner that postprocesses its
    gradients its own way gets its own method called on every gradient step, and no CUDA graph
    (whose step would bypass it: here the uncaptured static step; captured on a GPU,
    tests/test_gpu.py)."""
    train_with_own_gradient_postprocessing(path, "cpu")


@pytest.mark.parametrize("what", ["forward_train", "complete_update"])
def test_torch_compile_learner_is_said_to_slow_the_update_down(what, caplog):
    """It turns the lean update off (RLlib's update runs), and RLlib 2.60's default compiles nothing."""
    from rllib_gpuenv.rllib.device_config import _warn_torch_compile_learner

    _warn_torch_compile_learner.cache_clear()
    config = cartpole_config(device="cpu", seed=0).framework(
        torch_compile_learner=True, torch_compile_learner_what_to_compile=what
    )
    config.validate()
    config.validate()  # said once
    said = [r.getMessage() for r in caplog.records if "torch_compile_learner=True" in r.getMessage()]
    assert len(said) == 1 and "lean update" in said[0]
    assert ("compiles nothing" in said[0]) == (what == "forward_train")
    caplog.clear()
    cartpole_config(device="cpu", seed=0).validate()  # off: nothing said
    assert not [r for r in caplog.records if "torch_compile_learner" in r.getMessage()]


@pytest.mark.parametrize("grad_clip, env", [(None, "GPUPendulum-v1"), (0.5, "GPUPendulum-v1"), (None, "GPUCartPole-v1")])
def test_sac_lean_update_equals_rllibs_update(grad_clip, env):
    """SAC's four losses as one sum, one backward, against RLlib's four backward passes: the same
    weights (targets included) and metrics, unclipped and clipped per optimizer, for Box actions
    (a squashed Gaussian) and Discrete ones (a softmax actor, expectations over the actions)."""
    runs = {path: sac_updates(path, grad_clip, env=env) for path in (RLLIB, LEAN, STATIC)}
    assert runs[STATIC][2]._step_graph is not None
    assert {"qf_loss", "qf_twin_loss", "policy_loss", "alpha_loss"} <= set(runs[LEAN][1][0])
    assert ("gradients_qf_global_norm" in runs[LEAN][1][0]) == (grad_clip is not None)
    assert_same({path: run[:2] for path, run in runs.items()})
    assert_same_td_errors(runs[LEAN][2], runs[STATIC][2])


@pytest.mark.parametrize("noiseless", [True, False])
def test_noiseless_gaussians_leave_sacs_update_nothing_random(monkeypatch, noiseless):
    """What tests/test_gpu.py's captured-SAC check relies on: with the Gaussians' noise fixed,
    a SAC update draws no random numbers (the generator's state is where it was); with it, it does."""
    from rllib_gpuenv.rllib import DeviceSACConfig
    from rllib_gpuenv.rllib.device_replay import WEIGHTS, n_step_transitions

    if noiseless:
        noiseless_gaussians(monkeypatch)
    config = DeviceSACConfig().environment("GPUPendulum-v1").devices(learner="cpu", env_runners="cpu").debugging(seed=0)
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        batch = n_step_transitions(algo.env_runner.sample(), config.n_step, config.gamma)
        batch = {key: column[:512] for key, column in batch.items()}
        batch[WEIGHTS] = torch.ones(512)
        before = torch.get_rng_state()
        learner.update_on_draws(batch, {"num_env_steps_sampled_lifetime": 1024})
        assert torch.equal(torch.get_rng_state(), before) == noiseless
    finally:
        algo.stop()
