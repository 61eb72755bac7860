"""The gymnasium VectorEnv contract, outputs, seeding, episode statistics and rendering."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from rllib_gpuenv import CartPoleVectorEnv


def test_spaces_and_metadata():
    env = CartPoleVectorEnv(5)
    ref = gym.make("CartPole-v1")
    assert env.single_observation_space == ref.observation_space
    assert env.single_action_space == ref.action_space
    assert env.observation_space.shape == (5, 4) and env.action_space.shape == (5,)
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs.numpy()) and info == {}
    assert "num_envs=5" in repr(env)


def test_torch_output_stays_on_device_and_numpy_output_is_numpy(backend):
    env = CartPoleVectorEnv(6, backend=backend)
    obs, _ = env.reset(seed=0)
    out = env.step(torch.ones(6, dtype=torch.long))
    for x in (obs, *out[:4], *out[4]["episode"].values()):
        assert isinstance(x, torch.Tensor) and x.device == env.device
    assert (obs.dtype, out[1].dtype, out[2].dtype) == (torch.float32, torch.float32, torch.bool)

    env = CartPoleVectorEnv(6, backend=backend, output="numpy")
    obs, _ = env.reset(seed=0)
    out = env.step([1, 0, 1, 0, 1, 0])  # a list works too
    assert all(isinstance(x, np.ndarray) for x in (obs, *out[:4]))
    assert (obs.dtype, out[1].dtype, out[2].dtype) == (np.float32, np.float32, np.bool_)


def test_same_seed_same_trajectory_different_seed_different(backend):
    def run(seed):
        env = CartPoleVectorEnv(10, backend=backend, dtype="float64")
        obs, _ = env.reset(seed=seed)
        observations = [obs]
        for t in range(40):
            observations.append(env.step(torch.full((10,), t % 2))[0])
        return torch.stack(observations)

    assert torch.equal(run(3), run(3))
    assert not torch.equal(run(3), run(4))


def test_unseeded_resets_move_on_and_reset_bounds_option():
    env = CartPoleVectorEnv(100)
    first, _ = env.reset(seed=1)
    second, _ = env.reset()
    assert not torch.equal(first, second)
    assert torch.equal(env.reset(seed=1)[0], first)
    wide, _ = env.reset(seed=1, options={"low": -0.2, "high": 0.2})
    assert wide.abs().max() > 0.05 and wide.abs().max() <= 0.2
    envs = [CartPoleVectorEnv(4) for _ in range(2)]
    assert not torch.equal(envs[0].reset()[0], envs[1].reset()[0])  # entropy-seeded


def test_autoreset_next_step_and_episode_statistics(backend):
    env = CartPoleVectorEnv(3, backend=backend, max_episode_steps=7)
    env.reset(seed=0)
    push_right = torch.ones(3, dtype=torch.long)
    returns = torch.zeros(3)
    for t in range(1, 8):
        obs, rew, term, trunc, info = env.step(push_right)
        returns += rew
        if t < 7:
            assert not trunc.any() and not info["_episode"].any()
    assert trunc.all() and not term.any()  # time limit after 7 steps, pole still up
    assert info["_episode"].all() and info["episode"]["_r"].all()
    assert torch.equal(info["episode"]["l"], torch.full((3,), 7, dtype=torch.int32))
    assert torch.equal(info["episode"]["r"], returns)
    # The next step resets: initial observation, reward 0, no flags; the action is ignored.
    obs, rew, term, trunc, info = env.step(push_right)
    assert obs.abs().max() <= 0.05 and not rew.any() and not term.any() and not trunc.any()
    assert not info["_episode"].any() and not info["episode"]["l"].any()


def test_numpy_output_reports_episodes_only_when_one_ends():
    env = CartPoleVectorEnv(2, output="numpy", max_episode_steps=2)
    env.reset(seed=0)
    assert env.step([0, 0])[4] == {}
    info = env.step([0, 0])[4]
    assert info["_episode"].tolist() == [True, True] and info["episode"]["l"].tolist() == [2, 2]


def test_state_can_be_read_and_set(backend):
    env = CartPoleVectorEnv(2, backend=backend, dtype="float64")
    env.reset(seed=0)
    env.state = np.array([[0.0, 0.0, 0.0, 0.0], [2.39, 1.0, 0.0, 0.0]])
    _, _, term, _, _ = env.step(np.array([0, 1]))
    assert term.tolist() == [False, True]  # env 1 left the track
    # Pole upright at rest, pushed left: x_dot gains tau * xacc from the cart-pole equations.
    temp = -10.0 / 1.1
    thetaacc = -temp / (0.5 * (4 / 3 - 0.1 / 1.1))
    assert env.state[0, 1].item() == pytest.approx(0.02 * (temp - 0.05 * thetaacc / 1.1), rel=1e-12)
    with pytest.raises(ValueError, match=r"shape \(2, 4\)"):
        env.state = np.zeros((3, 4))


def test_render_rgb_array_of_one_env():
    pytest.importorskip("pygame")
    env = CartPoleVectorEnv(4, render_mode="rgb_array", render_env_index=2)
    env.reset(seed=0)
    env.state = torch.tensor([[0.0, 0, 0, 0]] * 2 + [[1.5, 0, 0.2, 0]] + [[0.0, 0, 0, 0]])
    frame = env.render()
    assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8
    centre = env.render()
    env.render_env_index = 0
    assert not np.array_equal(env.render(), centre)  # a different env is drawn elsewhere
    env.close()
