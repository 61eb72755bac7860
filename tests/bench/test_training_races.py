"""Smoke tests of the training races and the learners benchmark at tiny sizes (the slow benchmarks, in a
file of their own so that the test workers share them out)."""

import math
import os
import textwrap

import pytest

from tests.bench.runs import bench, outputs, tiny_dqn_file
from tests.helpers import run_module


def test_training_curves(tmp_path):
    # Every RLlib contender (stock-runner, stock-rllib, stock-rllib-8envs) takes the device's path with
    # another experiment file, and those files load in test_experiment_files: one RLlib run, SB3's and PureJaxRL's.
    contenders = ["device", "sb3", "purejaxrl"]
    out = bench(tmp_path, "training", "--contenders", *contenders, "--seeds", "0", "--target", "25", "--budget", "10")
    assert "time and env steps to a mean return of 25" in out.stdout and "the others against the device path" in out.stdout
    assert "median env steps to 25" in out.stdout and "lowest return after 12.5" in out.stdout
    assert "median gradient steps to 25" in out.stdout and "seeds the device path wins" in out.stdout
    result = outputs(tmp_path, "training")
    assert [r["contender"] for r in result["rows"]] == contenders
    device, sb3, purejaxrl = result["meta"]["curves"]
    # gradient steps so far at each point: the device file's 4 epochs x 4 minibatches per 2,048 env steps,
    # SB3's 20 epochs of one 256-step minibatch per rollout (counted before the rollout's own update),
    # PureJaxRL's 4 epochs x 4 minibatches per update of 4 envs x 128 steps, read back every 4 updates
    assert [p[3] for p in device["curve"]] == [16 * p[1] // 2048 for p in device["curve"]]
    assert [p[3] for p in sb3["curve"]] == [20 * (p[1] // 256 - 1) for p in sb3["curve"]]
    assert [p[1] for p in purejaxrl["curve"]] == [2048 * (i + 1) for i in range(len(purejaxrl["curve"]))]
    assert [p[3] for p in purejaxrl["curve"]] == [16 * p[1] // 512 for p in purejaxrl["curve"]]
    assert purejaxrl["jax_device"].startswith("cpu") and "jax_device" not in device
    assert all(run["curve"] and run["sampling_env_steps_per_s"] > 0 for run in result["meta"]["curves"])
    for run in result["meta"]["curves"]:  # instability: the lowest return once half the target was reached
        half = next((i for i, p in enumerate(run["curve"]) if p[2] >= 12.5), None)
        assert run["lowest_after_half"] == (None if half is None else min(p[2] for p in run["curve"][half:]))


def test_the_ratios_count_the_seeds_each_side_wins():
    """Beside the medians, seed by seed: a miss is slower than any time, two misses win for neither."""
    from rllib_gpuenv.bench.training import seeds_won

    ours = {"time_to_target_by_seed": {0: 1.0, 1: 3.0, 2: None, 3: 2.0, 4: None, 5: 1.0}}
    other = {"time_to_target_by_seed": {0: 2.0, 1: 2.0, 2: 1.0, 3: None, 4: None}}  # seed 5 not run
    assert seeds_won(ours, other) == "2/5"
    assert seeds_won(other, ours) == "2/5"


def test_training_curves_pendulum_ppo(tmp_path):
    """Continuous PPO: ours (the shipped Pendulum file); stock RLlib's and SB3's runs take the paths
    test_training_curves covers (their settings load in test_experiment_files)."""
    out = bench(
        tmp_path,
        "training",
        "--task",
        "pendulum-ppo",
        "--contenders",
        "device",
        "--seeds",
        "0",
        "--target",
        "-1400",
        "--budget",
        "4",
    )
    assert (
        "pendulum-ppo: time and env steps to a mean return of -1400" in out.stdout
        and "lowest return after -1300" in out.stdout
    )
    result = outputs(tmp_path, "training_pendulum-ppo")
    assert result["meta"]["task"] == "pendulum-ppo" and [r["contender"] for r in result["rows"]] == ["device"]
    assert all(run["curve"] and run["sampling_env_steps_per_s"] > 0 for run in result["meta"]["curves"])
    assert result["rows"][0]["config_file"].endswith("gpu_pendulum_ppo.yaml")


def test_training_curves_cartpole_dqn_reads_the_device_settings_when_it_runs(tmp_path):
    """DQN: ours with the settings of the file named (by default the shipped gpu_cartpole_dqn.yaml), and PureJaxRL's
    DQN. Stock RLlib's runs take the path test_training_curves covers (its DQN file loads in test_experiment_files);
    SB3's DQN runs in test_sb3_goes_on_past_rl_zoos_steps_until_the_target."""
    settings = tiny_dqn_file(tmp_path)
    out_dir = tmp_path / "out"
    out = bench(
        out_dir,
        "training",
        "--task",
        "cartpole-dqn",
        "--contenders",
        "device",
        "purejaxrl",
        "--seeds",
        "0",
        "--target",
        "25",
        "--budget",
        "4",
        "--device-config",
        str(settings),
    )
    assert "cartpole-dqn: time and env steps to a mean return of 25" in out.stdout
    result = outputs(out_dir, "training_cartpole-dqn")
    assert [r["contender"] for r in result["rows"]] == ["device", "purejaxrl"]
    assert all(run["curve"] and run["sampling_env_steps_per_s"] > 0 for run in result["meta"]["curves"])
    device, purejaxrl = result["meta"]["curves"]
    assert device["config_file"] == str(settings)
    assert all(p[1] % 48 == 0 for p in device["curve"])  # rounds of the file's 12 envs x 4 steps
    # PureJaxRL's file: 10 envs, read back every 2,000 env steps; a gradient step every 10 env steps past the first 10k
    assert [p[1] for p in purejaxrl["curve"]] == [2000 * (i + 1) for i in range(len(purejaxrl["curve"]))]
    assert [p[3] for p in purejaxrl["curve"]] == [max(0, (p[1] - 10_000) // 10) for p in purejaxrl["curve"]]
    assert purejaxrl["jax_device"].startswith("cpu")


def test_sb3_goes_on_past_rl_zoos_steps_until_the_target(tmp_path, monkeypatch):
    """RL-Zoo's DQN budget (50k CartPole steps) holds at most 100 episodes, so its last-100 mean
    cannot reach 475 inside it: SB3 then trains on (here: 8 steps end before any episode does).
    Nothing is left in the temporary folder (SB3's default logger makes an SB3-<date> folder)."""
    import tempfile

    from rllib_gpuenv.bench.training import SB3Setup, _sb3_curve

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    setup = SB3Setup(
        "DQN", "CartPole-v1", n_envs=1, total_timesteps=8, hyperparameters=dict(learning_starts=1000, train_freq=4)
    )
    run = _sb3_curve(setup, seed=0, target=5.0, budget_s=600.0)
    seconds, steps, mean, _ = run["curve"][-1]
    assert steps > 8 and mean >= 5.0
    assert [p[0] for p in run["curve"]] == sorted(p[0] for p in run["curve"])  # one clock across the learn() calls
    assert not list(tmp_path.glob("SB3-*"))


def test_the_acrobot_race_judges_every_contender_on_evaluation_episodes_off_its_clock(tmp_path):
    """Every contender's return is its last evaluation's (none before the first): the device file's
    every 5 iterations of 2,048 env steps, SB3's (RL-Zoo: 16 envs x 256 steps a rollout, its
    observations normalised) at the first rollout's end past 10,240 env steps, PureJaxRL's at
    its fifth call of 2,048. Any evaluation reaches -501, so each run stops at its first."""
    out = bench(tmp_path, "training", "--task", "acrobot-ppo", "--seeds", "0", "--target", "-501", "--budget", "600")
    assert "-501 (evaluation episodes: the device file's, the others' 100 every 10,240 env steps)" in out.stdout
    result = outputs(tmp_path, "training_acrobot-ppo")
    device, sb3, purejaxrl = result["meta"]["curves"]
    assert [p[1] for p in device["curve"]] == [2048 * i for i in range(1, 6)]
    assert [p[1] for p in sb3["curve"]] == [4096 * i for i in range(1, 4)]
    assert [p[1] for p in purejaxrl["curve"]] == [2048 * i for i in range(1, 6)]
    for run in (device, sb3, purejaxrl):
        assert run["evaluation_s"] > 0  # one evaluation each, off the clock
        *before, last = [p[2] for p in run["curve"]]
        assert all(math.isnan(r) for r in before) and -500 <= last <= 0
        assert run["steps_to_target"] == run["curve"][-1][1]
    assert result["meta"]["summary"][1]["median_gradient_steps_to_target"] == 2 * 4 * 64  # 2 rollouts: 4 epochs x 64 of 64
    assert not list(tmp_path.glob("*.partial.*"))  # the finished results replace what the run kept as it went


def test_a_race_judged_on_evaluation_refuses_a_file_that_never_evaluates(tmp_path):
    out = run_module(
        "rllib_gpuenv.cli",
        "bench",
        "training",
        "--task",
        "mountaincar-dqn",
        "--contenders",
        "device",
        "--device-config",
        str(tiny_dqn_file(tmp_path, env="GPUMountainCar-v0")),
        "--out",
        str(tmp_path / "out"),
    )
    assert out.returncode == 2 and out.stderr.startswith("rllib-gpuenv bench training: error: "), out.stderr[-3000:]
    assert "task mountaincar-dqn is judged on evaluation episodes" in out.stderr and "set evaluation_interval" in out.stderr
    assert not (tmp_path / "out").exists()  # no run started


def test_a_device_file_that_evaluates_otherwise_than_the_others_is_said_to(tmp_path, capsys):
    from rllib_gpuenv.bench.training import TASKS, _check_evaluates
    from rllib_gpuenv.experiments.shipped import config_file

    _check_evaluates(TASKS["acrobot-ppo"], str(config_file("gpu_acrobot_ppo.yaml")))  # the shipped file: as the others
    assert capsys.readouterr().err == ""
    greedy = tmp_path / "greedy.yaml"
    text = config_file("gpu_acrobot_ppo.yaml").read_text()
    greedy.write_text(text.replace("{num_envs_per_env_runner: 512}", "{num_envs_per_env_runner: 512, explore: false}"))
    _check_evaluates(TASKS["acrobot-ppo"], str(greedy))
    assert (
        "evaluates with explore=False, while the other contenders of acrobot-ppo evaluate sampling" in capsys.readouterr().err
    )


def test_a_device_file_of_another_env_is_refused_before_any_run():
    """A Pendulum file in the CartPole race would be timed against CartPole's target."""
    from rllib_gpuenv.bench.training import TASKS, _experiment_file
    from rllib_gpuenv.experiments.shipped import config_file

    pendulum = str(config_file("gpu_pendulum_ppo.yaml"))
    with pytest.raises(ValueError, match=r"trains on rllib_gpuenv:GPUPendulum-v1, but task cartpole-ppo races on "):
        _experiment_file(TASKS["cartpole-ppo"], "device", pendulum)
    assert _experiment_file(TASKS["pendulum-ppo"], "device", pendulum) == pendulum


def test_training_refuses_a_contender_the_task_lacks(tmp_path):
    out = run_module(
        "rllib_gpuenv.cli",
        "bench",
        "training",
        "--task",
        "pendulum-ppo",
        "--contenders",
        "stock-runner",
        "--out",
        str(tmp_path),
    )
    assert (
        out.returncode == 2
        and "task 'pendulum-ppo' has no contender 'stock-runner': its contenders are device, stock-rllib, sb3" in out.stderr
    )


def test_purejaxrl_without_its_packages_names_the_extra_before_any_run(tmp_path, monkeypatch):
    import importlib.util

    from rllib_gpuenv.bench import training
    from rllib_gpuenv.cli.errors import missing_extra

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gymnax" else find_spec(name, *a))
    with pytest.raises(ModuleNotFoundError) as err:
        training.run(["device", "purejaxrl"], [0], budget_s=1, out_dir=str(tmp_path))
    assert missing_extra(err.value) == 'gymnax is not installed: pip install "rllib_gpuenv[bench]"'
    assert not list(tmp_path.iterdir())  # no run started


def test_learners(tmp_path):
    """One local learner beside 2 colocated ones: throughput, time to a small target, the rollout trip. The
    separate layout's setups are the same measurement with env runners (test_learner_setups); their
    training is test_learners.py's, so this run leaves out their 4 actors."""
    config = tmp_path / "tiny.yaml"
    config.write_text(
        textwrap.dedent("""
        tiny:
          run: DevicePPO
          env: GPUCartPole-v1
          stop: {training_iteration: 100}
          config: {num_envs_per_env_runner: 16, device_rollouts: {rollout_length: 8}, minibatch_size: 64, num_epochs: 1}
    """)
    )
    out = bench(
        tmp_path,
        "learners",
        "--learners",
        "2",
        "--seeds",
        "0",
        "--iterations",
        "1",
        "--target",
        "15",
        "--budget",
        "60",
        "--config-file",
        str(config),
        "--layouts",
        "colocated",
    )
    assert "a rollout's trip from an env runner to a learner" not in out.stdout  # the separate layout's, not asked for
    result = outputs(tmp_path, "learners")
    rows = result["rows"]
    assert result["meta"]["rollout_trips"] == []
    assert [(r["layout"], r["learners"]) for r in rows] == [("local", 1), ("colocated", 2)]
    assert [r["env_steps_per_iteration"] for r in rows] == [128, 256]  # weak scaling: 16 envs x 8 steps per sampler
    assert all(r["env_steps_per_s"] > 0 and r["runs"][0]["seconds"] is not None for r in rows), rows


def test_learner_setups():
    """Each layout asked for, per learner count, after the local learner; the separate layout with as many env
    runners as learners; an unknown layout is an error naming the choices."""
    from rllib_gpuenv.bench.learners import setups

    rows = setups([1, 2])
    assert [(r["layout"], r["num_learners"], r["num_env_runners"]) for r in rows] == [
        ("local", 0, 0),
        ("colocated", 1, 0),
        ("separate", 1, 1),
        ("colocated", 2, 0),
        ("separate", 2, 2),
    ]
    assert [r["layout"] for r in setups([2], ("separate",))] == ["local", "separate"]
    with pytest.raises(ValueError, match="unknown layout.*colocted: choose from colocated, separate"):
        setups([2], ("colocted",))


def test_curves_of_runs_too_short_to_end_an_episode_still_plot(tmp_path):
    """A budget that ends before any episode does (a loaded machine) leaves curves without a return: no log axis then."""
    from rllib_gpuenv.bench.training import TASKS, plot_curves

    nan = float("nan")
    runs = [
        {"contender": "device", "curve": [(0.0, 0, nan)]},
        {"contender": "device", "curve": [(1.0, 100, nan), (2.0, 200, nan)]},
        {"contender": "device", "curve": []},
    ]
    path = plot_curves(runs, -1400, str(tmp_path), TASKS["pendulum-ppo"])
    assert os.path.getsize(path) > 0


def test_every_contenders_settings_change_its_file_into_a_config_that_validates(tmp_path):
    """A contender that runs another's file with settings changed (``Task.overrides``): the settings
    apply and validate, e.g. DeviceDQN's uniform and DeviceSAC's prioritized replay with their shipped
    files' other settings."""
    from rllib_gpuenv.bench.training import TASKS, _experiment_file
    from rllib_gpuenv.experiments import apply_config, load_experiments
    from rllib_gpuenv.experiments.shipped import config_file

    checked = []
    for task in TASKS.values():
        for contender, overrides in task.overrides.items():
            (experiment,) = load_experiments(_experiment_file(task, contender, None))
            apply_config(experiment.config, overrides, "overrides")
            experiment.config.validate()
            checked.append((task.name, contender))
    assert {("cartpole-dqn", "device-uniform"), ("pendulum-sac", "device-prioritized")} <= set(checked)
    sac = TASKS["pendulum-sac"]
    (experiment,) = load_experiments(_experiment_file(sac, "device-prioritized", None))
    apply_config(experiment.config, sac.overrides["device-prioritized"], "overrides")
    # --device-config replaces the device's file for the contenders that change its settings, not for the others
    mine = tmp_path / "mine.yaml"
    mine.write_text(config_file(sac.config_files["device"]).read_text())
    assert _experiment_file(sac, "device-prioritized", str(mine)) == str(mine)
    assert _experiment_file(TASKS["breakout-ppo"], "random", str(mine)) != str(mine)
    assert experiment.config.replay_buffer_config == {
        "type": "PrioritizedEpisodeReplayBuffer", "alpha": 0.6, "beta": 0.4, "capacity": 100_000
    }  # fmt: skip


def test_a_race_of_the_device_path_alone_prints_no_empty_comparison():
    from rllib_gpuenv.bench import training

    run = {
        "contender": "device",
        "seed": 0,
        "time_to_target_s": 2.0,
        "steps_to_target": 1000,
        "gradient_steps_to_target": 10,
        "curve": [(1.0, 500, 100.0, 5), (2.0, 1000, 480.0, 10)],
        "final_return": 480.0,
        "env_steps_per_s": 500.0,
        "sampling_env_steps_per_s": 5000.0,
        "build_s": 1.0,
        "budget_s": 10.0,
    }
    task = training.TASKS[training.DEFAULT_TASK]
    text = training.summary_text(training.summarise([run], 475.0, task), 475.0, task)
    assert "median s to 475" in text and "the others against the device path" not in text
