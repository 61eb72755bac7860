"""gymnax's JAX envs on the device env runner (``rllib_gpuenv/jax_envs/gymnax_envs.py``), with real jax on the
CPU, gymnax, gymnasium and Ray: the same CartPole equations as the suite's, SAME_STEP autoreset
with the real final observation and the time limit as a truncation, arrays shared with torch
(no copy, no host numpy), seeds and params, PPO (the shipped Breakout file's CNN too) and DQN
training a few iterations, one-line errors for a wrong id (Brax's too), a missing extra or a stock runner,
and ``bench sampling`` against gymnax's own rollout. The algorithms train in this process,
without a Ray cluster (``rllib/in_process.py``). Brax's envs: ``test_brax_envs.py``."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest
import torch

from rllib_gpuenv import make_vector_env
from rllib_gpuenv.bench import sampling, training
from rllib_gpuenv.experiments import ExperimentError, load_config
from rllib_gpuenv.experiments.settings import build_config
from rllib_gpuenv.experiments.shipped import config_file
from rllib_gpuenv.jax_envs import make_jax_env
from rllib_gpuenv.jax_envs.gymnax_envs import GymnaxVectorEnv, make_gymnax_env
from rllib_gpuenv.jax_envs.vector_env import use_compilation_cache
from rllib_gpuenv.rllib import DeviceDQNConfig, DeviceEnvRunner, DevicePPOConfig
from rllib_gpuenv.rllib.env_runner import make_device_env
from tests.helpers import run_code, run_python, train_briefly

CPU = torch.device("cpu")
N = 16


def cartpole(**env_config) -> GymnaxVectorEnv:
    return make_gymnax_env("gymnax:CartPole-v1", N, CPU, env_config)


def test_gymnax_cartpole_steps_as_the_suites_cartpole():
    """From the same states and actions, gymnax's CartPole-v1 and ``GPUCartPole-v1`` (torch, float32)
    reach the same next states, within float32 rounding, and end the same episodes."""
    env = cartpole()
    ours = make_vector_env("GPUCartPole-v1", N, backend="torch", device="cpu", output="torch")
    obs, _ = env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(100):
        actions = torch.randint(0, 2, (N,), generator=generator)
        ours.reset(seed=0)  # no pending autoreset, step counters at 0
        ours.state = obs
        expected_obs, expected_reward, expected_terminated, _, _ = ours.step(actions)
        obs, reward, terminated, truncated, info = env.step(actions)
        torch.testing.assert_close(info["final_obs"], expected_obs, rtol=1e-5, atol=1e-6)
        assert torch.equal(terminated, expected_terminated) and torch.equal(reward, expected_reward)
        ended += int(terminated.sum())
    assert ended > 10  # terminations compared, not only upright poles


def test_autoreset_keeps_the_final_observation_and_the_time_limit_truncates():
    """Each step checked against gymnax's single-env ``step_env`` from the wrapper's own state: the
    observation the step led to is ``infos["final_obs"]``; an env that ended starts again in the
    same step (SAME_STEP); ``truncated`` is the time limit (10 steps here), ``terminated`` the pole's fall."""
    import gymnax

    env = cartpole(max_steps_in_episode=10)
    single, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=10)
    step_env = jax.jit(single.step_env)
    assert env.metadata["autoreset_mode"].value == "SameStep" and env.max_episode_steps == 10
    env.reset(seed=1)
    generator = torch.Generator().manual_seed(1)
    seen = {"terminated": 0, "truncated": 0}
    for _ in range(40):
        state = env.get_state()["state"]
        actions = torch.randint(0, 2, (N,), generator=generator)
        obs, reward, terminated, truncated, info = env.step(actions)
        after = env.get_state()["state"]
        assert torch.equal(info["_final_obs"], terminated | truncated)
        for i in range(N):
            state_i = jax.tree.map(lambda x, i=i: x[i], state)
            final, stepped, _, fell, _ = step_env(jax.random.key(0), state_i, int(actions[i]), params)
            torch.testing.assert_close(info["final_obs"][i], torch.tensor(np.asarray(final)), rtol=0, atol=1e-6)
            assert bool(terminated[i]) == bool(fell) and bool(truncated[i]) == (int(stepped.time) >= 10)
            if terminated[i] or truncated[i]:  # the next episode's first observation, its clock at 0
                assert after.time[i] == 0 and bool((obs[i].abs() <= 0.05).all())
            else:
                assert after.time[i] == stepped.time and torch.equal(obs[i], info["final_obs"][i])
        seen["terminated"] += int((terminated & ~truncated).sum())
        seen["truncated"] += int((truncated & ~terminated).sum())
    assert seen["terminated"] and seen["truncated"]


