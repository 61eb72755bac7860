"""`rllib train` as a command: its errors, real Tune runs of files old and new, --algo/--env."""

import glob
import json
import os
import re

import pytest

from rllib_gpuenv.experiments import inline_experiment, load_experiments
from rllib_gpuenv.experiments.legacy import TRANSITION_FLAGS
from rllib_gpuenv.experiments.shipped import config_file
from tests.helpers import (
    ERROR_LINE,
    OLD_EXPERIMENTS,
    ROOT,
    assert_every_reported_metric_is_a_known_stop_metric,
    error_lines,
    rllib,
    tiny_main_job_file,
    trial_progress,
    write,
)

# --- the command line (subprocesses) ------------------------------------------------------------


def test_help():
    out = rllib("--help")
    assert out.returncode == 0 and "train" in out.stdout and "example" in out.stdout
    out = rllib("train", "--help")
    assert out.returncode == 0
    for text in (
        "rllib train file",
        "-f",
        "--framework",
        "--algo",
        "--env",
        "--config",
        "--stop",
        "--no-stop",
        "episode_reward_mean",
        "_enable_learner_api",
        "MeanStdFilter",
        "resource_search",
        "--restore",
        "--resume",
        "--scheduler",
        "--keep-checkpoints-num",
        "--checkpoint-score-attr",
        "--ray-ui",
        "--ray-object-store-memory",
        "--local-mode",
        "-v",
    ):
        assert text in out.stdout, text


