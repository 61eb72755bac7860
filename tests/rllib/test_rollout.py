"""The device env runner's rollout, checked exactly on a scripted env; PPO's and DQN's use of it.

``Scripted-v0``'s episodes are known from their first observation ``u`` (uniform in [0, 1)):
step ``k`` earns ``10 * u + k``; the episode lasts 3 steps if ``u < 1/3``, 4 if ``u < 2/3``, else
5; it terminates at its end if ``u < 1/2``, and the time limit truncates it after 4 steps. So
every rollout row's reward, flags, reset mask and next observation can be written down.
The algorithms build and train in this process without a Ray cluster (``rllib/in_process.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rllib_gpuenv import EnvDef, jitable, ops, register_env
from rllib_gpuenv.rllib import DeviceDQNConfig, DevicePPOConfig, Rollout
from rllib_gpuenv.rllib.device_replay import n_step_transitions
from rllib_gpuenv.rllib.gae import compute_gae


class ScriptedParams(NamedTuple):
    per_u: float = 10.0


@jitable
def scripted_step(state, action, p):
    u, k = state
    k = k + 1.0
    length = 3.0 + ops.select(u > 1.0 / 3.0, 1.0, 0.0) + ops.select(u > 2.0 / 3.0, 1.0, 0.0)
    return (u, k), p.per_u * u + k, (k >= length) & (u < 0.5)


@jitable
def scripted_observe(state, p):
    return state


SCRIPTED = EnvDef(
    id="Scripted-v0",
    gymnasium_env=None,
    params=ScriptedParams,
    state_names=("u", "k"),
    obs_size=2,
    observation_bounds=lambda p: ((0.0, 0.0), (1.0, 10.0)),
    action_space=lambda p: spaces.Discrete(2),
    reset_bounds=lambda options, p: ((0.0, 0.0), (1.0, 0.0)),
    step=scripted_step,
    observe=scripted_observe,
    max_episode_steps=4,
)
register_env(SCRIPTED)
N = 16


def expected_episode(u: float) -> tuple[int, bool, bool]:
    """(steps, terminated, truncated) of an episode that started with observation u."""
    length = 3 if u < 1 / 3 else 4 if u < 2 / 3 else 5
    steps = min(length, 4)
    return steps, u < 0.5, steps == 4


def scripted_algo(**training):
    config = (
        DevicePPOConfig()
        .environment("Scripted-v0")
        .env_runners(num_envs_per_env_runner=N)
        .device_rollouts(rollout_length=12)
        .devices(learner="cpu", env_runners="cpu")
        .training(minibatch_size=64, num_epochs=1, **training)
        .debugging(seed=0)
    )
    return config.build_algo()


def test_the_runner_acts_in_eval_mode_whatever_mode_its_module_is_in():
    """As RLlib's forward_exploration does; a colocated learner's update leaves the module it
    shares with its envs in training mode."""
    algo = scripted_algo()
    try:
        module = algo.env_runner.module
        module.train()
        algo.env_runner.sample()
        assert not any(m.training for m in module.modules())
    finally:
        algo.stop()


def test_rollout_rows_are_what_the_env_did():
    algo = scripted_algo()
    try:
        runner = algo.env_runner
        ended_before = torch.zeros(N, dtype=torch.bool)
        for _ in range(2):  # the second rollout goes on from where the first stopped
            rollout: Rollout = runner.sample()
            T = rollout.length
            assert rollout.rewards.shape == (T, N) and rollout.obs.shape == (T, N, 2) and rollout.last_obs.shape == (N, 2)
            next_obs = rollout.next_obs()
            for i in range(N):
                for t in range(T):
                    if not rollout.valid[t, i]:  # NEXT_STEP reset: the obs it led to starts an episode
                        assert (rollout.terminated[t - 1, i] or rollout.truncated[t - 1, i]) if t else ended_before[i]
                        assert rollout.rewards[t, i] == 0 and not rollout.terminated[t, i] and next_obs[t, i, 1] == 0
                        continue
                    u, k = float(rollout.obs[t, i, 0]), int(rollout.obs[t, i, 1]) + 1
                    steps, terminates, truncates = expected_episode(u)
                    assert float(rollout.rewards[t, i]) == pytest.approx(10 * u + k, rel=1e-6)
                    assert next_obs[t, i, 1] == k and next_obs[t, i, 0] == rollout.obs[t, i, 0]  # the obs the step led to
                    assert bool(rollout.terminated[t, i]) == (k == steps and terminates)
                    assert bool(rollout.truncated[t, i]) == (k == steps and truncates)
                    if t + 1 < T:
                        assert bool(rollout.valid[t + 1, i]) == (k < steps)
            ended_before = rollout.terminated[-1] | rollout.truncated[-1]
        assert (rollout.terminated & rollout.truncated).any() and (rollout.truncated & ~rollout.terminated).any()
        dist = runner.module.get_exploration_action_dist_cls().from_logits(rollout.dist_inputs)
        torch.testing.assert_close(rollout.logp, dist.logp(rollout.actions))  # the distribution's own log-probs
    finally:
        algo.stop()


def test_ppo_advantages_bootstrap_at_truncations_only():
    """The learner's GAE equals GAE on the rollout with the learner's own values: a termination
    does not bootstrap, a truncation does, from its final observation's value."""
    from rllib_gpuenv.rllib.learner import rollout_batch

    algo = scripted_algo(gamma=0.9, lambda_=0.8)
    try:
        rollout = algo.env_runner.sample()
        learner = algo.learner_group._learner
        batch = learner._with_advantages(rollout_batch(rollout), rollout.length)
        with torch.no_grad():
            values = learner.module["default_policy"].compute_values(
                {"obs": torch.cat([rollout.obs, rollout.last_obs[None]]).reshape(-1, 2)}
            )
        values = values.reshape(-1, N)
        _, targets = compute_gae(rollout.rewards, values, rollout.terminated, rollout.truncated, 0.9, 0.8)
        torch.testing.assert_close(batch["value_targets"].reshape(N, -1).T, targets)
        for t, i in zip(*torch.nonzero(rollout.terminated | rollout.truncated, as_tuple=True)):
            bootstrap = 0.0 if rollout.terminated[t, i] else 0.9 * float(values[t + 1, i])
            assert float(targets[t, i]) == pytest.approx(float(rollout.rewards[t, i]) + bootstrap, rel=1e-5)
    finally:
        algo.stop()


