"""The main job (`rllib-gpuenv train`): progress, logs you can open, and a run from a built wheel.

Real Ray, RLlib, Tune's logger callbacks, TensorBoard, pip and setuptools.
"""

import contextlib
import csv
import gc
import io
import json
import os
import re
import shutil
import site
import subprocess
import sys

import pytest

from rllib_gpuenv.cli import collector
from rllib_gpuenv.cli.result_files import ResultLoggers
from rllib_gpuenv.cli.train import SETUP_SECONDS, StartupTimes, _seconds_since_process_start, train
from rllib_gpuenv.experiments.shipped import config_file
from tests.helpers import ROOT, tiny_main_job_file


@pytest.fixture(scope="module")
def tiny_run(ray_local, tmp_path_factory):
    import ray

    root = tmp_path_factory.mktemp("main_job")
    tiny = tiny_main_job_file(root)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        run = train(tiny, device="cpu", storage_path=str(root / "results"), progress_bar=True)
    assert ray.is_initialized()  # the caller's Ray: the job leaves it running (it shuts down only one it started)
    return run, out.getvalue(), err.getvalue()


def test_progress_lines_say_when_no_episode_ended_and_the_bar_shows_an_eta(tiny_run):
    run, out, err = tiny_run
    lines = [line for line in out.splitlines() if line.startswith("iter ")]
    assert len(lines) == 3, out
    assert "no episode ended yet" in lines[0]  # no return measured: none to keep from before
    assert "no episode ended" not in lines[2] and "episodes" in lines[2]
    assert all("env-steps/s" in line for line in lines)
    assert "stopped after 3 iterations" in out and f"checkpoint saved to {run.checkpoint}" in out
    assert f"tensorboard --logdir {run.directory}" in out
    # tqdm's bar: position of the iteration limit, elapsed<ETA, and the return toward the target
    assert "3/3 [" in err and "<00:00" in err and "return " in err and "/475" in err, err[-2000:]


def test_metrics_are_in_a_csv_and_in_tensorboard_events(tiny_run):
    run, _, _ = tiny_run
    with open(os.path.join(run.directory, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["training_iteration"]) for r in rows] == [1, 2, 3]
    assert [float(r["env_runners/num_env_steps_sampled_lifetime"]) for r in rows] == [64, 128, 192]
    returns = [float(r["env_runners/episode_return_mean"]) for r in rows]  # a column even though
    assert returns[0] != returns[0] and returns[2] > 0  # iteration 1 ended no episode (NaN there)
    assert os.path.isfile(os.path.join(run.checkpoint, "rllib_checkpoint.json"))

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run.directory)
    events.Reload()
    steps = events.Scalars("ray/tune/env_runners/num_env_steps_sampled_lifetime")
    assert [(e.step, e.value) for e in steps] == [(1, 64), (2, 128), (3, 192)]
    assert "ray/tune/env_runners/episode_return_mean" in events.Tags()["scalars"]

    tensorboard = os.path.join(os.path.dirname(sys.executable), "tensorboard")  # the command itself works
    inspect = subprocess.run([tensorboard, "--inspect", "--logdir", run.directory], capture_output=True, text=True)
    assert inspect.returncode == 0 and "ray/tune/env_runners/episode_return_mean" in inspect.stdout, inspect.stderr[-2000:]


class _FailsAtIteration:
    """A logger callback that raises at one iteration (Tune's callback interface)."""

    def __init__(self, iteration: int):
        self.iteration, self.seen = iteration, []

    def log_trial_result(self, iteration, trial, result):
        self.seen.append(iteration)
        if iteration == self.iteration:
            raise ValueError("disk full")

    def log_trial_end(self, trial, failed=False):
        pass


def _result(iteration: int) -> dict:
    return {"training_iteration": iteration, "env_runners": {"episode_return_mean": 10.0 * iteration}}


def test_result_loggers_write_each_result_as_it_comes(tmp_path):
    """Between the iterations, not in a thread: progress.csv holds every result logged so far."""
    loggers = ResultLoggers(str(tmp_path / "run"), {"lr": 0.1})
    for iteration in range(1, 51):
        loggers.log(iteration, _result(iteration))
        if iteration in (1, 25):
            with open(tmp_path / "run" / "progress.csv") as f:
                assert len(list(csv.DictReader(f))) == iteration
    loggers.close()
    with open(tmp_path / "run" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["env_runners/episode_return_mean"]) for r in rows] == [10.0 * i for i in range(1, 51)]


