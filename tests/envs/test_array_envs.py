"""Envs with an array of their own (``EnvDef.array_shape``), on every backend: MinAtar's Breakout
step for step against gymnax's, the backends against each other (numba-cuda under the
simulator), and the array's accessors and checks."""

import json

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rllib_gpuenv import EnvDef, jitable, make_vector_env, ops
from rllib_gpuenv.envs.minatar_breakout import BREAKOUT
from tests.helpers import run_python

NUMBERS = BREAKOUT.state_names  # ball_y, ball_x, ball_dir, pos, strike, last_y, last_x, bricks


def random_breakout_states(n: int, seed: int) -> dict[str, np.ndarray]:
    """Mid-game states gymnax's rules can meet: the ball anywhere above the bottom row, bricks
    scattered thinly (so that walls are cleared and rebuilt), a trail beside the ball."""
    rng = np.random.default_rng(seed)
    ball_y = rng.integers(0, 9, n)
    ball_x = rng.integers(0, 10, n)
    ball_dir = rng.integers(0, 4, n)
    brick_map = (rng.random((n, 10, 10)) < 0.04).astype(np.float32)
    brick_map[:, 9] = 0
    brick_map[np.arange(n), ball_y, ball_x] = 0
    # A quarter of the envs: one brick left, in the way of a ball moving up, so that the wall is
    # cleared and a new one drawn when the ball next reaches the bottom.
    last = np.arange(0, n, 4)
    ball_y[last], ball_x[last], ball_dir[last] = rng.integers(2, 9, last.size), rng.integers(1, 9, last.size), last % 8 // 4
    brick_map[last] = 0
    brick_map[last, ball_y[last] - 1, ball_x[last] + np.where(ball_dir[last] == 0, -1, 1)] = 1
    return {
        "ball_y": ball_y,
        "ball_x": ball_x,
        "ball_dir": ball_dir,
        "pos": rng.integers(0, 10, n),
        "brick_map": brick_map,
        "strike": rng.random(n) < 0.2,
        "last_y": np.clip(ball_y + rng.integers(-1, 2, n), 0, 8),
        "last_x": np.clip(ball_x + rng.integers(-1, 2, n), 0, 9),
    }


@pytest.mark.parametrize("backend", ["torch", "numba-cpu"])
def test_breakout_steps_as_gymnax_does(backend):
    """From the same states and actions, gymnax's Breakout-MinAtar and GPUBreakout-MinAtar give the
    same screens, rewards and terminations, step after step, until each episode ends."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from gymnax.environments.minatar.breakout import EnvState, MinBreakout

    n, steps = 64, 60
    fields = random_breakout_states(n, seed=3)
    state = EnvState(
        **{k: jnp.asarray(v) for k, v in fields.items()}, time=jnp.zeros(n, jnp.int32), terminal=jnp.zeros(n, bool)
    )
    gx = MinBreakout()
    params = gx.default_params
    step = jax.jit(jax.vmap(gx.step_env, in_axes=(None, 0, 0, None)))
    observe = jax.jit(jax.vmap(gx.get_obs))

    env = make_vector_env("GPUBreakout-MinAtar", n, backend=backend, device="cpu")
    env.reset(seed=0)
    bricks = fields["brick_map"].sum(axis=(1, 2))
    env.state = np.stack([np.asarray(fields[k], np.float64) for k in NUMBERS[:-1]] + [bricks], axis=1)
    env.state_array = np.asarray(observe(state))
    assert np.array_equal(env.state_array.numpy(), np.asarray(observe(state)))

    rng = np.random.default_rng(4)
    alive = np.ones(n, bool)
    rewards = ends = new_walls = 0
    for _ in range(steps):
        actions = rng.integers(0, 3, n)
        obs_g, state, reward_g, done_g, _ = step(jax.random.PRNGKey(0), state, jnp.asarray(actions), params)
        obs, reward, terminated, truncated, _ = env.step(torch.as_tensor(actions))
        same = (obs.numpy() == np.asarray(obs_g)).all(axis=(1, 2, 3))
        assert same[alive].all(), np.flatnonzero(alive & ~same)
        assert np.array_equal(reward.numpy()[alive], np.asarray(reward_g)[alive])
        assert np.array_equal(terminated.numpy()[alive], np.asarray(done_g)[alive])
        rewards += int(np.asarray(reward_g)[alive].sum())
        ends += int(np.asarray(done_g)[alive].sum())
        new_walls += int((np.asarray(state.brick_map).sum(axis=(1, 2))[alive] == 30).sum())
        alive &= ~np.asarray(done_g)
    assert rewards > 10 and ends > 10 and new_walls > 0  # bricks broke, walls were rebuilt, balls were lost
    assert not truncated.any()


def test_breakout_starts_as_gymnax_does():
    """Three rows of bricks, the paddle in column 4, the ball and its trail on row 3, in column 0
    moving down-right or column 9 moving down-left, both starts drawn."""
    env = make_vector_env("GPUBreakout-MinAtar", 256, backend="torch", device="cpu")
    obs, _ = env.reset(seed=1)
    assert obs.shape == (256, 10, 10, 4) and env.observation_space.shape == (256, 10, 10, 4)
    assert (obs[:, 1:4, :, 3] == 1).all() and obs[..., 3].sum() == 256 * 30
    assert (obs[:, 9, 4, 0] == 1).all() and obs[..., 0].sum() == 256
    state = env.state
    left = state[:, 1] == 0
    assert 0.3 < left.float().mean() < 0.7
    assert torch.equal(state[:, 2], torch.where(left, 2.0, 3.0))
    assert torch.equal(obs[:, 3, :, 1], obs[:, 3, :, 2]) and (obs[:, 3, :, 1].sum(1) == 1).all()
    assert torch.equal(obs[left][:, 3, 0, 1], torch.ones(int(left.sum())))


def test_array_env_backends_agree_under_the_cuda_simulator():
    """torch, numba-cpu and numba-cuda (simulated) give identical Breakout episodes with autoresets."""
    code = """
