"""Every bad input gets an error that names the problem and the fix, and changes nothing."""

import numpy as np
import pytest
import torch

from rllib_gpuenv import CartPoleVectorEnv, make_vector_env


def snapshot(env):
    return {name: t.clone() for name, t in env._buffers.tensors().items()}


def assert_unchanged(env, before):
    for name, t in env._buffers.tensors().items():
        assert torch.equal(t, before[name]), name


@pytest.fixture
def env(backend):
    env = CartPoleVectorEnv(4, backend=backend, dtype="float64")
    env.reset(seed=0)
    env.step([1, 1, 1, 1])
    return env


@pytest.fixture
def box_env(backend):
    env = make_vector_env("GPUPendulum-v1", 4, backend=backend, dtype="float64")
    env.reset(seed=0)
    return env


@pytest.mark.parametrize(
    "actions, error, message",
    [
        (torch.ones(3, dtype=torch.long), ValueError, r"shape \(4,\), one Discrete\(2\) action .* per env, got \(3,\)"),
        (torch.ones(4, 1, dtype=torch.long), ValueError, r"shape \(4,\)"),
        (torch.ones(4), TypeError, r"integers \(Discrete\(2\).*\[0, 1\]\).*float32.*\.long\(\)"),
        (torch.tensor([0.0, 1.0, float("nan"), 1.0]), TypeError, r"containing NaN"),
        (np.array([0.5, 1, 0, 1]), TypeError, r"float64"),
        (torch.tensor([0, 1, 2, 1]), ValueError, r"in \[0, 1\].*\[2\]"),
        ([0, -1, 1, 1], ValueError, r"in \[0, 1\].*\[-1\]"),
        (np.array([0, 1, 2**64 - 1, 1], dtype=np.uint64), ValueError, r"in \[0, 1\]"),
        ("left", TypeError, r"torch tensor, numpy array or list of numbers"),
        ([object(), 1, 1, 1], TypeError, r"torch tensor, numpy array or list of numbers"),
    ],
)
def test_bad_discrete_actions_are_rejected_and_leave_the_env_unchanged(env, actions, error, message):
    before = snapshot(env)
    with pytest.raises(error, match=message):
        env.step(actions)
    assert_unchanged(env, before)


def test_unsigned_and_bool_discrete_actions_work(env):
    env.step(np.array([0, 1, 1, 0], dtype=np.uint64))
    env.step(np.array([0, 1, 1, 0], dtype=np.uint8))
    env.step(torch.tensor([True, False, True, False]))


@pytest.mark.parametrize(
    "actions, error, message",
    [
        (torch.zeros(4), ValueError, r"shape \(4, 1\), one Box action"),
        (torch.zeros(3, 1), ValueError, r"shape \(4, 1\)"),
        (torch.zeros(4, 1, dtype=torch.long), TypeError, r"floats \(Box action.*\.float\(\)"),
        (torch.tensor([[0.0], [float("nan")], [1.0], [0.0]]), ValueError, r"NaN \(envs \[1\]\)"),
        ([[0.0], ["a"], [1.0], [0.0]], TypeError, r"torch tensor, numpy array or list of numbers"),
    ],
)
def test_bad_box_actions_are_rejected_and_leave_the_env_unchanged(box_env, actions, error, message):
    before = snapshot(box_env)
    with pytest.raises(error, match=message):
        box_env.step(actions)
    assert_unchanged(box_env, before)


def test_box_actions_are_clipped_where_gymnasium_clips(box_env):
    """Out-of-bound torques act as the bound (gymnasium clips inside Pendulum's step); float64
    actions are taken as the space's float32."""
    states = []
    for torque in (2.0, 7.5, np.float64(2.0)):
        box_env.reset(seed=3)
        box_env.step(np.full((4, 1), torque))
        states.append(box_env.state)
    assert torch.equal(states[0], states[1]) and torch.equal(states[0], states[2])