def test_arrays_cross_between_jax_and_torch_without_a_copy(monkeypatch):
    """Observations are torch tensors on the runner's device in JAX's own memory; the actions
    JAX steps are the tensor's memory; nothing goes through host numpy on the way."""
    env = cartpole()
    env.reset(seed=0)
    outputs = []
    step = env._step
    monkeypatch.setattr(env, "_step", lambda *args: outputs.append(step(*args)) or outputs[-1])
    for cls in (torch.Tensor, type(jax.numpy.zeros(1))):
        monkeypatch.setattr(cls, "__array__", lambda *a, **k: pytest.fail("a host numpy copy"), raising=False)
    monkeypatch.setattr(torch.Tensor, "numpy", lambda *a, **k: pytest.fail("a host numpy copy"))
    actions = torch.ones(N, dtype=torch.int32)
    obs, reward, terminated, truncated, info = env.step(actions)
    observations = outputs[-1][2]  # (obs, final_obs), stacked
    assert obs.device == info["final_obs"].device == reward.device == CPU
    assert obs.data_ptr() == observations.unsafe_buffer_pointer()
    assert info["final_obs"].data_ptr() == observations.unsafe_buffer_pointer() + obs.nbytes
    assert env._to_jax(actions).unsafe_buffer_pointer() == actions.data_ptr()


@pytest.mark.parametrize(
    "env_id, actions", [("gymnax:CartPole-v1", torch.ones(5, dtype=torch.int64)), ("gymnax:Pendulum-v1", torch.zeros(5, 1))]
)
def test_a_gymnax_env_is_compiled_when_the_runner_makes_it(env_id, actions):
    """As Brax's (test_brax_envs.py): the runner's actions (CartPole's int64) step the function
    compiled with the env, whether the state comes from a reset, a step or a restore. (Pendulum's
    reset made a weakly typed leaf that its step made strong: each env compiled its step twice.)"""
    config = DevicePPOConfig().environment(env_id).env_runners(num_envs_per_env_runner=5)
    env = DeviceEnvRunner(config=config.devices(learner="cpu", env_runners="cpu")).env.unwrapped  # new sizes
    assert (env._reset._cache_size(), env._step._cache_size()) == (1, 1)
    env.reset(seed=0)
    env.step(actions)
    env.step(actions)
    env.set_state(env.get_state())
    env.step(actions)
    assert (env._reset._cache_size(), env._step._cache_size()) == (1, 1)


COMPILE_TWICE = """
import jax, torch
from jax import monitoring
from rllib_gpuenv.jax_envs import make_jax_env

hits = []
monitoring.register_event_listener(lambda event, **kwargs: hits.append(event) if event.endswith("cache_hits") else None)
make_jax_env("gymnax:CartPole-v1", 3, torch.device("cpu"), {}).compile()
first = len(hits)
jax.clear_caches()  # what a new process starts with: the next env's compile looks in the persistent cache
make_jax_env("gymnax:CartPole-v1", 3, torch.device("cpu"), {}).compile()
print(jax.config.jax_compilation_cache_dir, first, len(hits))
"""