import json, torch
from rllib_gpuenv import make_vector_env
runs = {}
for backend, options in (("numba-cuda", {"threads_per_block": 8}), ("numba-cpu", {}), ("torch", {})):
    env = make_vector_env("GPUBreakout-MinAtar", 12, backend=backend, device="cpu", max_episode_steps=15,
                          episode_statistics=True, **options)
    obs, _ = env.reset(seed=2)
    g = torch.Generator().manual_seed(0)
    frames, ends = [obs], []
    for _ in range(40):
        obs, reward, terminated, truncated, info = env.step(torch.randint(0, 3, (12,), generator=g))
        frames.append(obs.clone()); ends.append(torch.stack([reward, terminated, truncated, info["episode"]["l"]]))
    runs[backend] = (torch.stack(frames), torch.stack(ends).float(), env.backend)
torch_run = runs["torch"]
print(json.dumps({b: [r[2], torch.equal(r[0], torch_run[0]), torch.equal(r[1], torch_run[1]),
                      int(r[1][:, 1].sum()), int(r[1][:, 2].sum())] for b, r in runs.items()}))
"""
    proc = run_python(code, env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for backend, (used, frames_equal, outcomes_equal, terminations, truncations) in results.items():
        assert used == backend
        assert frames_equal and outcomes_equal, backend
        assert terminations > 0 and truncations > 0, backend  # both kinds of autoreset were met


def test_state_array_is_read_and_set_with_envs_first():
    env = make_vector_env("GPUBreakout-MinAtar", 3, backend="torch", device="cpu")
    obs, _ = env.reset(seed=0)
    assert torch.equal(env.state_array, obs)
    screens = torch.zeros(3, 10, 10, 4)
    screens[1, 5, 5, 3] = 1
    env.state_array = screens
    assert torch.equal(env.state_array, screens)
    with pytest.raises(ValueError, match=r"state_array must have shape \(3, 10, 10, 4\)"):
        env.state_array = torch.zeros(10, 10, 4, 3)
    with pytest.raises(ValueError, match="GPUCartPole-v1 has no array in its state"):
        make_vector_env("GPUCartPole-v1", 2).state_array = torch.zeros(2, 1)
    assert make_vector_env("GPUCartPole-v1", 2).state_array is None


def test_an_env_without_a_gymnasium_env_offers_no_render_mode():
    """Nothing draws GPUBreakout-MinAtar (no gymnasium env of it): its metadata lists no render
    mode, and asking for one says so."""
    assert make_vector_env("GPUBreakout-MinAtar", 2).metadata["render_modes"] == []
    with pytest.raises(ValueError, match="GPUBreakout-MinAtar has no gymnasium env to draw it"):
        make_vector_env("GPUBreakout-MinAtar", 2, render_mode="rgb_array")


def test_get_and_put_state_with_an_array_resume_exactly():
    env = make_vector_env("GPUBreakout-MinAtar", 8, backend="numba-cpu")
    env.reset(seed=0)
    for a in range(5):
        env.step(torch.full((8,), a % 3))
    saved = env.get_state()
    copy = make_vector_env("GPUBreakout-MinAtar", 8, backend="torch")
    copy.set_state(saved)
    for a in range(12):
        first, second = env.step(torch.full((8,), a % 3)), copy.step(torch.full((8,), a % 3))
        assert all(torch.equal(x, y) for x, y in zip(first[:4], second[:4]))


# ---------------------------------------------------------------- a user's own array env
@jitable
def _paint(state, action, p):
    """A toy: paint the cell under a cursor that moves along a 1-D strip; the episode ends when all are painted."""
    cursor, painted, strip = state
    cursor = ops.clip(cursor + ops.to_float(action) - 1.0, 0.0, p.width - 1.0)
    fresh = ops.get(strip, (ops.to_int(cursor),)) == 0.0
    strip = ops.put(strip, (ops.to_int(cursor),), 1.0)
    painted = painted + ops.select(fresh, 1.0, 0.0)
    return (cursor, painted, strip), ops.select(fresh, 1.0, -0.1), painted >= p.width


def test_a_users_array_env_runs_on_every_cpu_backend_and_reports_bad_definitions():
    from typing import NamedTuple

    class P(NamedTuple):
        width: int = 6

    definition = EnvDef(
        id="PaintStrip-v0",
        gymnasium_env=None,
        params=P,
        state_names=("cursor", "painted"),
        obs_size=(6,),
        observation_bounds=lambda p: (0.0, 1.0),
        action_space=lambda p: spaces.Discrete(3),
        reset_bounds=lambda options, p: ((2.0, 0.0), (2.0, 0.0)),
        step=_paint,
        observe=jitable(returns_array=True)(lambda state, p: state[-1]),
        max_episode_steps=50,
        array_shape=(6,),
    )
    results = {}
    for backend in ("torch", "numba-cpu"):
        env = make_vector_env(definition, 4, backend=backend, episode_statistics=True)
        env.reset(seed=0)
        total = torch.zeros(4)
        for _ in range(9):  # right to the end, then back to the start: every cell painted once
            _, reward, terminated, _, _ = env.step(torch.full((4,), 2))
            total += reward
        for _ in range(5):
            obs, reward, terminated, _, _ = env.step(torch.full((4,), 0))
            total += reward
        results[backend] = (total, terminated)
    # 3 cells on the way right, 6 steps at the end (-0.1 each), 2 back over painted ones, 3 new ones
    assert torch.equal(*[r[0] for r in results.values()]) and torch.allclose(results["torch"][0], torch.tensor(5.2))
    assert results["torch"][1].all() and results["numba-cpu"][1].all()  # the 6th cell ends it

    # An observation that is part of the array (constant indices): the first 3 cells of the strip.
    partial = EnvDef(
        **{
            **definition.__dict__,
            "id": "PaintStripLeft-v0",
            "obs_size": (3,),
            "observe": jitable(returns_array=True)(lambda state, p: state[-1][:3]),
        }
    )
    seen = {}
    for backend in ("torch", "numba-cpu"):
        env = make_vector_env(partial, 2, backend=backend)
        first, _ = env.reset(seed=0)
        steps = [env.step(torch.full((2,), 0))[0] for _ in range(2)]  # left twice: cells 1 and 0 painted
        seen[backend] = torch.stack([first, *steps])
    assert torch.equal(seen["torch"], seen["numba-cpu"])
    assert seen["torch"][:, 0].tolist() == [[0, 0, 0], [0, 1, 0], [1, 1, 0]]

    with pytest.raises(ValueError, match="array_shape must be positive integers"):
        EnvDef(**{**definition.__dict__, "array_shape": (0, 3)})