def test_actions_on_the_wrong_device(env):
    meta = torch.ones(4, dtype=torch.long, device="meta")
    with pytest.raises(ValueError, match=r"actions are on meta, but this env runs on cpu: move them"):
        env.step(meta)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"num_envs": 0}, ValueError, "num_envs must be a positive integer"),
        ({"num_envs": 2.5}, ValueError, "num_envs must be a positive integer"),
        ({"max_episode_steps": 2.7}, ValueError, "max_episode_steps must be a positive integer, got 2.7"),
        ({"max_episode_steps": 0}, ValueError, "max_episode_steps must be a positive integer"),
        ({"backend": "jax"}, ValueError, r"unknown backend 'jax'.*usable on cpu here: torch, numba-cpu"),
        ({"device": "tpu"}, ValueError, r"unknown device 'tpu'|not supported"),
        ({"dtype": "float16"}, ValueError, "float32 or float64"),
        ({"output": "jax"}, ValueError, "'torch' or 'numpy'"),
        ({"substeps": 0}, TypeError, "substeps must be a positive integer"),
        ({"substeps": 2.0}, TypeError, "substeps must be an integer, got 2.0"),
        ({"gravity": "high"}, TypeError, "gravity must be a finite number"),
        (
            {"mass": 1.0},
            TypeError,
            r"no parameter\(s\) \['mass'\] \(did you mean masspole or masscart\?\); its parameters are",
        ),
        ({"backnd": "torch"}, TypeError, r"GPUCartPole-v1: no option or parameter 'backnd': did you mean backend\?"),
        ({"render_mode": "human"}, ValueError, r"render_mode must be None, 'rgb_array' or 'rgb_array_list', got 'human'"),
        ({"backend": "torch", "threads_per_block": 64}, ValueError, "threads_per_block is a numba-cuda setting"),
        ({"backend": "numba-cpu", "num_threads": 0}, ValueError, "num_threads must be an integer in 1.."),
        ({"num_envs": 2**50}, MemoryError, r"num_envs=.* needs about .* GiB on cpu.*use at most"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        CartPoleVectorEnv(**{"num_envs": 2, **kwargs})


def test_an_integer_parameter_is_a_count_only_where_its_default_is_one():
    """CartPole's substeps (default 1) is a count; a user's offset whose default is 0 takes 0 and below."""
    import dataclasses
    from typing import NamedTuple

    class Params(NamedTuple):
        substeps: int = 1
        offset: int = 0

    definition = dataclasses.replace(CartPoleVectorEnv.definition, id="IntParams-v0", params=Params)
    assert definition.make_params(offset=0).offset == 0 and definition.make_params(offset=-3).offset == -3
    with pytest.raises(TypeError, match="offset must be an integer, got 0.5"):
        definition.make_params(offset=0.5)
    with pytest.raises(TypeError, match="substeps must be a positive integer, got 0"):
        definition.make_params(substeps=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU messages")
def test_gpu_asked_for_where_there_is_none():
    with pytest.raises(ValueError, match=r"no CUDA GPU.*available: cpu.*device='cpu'"):
        CartPoleVectorEnv(2, device="cuda")
    with pytest.raises(RuntimeError, match=r"numba-cuda.*needs a CUDA GPU.*backend='torch' or 'numba-cpu'"):
        CartPoleVectorEnv(2, backend="numba-cuda", device="cpu")


def test_step_before_reset_and_bad_seeds():
    env = CartPoleVectorEnv(2)
    with pytest.raises(RuntimeError, match=r"reset\(\) before step\(\)"):
        env.step([0, 1])
    for seed in ([1, 2], -1, True, 1.5):
        with pytest.raises(TypeError, match="seed must be a non-negative integer or None"):
            env.reset(seed=seed)
    with pytest.raises(TypeError, match=r"got \[1, 2\] \(one seed for the whole vector: each env draws its episodes"):
        env.reset(seed=[1, 2])  # gymnasium's Sync/AsyncVectorEnv take a seed per env
    first, _ = env.reset(seed=np.int64(5))  # numpy integers are integers
    assert torch.equal(first, env.reset(seed=5)[0])


def test_bad_state_assignments_name_the_shape_and_change_nothing(env):
    before = snapshot(env)
    with pytest.raises(TypeError, match=r"state must be numbers of shape \(4, 4\) \(x, x_dot, theta, theta_dot per env\)"):
        env.state = "abc"
    with pytest.raises(ValueError, match=r"shape \(4, 4\).*got \(3, 4\)"):
        env.state = np.zeros((3, 4))
    with pytest.raises(TypeError, match=r"real numbers"):
        env.state = torch.zeros(4, 4, dtype=torch.bool)
    assert_unchanged(env, before)


def test_a_closed_env_refuses_to_work():
    env = CartPoleVectorEnv(2, render_mode="rgb_array")
    env.reset(seed=0)
    env.close()
    for call in (lambda: env.step([0, 1]), lambda: env.reset(), env.render):
        with pytest.raises(RuntimeError, match="CartPoleVectorEnv is closed: make a new one"):
            call()


def test_thread_tuner_moves_to_the_faster_count():
    """numba-cpu's default thread count follows what is faster now (a busy machine: fewer)."""
    from rllib_gpuenv.backends.numba_cpu import ThreadTuner

    tuner = ThreadTuner(maximum=4, explore_every=4, trial=2)
    cost = {1: 1.0, 2: 0.6, 3: 0.8, 4: 0.9}  # two threads are fastest on this machine now
    for _ in range(200):
        threads = tuner.threads()
        tuner.record(threads, cost[threads])
    assert tuner.best == 2
    cost = {1: 0.5, 2: 0.9, 3: 1.0, 4: 1.1}  # another tenant arrived: one thread is fastest
    for _ in range(400):
        threads = tuner.threads()
        tuner.record(threads, cost[threads])
    assert tuner.best == 1
    fixed = CartPoleVectorEnv(4, backend="numba-cpu", num_threads=1)
    assert fixed._backend._tuner is None and fixed._backend.threads_in_use == 1


def test_numba_cpu_starts_small_vectors_on_one_thread_and_a_users_count_wins():
    """Issue 28, 6f: a parallel region costs more than stepping a few thousand CartPoles serially
    (benchmarks/RESULTS.md, "numba-cpu threads by num_envs"): one thread per ENVS_PER_THREAD envs."""
    import numba

    from rllib_gpuenv.backends.numba_cpu import ENVS_PER_THREAD, default_num_threads, learner_process_threads

    cpus = default_num_threads()
    small = CartPoleVectorEnv(16, backend="numba-cpu")
    assert small._backend.threads_in_use == 1 and small._backend.num_threads == cpus  # the tuner may try more
    small.reset(seed=0)
    for _ in range(3):
        small.step(np.zeros(16, dtype=np.int64))
    assert small._backend.threads_in_use == 1
    assert CartPoleVectorEnv(2 * ENVS_PER_THREAD, backend="numba-cpu")._backend.threads_in_use == min(2, cpus)
    assert default_num_threads(ENVS_PER_THREAD - 1) == 1 and learner_process_threads(16) == 1
    count = min(2, numba.config.NUMBA_NUM_THREADS)
    user = CartPoleVectorEnv(16, backend="numba-cpu", num_threads=count)
    assert user._backend._tuner is None and user._backend.threads_in_use == count