def test_train_refuses_bad_input_before_ray_starts(tmp_path):
    """Every file's mistakes in one run, one line each; nothing runs (no Ray, no results)."""
    fail = sorted(glob.glob(os.path.join(OLD_EXPERIMENTS, "fail", "*.yaml")))
    out = rllib("train", "file", *fail, "--storage-path", str(tmp_path / "results"))
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == len(fail) and all(ERROR_LINE.match(e) for e in errors), errors
    assert (
        "cartpole-appo-no-vtrace.yaml: experiment 'cartpole-appo': vtrace: IMPALA and APPO do NOT support vtrace=False"
        in out.stderr
    )
    assert (
        "pendulum-ppo-v0.yaml: experiment 'pendulum-ppo': env: Environment version v0 for `Pendulum` is deprecated"
        in out.stderr
    )
    assert "Started a local Ray instance" not in out.stderr and not os.path.exists(tmp_path / "results")
    out = rllib("train", "--algo", "PPO", "--env", "CartPole-v1", "--framework", "tf", "--stop", '{"training_iteration": 1}')
    assert out.returncode == 2 and error_lines(out.stderr) == [
        "rllib: error: --framework tf: RLlib's new API stack runs torch only: drop --framework (or pass --framework torch)"
    ], out.stderr[-2000:]
    out = rllib("train", "--algo", "PPO")
    assert out.returncode == 2 and "both --algo and --env" in out.stderr
    # more env runners than the Ray about to start has CPUs: said before it starts, not after
    out = rllib("train", "--algo", "PPO", "--env", "CartPole-v1", "--ray-num-cpus", "2", "--stop", '{"training_iteration": 1}')
    assert (
        out.returncode == 2
        and "PPO cannot run on this Ray cluster: it asks Ray for 3 CPU(s) but the cluster has 2" in out.stderr
    )
    assert "Started a local Ray instance" not in out.stderr, out.stderr[-2000:]
    out = rllib("train", "-f", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "missing.yaml: no such experiment file" in out.stderr
    # the metrics that rank trials and checkpoints, as the stop criteria's: Ray started, then Tune failed on the
    # scheduler's (a traceback with the whole result), and ranked the checkpoints by nothing without a word
    tiny = tiny_main_job_file(tmp_path)
    for option, value in [
        ("--scheduler-config", '{"metric": "env_runners/episode_retrn_mean", "mode": "max"}'),
        ("--checkpoint-score-attr", "env_runners/episode_retrn_mean"),
    ]:
        scheduler = ["--scheduler", "ASHA"] if option == "--scheduler-config" else ["--keep-checkpoints-num", "1"]
        out = rllib("train", "file", tiny, *scheduler, option, value, "--storage-path", str(tmp_path / "results"))
        assert out.returncode == 2 and error_lines(out.stderr) == [
            f"rllib: error: <command line>: experiment 'tiny': {option.replace('-config', '-config metric')}: no RLlib "
            "or Tune result has this metric; did you mean env_runners/episode_return_mean, env_runners/episode_return_min, "
            "env_runners/episode_return_max? (metrics logged by your own callbacks are accepted when the config sets "
            "callbacks)"
        ], out.stderr[-2000:]
    # an env parameter misspelt: each env runner (RLlib's stock one too) failed on it once Ray had started
    for algo in ("PPO", "DevicePPO"):
        out = rllib("train", "--algo", algo, "--env", "GPUPendulum-v1", "--config", '{"env_config": {"gg": 9.0}}')
        assert out.returncode == 2 and "GPUPendulum-v1 has no parameter(s) ['gg'] (did you mean g?)" in out.stderr
        assert "Started a local Ray instance" not in out.stderr, out.stderr[-2000:]
    # the main job's options, as rllib train spells them
    out = rllib("train", "--algo", "DevicePPO", "--env", "GPUCartPole-v1", "--device", "cpu")
    assert out.returncode == 2 and '--device (rllib train sets devices in the config: --config \'{"devices"' in out.stderr


def test_old_command_lines_parse_as_they_did_or_say_what_replaced_them(caplog):
    """The last RLlib CLI's short options and --experiment-name; old Tune's --max-failures and
    --upload-dir; the options whose work is done otherwise today, each an error naming how
    (argparse alone said "unrecognized arguments")."""
    from rllib_gpuenv.cli.rllib import OLD_OPTIONS, apply_run_options, build_parser, experiments_from_args
    from rllib_gpuenv.experiments import ExperimentError

    parser = build_parser()
    args = parser.parse_args(
        ["train", "-a", "PPO", "-e", "CartPole-v1", "-n", "mine", "-c", '{"lr": 0.001}', "-s", '{"training_iteration": 2}']
        + ["--torch", "--max-failures", "2", "--local-dir", "/tmp/here", "--upload-dir", "s3://bucket/runs"]
    )
    (experiment,) = experiments_from_args(args)
    assert (experiment.name, experiment.config.lr, experiment.stop) == ("mine", 0.001, {"training_iteration": 2})
    assert apply_run_options([experiment], args) == "s3://bucket/runs" and experiment.failure_config == {"max_failures": 2}
    assert "--storage-path: not used: Tune writes the results to --upload-dir s3://bucket/runs" in caplog.text
    base = ["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop", '{"training_iteration": 1}']
    for flag, (takes_value, replacement) in OLD_OPTIONS.items():
        with pytest.raises(ExperimentError, match=re.escape(f"{flag}: {replacement}")):
            experiments_from_args(parser.parse_args(base + [flag] + (["x"] if takes_value else [])))
    assert experiments_from_args(parser.parse_args(base + ["--sync-on-checkpoint"]))
    assert "--sync-on-checkpoint: dropped: Tune syncs each checkpoint" in caplog.text
    with pytest.raises(ExperimentError, match="--experiment-name names the experiment of --algo/--env; a file names its"):
        experiments_from_args(parser.parse_args(["train", "file", str(config_file("gpu_cartpole_ppo.yaml")), "-n", "x"]))


def test_rllib_example_lists_prints_and_runs_the_shipped_files(capsys):
    """The last RLlib CLI's `rllib example list|get|run`, over the experiment files the package ships."""
    import yaml

    from rllib_gpuenv.cli.rllib import build_parser
    from rllib_gpuenv.experiments import ExperimentError
    from rllib_gpuenv.experiments.shipped import config_names

    def example(*argv):
        args = build_parser().parse_args(["example", *argv])
        return args.func(args)

    shipped = [(str(name), file) for file in config_names() for name in yaml.safe_load(config_file(file).read_text())]
    assert example("list") == 0
    listed = capsys.readouterr().out
    assert [tuple(line.split()[:2]) for line in listed.splitlines()] == [(name, f"{file}:") for name, file in shipped]
    assert "gpu-cartpole-ppo  " in listed and "PPO on GPUCartPole-v1 on the device path" in listed
    assert example("list", "--filter", "DQN") == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [n for n, _ in shipped if "dqn" in n]
    for name in ("gpu-cartpole-dqn", "gpu_cartpole_dqn", "gpu_cartpole_dqn.yaml"):  # the id or the file's name
        assert example("get", name) == 0
        assert capsys.readouterr().out == config_file("gpu_cartpole_dqn.yaml").read_text()
    with pytest.raises(ExperimentError, match="'cartpole-ppo' is not a shipped example; did you mean gpu-cartpole-ppo?"):
        example("get", "cartpole-ppo")
    # `run` is `rllib train file <its file>` with the options after the id: here one that stops before Ray starts
    message = f"{config_file('gpu_pendulum_sac.yaml')}: experiment 'gpu-pendulum-sac': no_such_setting: not a"
    with pytest.raises(ExperimentError, match=re.escape(message)):
        example("run", "gpu-pendulum-sac", "--config", '{"no_such_setting": 1}')


def train_on_our_env(tmp_path, algo: str, num_cpus: int, iterations: int = 2, *config):
    """`rllib train --algo ALGO --env GPUCartPole-v1` for some iterations: the trial's progress rows, its config
    and the command's output."""
    out = rllib(
        "train",
        "--algo",
        algo,
        "--env",
        "GPUCartPole-v1",
        *config,
        "--stop",
        json.dumps({"training_iteration": iterations}),
        "--storage-path",
        str(tmp_path),
        "--ray-num-cpus",
        str(num_cpus),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    name = f"{algo}_GPUCartPole-v1"
    assert f"experiment '{name}': 1 trial(s)" in out.stdout
    (progress,) = trial_progress(tmp_path / name)
    (params,) = glob.glob(str(tmp_path / name / "*" / "params.json"))
    return progress, json.load(open(params)), out


def test_stock_ppo_trains_on_our_env_by_its_plain_name(tmp_path):
    """Issue 17's command: RLlib's stock PPO builds our env through its vector entry point, by its plain name."""
    # The README's command, with a smaller batch: RLlib's default (4,000 env steps, 30 epochs) takes a minute here
    settings = '{"num_env_runners": 1, "train_batch_size_per_learner": 512, "num_epochs": 1}'
    progress, config, _ = train_on_our_env(tmp_path, "PPO", 2, 1, "--config", settings)
    assert len(progress) == 1 and float(progress[-1]["env_runners/num_env_steps_sampled_lifetime"]) >= 512
    assert config["env"] == "rllib_gpuenv:GPUCartPole-v1" and config["gym_env_vectorize_mode"] == "vector_entry_point"


def test_device_dqn_trains_from_the_command_line_with_its_tuned_defaults(tmp_path):
    """`rllib train --algo DeviceDQN --env GPUCartPole-v1`: the settings of configs/gpu_cartpole_dqn.yaml."""
    progress, config, out = train_on_our_env(tmp_path, "DeviceDQN", 2, 2, "-v")
    # min_sample_timesteps_per_iteration 1000: four rounds of 16 envs x 16 steps per iteration
    assert [int(float(row["env_runners/num_env_steps_sampled_lifetime"])) for row in progress] == [1024, 2048]
    assert out.stdout.count(" config:\n") == 1  # -v: the trial's config, once
    assert float(progress[-1]["env_runners/episode_return_mean"]) > 0
    assert (config["n_step"], config["training_intensity"], config["target_network_update_freq"]) == (3, 8, 750)
    assert config["gamma"] == 0.98
    # Tune's runs write TensorBoard events through the package's callback: a result's scalars in one event
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (events,) = glob.glob(str(tmp_path / "DeviceDQN_GPUCartPole-v1" / "*" / "events.out.tfevents.*"))
    scalars_per_event = [len(e.summary.value) for e in EventFileLoader(events).Load() if e.HasField("summary")]
    assert len(scalars_per_event) == 2 and min(scalars_per_event) > 20, scalars_per_event


LEGACY_NAMES = """
legacy-device-ppo:
  run: DevicePPO
  env: GPUCartPole-v1
  stop: {training_iteration: 5}
  checkpoint_at_end: true
  config:
    num_workers: 0
    num_envs_per_worker: 32
    device_rollouts: {rollout_length: 16}
    sgd_minibatch_size: 128
    num_sgd_iter: 2
"""


def test_old_files_old_names_and_a_shipped_file_run_with_tune(tmp_path):
    """Files in one `rllib train` (-f each, --stop for all), an iteration each: RLlib's old tuned
    examples of PPO and DQN, a DevicePPO file in old names, and the shipped Pendulum file (its own
    settings: 64 envs x 32 steps, a Box action space). The APPO,
    IMPALA and Pendulum PPO files are translated and checked by RLlib's validate() without Ray
    (test_experiment_files.py); running them would start RLlib's own algorithms again at a
    minute's cost (IMPALA's grid search: two trials)."""
    files = [os.path.join(OLD_EXPERIMENTS, f"{name}.yaml") for name in ("cartpole-dqn", "cartpole-ppo")]
    legacy = write(tmp_path, LEGACY_NAMES, name="legacy.yaml")
    pendulum = str(config_file("gpu_pendulum_ppo.yaml"))
    acrobot = str(config_file("gpu_acrobot_ppo.yaml"))  # stops on an evaluation metric, first reported at iteration 5
    args = [a for f in [*files, legacy, pendulum, acrobot] for a in ("-f", f)]
    out = rllib(
        "train",
        *args,
        "--framework",
        "torch",
        "--stop",
        '{"training_iteration": 1}',
        "--storage-path",
        str(tmp_path / "results"),
        "--ray-num-cpus",
        "2",  # the experiments run one after another, one trial each, in one Ray instance
    )
    assert out.returncode == 0, out.stderr[-5000:]
    expected_trials = {
        "cartpole-ppo": 1,
        "cartpole-dqn": 1,
        "legacy-device-ppo": 1,
        "gpu-pendulum-ppo": 1,
        "gpu-acrobot-ppo": 1,
    }
    for name, trials in expected_trials.items():
        progress = trial_progress(tmp_path / "results" / name)
        assert len(progress) == trials and all(len(rows) == 1 for rows in progress), name
        assert all(int(float(rows[-1]["num_env_steps_sampled_lifetime"])) > 0 for rows in progress), name
    # every transition flag in these files: one warning line each, in this one run
    warnings = [line for line in out.stderr.splitlines() if line.startswith("WARNING rllib_gpuenv")]
    for path in files:
        text = open(path).read()
        for flag in TRANSITION_FLAGS:
            if re.search(rf"^\s+{flag}:", text, re.M):
                named = [w for w in warnings if f"{os.path.basename(path)}: " in w and f": {flag}: dropped" in w]
                assert len(named) == 1, (path, flag, named)
    assert (
        sum(
            "observation_filter: MeanStdFilter is applied as RLlib's MeanStdFilter env-to-module connector" in w
            for w in warnings
        )
        == 1
    )
    assert "num_workers: called 'num_env_runners' today" in out.stderr
    # one row per result (return, env steps, env-steps/s, time), no config dump without -v
    legacy_trial = "DevicePPO_GPUCartPole-v1_"  # the env's id as written, not the rllib_gpuenv: the trials import it by
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(legacy_trial) and "TERMINATED" not in line]
    assert [r[1] for r in rows] == ["1"] and [r[3] for r in rows] == ["512"], out.stdout
    assert "return" in out.stdout and "env-steps/s" in out.stdout and "TERMINATED after 1 iteration(s)" in out.stdout
    assert " config:" not in out.stdout and "model_config" not in out.stdout
    (pendulum_rows,) = trial_progress(tmp_path / "results" / "gpu-pendulum-ppo")
    assert float(pendulum_rows[-1]["env_runners/num_env_steps_sampled_lifetime"]) == 64 * 32
    # Tune's warning, with every key of the result, for a stop metric not (yet) in it: our checks have done its job
    assert "not found in result dict" not in out.stdout + out.stderr
    for path in [*files, legacy, pendulum]:
        for experiment in load_experiments(path):
            assert_every_reported_metric_is_a_known_stop_metric(tmp_path / "results" / experiment.name, experiment.config)


def test_algo_and_env_start_from_the_shipped_settings_for_that_pair():
    """`--algo DevicePPO --env GPUPendulum-v1` starts from configs/gpu_pendulum_ppo.yaml (PPO's
    generic lr 5e-5 barely moves Pendulum); --config overrides it; RLlib's own algorithms keep
    their defaults, as RLlib's CLI did."""
    from ray.rllib.algorithms.ppo import PPOConfig

    pendulum = inline_experiment("DevicePPO", "GPUPendulum-v1", {"num_epochs": 3}, {"training_iteration": 1})
    assert (pendulum.config.lr, pendulum.config.gamma, pendulum.config.num_envs_per_env_runner) == (0.002, 0.9, 64)
    assert pendulum.config.num_epochs == 3
    stock = inline_experiment("PPO", "GPUCartPole-v1", None, {"training_iteration": 1})
    assert stock.config.lr == PPOConfig().lr
    mountaincar = inline_experiment("DeviceDQN", "GPUMountainCar-v0", None, {"training_iteration": 1})
    assert (mountaincar.config.gamma, mountaincar.config.training_intensity) == (0.99, 16)  # gpu_mountaincar_dqn.yaml
    cartpole = inline_experiment("DevicePPO", "GPUCartPole-v1", None, {"training_iteration": 1})
    assert cartpole.config.num_envs_per_env_runner == 32  # gpu_cartpole_ppo.yaml, not the GPU-sized file


def test_a_scheduler_stops_trials_and_checkpoints_are_kept_by_score(tmp_path):
    """Old `rllib train` run options (`--local-mode` accepted with a warning, the local Ray's
    options passed on): `--scheduler`/`--scheduler-config` (ASHA stops both trials at
    its max_t of 3, before the stop criterion's 5), `--keep-checkpoints-num` with
    `--checkpoint-score-attr` (a `min-` prefix: the lowest is best, so the first checkpoint is the
    one kept, beside the latest, which Tune always keeps). One CPU: the trials run one after the
    other, the second in the first's actor (Tune's reuse_actors, which the command sets for the
    device algorithms: ``rllib/reset_in_place.py``)."""
    tiny = tiny_main_job_file(tmp_path, rollout_length=8, iterations=5)
    out = rllib(
        "train",
        "file",
        tiny,
        "--num-samples",
        "2",
        "--scheduler",
        "ASHA",
        "--scheduler-config",
        '{"grace_period": 1, "max_t": 3}',
        "--checkpoint-freq",
        "1",
        "--keep-checkpoints-num",
        "1",
        "--checkpoint-score-attr",
        "min-training_iteration",
        "--storage-path",
        str(tmp_path / "results"),
        "--ray-num-cpus",
        "1",
        "--ray-object-store-memory",
        str(200 * 2**20),
        "--local-mode",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "--local-mode: dropped: Ray no longer has a local mode" in out.stderr
    assert "View the dashboard" not in out.stderr  # no --ray-ui
    progress = trial_progress(tmp_path / "results" / "tiny")
    assert [len(rows) for rows in progress] == [3, 3]  # ASHA's max_t, not the file's 5 iterations
    assert len({row["pid"] for rows in progress for row in rows}) == 1  # one actor for both trials
    trials = glob.glob(os.path.join(str(tmp_path / "results" / "tiny"), "*", ""))
    assert len(trials) == 2
    for trial in trials:
        kept = sorted(os.path.basename(c) for c in glob.glob(os.path.join(trial, "checkpoint_*")))
        assert kept == ["checkpoint_000000", "checkpoint_000002"], kept  # iteration 1 (the best), 3 (the latest)
    # each trial's latest checkpoint named once, at the end; not every checkpoint as it is saved
    named = sorted(line.removeprefix("latest checkpoint: ") for line in out.stdout.splitlines() if "latest checkpoint" in line)
    assert named == sorted(os.path.join(trial, "checkpoint_000002") for trial in trials), out.stdout
    assert "Checkpoint successfully created" not in out.stdout + out.stderr


def test_a_scheduler_that_cannot_run_is_named_before_ray_starts():
    from rllib_gpuenv.experiments import ExperimentError
    from rllib_gpuenv.experiments.running import make_scheduler

    assert make_scheduler("FIFO") is None
    asha = make_scheduler("asha", {"max_t": 5})
    assert asha.metric == "env_runners/episode_return_mean"  # the mean return unless given
    for name, settings, message in [
        ("ASAH", {}, r"--scheduler ASAH: not one of Tune's schedulers: asha, async_hyperband"),
        ("asha", {"grace": 1}, r"--scheduler-config: grace: not a setting of AsyncHyperBandScheduler, which takes time_attr"),
        ("asha", {"mode": "sideways"}, r"--scheduler-config: AsyncHyperBandScheduler: `mode` must be 'min' or 'max'"),
        ("fifo", {"max_t": 5}, r"--scheduler-config: FIFO \(the default scheduler\) takes no settings"),
        ("pbt", {}, r"--scheduler-config: PopulationBasedTraining: You must specify at least one of `hyperparam_mutations`"),
    ]:
        with pytest.raises(ExperimentError, match=message):
            make_scheduler(name, settings)


COIN_EXPERIMENT = """
import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from ray import tune

from rllib_gpuenv.rllib import DevicePPOConfig


class Coin(VectorEnv):
    \"\"\"Call the coin shown: reward 1 when right; 10 calls an episode (NEXT_STEP autoreset).\"\"\"

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs, device):
        self.num_envs, self.device = num_envs, torch.device(device)
        self.single_observation_space, self.single_action_space = gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def _obs(self):
        return torch.stack([self.coin, self.t / 10], 1)

    def reset(self, *, seed=None, options=None):
        self.t, self.done = torch.zeros(self.num_envs), torch.zeros(self.num_envs, dtype=torch.bool)
        self.coin = torch.randint(0, 2, (self.num_envs,)).float()
        return self._obs(), {}

    def step(self, actions):
        restart = self.done
        reward = torch.where(restart, 0.0, (actions.float() == self.coin).float())
        self.t = torch.where(restart, 0.0, self.t + 1)
        self.coin = torch.randint(0, 2, (self.num_envs,)).float()
        self.done = (self.t >= 10) & ~restart
        return self._obs(), reward, torch.zeros_like(self.done), self.done.clone(), {}


tune.register_env("coin-in-a-file", lambda config: Coin(config["num_envs"], config["device"]))
config = DevicePPOConfig().environment("coin-in-a-file").env_runners(num_envs_per_env_runner=16).training(minibatch_size=256)
stop = {"training_iteration": 1}
"""


def test_python_files_hand_their_own_envs_to_tunes_trials(tmp_path):
    """Two Python experiment files in one `rllib train`, each run from another folder as `python
    file.py` would run it. One imports the module beside it that defines an env (the README's
    Reach1D, written to a file): the trial (another process) gets the env as `module:id` and
    imports that module too. Before, the import failed, and with PYTHONPATH set the id went as
    `rllib_gpuenv:Reach1D...`, which no import of this package registers. The other defines a
    torch vector env and `tune.register_env`s it: Tune pickles the creator as it registers, and
    the trial gets the class by value, where it was pickled as `<run_path>.Coin`, a module no
    trial has. Old Tune's run options on the way: `--upload-dir` (a URI, here file://: Tune writes
    the results there) and `--max-failures` (the Reach1D trial fails once, at its first result,
    and starts again)."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    source = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if 'id="Reach1D-v0"' in b)
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "reach1d_file_env.py").write_text(source.replace("Reach1D-v0", "Reach1DFile-v0"))
    failed = tmp_path / "failed-once"
    reach = write(
        folder,
        f"""
        import os
        import reach1d_file_env  # registers Reach1DFile-v0
        from ray.rllib.callbacks.callbacks import RLlibCallback
        from rllib_gpuenv.rllib import DevicePPOConfig


        class FailOnce(RLlibCallback):
            def on_train_result(self, *, algorithm, result, **kwargs):
                if not os.path.exists({str(failed)!r}):
                    open({str(failed)!r}, "w").close()
                    raise RuntimeError("a failure --max-failures retries")


        config = DevicePPOConfig().environment("Reach1DFile-v0").env_runners(num_envs_per_env_runner=16).training(
            minibatch_size=256
        ).callbacks(FailOnce)
        stop = {{"training_iteration": 1}}
        """,
        name="reach_exp.py",
    )
    coin = write(folder, COIN_EXPERIMENT, name="coin_exp.py")
    results = tmp_path / "results"
    out = rllib(
        "train", "file", reach, coin, "--upload-dir", f"file://{results}", "--max-failures", "1", "--ray-num-cpus", "2",
        "--checkpoint-at-end",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert failed.exists()  # the Reach1D trial failed once, and Tune started it again
    for name, env in (("reach_exp", "reach1d_file_env:Reach1DFile-v0"), ("coin_exp", "coin-in-a-file")):
        (progress,) = trial_progress(results / name)
        assert len(progress) == 1 and float(progress[0]["env_runners/num_env_steps_sampled_lifetime"]) > 0
        (params,) = glob.glob(str(results / name / "*" / "params.json"))
        assert json.load(open(params))["env"] == env
        # the folder `evaluate` and `--resume` import the file's modules from (the env's module, callbacks)
        (checkpoint,) = glob.glob(str(results / name / "*" / "checkpoint_000000"))
        assert json.load(open(os.path.join(checkpoint, "code_folders.json"))) == [str(folder.resolve())]
