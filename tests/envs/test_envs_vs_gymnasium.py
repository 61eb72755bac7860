"""Lockstep equivalence of every env of the suite, on every CPU backend, with gymnasium's own env.

After each reset the state is copied from gymnasium (the initial states come from different
random generators), then both envs take the same actions: a mix of random actions and a simple
controller that reaches each env's goal, so that terminations and time-limit truncations both
happen (Pendulum never terminates; Acrobot's swing-up is rare enough that its controller is
helped by a lower bar: the check is then on the termination flag's agreement, see below).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rllib_gpuenv import ENV_DEFS, make_vector_env

# float64 is gymnasium's precision: states within 1e-9 over whole episodes (they differ only
# where gymnasium's x**2 calls C's pow). float32 steps from gymnasium's state (copied before
# every step) land within float32 rounding of gymnasium's: their errors would otherwise add up.
STATE_TOLERANCE = {"float64": {"rtol": 0, "atol": 1e-9}, "float32": {"rtol": 1e-5, "atol": 1e-6}}
GOAL_SEEKERS = {
    "GPUCartPole-v1": lambda s: int(s[2] + 0.5 * s[3] > 0),  # push under the falling pole
    "GPUAcrobot-v1": lambda s: 2 if s[2] > 0 else 0,  # pump energy with the first link's swing
    "GPUMountainCar-v0": lambda s: 2 if s[1] >= 0 else 0,  # accelerate with the motion
    "GPUMountainCarContinuous-v0": lambda s: np.array([1.3 if s[1] >= 0 else -1.3], np.float32),
    "GPUPendulum-v1": lambda s: np.array([np.clip(-3.0 * s[1], -2.5, 2.5)], np.float32),
}
ENDINGS = {  # what whole-episode play must exercise per env
    "GPUCartPole-v1": ("terminated", "truncated"),
    "GPUAcrobot-v1": ("truncated",),
    "GPUMountainCar-v0": ("terminated", "truncated"),
    "GPUMountainCarContinuous-v0": ("terminated", "truncated"),
    "GPUPendulum-v1": ("truncated",),
}


def gymnasium_env(env_id: str, **params):
    return ENV_DEFS[env_id].gymnasium_class()(**params)


def action_for(env_id, space, state, rng, p_random):
    if rng.random() < p_random:
        if isinstance(space, gym.spaces.Discrete):
            return int(rng.integers(space.n))
        return (rng.standard_normal(space.shape) * 1.5).astype(np.float32)  # out of bounds too: clipped
    return GOAL_SEEKERS[env_id](state)


def as_batch(action):
    return np.asarray(action)[None]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("env_id", list(ENV_DEFS))
def test_lockstep_with_gymnasium(env_id, dtype, backend):
    """≥ 2,000 steps (float64; 400 in float32, one step at a time) of one env against
    gymnasium's single env."""
    steps = 2000 if dtype == "float64" else 400
    max_steps = {"GPUCartPole-v1": 150, "GPUMountainCarContinuous-v0": 250}.get(env_id)  # reach truncations sooner
    ours = make_vector_env(
        env_id, 1, backend=backend, dtype=dtype, output="numpy", max_episode_steps=max_steps, episode_statistics=True
    )
    ref = gymnasium_env(env_id)
    rng = np.random.default_rng(0)
    obs, _ = ours.reset(seed=1)
    ref.reset(seed=1)
    ours.state = np.asarray(ref.state, dtype=np.float64)[None]
    limit = ours.max_episode_steps
    seen = {"terminated": 0, "truncated": 0}
    t = episode = 0
    for _ in range(steps):
        if dtype == "float32":
            ours.state = np.asarray(ref.state, dtype=np.float64)[None]
        p_random = 0.3 if episode % 2 == 0 else 1.0  # goal-seeking and random episodes in turn
        action = action_for(env_id, ref.action_space, np.asarray(ref.state), rng, p_random)
        obs, reward, term, trunc, info = ours.step(as_batch(action))
        ref_obs, ref_reward, ref_term, _, _ = ref.step(action)
        t += 1
        ref_trunc = t >= limit
        state = np.asarray(ref.state, dtype=np.float64)
        np.testing.assert_allclose(ours.state.numpy()[0], state, **STATE_TOLERANCE[dtype])
        np.testing.assert_allclose(obs[0], ref_obs, rtol=1e-6, atol=1e-6 if dtype == "float64" else 2e-4)
        assert bool(trunc[0]) == ref_trunc
        if dtype == "float64":
            assert bool(term[0]) == ref_term
            assert reward[0] == np.float32(ref_reward)  # rewards are float32, as gymnasium's spaces
        else:  # a float32 state within rounding of a threshold may end a step apart
            assert reward[0] == pytest.approx(ref_reward, rel=1e-4, abs=1e-4) or bool(term[0]) != ref_term
            if bool(term[0]) != ref_term:
                ref_term = bool(term[0])
        if term[0] or trunc[0]:
            seen["terminated"] += bool(term[0])
            seen["truncated"] += bool(trunc[0])
            assert info["episode"]["l"][0] == t
            obs, reward, term, trunc, _ = ours.step(as_batch(action))  # the NEXT_STEP reset step
            assert (reward[0], term[0], trunc[0]) == (0.0, False, False)
            ref.reset(seed=int(rng.integers(1 << 30)))
            ours.state = np.asarray(ref.state, dtype=np.float64)[None]
            t, episode = 0, episode + 1
    if dtype == "float64":
        for ending in ENDINGS[env_id]:
            assert seen[ending] > 0, seen


