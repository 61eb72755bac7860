"""Same seed + same actions → same trajectories on every backend (float64 within 1e-9)."""

import numpy as np
import torch

from rllib_gpuenv import CartPoleVectorEnv


def rollout(backend: str, dtype: str = "float64", n: int = 64, steps: int = 200, **kwargs):
    env = CartPoleVectorEnv(n, backend=backend, dtype=dtype, max_episode_steps=50, **kwargs)
    obs, _ = env.reset(seed=123)
    gen = torch.Generator().manual_seed(0)
    states, flags, rewards, lengths = [env.state], [], [], []
    for _ in range(steps):
        actions = torch.randint(0, 2, (n,), generator=gen)
        obs, rew, term, trunc, info = env.step(actions)
        states.append(env.state)
        flags.append(torch.stack([term, trunc]))
        rewards.append(rew)
        lengths.append(info["episode"]["l"])
    return torch.stack(states), torch.stack(flags), torch.stack(rewards), torch.stack(lengths)


def test_torch_and_numba_cpu_agree():
    a, b = rollout("torch"), rollout("numba-cpu")
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=1e-9)
    for x, y in zip(a[1:], b[1:]):
        assert torch.equal(x, y)
    assert a[1][:, 0].any() and a[3].max() > 0  # episodes did end and were reported


def test_substeps_agree_and_change_the_physics():
    one = rollout("numba-cpu", substeps=1, steps=20)[0]
    four_numba = rollout("numba-cpu", substeps=4, steps=20)[0]
    four_torch = rollout("torch", substeps=4, steps=20)[0]
    torch.testing.assert_close(four_numba, four_torch, rtol=0, atol=1e-9)
    assert not torch.allclose(one, four_numba)  # finer integration, different trajectory
    # Finer Euler steps converge: over the first steps (before any episode ends at a different
    # time), 4 and 8 sub-steps differ less than 1 and 4.
    eight = rollout("numba-cpu", substeps=8, steps=20)[0]
    assert (eight[:6] - four_numba[:6]).abs().max() < (four_numba[:6] - one[:6]).abs().max()


def test_float32_tracks_float64():
    s64 = rollout("numba-cpu", "float64", steps=15)[0]
    s32 = rollout("numba-cpu", "float32", steps=15)[0]
    np.testing.assert_allclose(s32.double(), s64, atol=1e-4)


def test_float32_backends_agree():
    """Float32 envs compute in float32 on both backends: same initial states, same flags."""
    a, b = rollout("torch", "float32"), rollout("numba-cpu", "float32")
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=1e-5)
    for x, y in zip(a[1:], b[1:]):
        assert torch.equal(x, y)
    restarted = a[1][:-1].any(1)  # done at step t: step t + 1 starts a new episode (state t + 2)
    assert restarted.any() and torch.equal(a[0][2:][restarted], b[0][2:][restarted])
    assert torch.equal(a[0][0], b[0][0])


def test_single_precision_kernels_compute_in_float32():
    """numba types Python floats as float64; ``single_precision`` keeps float32 physics float32."""
    import numba

    from rllib_gpuenv._jit import single_precision
    from rllib_gpuenv.physics import euler_step, sin_cos

    def step(theta, dt):
        s, c = sin_cos(theta, 0)
        return euler_step(theta, theta, theta, theta, 10.0, c, s, dt)

    def result_types(fn):
        compiled = numba.njit(fn)
        values = compiled(np.float32(0.1), np.float32(0.02))
        return {str(t) for t in compiled.nopython_signatures[0].return_type}, values

    assert "float64" in result_types(step)[0]  # what numba does by itself
    types, values = result_types(single_precision(step))
    assert types == {"float32"}
    np.testing.assert_allclose(values, step(0.1, 0.02), rtol=1e-6)


def test_kernel_sin_cos_matches_libm():
    """Float32 envs' branch-free sin/cos: within 2e-9 (float32 keeps 7 digits), all quadrants."""
    import math

    import numba

    from rllib_gpuenv.physics import sin_cos

    compiled = numba.njit(lambda theta, exact: sin_cos(theta, exact))
    thetas = np.concatenate([np.linspace(-7, 7, 4001), np.linspace(-1e5, 1e5, 401), [0.0, -0.0, 0.2094, -0.2094]])
    for theta in thetas:
        assert sin_cos(theta, True) == (math.sin(theta), math.cos(theta))
        for s, c in (sin_cos(theta, False), compiled(theta, False)):
            assert abs(s - math.sin(theta)) <= 2e-9 and abs(c - math.cos(theta)) <= 2e-9, theta