def test_compiled_envs_are_kept_in_jax_s_persistent_cache(tmp_path):
    """Where no cache was chosen, this package's (under XDG_CACHE_HOME): the second env's reset
    and step come from it. (JAX writes only compiles of a second or more unless told: here, all.)"""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    out = run_python(COMPILE_TWICE, env=env, clean=True)
    assert out.returncode == 0, out.stderr[-3000:]
    folder, first, second = out.stdout.split()
    assert folder == str(tmp_path / "rllib_gpuenv" / "jax") and int(first) == 0 and int(second) >= 2, out.stdout
    assert {"jit_reset", "jit_step"} <= {name.split("-")[0] for name in os.listdir(folder)}
    assert use_compilation_cache() == os.environ["JAX_COMPILATION_CACHE_DIR"]  # one chosen is kept (tests/conftest.py)


def test_seeds_params_and_state():
    env = cartpole(gravity=20.0)
    assert env.params.gravity == 20.0 and env.params.masscart == 1.0
    first, _ = env.reset(seed=3)
    assert len({tuple(row.tolist()) for row in first}) == N  # one key per env
    saved = env.get_state()
    step = env.step(torch.zeros(N, dtype=torch.int64))
    env.set_state(saved)
    again = env.step(torch.zeros(N, dtype=torch.int64))
    assert all(torch.equal(a, b) for a, b in zip(step[:4], again[:4]))
    assert torch.equal(env.reset(seed=3)[0], first) and not torch.equal(env.reset(seed=4)[0], first)
    breakout = make_gymnax_env("gymnax:Breakout-MinAtar", 2, CPU, {"use_minimal_action_set": False})
    assert breakout.single_action_space.n == 6  # a constructor argument: the full action set
    assert breakout.single_observation_space.shape == (10, 10, 4)
    assert breakout.single_observation_space.dtype == np.float32


@pytest.mark.parametrize(
    "env_spec, env_config, error, message",
    [
        (
            "gymnax:CartPole-v2",
            {},
            ValueError,
            r"^'gymnax:CartPole-v2': gymnax has no env 'CartPole-v2': did you mean CartPole-v1\? ",
        ),
        (
            "gymnax:CartPole-v1",
            {"gravty": 1.0},
            ValueError,
            r"^'gymnax:CartPole-v1': env_config 'gravty' \(did you mean gravity\?\) is neither a field of gymnax's params "
            r"for it \(.*gravity.*\) "
            r"nor an argument of CartPole\(\) \(none\)$",
        ),
        (
            "gymnax:CartPole-v1",
            {"max_steps_in_episode": "ten"},  # was int()'s "invalid literal", naming neither the env nor the field
            ValueError,
            r"^'gymnax:CartPole-v1': env_config max_steps_in_episode='ten': gymnax's params for it take a number there "
            r"\(int, default 500\)$",
        ),
        ("brax:antt", {}, ValueError, r"^'brax:antt': Brax has no env 'antt': did you mean ant\? Brax's envs: ant, fast, "),
        (
            "brax:inverted_pendulum",
            {"gravity": 1.0},
            ValueError,
            r"^'brax:inverted_pendulum': env_config 'gravity' is neither episode_length nor an argument of "
            r"InvertedPendulum\(\) \(backend, n_frames, debug\)$",
        ),
        ("brax:inverted_pendulum", {"episode_length": 0}, ValueError, r"episode_length must be at least 1, not 0$"),
        ("brax:fast", {"obs_mode": "dict_state"}, TypeError, r"^Brax env fast has dict observations \(.*one flat array"),
    ],
)
def test_a_wrong_id_param_or_observation_fails_in_one_line(env_spec, env_config, error, message):
    """And before Ray starts: an id when the config is validated, an env_config when an experiment
    is read (it was named by each runner, in a trial's traceback)."""
    with pytest.raises(error, match=message) as caught:
        make_jax_env(env_spec, N, CPU, env_config)
    assert "\n" not in str(caught.value)
    if not env_config:
        with pytest.raises(error, match=message):
            DevicePPOConfig().environment(env_spec).validate()  # before anything is built
    elif error is ValueError:
        with pytest.raises(ExperimentError, match=r"^<test>: env_config: .*" + message.removeprefix("^")):
            build_config("DevicePPO", env_spec, {"env_config": env_config}, "<test>")