def test_acrobot_terminations_agree_with_gymnasium(backend):
    """Acrobot's swing-up rarely happens by chance: start near the top to make it terminate."""
    ours = make_vector_env("GPUAcrobot-v1", 1, backend=backend, dtype="float64", output="numpy")
    ref = gymnasium_env("GPUAcrobot-v1")
    rng = np.random.default_rng(3)
    terminations = 0
    for episode in range(40):
        ours.reset(seed=episode)
        ref.reset(seed=episode, options={"low": 2.2, "high": 2.6})  # both links well above level
        ours.state = np.asarray(ref.state, dtype=np.float64)[None]
        for _ in range(20):
            action = int(rng.integers(3))
            _, reward, term, _, _ = ours.step(np.array([action]))
            _, ref_reward, ref_term, _, _ = ref.step(action)
            np.testing.assert_allclose(ours.state.numpy()[0], ref.state, rtol=0, atol=1e-9)
            assert (bool(term[0]), reward[0]) == (ref_term, ref_reward)
            if term[0]:
                terminations += 1
                break
    assert terminations > 5


def test_sutton_barto_reward_matches_gymnasium(backend):
    n = 8
    ours = make_vector_env("GPUCartPole-v1", n, backend=backend, dtype="float64", output="numpy", sutton_barto_reward=True)
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    ref = CartPoleVectorEnv(num_envs=n, sutton_barto_reward=True)
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


# numba compiles an env's parameters into its kernel, the same way for every env: one env's new
# kernel checks that (each costs a compile of several seconds); torch checks every env's.
@pytest.mark.parametrize("env_id, backend", [(env_id, "torch") for env_id in ENV_DEFS] + [("GPUCartPole-v1", "numba-cpu")])
def test_parameters_override_as_gymnasium_attributes(env_id, backend):
    """A parameter set on our env equals the same attribute set on gymnasium's env."""
    name, value = {
        "GPUCartPole-v1": ("masspole", 0.3),
        "GPUAcrobot-v1": ("LINK_MASS_2", 1.7),
        "GPUMountainCar-v0": ("force", 0.0015),
        "GPUMountainCarContinuous-v0": ("power", 0.002),
        "GPUPendulum-v1": ("g", 9.81),
    }[env_id]
    ours = make_vector_env(env_id, 1, backend=backend, dtype="float64", output="numpy", **{name: value})
    ref = gymnasium_env(env_id)
    setattr(ref, name, value)
    if env_id == "GPUCartPole-v1":  # gymnasium derives these once, in its constructor
        ref.total_mass, ref.polemass_length = ref.masspole + ref.masscart, ref.masspole * ref.length
    rng = np.random.default_rng(2)
    ours.reset(seed=0)
    ref.reset(seed=0)
    ours.state = np.asarray(ref.state, dtype=np.float64)[None]
    for _ in range(30):
        action = action_for(env_id, ref.action_space, np.asarray(ref.state), rng, p_random=0.5)
        _, _, term, _, _ = ours.step(as_batch(action))
        _, _, ref_term, _, _ = ref.step(action)
        np.testing.assert_allclose(ours.state.numpy()[0], np.asarray(ref.state, np.float64), rtol=0, atol=1e-9)
        if term[0] or ref_term:
            break
    default = make_vector_env(env_id, 1, backend=backend, dtype="float64")
    assert getattr(default.params, name) != value and getattr(ours.params, name) == value
