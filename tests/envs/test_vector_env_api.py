"""The gymnasium VectorEnv contract, outputs, seeding, episode statistics and rendering."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from rllib_gpuenv import ENV_DEFS, CartPoleVectorEnv, make_vector_env

GYMNASIUM_IDS = {
    "GPUCartPole-v1": "CartPole-v1",
    "GPUAcrobot-v1": "Acrobot-v1",
    "GPUMountainCar-v0": "MountainCar-v0",
    "GPUMountainCarContinuous-v0": "MountainCarContinuous-v0",
    "GPUPendulum-v1": "Pendulum-v1",
}


@pytest.mark.parametrize("env_id", list(ENV_DEFS))
def test_spaces_time_limits_and_metadata_are_gymnasiums(env_id):
    env = make_vector_env(env_id, 5)
    ref = gym.make(GYMNASIUM_IDS[env_id])
    assert env.single_observation_space == ref.observation_space
    assert env.single_action_space == ref.action_space
    assert env.observation_space == gym.vector.utils.batch_space(ref.observation_space, 5)
    assert env.action_space == gym.vector.utils.batch_space(ref.action_space, 5)
    assert env.max_episode_steps == ref.spec.max_episode_steps
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert env.metadata["render_fps"] == ref.metadata["render_fps"]
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs.numpy()) and info == {}
    assert f"{env_id}, num_envs=5" in repr(env)


@pytest.mark.parametrize("env_id", list(ENV_DEFS))
def test_reset_draws_gymnasiums_initial_distribution(env_id):
    """Same bounds, and the options gymnasium's reset takes."""
    env = make_vector_env(env_id, 4000, dtype="float64")
    env.reset(seed=0)
    low, high = env.state.min(0).values.numpy(), env.state.max(0).values.numpy()
    expected = {
        "GPUCartPole-v1": ([-0.05] * 4, [0.05] * 4),
        "GPUAcrobot-v1": ([-0.1] * 4, [0.1] * 4),
        "GPUMountainCar-v0": ([-0.6, 0.0], [-0.4, 0.0]),
        "GPUMountainCarContinuous-v0": ([-0.6, 0.0], [-0.4, 0.0]),
        "GPUPendulum-v1": ([-np.pi, -1.0], [np.pi, 1.0]),
    }[env_id]
    span = np.asarray(expected[1]) - np.asarray(expected[0])
    assert np.all(low >= expected[0]) and np.all(high <= expected[1])
    assert np.all(low - expected[0] <= 0.01 * span) and np.all(expected[1] - high <= 0.01 * span)  # all of it is used
    options = {"x_init": 0.5, "y_init": 0.25} if env_id == "GPUPendulum-v1" else {"low": -0.01, "high": 0.01}
    env.reset(seed=0, options=options)
    assert env.state.abs().max() <= 0.5 + 1e-12
    if env_id == "GPUAcrobot-v1":  # gymnasium stores Acrobot's initial state as float32
        assert torch.equal(env.state, env.state.float().double())


def test_torch_output_stays_on_device_and_numpy_output_is_numpy(backend):
    env = CartPoleVectorEnv(6, backend=backend, episode_statistics=True)
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


@pytest.mark.parametrize("device", ["cpu:0", torch.device("cpu", 0), "auto", None])
def test_every_spelling_of_the_cpu_steps(device, backend):
    """The env's device is the one torch reports for its tensors: ``cpu:0`` is ``cpu``, and
    actions made with ``.to(env.device)`` (or anywhere on the CPU) are taken."""
    env = CartPoleVectorEnv(2, backend=backend, device=device)
    assert env.device == torch.device("cpu")
    obs, _ = env.reset(seed=0)
    assert obs.device == env.device
    env.step(torch.zeros(2, dtype=torch.long).to(env.device))


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