def test_progress_csv_gets_a_column_for_every_key_and_a_resumed_run_s_rows_line_up(tmp_path):
    """An evaluation first reported at iteration 3 has its column (Tune's CSV logger kept the first
    result's columns only); a run resumed in the same folder whose results bring a new key before
    the others (RLlib's timer after a restore) writes its rows under the widened header, each value
    under its own name (Tune's wrote them by position under the old header)."""
    run = str(tmp_path / "run")
    loggers = ResultLoggers(run, {})
    for iteration in (1, 2, 3):
        result = _result(iteration)
        if iteration == 3:
            result["evaluation"] = {"env_runners": {"episode_return_mean": 99.0}}
        loggers.log(iteration, result)
    loggers.close()
    resumed = ResultLoggers(run, {})
    resumed.log(4, {"timers": {"restore": 0.5}, **_result(4)})
    resumed.close()
    with open(tmp_path / "run" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["training_iteration"] for r in rows] == ["1", "2", "3", "4"]
    assert [r["env_runners/episode_return_mean"] for r in rows] == ["10.0", "20.0", "30.0", "40.0"]
    assert [r["evaluation/env_runners/episode_return_mean"] for r in rows] == ["", "", "99.0", ""]
    assert [r["timers/restore"] for r in rows] == ["", "", "", "0.5"]


def test_result_loggers_raise_what_a_callback_raised_at_close(tmp_path):
    loggers = ResultLoggers(str(tmp_path / "run"), {})
    failing = _FailsAtIteration(2)
    loggers.callbacks.append(failing)
    for iteration in range(1, 5):
        loggers.log(iteration, _result(iteration))
    with pytest.raises(ValueError, match="disk full"):
        loggers.close()
    assert failing.seen == [1, 2]  # nothing more is written after the error
    with open(tmp_path / "run" / "progress.csv") as f:
        assert [int(r["training_iteration"]) for r in csv.DictReader(f)] == [1, 2]


def test_the_start_up_line_names_run_sh_s_setup_apart_from_the_imports(monkeypatch):
    """./run.sh execs the command in its own process after installing: the seconds since the
    process started are then its setup's (it says how many) and the imports' after it."""
    monkeypatch.setenv(SETUP_SECONDS, "12")
    before = max(_seconds_since_process_start() - 12.0, 0.0)
    startup = StartupTimes()
    after = max(_seconds_since_process_start() - 12.0, 0.0)
    ((setup, imports),) = [startup.parts]
    assert setup == ("setup (./run.sh)", 12.0, "") and imports[0] == "Python and imports"
    assert before <= imports[1] <= after  # the rest of the seconds since the process started, however loaded the machine
    assert SETUP_SECONDS not in os.environ  # not for the processes the job starts
    assert StartupTimes().parts[0][0] == "Python and imports"  # a run without a setup before it
    assert startup.summary().startswith(f"ready after {12.0 + imports[1]:.1f} s: setup (./run.sh) 12.0 s, Python and imports")


# Prints a line whenever Python's collector starts a full pass, and at exit whether it is on.
FULL_PASSES = (
    "import atexit, gc\n"
    "gc.callbacks.append(lambda phase, info: phase == 'start' and info['generation'] == 2 and print('[full pass]'))\n"
    "atexit.register(lambda: print('[collector on]', gc.isenabled()))\n"
)


def test_the_command_makes_no_full_collection_from_its_start_to_its_ready_line(tmp_path):
    """The console scripts pause the collector before the command's imports, and the main job
    resumes it once its algorithm is built (cli/collector.py): the full passes before the ready
    line are those of the same command asked for its help, which passes the same way up to the
    pause (torch's import) and then only imports and parses."""
    command = [sys.executable, "-c", FULL_PASSES + "import runpy\nrunpy.run_module('rllib_gpuenv.cli', run_name='__main__')"]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # both runs allocate alike up to the pause
    help = subprocess.run([*command, "train", "--help"], capture_output=True, text=True, env=env)
    assert help.returncode == 0 and "--config-file" in help.stdout, help.stdout[-2000:] + help.stderr[-3000:]
    tiny = tiny_main_job_file(tmp_path, iterations=1)
    args = ["train", "--config-file", tiny, "--device", "cpu", "--storage-path", str(tmp_path / "runs")]
    job = subprocess.run([*command, *args], capture_output=True, text=True, env=env)
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    start_up, ready, _ = job.stdout.partition("ready after ")
    assert ready, job.stdout
    assert start_up.count("[full pass]") <= help.stdout.count("[full pass]"), job.stdout  # none while it built
    assert "[collector on] True" in job.stdout, job.stdout[-2000:]


