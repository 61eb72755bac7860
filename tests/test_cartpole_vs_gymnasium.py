"""Lockstep equivalence of every CPU backend with gymnasium's own CartPole-v1."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv as GymCartPoleVectorEnv

from rllib_gpuenv import CartPoleVectorEnv

# float64 is gymnasium's own precision: states equal within 1e-9 (they differ only in the last
# bits of sin/cos and fused multiply-adds); float32 physics tracks it to float32 precision.
TOLERANCE = {"float64": 1e-9, "float32": 2e-4}
OBS_TOLERANCE = {"rtol": 1e-6, "atol": 1e-7}  # observations are float32 in both envs


def balancing_actions(obs: np.ndarray, rng: np.random.Generator, p_random=0.2) -> np.ndarray:
    """A crude controller with some noise: long episodes, so time limits are reached too.

    ``p_random`` (a number, or one per env) is the chance of a random action instead.
    """
    push_right = (obs[:, 2] + 0.5 * obs[:, 3]) > 0
    noise = rng.random(len(obs)) < p_random
    return np.where(noise, rng.integers(0, 2, len(obs)), push_right).astype(np.int64)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_lockstep_with_gymnasium_vector_env(backend, dtype):
    n, max_steps = 16, 40
    ours = CartPoleVectorEnv(n, backend=backend, dtype=dtype, output="numpy", max_episode_steps=max_steps)
    ref = GymCartPoleVectorEnv(num_envs=n, max_episode_steps=max_steps)
    obs, _ = ours.reset(seed=7)
    ref.reset(seed=7)
    ref.state = ours.state.double().numpy().T.copy()  # same start; gymnasium keeps (4, N)
    rng = np.random.default_rng(0)
    seen = {"terminated": 0, "truncated": 0, "reset_steps": 0}
    for _ in range(300):
        actions = balancing_actions(obs, rng, p_random=np.tile([0.1, 0.9], n // 2))
        resetting = ref.prev_done.copy()
        obs, rew, term, trunc, _ = ours.step(actions)
        ref_obs, ref_rew, ref_term, ref_trunc, _ = ref.step(actions)
        np.testing.assert_array_equal(term, ref_term)
        np.testing.assert_array_equal(trunc, ref_trunc)
        np.testing.assert_array_equal(rew, ref_rew)
        # Reset steps draw initial states from different RNGs: compare the rest, then align.
        live = ~resetting
        np.testing.assert_allclose(ours.state.double().numpy()[live], ref.state.T[live], rtol=0, atol=TOLERANCE[dtype])
        np.testing.assert_allclose(obs[live], ref_obs[live], rtol=1e-6, atol=TOLERANCE[dtype])
        assert np.all(np.abs(obs[resetting]) <= 0.05)
        ref.state[:, resetting] = ours.state.double().numpy().T[:, resetting]
        seen["terminated"] += term.sum()
        seen["truncated"] += trunc.sum()
        seen["reset_steps"] += resetting.sum()
    assert min(seen.values()) > 0, seen  # every kind of transition was exercised


def test_lockstep_with_gymnasium_single_env(backend):
    """Whole episodes of env 0 against gymnasium.make('CartPole-v1') (with its TimeLimit)."""
    ours = CartPoleVectorEnv(1, backend=backend, dtype="float64", output="numpy")
    ref = gym.make("CartPole-v1")
    rng = np.random.default_rng(1)
    obs, _ = ours.reset(seed=3)
    ref.reset(seed=3)
    ref.unwrapped.state = ours.state.numpy()[0].copy()
    episodes = lengths = 0
    while episodes < 6:
        action = balancing_actions(obs, rng, p_random=0.1)
        obs, rew, term, trunc, info = ours.step(action)
        ref_obs, ref_rew, ref_term, ref_trunc, _ = ref.step(int(action[0]))
        np.testing.assert_allclose(ours.state.numpy()[0], ref.unwrapped.state, rtol=0, atol=1e-9)
        np.testing.assert_allclose(obs[0], ref_obs, **OBS_TOLERANCE)
        assert (rew[0], term[0], trunc[0]) == (ref_rew, ref_term, ref_trunc)
        if term[0] or trunc[0]:
            episodes += 1
            lengths += info["episode"]["l"][0]
            assert info["episode"]["r"][0] == info["episode"]["l"][0]
            obs, rew, term, trunc, _ = ours.step(np.array([1]))  # the NEXT_STEP reset step
            assert (rew[0], term[0], trunc[0]) == (0.0, False, False)
            ref.reset()
            ref.unwrapped.state = ours.state.numpy()[0].copy()
    assert lengths > 6 * 20  # the controller keeps the pole up for a while


def test_sutton_barto_reward_matches_gymnasium(backend):
    n = 8
    ours = CartPoleVectorEnv(n, backend=backend, dtype="float64", output="numpy", sutton_barto_reward=True)
    ref = GymCartPoleVectorEnv(num_envs=n, sutton_barto_reward=True)
    ours.reset(seed=0)
    ref.reset(seed=0)
    ref.state = ours.state.numpy().T.copy()
    actions = np.ones(n, dtype=np.int64)  # push right until every pole falls
    rewards = []
    for _ in range(30):
        _, rew, term, _, _ = ours.step(actions)
        _, ref_rew, ref_term, _, _ = ref.step(actions)
        np.testing.assert_array_equal(rew, ref_rew)
        np.testing.assert_array_equal(term, ref_term)
        rewards.append(rew)
        ref.state = ours.state.numpy().T.copy()
    assert np.min(rewards) == -1.0 and np.max(rewards) == 0.0
