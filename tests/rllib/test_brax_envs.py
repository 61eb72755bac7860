"""Brax's JAX envs on the device env runner (``rllib_gpuenv/jax_envs/brax_envs.py``), with real
Brax, jax on the CPU, gymnasium and RLlib: each step is Brax's own (the env's ``step`` vmapped),
SAME_STEP autoreset from a fresh start with the real final observation, the time limit a
truncation and the env's ``done`` a termination, exact resume, PPO training a few iterations,
and a stock runner refused in one line (a wrong name, argument or observation kind and a missing
extra: ``test_jax_envs.py``). MuJoCo's physics compiles slowly on a CPU: every test uses the
same sizes, so that each compiled function is made once."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

from rllib_gpuenv.bench import training
from rllib_gpuenv.experiments import ExperimentError, load_config
from rllib_gpuenv.experiments.metric_names import RETURN_METRIC
from rllib_gpuenv.experiments.settings import build_config
from rllib_gpuenv.experiments.shipped import config_file
from rllib_gpuenv.jax_envs import make_jax_env
from rllib_gpuenv.jax_envs.brax_envs import BraxVectorEnv
from rllib_gpuenv.rllib import DeviceEnvRunner, DevicePPOConfig
from rllib_gpuenv.rllib.env_runner import check_prefixed_id
from tests.helpers import train_briefly

CPU = torch.device("cpu")
PENDULUM = "brax:inverted_pendulum"
N, LIMIT = 8, 12  # a time limit short enough that episodes both fall and time out


def pendulum() -> BraxVectorEnv:
    return make_jax_env(PENDULUM, N, CPU, {"episode_length": LIMIT})


def test_each_step_is_brax_s_own_and_an_ended_episode_starts_afresh():
    """From the wrapper's own state, each step is Brax's ``step`` of every env: its observation
    (``infos["final_obs"]``), reward and ``done`` (``terminated``). ``truncated`` is the 12th step
    of an episode that did not fall, and an env that ended starts again in the same step from a
    new draw of Brax's ``reset`` (each start differs), its step count back at 0."""
    env = pendulum()
    assert env.single_action_space.shape == (1,) and env.single_action_space.high[0] == 1.0
    brax_step = jax.jit(jax.vmap(env.brax_env.step))
    obs, _ = env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    played = torch.zeros(N, dtype=torch.long)
    starts, falls, time_outs = [obs], 0, 0
    for _ in range(30):
        state, _ = env._state
        actions = torch.rand((N, 1), generator=generator) * 2 - 1
        expected = brax_step(state, jnp.asarray(actions.numpy()))
        obs, reward, terminated, truncated, infos = env.step(actions)
        played += 1
        torch.testing.assert_close(infos["final_obs"], torch.from_dlpack(expected.obs))
        torch.testing.assert_close(reward, torch.from_dlpack(expected.reward))
        assert torch.equal(terminated, torch.from_dlpack(expected.done).bool())
        assert torch.equal(truncated, (played == LIMIT) & ~terminated)
        done = terminated | truncated
        assert torch.equal(infos["_final_obs"], done)
        assert torch.equal(obs[~done], infos["final_obs"][~done])
        assert (obs[done] != infos["final_obs"][done]).any(-1).all()
        assert (obs[done].abs() <= 0.01).all()  # a start: Brax's reset draws q and qd within ±0.01
        assert torch.equal(torch.from_dlpack(env._state[1]), torch.where(done, 0, played).int())
        starts.append(obs[done])
        falls, time_outs = falls + int(terminated.sum()), time_outs + int(truncated.sum())
        played[done] = 0
    starts = torch.cat(starts)
    assert len(torch.unique(starts, dim=0)) == len(starts)  # fresh draws, not the same first state again
    assert falls > 10 and time_outs > 0


def test_a_brax_env_resumes_exactly():
    env = pendulum()
    env.reset(seed=1)
    for _ in range(3):
        env.step(torch.zeros(N, 1))
    saved = env.get_state()
    actions = torch.linspace(-1, 1, N).reshape(N, 1)
    first = env.step(actions)
    env.set_state(saved)
    again = env.step(actions)
    for a, b in zip(first[:4], again[:4]):
        assert torch.equal(a, b)
    assert torch.equal(first[4]["final_obs"], again[4]["final_obs"])