@pytest.mark.parametrize(
    "env_spec, actions, error, message",
    [
        (
            "gymnax:CartPole-v1",
            torch.tensor([0, 1, 5] + [0] * (N - 3)),
            ValueError,
            r"^actions must be in \[0, 1\] .* such as \[5\]$",
        ),
        ("gymnax:CartPole-v1", torch.zeros(N), TypeError, r"^actions must be integers .*got dtype torch.float32: cast them"),
        (
            "gymnax:CartPole-v1",
            np.zeros(N - 1, dtype=np.int64),
            ValueError,
            rf"^actions must have shape \({N},\), one Discrete\(2\)",
        ),
        ("gymnax:CartPole-v1", ["left"] * N, TypeError, r"^actions must be a torch tensor, numpy array or list of numbers"),
        ("brax:fast", torch.full((N, 1), float("nan")), ValueError, r"^actions contain NaN \(envs \[0, 1, 2, 3, 4\]\)"),
        (
            "brax:fast",
            torch.zeros(N, 1, dtype=torch.int64),
            TypeError,
            r"^actions must be floats .*: cast them with .float\(\)$",
        ),
        (
            "brax:fast",
            torch.zeros(N, 1, device="meta"),
            ValueError,
            r"^actions are on meta, but this env runs on cpu: move them",
        ),
    ],
)
def test_a_jax_env_names_wrong_actions_and_steps_nothing(env_spec, actions, error, message):
    """As the suite's envs do (``core/actions.py``): gymnax's CartPole would push nine times as hard
    for an action of 5, floats would be truncated to actions, Brax would step the NaN; the env is
    left as it was. The device env
    runner's envs check no values (its actions come from the policy: no read-back each step)."""
    env = make_jax_env(env_spec, N, CPU, {})
    env.reset(seed=0)
    before = jax.tree.leaves(env.get_state())
    with pytest.raises(error, match=message):
        env.step(actions)
    assert all(np.array_equal(a, b) for a, b in zip(before, jax.tree.leaves(env.get_state()), strict=True))
    env.step(np.asarray(env.action_space.sample()))  # numpy actions, as gymnasium's vector envs take them
    spelt = make_jax_env(env_spec, N, torch.device("cpu", 0), {})  # the device as a tensor's reads: cpu
    spelt.reset(seed=0)
    spelt.step(torch.as_tensor(spelt.action_space.sample()))
    assert make_device_env(env_spec, N, CPU, {}).validate_actions is False