@pytest.mark.parametrize("n", [1, 3])
def test_dqn_n_step_transitions(n):
    algo = scripted_algo()
    try:
        rollout = algo.env_runner.sample()
    finally:
        algo.stop()
    gamma = 0.5
    out = n_step_transitions(rollout, n, gamma)
    assert len(out["rewards"]) == int(rollout.valid.sum())
    rows = [(t, i) for t in range(rollout.length) for i in range(N) if rollout.valid[t, i]]
    next_obs = rollout.next_obs()
    for row, (t, i) in enumerate(rows):
        reward, steps, terminated = 0.0, 0, False
        for k in range(n):
            if t + k >= rollout.length:
                break
            reward += gamma**k * float(rollout.rewards[t + k, i])
            steps += 1
            if rollout.terminated[t + k, i] or rollout.truncated[t + k, i]:
                terminated = bool(rollout.terminated[t + k, i])
                break
        assert out["rewards"][row] == pytest.approx(reward)
        assert int(out["n_step"][row]) == steps
        assert bool(out["terminateds"][row]) == terminated  # a truncation bootstraps: not "terminated"
        assert torch.equal(out["new_obs"][row], next_obs[t + steps - 1, i])
    assert out["terminateds"].any() and (out["n_step"] == n).any()


def test_dqn_on_the_device_runner_learns_and_its_buffer_is_on_the_learner_device():
    config = (
        DeviceDQNConfig()
        .environment("GPUCartPole-v1")
        .env_runners(num_envs_per_env_runner=8)
        .device_rollouts(rollout_length=4)
        .training(
            train_batch_size_per_learner=32,
            num_steps_sampled_before_learning_starts=64,
            replay_buffer_config={"capacity": 1000},
        )
        .reporting(min_sample_timesteps_per_iteration=0)
    )
    algo = config.build_algo()
    try:
        for _ in range(5):
            result = algo.train()
        buffer = algo.learner_group._learner._replay
        assert buffer.added == 5 * 32 - 0 or buffer.added > 0
        assert buffer.columns["obs"].device == torch.device(algo.learner_group._learner._device)
        assert result["learners"]["default_policy"]["num_module_steps_trained"] > 0
    finally:
        algo.stop()


def test_replay_buffer_that_does_not_fit_says_so():
    from rllib_gpuenv.rllib.replay_buffer import DeviceReplayBuffer

    with pytest.raises(MemoryError, match=r"replay_buffer_config\['capacity'\]=.*needs about"):
        DeviceReplayBuffer(2**50, {"obs": torch.zeros(4)}, torch.device("cpu"))
    buffer = DeviceReplayBuffer(5, {"obs": torch.zeros(2), "rewards": torch.zeros(())}, torch.device("cpu"))
    buffer.add({"obs": torch.arange(14.0).reshape(7, 2), "rewards": torch.arange(7.0)})
    assert buffer.size == 5 and buffer.added == 7
    assert sorted(buffer.columns["rewards"].tolist()) == [2.0, 3.0, 4.0, 5.0, 6.0]  # the newest kept
    np.testing.assert_array_equal(sorted(buffer.sample(100)["rewards"].unique().tolist()), [2.0, 3.0, 4.0, 5.0, 6.0])


def test_a_runners_checkpoint_restored_into_colocated_learners_says_their_envs_start_anew(caplog):
    """The colocated learners step envs of their own; the driver's runner (envs only for the
    spaces) keeps no checkpointed envs, and says that the ones the checkpoint holds are not used."""
    from rllib_gpuenv.rllib.env_runner import DEVICE_ROLLOUT_STATE, DeviceEnvRunner

    def config():
        return (
            DevicePPOConfig()
            .environment("GPUCartPole-v1")
            .env_runners(num_envs_per_env_runner=4)
            .device_rollouts(rollout_length=4)
            .devices(learner="cpu", env_runners="cpu")
            .training(minibatch_size=16, num_epochs=1)
        )

    runner = DeviceEnvRunner(config=config())
    runner.sample()
    state = runner.get_state()
    assert "env" in state[DEVICE_ROLLOUT_STATE]
    colocated = config().learners(num_learners=2)
    colocated.validate()
    assert colocated.colocated_learners
    driver = DeviceEnvRunner(config=colocated)
    driver.set_state(state)
    assert "this run's colocated learners step envs of their own: they start new episodes" in caplog.text
    assert driver.num_envs == 1
