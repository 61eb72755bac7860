"""`rllib train` going on from where training stopped: `restore:`/`--restore` (trials that start
from a checkpoint), real Tune runs; checkpoints that do not fit are refused before Ray starts.
`--resume` (an interrupted Tune experiment: Ctrl-C, or SIGTERM, which the command takes as Ctrl-C)
is test_job_submit.py's: `ray job stop` sends SIGTERM, and the job goes on when submitted again."""

import glob
import json
import os

import pytest

from rllib_gpuenv.experiments import ExperimentError, load_experiments
from rllib_gpuenv.experiments.restore import check_restore, restoring
from rllib_gpuenv.experiments.shipped import config_file
from tests.helpers import ROOT, error_lines, rllib, tiny_main_job_file, trial_progress

# A DevicePPO checkpoint of GPUCartPole-v1: 4 envs, an [8] network (test_resume.py's old checkpoints)
SMALL_CHECKPOINT = os.path.join(ROOT, "tests", "rllib", "data", "checkpoints_82623be", "device")


def rows(stdout: str, trial_prefix: str = "DevicePPO_") -> list[tuple[int, str, str]]:
    """The progress rows a run printed: (iteration, return, env steps)."""
    fields = [line.split() for line in stdout.splitlines() if line.startswith(trial_prefix)]
    return [(int(f[1]), f[2], f[3]) for f in fields if len(f) == 6 and f[1].isdigit()]


def test_a_checkpoint_that_does_not_fit_is_refused_before_ray_starts(tmp_path):
    """Another algorithm, another env, other networks: one line each, naming the file, the
    experiment and --restore; nothing runs."""
    out = rllib(
        "train",
        "file",
        str(config_file("gpu_cartpole_dqn.yaml")),
        str(config_file("gpu_pendulum_ppo.yaml")),
        str(config_file("gpu_cartpole_ppo.yaml")),
        "--restore",
        SMALL_CHECKPOINT,
        "--storage-path",
        str(tmp_path / "results"),
    )
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 3, errors
    assert "gpu_cartpole_dqn.yaml: experiment 'gpu-cartpole-dqn': --restore: " in errors[0]
    assert "is a checkpoint of DevicePPO, but the experiment runs DeviceDQN: set `run: DevicePPO`" in errors[0]
    assert "was trained on rllib_gpuenv:GPUCartPole-v1, but the experiment runs rllib_gpuenv:GPUPendulum-v1" in errors[1]
    assert "holds networks built with fcnet_hiddens=[8], but the experiment builds fcnet_hiddens=[64, 64]" in errors[2]
    assert "set them in its model_config as the checkpoint has them" in errors[2]
    assert "Started a local Ray instance" not in out.stderr and not os.path.exists(tmp_path / "results")


def test_a_path_that_is_not_a_checkpoint_is_named():
    (experiment,) = load_experiments(config_file("gpu_cartpole_ppo.yaml"))
    with pytest.raises(ExperimentError, match=r"^x: restore: /nowhere/at/all: no such checkpoint directory$"):
        check_restore("/nowhere/at/all", experiment.config, "x")
    parent = os.path.dirname(SMALL_CHECKPOINT)  # a folder above checkpoints: they are listed
    with pytest.raises(ExperimentError, match=r"not an RLlib algorithm checkpoint .*checkpoints below it, newest first: "):
        check_restore(parent, experiment.config, "x")


def test_networks_are_compared_with_rllib_s_defaults_filled_in():
    """The checkpoint left fcnet_activation unset (RLlib's default: tanh): an experiment that names
    tanh builds the same networks, one that names relu does not. Its env, named
    `rllib_gpuenv:GPUCartPole-v1`, is the env a Python config names `GPUCartPole-v1`."""
    from rllib_gpuenv.rllib import DevicePPOConfig

    config = DevicePPOConfig().environment("GPUCartPole-v1")
    config.rl_module(model_config={"fcnet_hiddens": [8], "fcnet_activation": "tanh"})
    assert check_restore(SMALL_CHECKPOINT, config, "x") == SMALL_CHECKPOINT
    config.rl_module(model_config={"fcnet_hiddens": [8], "fcnet_activation": "relu"})
    with pytest.raises(ExperimentError, match=r"fcnet_activation='tanh', but the experiment builds fcnet_activation='relu'"):
        check_restore(SMALL_CHECKPOINT, config, "x")