def test_seeds_past_32_bits_are_seeds_of_their_own():
    """A seed below 2**32 is the hash's seed itself (the trajectories recorded so far stay as they
    were); every further word counts, zero words too: ``k * 2**32`` is not seed ``k``."""
    from rllib_gpuenv.core.rng import fold_seed

    assert [fold_seed(s) for s in (0, 1, 12345, 2**32 - 1)] == [0, 1, 12345, 2**32 - 1]
    big = [1 << 32, 2 << 32, (1 << 64) + 1, 1 << 64, (1 << 32) + 1]
    assert len({fold_seed(s) for s in big + [0, 1, 2]}) == len(big) + 3
    env = CartPoleVectorEnv(4)
    assert not torch.equal(env.reset(seed=1)[0], env.reset(seed=1 << 32)[0])


def test_a_reset_mask_resets_only_those_envs(backend):
    """gymnasium's ``options["reset_mask"]`` (SyncVectorEnv's): the masked envs start a new episode
    (their step counts and returns anew), the others go on where they were, from the same states."""
    env = CartPoleVectorEnv(4, backend=backend, dtype="float64", episode_statistics=True)
    reference = CartPoleVectorEnv(4, backend=backend, dtype="float64", episode_statistics=True)
    env.reset(seed=0), reference.reset(seed=0)
    for _ in range(3):
        obs = env.step(torch.zeros(4, dtype=torch.long))[0]
        reference.step(torch.zeros(4, dtype=torch.long))
    mask = np.array([True, False, False, True])
    after, _ = env.reset(options={"reset_mask": mask})
    assert torch.equal(after[1:3], obs[1:3]) and not torch.isclose(after[[0, 3]], obs[[0, 3]]).any()
    assert after[[0, 3]].abs().max() <= 0.05  # CartPole's initial range
    for _ in range(15):  # the kept envs step on exactly as the envs that were never reset
        out, ref = env.step(torch.ones(4, dtype=torch.long)), reference.step(torch.ones(4, dtype=torch.long))
        assert torch.equal(out[0][1:3], ref[0][1:3])
        if out[4]["_episode"][1:3].any():
            assert torch.equal(out[4]["episode"]["l"][1:3], ref[4]["episode"]["l"][1:3])
    env.reset(options={"reset_mask": torch.tensor([True, False, False, False])})  # a tensor mask too
    with pytest.raises(ValueError, match=r"reset_mask'\] must have shape \(4,\), one entry per env, got \(3,\)"):
        env.reset(options={"reset_mask": np.ones(3, dtype=bool)})
    with pytest.raises(TypeError, match=r"reset_mask'\] must be a bool numpy array or tensor, .* got list"):
        env.reset(options={"reset_mask": [True, False, False, True]})


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
    env = CartPoleVectorEnv(3, backend=backend, max_episode_steps=7, episode_statistics=True)
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
    env = CartPoleVectorEnv(2, output="numpy", max_episode_steps=2, episode_statistics=True)
    env.reset(seed=0)
    assert env.step([0, 0])[4] == {}
    info = env.step([0, 0])[4]
    assert info["_episode"].tolist() == [True, True] and info["episode"]["l"].tolist() == [2, 2]


def test_setting_the_state_keeps_counters_and_a_pending_reset(backend):
    """As assigning ``env.unwrapped.state`` in gymnasium: only the physical state changes."""
    env = CartPoleVectorEnv(2, backend=backend, max_episode_steps=3)
    env.reset(seed=0)
    for _ in range(3):
        _, _, _, trunc, _ = env.step([0, 1])
    assert trunc.all()  # both episodes ended: the next step resets them
    env.state = np.zeros((2, 4))
    obs, reward, term, trunc, _ = env.step([0, 1])
    assert not reward.any() and not trunc.any() and obs.abs().max() <= 0.05 and obs.abs().max() > 0  # reset, not zeros
    env.step([0, 1])
    env.step([0, 1])
    env.state = np.zeros((2, 4))
    _, _, _, trunc, _ = env.step([0, 1])
    assert trunc.all()  # the step count went on: third step of the episode


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