def test_a_run_from_a_script_or_a_test_keeps_its_collector_as_it_was():
    """``train`` resumes the collector only where a console script paused it: called from Python,
    it freezes nothing of the caller's."""
    frozen = gc.get_freeze_count()
    collector.resume()
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_more_learners_than_the_machine_holds_fail_before_ray_starts(tmp_path):
    """Checked against what the local Ray instance will have, before it starts (before, the same
    line came from the build, ~13 s later on a 2-core machine, with Ray started and stopped), and
    naming the job's own option."""
    import ray

    from rllib_gpuenv.rllib.resources import ResourceError

    running = ray.is_initialized()  # a module before this one in the worker may have left Ray up
    with pytest.raises(ResourceError, match=r"asks Ray for \d+ CPU\(s\) but the cluster has") as err:
        train(tiny_main_job_file(tmp_path), device="cpu", max_iterations=1, storage_path=str(tmp_path), num_learners=1000)
    if not running:
        assert "(this job: --num-learners;" in str(err.value) and not ray.is_initialized()


def test_the_main_job_trains_with_colocated_learners(ray_local, tmp_path):
    """--num-learners 2: two learners, each stepping the file's 16 envs, gradients all-reduced."""
    tiny = tiny_main_job_file(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run = train(tiny, device="cpu", max_iterations=2, storage_path=str(tmp_path), num_learners=2)
    text = out.getvalue()
    assert "2 learners, each stepping its own 16 envs (on cpu), gradients all-reduced" in text, text
    lines = [line for line in text.splitlines() if line.startswith("iter ")]
    assert "env steps        128" in lines[0] and "env steps        256" in lines[1], lines  # 2 x 16 envs x 4 steps
    assert os.path.isfile(os.path.join(run.checkpoint, "rllib_checkpoint.json"))


def _repository_copy(dest) -> str:
    """The files a clone has (tracked, and new ones git does not ignore), links kept as links."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    for name in filter(None, files.stdout.split("\0")):
        source, target = os.path.join(ROOT, name), os.path.join(dest, name)
        if os.path.lexists(source):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return str(dest)


def test_the_main_job_runs_from_a_built_wheel_outside_the_repository(tmp_path):
    """Build the wheel, install it alone (--no-deps, no index) into a fresh virtualenv that reaches
    the project venv's dependencies, and run the main job from another folder."""
    source = _repository_copy(tmp_path / "source")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp_path / "dist"),
            source,
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("rllib_gpuenv-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    venv_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # The dependencies come from the project venv, after the new venv's own site-packages: the
    # package itself must come from the wheel.
    deps = "".join(f"import site; site.addsitedir({path!r})\n" for path in site.getsitepackages())
    with open(os.path.join(venv_site, "project_dependencies.pth"), "w") as f:
        f.write(deps)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RAY_ADDRESS")}
    job = subprocess.run(
        [str(venv / "bin" / "rllib-gpuenv"), "train", "--max-iterations", "2", "--storage-path", "runs"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
    )
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    # the job read the experiment file shipped in the wheel, so it imported the installed package
    config_file = os.path.join(venv_site, "rllib_gpuenv", "configs", "gpu_cartpole_ppo.yaml")
    assert f"gpu-cartpole-ppo ({config_file}): DevicePPO on GPUCartPole-v1" in job.stdout, job.stdout
    assert "iter    2" in job.stdout, job.stdout
    # where the start-up time went, in parts that add up to the whole; no Ray cluster is started
    # for a job whose env runner and learner are both in its own process (rllib/in_process.py)
    (ready,) = re.findall(r"ready after (.+) s: Python and imports (.+) s, building the algorithm (.+) s", job.stdout)
    total, *parts = map(float, ready)
    assert min(parts) > 0 and sum(parts) == pytest.approx(total, abs=0.25)
    assert "Started a local Ray instance" not in job.stdout + job.stderr, job.stderr[-3000:]
    # the checkpoint and metrics lines are the last (printed once the algorithm and Ray have stopped)
    assert job.stdout.rstrip().splitlines()[-2].startswith("checkpoint saved to "), job.stdout
    (run_dir,) = (elsewhere / "runs").iterdir()
    assert (run_dir / "progress.csv").is_file() and (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file()


def test_a_run_that_ends_before_any_episode_says_so_and_a_resource_search_is_named(tmp_path, caplog):
    """One iteration of 16 envs x 4 steps ends no CartPole episode: the summary says so (not
    "mean return nan"), in the singular. A file with a Tune resource search trains its own
    settings once here, and the job says which command runs the search."""
    path = tiny_main_job_file(tmp_path, rollout_length=4, iterations=1)
    with open(path, "a") as f:
        f.write("  resource_search: {num_envs_per_env_runner: [16, 32]}\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), caplog.at_level("WARNING", logger="rllib_gpuenv.cli.train"):
        train(path, device="cpu", storage_path=str(tmp_path / "results"), progress_bar=False)
    assert (
        "stopped after 1 iteration (" in out.getvalue()
        and "s) before any episode ended, below the target 475" in out.getvalue()
    )
    assert f"its resource_search section is a Tune search, which `rllib train file {path}` runs" in caplog.text


def test_a_file_that_stops_on_its_evaluation_is_judged_by_it(tmp_path):
    """configs/gpu_acrobot_ppo.yaml stops on its evaluation's mean return (-100): the job stops
    there, its lines give the evaluation where it ran, and the summary says it reached that
    target (not the training window's 475, which an Acrobot return never reaches)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run = train(config_file("gpu_acrobot_ppo.yaml"), device="cpu", seed=0, storage_path=str(tmp_path), progress_bar=False)
    text = out.getvalue()
    lines = [line for line in text.splitlines() if line.startswith("iter ")]
    evaluated = [line for line in lines if "evaluation" in line]
    assert evaluated and all(int(line.split()[1]) % 5 == 0 for line in evaluated)
    assert len(lines) == int(evaluated[-1].split()[1])  # it stopped at an evaluation
    assert run.reached_target and "reached evaluation mean return" in text and ">= -100" in text, text[-1500:]
    assert re.search(r">= -100 in [0-9.]+ s, of which evaluating [0-9.]+ s \(\d+ iterations\)", text), text[-500:]
    assert "stops at evaluation/env_runners/episode_return_mean >= -100 or training_iteration >= 300" in text


def test_resume_goes_on_with_the_experiment_the_checkpoint_ran(tmp_path):
    """`rllib-gpuenv train --resume CKPT` (what Ctrl-C's hint says) goes on with the experiment
    file, name and stop criteria the checkpoint's run had, not the main job's CartPole file's; a
    file that does not fit the checkpoint, or a setting other than the checkpoint's, is one line
    that names the fix."""
    from rllib_gpuenv.cli.train import RUN_FILE, _storage_path_of
    from rllib_gpuenv.experiments.errors import ExperimentError

    acrobot = config_file("gpu_acrobot_ppo.yaml")
    with contextlib.redirect_stdout(io.StringIO()):
        first = train(acrobot, device="cpu", seed=0, max_iterations=2, storage_path=str(tmp_path), progress_bar=False)
    # without --storage-path the resumed run writes beside the first, not into the folder the command runs from
    assert _storage_path_of(first.checkpoint) == str(tmp_path.resolve()) and _storage_path_of(None) == "results"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        train(resume=first.checkpoint, max_iterations=3, storage_path=str(tmp_path), progress_bar=False)
    text = out.getvalue()
    assert f"gpu-acrobot-ppo ({acrobot}): DevicePPO on GPUAcrobot-v1" in text, text[-1500:]
    assert "stops at evaluation/env_runners/episode_return_mean >= -100 or training_iteration >= 3" in text
    assert "stopped after 3 iterations" in text and "below the target -100" in text

    with pytest.raises(ValueError, match=r"--seed 5 \(the checkpoint's: 0\) with --resume: .* --restore "):
        train(resume=first.checkpoint, seed=5)
    with pytest.raises(ExperimentError, match="trained on rllib_gpuenv:GPUAcrobot-v1.* with --config-file"):
        train(config_file("gpu_cartpole_ppo.yaml"), resume=first.checkpoint)
    os.remove(os.path.join(first.checkpoint, RUN_FILE))  # a checkpoint of another run: checked against the main job's file
    with pytest.raises(ExperimentError, match="gpu_cartpole_ppo.yaml: --resume: .* with --config-file"):
        train(resume=first.checkpoint)


def test_a_stock_rllib_file_takes_device_and_resumes_with_its_clocks(tmp_path, monkeypatch):
    """RLlib's own PPO (the stock-runner file): `--device cpu` puts its learner on the CPU
    (RLlib's `num_gpus_per_learner`; it was an AttributeError), and `--resume` goes on counting
    the seconds of the run it resumes (RLlib's `from_checkpoint` starts them at 0; the job keeps
    them in its checkpoint), where a device algorithm's checkpoint keeps its own. Neither run
    leaves the empty log folder that Tune makes for an algorithm built outside a Tune run (Tune's
    results folder, ~/ray_results, here a temporary one)."""
    import ray.train.constants
    import ray.tune.trainable.trainable

    home_results = tmp_path / "ray_results"
    for module in (ray.train.constants, ray.tune.trainable.trainable):
        monkeypatch.setattr(module, "DEFAULT_STORAGE_PATH", str(home_results))
    stock = config_file("gpu_cartpole_stock_runner.yaml")
    with contextlib.redirect_stdout(io.StringIO()):
        first = train(stock, device="cpu", seed=0, max_iterations=2, storage_path=str(tmp_path / "a"), progress_bar=False)
        second = train(resume=first.checkpoint, device="cpu", max_iterations=3, storage_path=str(tmp_path / "b"))

    def seconds(run) -> list[float]:
        with open(os.path.join(run.directory, "progress.csv")) as f:
            return [float(row["time_total_s"]) for row in csv.DictReader(f)]

    before, after = seconds(first), seconds(second)
    assert len(before) == 2 and len(after) == 1
    assert after[0] > before[-1] > 0, (before, after)
    assert home_results.is_dir() and not list(home_results.iterdir())  # Tune made the folders; the job took them away
    import torch

    if not torch.cuda.is_available():  # a GPU the machine lacks: the device path's one line, before anything starts
        with pytest.raises(ValueError, match="no CUDA GPU"):
            train(stock, device="cuda:0", max_iterations=1, storage_path=str(tmp_path / "c"))


def test_a_python_file_s_env_module_reaches_the_main_job_s_remote_runner(tmp_path):
    """`rllib-gpuenv train --config-file exp.py`, run from another folder, with a remote env
    runner: the file imports the module beside it that defines its env (the README's Reach1D),
    and so does the runner's process, which gets the file's folder from the job's Ray (its
    runtime env); Ray itself passes on only the driver's working folder. The checkpoint records
    that folder, so that `--resume` (its remote runner too) and `evaluate`, run from another
    folder, import the env module as the training did."""
    from tests.helpers import run_module

    readme = open(os.path.join(ROOT, "README.md")).read()
    source = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if 'id="Reach1D-v0"' in b)
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "reach1d_job_env.py").write_text(source.replace("Reach1D-v0", "Reach1DJob-v0"))
    (folder / "job_exp.py").write_text(
        "import reach1d_job_env  # registers Reach1DJob-v0\n"
        "from rllib_gpuenv.rllib import DevicePPOConfig\n\n"
        'config = DevicePPOConfig().environment("Reach1DJob-v0").env_runners(num_env_runners=1, num_envs_per_env_runner=16)\n'
        "config.training(minibatch_size=256)\n"
        'stop = {"training_iteration": 1}\n'
    )
    out = run_module(
        "rllib_gpuenv.cli", "train", "--config-file", str(folder / "job_exp.py"), "--storage-path", str(tmp_path / "runs")
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "on Reach1DJob-v0" in out.stdout and "stopped after 1 iteration" in out.stdout, out.stdout[-1500:]
    checkpoint = re.search(r"checkpoint saved to (\S+)", out.stdout).group(1)
    assert json.loads(open(os.path.join(checkpoint, "code_folders.json")).read()) == [str(folder.resolve())]
    resumed = run_module(
        "rllib_gpuenv.cli", "train", "--resume", checkpoint, "--max-iterations", "2", "--storage-path", str(tmp_path / "runs")
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout and "stopped after 2 iterations" in resumed.stdout, resumed.stdout[-1500:]
    played = run_module("rllib_gpuenv.cli", "evaluate", checkpoint, "--episodes", "2")
    assert played.returncode == 0, played.stderr[-3000:]
    assert "2 episodes: mean return" in played.stdout, played.stdout
    recorded = run_module("rllib_gpuenv.cli", "evaluate", checkpoint, "--video", str(tmp_path / "reach.gif"))
    assert recorded.returncode == 2 and "--video: Reach1DJob-v0 has no renderer to record" in recorded.stderr, recorded.stderr
