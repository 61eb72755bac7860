"""Same seed + same actions → same trajectories on every backend, for every env of the suite.

float64: states within 1e-9 and identical flags, rewards and episode statistics (in fact the
CPU backends agree bit for bit: both call the C library's trigonometry). float32: both compute
in float32 from identical initial states, so steps agree to float32 rounding; over long
horizons float32 trajectories part, as any two float32 implementations' do (see the README).
"""

import math

import numba
import numpy as np
import pytest
import torch

from rllib_gpuenv import ENV_DEFS, CartPoleVectorEnv, make_vector_env
from rllib_gpuenv.core import ops
from rllib_gpuenv.core.jit import single_precision, use_numba


def rollout(backend: str, env_id: str = "GPUCartPole-v1", dtype: str = "float64", n: int = 64, steps: int = 200, **kwargs):
    """The CPU backends (torch on the CPU where a GPU is there too): test_gpu.py compares the GPU's."""
    env = make_vector_env(
        env_id, n, backend=backend, device="cpu", dtype=dtype, max_episode_steps=50, episode_statistics=True, **kwargs
    )
    env.reset(seed=123)
    env.action_space.seed(0)
    states, flags, rewards, lengths = [env.state], [], [], []
    for _ in range(steps):
        obs, rew, term, trunc, info = env.step(torch.as_tensor(env.action_space.sample()))
        states.append(env.state)
        flags.append(torch.stack([term, trunc]))
        rewards.append(rew)
        lengths.append(info["episode"]["l"])
    return torch.stack(states), torch.stack(flags), torch.stack(rewards), torch.stack(lengths)


@pytest.mark.parametrize("env_id", list(ENV_DEFS))
def test_torch_and_numba_cpu_agree_in_float64(env_id):
    a, b = rollout("torch", env_id), rollout("numba-cpu", env_id)
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=1e-9)
    for x, y in zip(a[1:], b[1:]):
        assert torch.equal(x, y)
    assert a[1][:, 1].any() and a[3].max() > 0  # episodes did end and were reported


def test_the_hash_s_product_is_exact_modulo_2_32_on_tensors_and_in_kernels():
    """``mul32`` on int64 tensors is one product, wrapping past 2**63; kernels split it in two."""
    from rllib_gpuenv.core.rng import MASK32, mul32

    use_numba()
    kernel = numba.njit(lambda a, c: mul32(a, c))
    values = [0, 1, 2**31, 2**32 - 1, *np.random.default_rng(0).integers(0, 2**32, 200).tolist()]
    for c in (0x85EBCA6B, 0xC2B2AE35, MASK32):
        exact = [v * c % 2**32 for v in values]
        assert mul32(torch.tensor(values), c).tolist() == exact  # products up to 2**64: int64 wraps
        assert [kernel(np.int64(v), np.int64(c)) for v in values] == exact
        assert [mul32(v, c) for v in values] == exact


@pytest.mark.parametrize("env_id", list(ENV_DEFS))
def test_the_torch_backend_steps_alike_on_the_gpu_s_way(env_id):
    """A torch step on a GPU asks the host nothing: it draws initial states for every env at every
    step, all components at once, and wraps angles a fixed number of times. On the CPU's tensors
    the same step (``ops.gpu_code_paths``) gives the same numbers, bit for bit."""
    with ops.gpu_code_paths():
        gpu_way = rollout("torch", env_id)
    for a, b in zip(gpu_way, rollout("torch", env_id)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("env_id", list(ENV_DEFS))
def test_float32_backends_start_alike_and_step_alike(env_id):
    """Same float32 initial states; the first steps agree to float32 rounding."""
    a, b = rollout("torch", env_id, "float32", steps=3), rollout("numba-cpu", env_id, "float32", steps=3)
    assert torch.equal(a[0][0], b[0][0])
    torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-5)
    assert torch.equal(a[1], b[1])


def test_float32_tracks_float64():
    s64 = rollout("numba-cpu", dtype="float64", steps=15)[0]
    s32 = rollout("numba-cpu", dtype="float32", steps=15)[0]
    np.testing.assert_allclose(s32.double(), s64, atol=1e-4)