def test_more_envs_than_the_checkpoint_had_start_new_episodes(caplog):
    """A run restored with another number of envs: the weights go on, the envs start over (the
    checkpoint's env state fits only as many envs)."""
    (experiment,) = load_experiments(config_file("gpu_cartpole_ppo.yaml"))
    config = (
        experiment.config.env_runners(num_envs_per_env_runner=8)
        .device_rollouts(rollout_length=4)
        .devices(learner="cpu", env_runners="cpu")
        .training(minibatch_size=32, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [8]})
    )
    restored = restoring(config, SMALL_CHECKPOINT).build_algo()
    try:
        assert restored.iteration > 0  # the checkpoint's counters
        assert "The checkpoint holds 4 envs, this env runner has 8: its envs start new episodes" in caplog.text
        result = restored.train()
        assert result["training_iteration"] == restored.iteration
    finally:
        restored.stop()


def test_a_trial_goes_on_from_a_checkpoint_named_in_its_file(tmp_path):
    """A run checkpoints at iteration 3 of 5; a file that restores that checkpoint (its path
    relative to the file) runs iterations 4 and 5 as the first run did: the same returns and env
    steps (the envs, generators and counters come back with the weights)."""
    tiny = tiny_main_job_file(tmp_path, rollout_length=16, iterations=5)
    first = rllib("train", "file", tiny, "--checkpoint-freq", "3", "--storage-path", str(tmp_path / "first"), "--resume")
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"experiment 'tiny': nothing to resume in {tmp_path / 'first' / 'tiny'}: starting it" in first.stdout
    (checkpoint,) = glob.glob(str(tmp_path / "first" / "tiny" / "*" / "checkpoint_000000"))
    restoring_file = tmp_path / "restored.yaml"
    restoring_file.write_text(open(tiny).read() + f"  restore: {os.path.relpath(checkpoint, tmp_path)}\n")
    second = rllib("train", "file", str(restoring_file), "--storage-path", str(tmp_path / "second"))
    assert second.returncode == 0, second.stderr[-3000:]
    assert [r[0] for r in rows(first.stdout)] == [1, 2, 3, 4, 5]
    assert rows(second.stdout) == rows(first.stdout)[3:]
    (progress,) = trial_progress(tmp_path / "second" / "tiny")
    assert [int(row["training_iteration"]) for row in progress] == [4, 5]
    # the first row's env-steps/s is its own iteration's, not the checkpoint's env steps over it
    first_row = next(line.split() for line in second.stdout.splitlines() if line.startswith("DevicePPO_"))
    (result_file,) = glob.glob(str(tmp_path / "second" / "tiny" / "*" / "result.json"))
    result = json.loads(open(result_file).readline())
    own_rate = result["env_runners"]["num_env_steps_sampled"] / result["time_this_iter_s"]
    assert abs(int(first_row[4].replace(",", "")) - own_rate) <= 1, (first_row, own_rate)
    # a stop the checkpoint has reached is named before Ray starts: its trial trained one iteration and stopped
    reached = rllib(
        "train", "file", str(restoring_file), "--stop", '{"training_iteration": 3}', "--storage-path", str(tmp_path / "3")
    )
    assert reached.returncode == 2 and not (tmp_path / "3").exists(), reached.stderr[-3000:]
    assert "checkpoint_000000 is at training_iteration 3, and the experiment stops at training_iteration 3" in reached.stderr
    assert """e.g. --stop '{"training_iteration": 6}' for 3 more""" in reached.stderr
