"""`rllib train`: old-format experiment files, legacy names, bad input, real Tune runs."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from rllib_gpuenv.experiments import ExperimentError, check_fits_cluster, inline_experiment, load_experiments
from rllib_gpuenv.rllib import DevicePPO

from conftest import ROOT

CONFIGS = os.path.join(ROOT, "configs")


def rllib(*args, timeout=300) -> subprocess.CompletedProcess:
    """The installed-style command: python -m rllib_gpuenv.rllib_cli (what the `rllib` script runs)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "RAY_DEDUP_LOGS": "0"}
    return subprocess.run([sys.executable, "-m", "rllib_gpuenv.rllib_cli", *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)  # fmt: skip


def write(tmp_path, text, name="exp.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_every_shipped_config_loads():
    for name in sorted(os.listdir(CONFIGS)):
        experiments = load_experiments(os.path.join(CONFIGS, name))
        assert experiments and all(e.stop for e in experiments), name


def test_legacy_keys_and_metrics_are_translated_with_warnings(tmp_path, caplog):
    path = write(tmp_path, """
        old-style:
          run: PPO
          env: CartPole-v1
          local_dir: results
          checkpoint_freq: 5
          stop: {episode_reward_mean: 150, timesteps_total: 100000}
          config:
            framework: torch
            num_workers: 1
            num_envs_per_worker: 4
            sgd_minibatch_size: 64
            num_sgd_iter: 3
            lambda: 0.9
            model: {fcnet_hiddens: [32, 32]}
    """)
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv.experiments"):
        (exp,) = load_experiments(path)
    c = exp.config
    assert (c.num_env_runners, c.num_envs_per_env_runner, c.minibatch_size, c.num_epochs, c.lambda_) == (1, 4, 64, 3, 0.9)
    assert c.model_config["fcnet_hiddens"] == [32, 32]
    assert exp.stop == {"env_runners/episode_return_mean": 150, "env_runners/num_env_steps_sampled_lifetime": 100000}
    assert exp.checkpoint_config == {"checkpoint_frequency": 5} and exp.storage_path == str(tmp_path / "results")
    warned = caplog.text
    for old in ("num_workers", "num_envs_per_worker", "sgd_minibatch_size", "num_sgd_iter", "'model'", "episode_reward_mean",
                "timesteps_total", "local_dir", "checkpoint_freq", "framework"):  # fmt: skip
        assert old in warned, old


@pytest.mark.parametrize(
    "body, message",
    [
        ("x: {run: NoSuchAlgo, env: CartPole-v1}", r"exp.yaml: experiment 'x': unknown algorithm run='NoSuchAlgo'; available: DevicePPO.*PPO"),
        ("x: {run: PPO, env: CartPoel-v1}", r"exp.yaml: experiment 'x': unknown env 'CartPoel-v1'; did you mean CartPole-v1"),
        ("x: {run: PPO, env: CartPole-v1, config: {num_env_runer: 2}}", r"exp.yaml: experiment 'x': config key 'num_env_runer' is not a PPOConfig setting; did you mean num_env_runners"),
        ("x: {run: PPO, env: CartPole-v1, stopp: {}}", r"exp.yaml: experiment 'x': unknown key\(s\) \['stopp'\]"),
        ("x: {run: PPO, env: CartPole-v1, config: {devices: {learner: cpu}}}", r"'devices' needs run: DevicePPO"),
        ("x: {run: DevicePPO, env: GPUCartPole-v1, config: {devices: {learnr: cpu}}}", r"config key 'devices':.*learnr"),
        ("x: {run: PPO, env: CartPole-v1, config: {model: {fcnet_hidens: [8]}}}", r"model_config key\(s\) \['fcnet_hidens'\]"),
        ("x: [run: PPO\n", r"exp.yaml: not valid YAML"),
        ("- just a list", r"exp.yaml: expected experiments as"),
    ],
)
def test_bad_experiment_files_name_the_file_and_key(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(ExperimentError, match=message):
        load_experiments(path)


def test_python_experiment_file(tmp_path):
    path = write(tmp_path, """
        from rllib_gpuenv.rllib import DevicePPOConfig
        config = DevicePPOConfig().environment("GPUCartPole-v1").env_runners(num_envs_per_env_runner=32)
        stop = {"episode_reward_mean": 100}
    """, name="my_exp.py")  # fmt: skip
    (exp,) = load_experiments(path)
    assert exp.name == "my_exp" and exp.algo_class is DevicePPO and exp.stop == {"env_runners/episode_return_mean": 100}


def test_asking_for_more_than_the_cluster_has_fails_at_once():
    exp = inline_experiment("DevicePPO", "GPUCartPole-v1", {"num_env_runners": 3, "num_gpus_per_env_runner": 1})
    with pytest.raises(ExperimentError, match=r"needs 4 CPU \(the cluster has 2\), 3 GPU \(the cluster has 0\) per trial"):
        check_fits_cluster(exp, cluster={"CPU": 2.0})
    check_fits_cluster(inline_experiment("DevicePPO", "GPUCartPole-v1", {"num_env_runners": 1}), cluster={"CPU": 2.0})


def test_help():
    out = rllib("--help")
    assert out.returncode == 0 and "train" in out.stdout
    out = rllib("train", "--help")
    assert out.returncode == 0
    for text in ("rllib train file", "--algo", "--env", "--config", "--stop", "episode_reward_mean", "resource_search"):
        assert text in out.stdout, text


def test_train_file_with_legacy_names_runs_with_tune(tmp_path):
    path = write(tmp_path, """
        legacy-device-ppo:
          run: DevicePPO
          env: GPUCartPole-v1
          stop: {training_iteration: 2}
          checkpoint_at_end: true
          config:
            num_workers: 0
            num_envs_per_worker: 32
            device_rollouts: {rollout_length: 16}
            sgd_minibatch_size: 128
            num_sgd_iter: 2
    """)
    out = rllib("train", "file", path, "--storage-path", str(tmp_path / "results"), "--ray-num-cpus", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "config key 'num_workers' is called 'num_env_runners' today" in out.stderr
    assert "TERMINATED" in out.stdout + out.stderr
    trial_dirs = [d for d in os.listdir(tmp_path / "results" / "legacy-device-ppo") if d.startswith("DevicePPO")]
    assert len(trial_dirs) == 1
    progress = (tmp_path / "results" / "legacy-device-ppo" / trial_dirs[0] / "progress.csv").read_text().splitlines()
    assert len(progress) == 3  # a header and two iterations


def test_train_inline_algo_env_config_stop(tmp_path):
    out = rllib(
        "train", "--algo", "PPO", "--env", "CartPole-v1",
        "--config", '{"num_env_runners": 0, "train_batch_size_per_learner": 256, "minibatch_size": 64, "num_epochs": 1}',
        "--stop", '{"training_iteration": 1}', "--storage-path", str(tmp_path), "--ray-num-cpus", "2",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "experiment 'PPO_CartPole-v1': 1 trial(s)" in out.stdout


def test_train_refuses_bad_input_before_running(tmp_path):
    out = rllib("train", "file", os.path.join(CONFIGS, "gpu_cartpole_ppo.yaml"), "--config", '{"num_env_runners": 8}', "--ray-num-cpus", "2")
    assert out.returncode == 2 and "needs 9 CPU (the cluster has 2)" in out.stderr, out.stderr[-2000:]
    out = rllib("train", "--algo", "PPO")
    assert out.returncode == 2 and "both --algo and --env" in out.stderr
    out = rllib("train", "file", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "missing.yaml: no such experiment file" in out.stderr