def test_a_missing_extra_fails_in_one_line_naming_it():
    """Without jax, a gymnax id names the ``jax`` extra; without Brax, or without the jax Brax
    needs, a Brax id names the ``brax`` extra."""
    code = (
        "import sys\n"
        "from rllib_gpuenv.cli.errors import missing_extra\n"
        "from rllib_gpuenv.jax_envs import make_jax_env\n"
        "for blocked, env in [('jax', 'gymnax:CartPole-v1'), ('brax', 'brax:ant'), ('jax', 'brax:ant')]:\n"
        "    sys.modules[blocked] = None\n"
        "    try:\n        make_jax_env(env, 1, 'cpu', {})\n"
        "    except ImportError as err:\n        print(err); print(missing_extra(err))\n"
        "    del sys.modules[blocked]\n"
    )
    out = run_code(code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == [
        'gymnax envs need jax and gymnax, and jax is not installed: pip install "rllib_gpuenv[jax]"',
        'jax is not installed: pip install "rllib_gpuenv[jax]"',
        'Brax envs need jax and brax, and brax is not installed: pip install "rllib_gpuenv[brax]"',
        'brax is not installed: pip install "rllib_gpuenv[brax]"',
        'Brax envs need jax and brax, and jax is not installed: pip install "rllib_gpuenv[brax]"',
        'jax is not installed: pip install "rllib_gpuenv[brax]"',
    ]


def test_experiments_check_gymnax_ids_before_ray_starts():
    with pytest.raises(
        ExperimentError, match=r"env: 'gymnax:Breakout': gymnax has no env 'Breakout': did you mean Breakout-MinAtar\?"
    ):
        build_config("DevicePPO", "gymnax:Breakout", {}, "<test>")
    with pytest.raises(
        ExperimentError, match=r"JAX envs, which run on the device env runner only: use DevicePPO, DeviceDQN or DeviceSAC"
    ):
        build_config("PPO", "gymnax:CartPole-v1", {}, "<test>")


@pytest.mark.parametrize("env, own", [("gymnax:CartPole-v1", sampling.GYMNAX), ("brax:fast", sampling.BRAX)])
def test_sampling_bench_against_the_library_s_own_rollout(tmp_path, capsys, env, own):
    """``bench sampling --env gymnax:CartPole-v1`` (or a Brax env): the device runner, the env
    alone and the library's own jit + vmap + scan rollout, side by side."""
    rows = sampling.run(
        [8], rollout_length=4, device="cpu", rounds=1, min_seconds=0.01, out_dir=str(tmp_path), env=env, plot=True
    )
    assert {r["contender"] for r in rows} == {sampling.ENV_ALONE, sampling.DEVICE, own}
    assert all(r["env_steps_per_s"] > 0 for r in rows)
    assert f"device runner / {sampling.OWN_ROLLOUTS[own]} rollout" in capsys.readouterr().out
    for kind in ("json", "png"):  # beside CartPole's sampling.json, not over it
        assert (tmp_path / f"sampling_{env.replace(':', '-')}.{kind}").exists()


def test_sampling_bench_puts_this_package_s_breakout_beside_gymnax_s(tmp_path, capsys):
    """``bench sampling --env gymnax:Breakout-MinAtar``: the same env written here
    (``GPUBreakout-MinAtar``) alone and through the device runner, with its ratio to gymnax's."""
    rows = sampling.run(
        [8], rollout_length=2, device="cpu", rounds=1, min_seconds=0.01, out_dir=str(tmp_path), env="gymnax:Breakout-MinAtar"
    )
    twin = "GPUBreakout-MinAtar"
    assert {r["contender"] for r in rows} == {
        sampling.ENV_ALONE,
        sampling.DEVICE,
        sampling.GYMNAX,
        sampling.twin_name(sampling.ENV_ALONE, twin),
        sampling.twin_name(sampling.DEVICE, twin),
    }
    assert all(r["env_steps_per_s"] > 0 for r in rows)
    assert "device runner on the twin / on gymnax's env" in capsys.readouterr().out


def test_bench_training_races_breakout_against_a_random_policy():
    """``bench training --task breakout-ppo``: the random baseline's curve (the device contender
    is the shipped Breakout file, trained above)."""
    task = training.TASKS["breakout-ppo"]
    assert set(task.contenders) == {"device", "random"} and task.config_files["device"] == "gymnax_breakout_ppo.yaml"
    result = training.run_one(task, "random", 0, task.target, budget_s=0.2)
    seconds, steps, mean, _ = result["curve"][-1]
    assert steps % (128 * 128) == 0 and 0.0 <= mean < 2.0  # a random policy breaks a brick or none


def test_the_runner_trains_on_the_real_episodes():
    """A rollout of 20-step CartPole: every step is trained on, each step's next observation is
    the next row's except where an episode ended, and each episode ends by the time limit exactly
    at its 20th step (or earlier by a fall)."""
    config = (
        DevicePPOConfig()
        .environment("gymnax:CartPole-v1", env_config={"max_steps_in_episode": 20})
        .env_runners(num_envs_per_env_runner=N)
        .device_rollouts(rollout_length=32)
        .devices(learner="cpu", env_runners="cpu")
        .debugging(seed=0)
    )
    runner = DeviceEnvRunner(config=config)
    rollout = runner.sample()
    assert isinstance(runner.env.unwrapped, GymnaxVectorEnv) and rollout.obs.device == CPU
    assert rollout.valid.all() and rollout.next_observations is not None
    done = rollout.terminated | rollout.truncated
    next_obs = rollout.next_obs()
    assert torch.equal(next_obs[:-1][~done[:-1]], rollout.obs[1:][~done[:-1]])
    assert not (next_obs[:-1] == rollout.obs[1:]).all(-1)[done[:-1]].any()
    for i in range(N):
        k = 0
        for t in range(32):
            k += 1
            assert bool(rollout.truncated[t, i]) == (k == 20) and k <= 20
            if done[t, i]:
                k = 0
    lengths = [length for _, length in runner._recent_episodes]
    assert lengths and max(lengths) == 20 and min(lengths) < 20


def test_a_runner_resumes_a_gymnax_env_exactly():
    """The runner's checkpoint state (the envs' JAX states and key, the episodes under way, which
    the runner counts itself for an env without statistics) gives the same next rollout."""
    config = (
        DevicePPOConfig()
        .environment("gymnax:CartPole-v1", env_config={"max_steps_in_episode": 20})
        .env_runners(num_envs_per_env_runner=N)
        .device_rollouts(rollout_length=16)
        .devices(learner="cpu", env_runners="cpu")
        .debugging(seed=0)
    )
    runner = DeviceEnvRunner(config=config)
    runner.sample()
    saved = runner.rollout_state()
    played = []
    for _ in range(2):
        torch.manual_seed(0)  # the same action draws
        rollout = runner.sample()
        played.append((rollout.obs.clone(), rollout.rewards.clone(), rollout.truncated.clone(), list(runner._recent_episodes)))
        runner.set_rollout_state(saved)
    for first, again in zip(*played):
        assert first == again if isinstance(first, list) else torch.equal(first, again)
    assert played[0][2].any()  # episodes ended in it, some begun before the checkpoint


def breakout_file_config():
    """``configs/gymnax_breakout_ppo.yaml`` (MinAtar Breakout, RLlib's CNN encoder), on the CPU."""
    return load_config(config_file("gymnax_breakout_ppo.yaml"), device="cpu", seed=0).config


@pytest.mark.parametrize("env", ["gymnax:CartPole-v1", "gymnax:Breakout-MinAtar", "gymnax:Catch-bsuite"])
def test_device_ppo_trains_on_gymnax_envs(env):
    """CartPole with PPO's default MLP; Breakout with the shipped experiment file's settings, at test
    sizes; bsuite's Catch, whose 10 x 5 board (neither a vector nor an image, which RLlib's default
    networks refuse) reaches the module flat."""
    config = DevicePPOConfig().environment(env) if "MinAtar" not in env else breakout_file_config()
    metrics, runner = train_briefly(config, num_envs=16, rollout_length=32)
    assert metrics["episode_len_mean"] > 0  # real episodes ended and were counted
    assert isinstance(runner.env.unwrapped, GymnaxVectorEnv)
    if "MinAtar" in env:
        assert "CNN" in type(runner.module.encoder.actor_encoder).__name__
    if "bsuite" in env:
        assert runner.env.unwrapped.single_observation_space.shape == (10, 5)
        assert runner.env.single_observation_space.shape == (50,) and runner.module.observation_space.shape == (50,)


def test_device_dqn_trains_on_a_gymnax_env():
    config = (
        DeviceDQNConfig()
        .environment("gymnax:CartPole-v1")
        .env_runners(num_envs_per_env_runner=8)
        .device_rollouts(rollout_length=8)
        .devices(learner="cpu", env_runners="cpu")
        .training(num_steps_sampled_before_learning_starts=64)
        .reporting(min_sample_timesteps_per_iteration=0)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] == 3 * 64
        assert results[-1]["learners"]["default_policy"]["num_module_steps_trained"] > 0
    finally:
        algo.stop()