def test_device_ppo_trains_on_a_brax_env():
    """Two iterations: every step sampled is counted, real episodes ended (none longer than the
    time limit) and the runner steps Brax's env itself."""
    config = DevicePPOConfig().environment(PENDULUM, env_config={"episode_length": LIMIT})
    metrics, runner = train_briefly(config, num_envs=N, rollout_length=16)
    assert 0 < metrics["episode_len_mean"] <= LIMIT
    assert isinstance(runner.env.unwrapped, BraxVectorEnv)


def test_env_config_sets_the_time_limit_and_the_env_s_arguments():
    env = make_jax_env("brax:fast", 2, CPU, {"episode_length": 5})
    env.reset(seed=0)
    for _ in range(5):
        *_, truncated, _ = env.step(torch.ones(2, 1))
    assert env.max_episode_steps == 5 and truncated.all()  # the 5th step of envs that never end themselves
    positional = make_jax_env(PENDULUM, N, CPU, {"backend": "positional"})
    assert positional.brax_env._backend == "positional" and positional.max_episode_steps == 1000  # Brax's default
    check_prefixed_id("brax:ant")  # a Brax id is a known id


def test_experiments_check_brax_ids_before_ray_starts():
    with pytest.raises(ExperimentError, match=r"env: 'brax:antt': Brax has no env 'antt': did you mean ant\?"):
        build_config("DevicePPO", "brax:antt", {}, "<test>")
    with pytest.raises(ExperimentError, match=r"JAX envs, which run on the device env runner only: use DevicePPO, "):
        build_config("PPO", "brax:ant", {}, "<test>")


def test_the_shipped_file_and_its_race_against_a_random_policy():
    """``configs/brax_inverted_pendulum_ppo.yaml`` stops at the race's target, and the race's random
    baseline plays the file's envs with Box actions (its training: RESULTS.md, too long for a test)."""
    task = training.TASKS["inverted-pendulum-ppo"]
    assert set(task.contenders) == {"device", "random"}
    experiment = load_config(config_file(task.config_files["device"]), device="cpu", seed=0)
    assert experiment.stop[RETURN_METRIC] == task.target == 950
    assert experiment.config.env == PENDULUM and experiment.config.env_config == {"episode_length": 1000}
    result = training.run_one(task, "random", 0, task.target, budget_s=0.2)
    seconds, steps, mean, _ = result["curve"][-1]
    assert steps % (128 * 16) == 0 and 1.0 <= mean < 20.0  # a random push keeps the pole up a few steps


def runner_config(num_envs: int):
    return (
        DevicePPOConfig()
        .environment(PENDULUM, env_config={"episode_length": LIMIT})
        .env_runners(num_envs_per_env_runner=num_envs)
        .devices(learner="cpu", env_runners="cpu")
        .debugging(seed=0)
    )


def test_the_runner_s_env_is_compiled_when_made_and_the_commands_drop_mjx_s_notice(caplog):
    """The runner compiles its env's reset and step when it is built (``compile_s``: the seconds,
    which the main job's start-up line reports); the first reset and step then compile nothing
    more, and the throwaway calls advanced nothing (the same seed starts the same states as a
    fresh env). The driver's one env for the spaces beside colocated learners is never stepped:
    never compiled. MuJoCo's MJX logs which JAX device it uses (on the root logger) whenever a
    Brax env is traced; the package's commands drop it (``cli/quiet.py``), a user's script keeps it."""
    import logging

    from rllib_gpuenv.cli import quiet

    spaces_only = DeviceEnvRunner(config=runner_config(N).learners(num_learners=2)).env.unwrapped
    assert spaces_only.num_envs == 1 and spaces_only.compile_s is None
    notice = "Using JAX default device"
    caplog.set_level(logging.INFO)
    env = DeviceEnvRunner(config=runner_config(N)).env.unwrapped  # a new env: traced and compiled afresh
    compiled = env._reset._cache_size(), env._step._cache_size()
    assert compiled == (1, 1) and env.compile_s > 0 and env.compile() == env.compile_s
    assert notice in caplog.text
    obs, _ = env.reset(seed=3)
    env.step(torch.rand(N, 1) * 2 - 1)  # what the runner passes: float32 (num_envs, 1)
    assert (env._reset._cache_size(), env._step._cache_size()) == compiled
    again, _ = pendulum().reset(seed=3)
    assert torch.equal(obs, again)

    caplog.clear()
    quiet.quiet_start()
    try:
        pendulum().reset(seed=0)  # traced again
        assert notice not in caplog.text
    finally:  # this test process's loggers as they were
        for name in quiet.NOTICES:
            target = logging.getLogger(name)
            for dropped in [f for f in target.filters if isinstance(f, quiet._DropNotice)]:
                target.removeFilter(dropped)