def test_substeps_agree_and_change_the_physics():
    one = rollout("numba-cpu", substeps=1, steps=20)[0]
    four_numba = rollout("numba-cpu", substeps=4, steps=20)[0]
    four_torch = rollout("torch", substeps=4, steps=20)[0]
    torch.testing.assert_close(four_numba, four_torch, rtol=0, atol=1e-9)
    assert not torch.allclose(one, four_numba)  # finer integration, different trajectory
    # Finer Euler steps converge: over the first steps (before any episode ends at a different
    # time), 4 and 8 sub-steps differ less than 1 and 4 (physics: torch's, which numba's matches;
    # a numba kernel of its own would cost a compile, its parameters being compiled in).
    eight = rollout("torch", substeps=8, steps=20)[0]
    assert (eight[:6] - four_numba[:6]).abs().max() < (four_numba[:6] - one[:6]).abs().max()


def test_single_precision_kernels_compute_in_float32():
    """numba types Python floats as float64; ``single_precision`` keeps a float32 step float32."""
    from rllib_gpuenv.envs.cartpole import CartPoleParams, step

    use_numba()
    params32 = CartPoleParams()._replace(
        **{k: np.float32(v) for k, v in CartPoleParams()._asdict().items() if type(v) is float}
    )

    def cartpole_step(theta, params):
        return step((theta, theta, theta, theta), 1, params)[0]

    def result_types(fn, params):
        compiled = numba.njit(fn)
        values = compiled(np.float32(0.1), params)
        return {str(t) for t in compiled.nopython_signatures[0].return_type}, values

    assert "float64" in result_types(cartpole_step, params32)[0]  # what numba does by itself
    types, values = result_types(single_precision(cartpole_step), params32)
    assert types == {"float32"}
    np.testing.assert_allclose(values, cartpole_step(torch.tensor(0.1, dtype=torch.float64), CartPoleParams()), rtol=1e-6)


def test_float32_kernel_sin_cos_are_accurate_polynomials():
    """float32 kernels' branch-free sin/cos: within 2e-9 of libm in float64 arithmetic (float32
    keeps 7 digits), in every quadrant; float64 kernels call libm itself."""
    from rllib_gpuenv.core.ops import _poly_cos, _poly_sin, cos, sin

    use_numba()
    poly = numba.njit(lambda theta: (_poly_sin(theta), _poly_cos(theta)))
    exact = numba.njit(lambda theta: (sin(theta), cos(theta)))
    thetas = np.concatenate([np.linspace(-7, 7, 4001), np.linspace(-1e5, 1e5, 401), [0.0, -0.0, 0.2094, -0.2094]])
    for theta in thetas:
        assert exact(theta) == (math.sin(theta), math.cos(theta))
        s, c = poly(theta)
        assert abs(s - math.sin(theta)) <= 2e-9 and abs(c - math.cos(theta)) <= 2e-9, theta


def test_squares_are_gymnasiums_pow_on_the_cpu():
    """``square`` is C's pow(x, 2.0) in float64 kernels and on float64 CPU tensors, as numpy
    scalars compute ``x**2`` in gymnasium (``x * x`` differs in the last bit now and then)."""
    from rllib_gpuenv.core.libm import HAS_POWF64
    from rllib_gpuenv.core.ops import square

    if not HAS_POWF64:
        pytest.skip("this C library has no powf64: kernels multiply")
    use_numba()
    xs = np.random.default_rng(0).standard_normal(20000) * 30
    reference = np.array([np.float64(x) ** 2 for x in xs])
    assert (xs * xs != reference).any()  # the difference the op exists for
    compiled = numba.njit(lambda x: square(x))
    assert np.array_equal(np.array([compiled(x) for x in xs]), reference)
    assert np.array_equal(square(torch.from_numpy(xs)).numpy(), reference)


def test_cartpole_class_is_the_generic_env():
    env = CartPoleVectorEnv(3)
    assert env.definition.id == "GPUCartPole-v1" and type(make_vector_env("GPUCartPole-v1", 3)) is CartPoleVectorEnv


def test_numba_cpu_compiles_when_the_env_is_made_and_its_steps_compile_nothing():
    """The env's build holds the kernel's compile (or its load from numba's cache), not its first step."""
    fresh = CartPoleVectorEnv(10, backend="numba-cpu", force_mag=10.25)  # parameters of its own: a kernel of its own
    box = make_vector_env("GPUPendulum-v1", 10, backend="numba-cpu")
    for env in (fresh, box):
        made = list(env._backend._kernel.overloads)
        assert made, f"{env.definition.id}: no kernel compiled when the env was made"
        env.reset(seed=0)
        sample = env.action_space.sample
        for actions in (sample(), torch.as_tensor(sample()), sample().tolist()):  # numpy, a tensor, a list
            env.step(actions)
        assert list(env._backend._kernel.overloads) == made, "a step compiled the kernel again, for other argument types"