def test_render_returns_one_frame_per_env_as_gymnasiums_vector_cartpole():
    """gymnasium's vector contract (issue 28, 6b): a list of num_envs frames, every env drawn, as
    its CartPoleVectorEnv draws them; "rgb_array_list" is accepted and draws the same."""
    pytest.importorskip("pygame")
    ref = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point", render_mode="rgb_array_list")
    for mode in ("rgb_array", "rgb_array_list"):
        env = CartPoleVectorEnv(3, render_mode=mode, dtype="float64")
        env.reset(seed=0)
        ref.reset(seed=0)
        env.state = torch.tensor([[0.0, 0, 0, 0], [1.5, 0, 0.2, 0], [-1.0, 0, -0.1, 0]], dtype=torch.float64)
        ref.unwrapped.state = env.state.numpy().T.copy()
        frames, expected = env.render(), ref.render()
        assert isinstance(frames, list) and len(frames) == 3
        assert all(f.shape == (400, 600, 3) and f.dtype == np.uint8 for f in frames)
        assert not np.array_equal(frames[0], frames[1])
        for frame, want in zip(frames, expected):
            assert np.array_equal(frame, want)
        env.close()


def test_gymnasiums_record_video_wrapper_records_our_frames(tmp_path):
    """gymnasium's RecordVideo vector wrapper asserts that render() gives num_envs frames."""
    pytest.importorskip("pygame")
    pytest.importorskip("moviepy")
    for mode in ("rgb_array", "rgb_array_list"):
        env = gym.wrappers.vector.RecordVideo(
            make_vector_env("GPUPendulum-v1", 2, render_mode=mode, output="numpy"),
            str(tmp_path / mode),
            step_trigger=lambda step: step == 0,
            video_length=3,
        )
        env.reset(seed=0)
        for _ in range(3):
            env.step(env.action_space.sample())
        env.close()
        assert [f.suffix for f in (tmp_path / mode).iterdir()] == [".mp4"]


@pytest.mark.parametrize("env_id", list(ENV_DEFS))
def test_render_draws_what_gymnasium_draws_for_the_same_state(env_id):
    pytest.importorskip("pygame")
    env = make_vector_env(env_id, 3, render_mode="rgb_array", dtype="float64")
    ref = gym.make(GYMNASIUM_IDS[env_id], render_mode="rgb_array").unwrapped
    env.reset(seed=0)
    ref.reset(seed=0)
    env.action_space.seed(0)
    for t in range(3):
        action = env.action_space.sample()
        env.step(action)
        frames = env.render()
        for i in range(3):
            ref.state = env.state.numpy()[i].copy()
            if env_id == "GPUPendulum-v1":  # it draws the last torque too
                ref.last_u = np.clip(action[i], -2.0, 2.0)[0]
            assert np.array_equal(frames[i], ref.render()), (t, i)
    env.close()


def test_gymnasiums_episode_statistics_wrapper_works_on_every_env_and_agrees_with_ours():
    """CleanRL-style code wraps the vector env in RecordEpisodeStatistics: our envs leave its keys
    to it (as gymnasium's own vector envs do) unless asked for their own, which agree with it."""
    for env_id in ENV_DEFS:
        wrapped = gym.wrappers.vector.RecordEpisodeStatistics(gym.make_vec(env_id, num_envs=4, max_episode_steps=20))
        ours = make_vector_env(env_id, 4, output="numpy", max_episode_steps=20, episode_statistics=True)
        wrapped.reset(seed=0), ours.reset(seed=0)
        ended = 0
        for _ in range(45):
            actions = wrapped.action_space.sample()
            theirs_info, our_info = wrapped.step(actions)[4], ours.step(actions)[4]
            assert ("episode" in theirs_info) == ("episode" in our_info), env_id
            if "episode" in our_info:
                mask = our_info["_episode"]
                assert (theirs_info["_episode"] == mask).all(), env_id
                np.testing.assert_allclose(theirs_info["episode"]["r"][mask], our_info["episode"]["r"][mask], rtol=1e-5)
                assert (theirs_info["episode"]["l"][mask] == our_info["episode"]["l"][mask]).all(), env_id
                ended += int(mask.sum())
        assert ended >= 8, env_id  # two time limits of 20 steps in 45, at least
