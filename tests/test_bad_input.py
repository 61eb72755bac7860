"""Every bad input gets an error that names the problem and the fix, and changes nothing."""

import numpy as np
import pytest
import torch

from rllib_gpuenv import CartPoleVectorEnv


@pytest.fixture
def env(backend):
    env = CartPoleVectorEnv(4, backend=backend, dtype="float64")
    env.reset(seed=0)
    return env


@pytest.mark.parametrize(
    "actions, error, message",
    [
        (torch.ones(3, dtype=torch.long), ValueError, r"shape \(4,\), one per env, got \(3,\)"),
        (torch.ones(4, 1, dtype=torch.long), ValueError, r"shape \(4,\)"),
        (torch.ones(4), TypeError, r"integers 0 or 1.*float32.*\.long\(\)"),
        (torch.tensor([0.0, 1.0, float("nan"), 1.0]), TypeError, r"containing NaN"),
        (np.array([0.5, 1, 0, 1]), TypeError, r"float64"),
        (torch.tensor([0, 1, 2, 1]), ValueError, r"0 or 1.*\[2\]"),
        ([0, -1, 1, 1], ValueError, r"0 or 1.*\[-1\]"),
        ("left", TypeError, r"torch tensor, numpy array or list of ints"),
        ([object(), 1, 1, 1], TypeError, r"torch tensor, numpy array or list of ints"),
    ],
)
def test_bad_actions_are_rejected_and_leave_the_env_unchanged(env, actions, error, message):
    before = env.state
    with pytest.raises(error, match=message):
        env.step(actions)
    assert torch.equal(env.state, before)
    env.step([0, 1, 0, 1])  # still usable


def test_actions_on_the_wrong_device(env):
    meta = torch.ones(4, dtype=torch.long, device="meta")
    with pytest.raises(ValueError, match=r"actions are on meta, but this env runs on cpu: move them"):
        env.step(meta)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"num_envs": 0}, ValueError, "num_envs must be a positive integer"),
        ({"num_envs": 2.5}, ValueError, "num_envs must be a positive integer"),
        ({"backend": "jax"}, ValueError, r"unknown backend 'jax'.*usable on cpu here: torch, numba-cpu"),
        ({"device": "tpu"}, ValueError, r"unknown device 'tpu'|not supported"),
        ({"dtype": "float16"}, ValueError, "float32 or float64"),
        ({"output": "jax"}, ValueError, "'torch' or 'numpy'"),
        ({"substeps": 0}, ValueError, "substeps must be at least 1"),
        ({"num_envs": 2**50}, MemoryError, r"num_envs=.* needs about .* GiB on cpu.*use at most"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        CartPoleVectorEnv(**{"num_envs": 2, **kwargs})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU messages")
def test_gpu_asked_for_where_there_is_none():
    with pytest.raises(ValueError, match=r"no CUDA GPU.*available: cpu.*device='cpu'"):
        CartPoleVectorEnv(2, device="cuda")
    with pytest.raises(RuntimeError, match=r"numba-cuda.*needs a CUDA GPU.*backend='torch' or 'numba-cpu'"):
        CartPoleVectorEnv(2, backend="numba-cuda", device="cpu")


def test_step_before_reset_and_bad_seed():
    env = CartPoleVectorEnv(2)
    with pytest.raises(RuntimeError, match=r"reset\(\) before step\(\)"):
        env.step([0, 1])
    with pytest.raises(TypeError, match="seed must be an int"):
        env.reset(seed=[1, 2])
