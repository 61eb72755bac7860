"""How the commands end: a user's mistake or a missing extra in one line, Ctrl-C that saves
and says how to go on (the main job), and a resumed run that goes on where it stopped."""

import os
import re
import signal
import subprocess
import sys

import pytest
import torch

from tests.helpers import ROOT, interrupted, run_code, run_module, started_module, tiny_main_job_file

DEVICE_CHECKPOINT = os.path.join(ROOT, "tests", "rllib", "data", "checkpoints_82623be", "device")


def command(*args, code: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``rllib-gpuenv ARGS`` in a fresh interpreter (``code`` runs first, e.g. to take a package away)."""
    run = f"{code or ''}\nimport sys\nfrom rllib_gpuenv.cli.main import main\nsys.exit(main({list(args)!r}))"
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, env=env, cwd=ROOT, **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_a_gpu_that_is_not_there_is_one_line():
    out = run_module("rllib_gpuenv.cli", "train", "--device", "cuda", "--max-iterations", "1")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()  # one line, no traceback: before Ray starts
    assert re.match(r"rllib-gpuenv: error: device 'cuda' asked for, but this machine has no CUDA GPU", line), line


def test_a_missing_video_extra_is_one_line_naming_the_install(tmp_path):
    out = command(
        "evaluate",
        DEVICE_CHECKPOINT,
        "--episodes",
        "1",
        "--device",
        "cpu",
        "--video",
        str(tmp_path / "x.gif"),
        code="import sys; sys.modules['pygame'] = None  # as if the video extra were not installed",
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    line = out.stderr.strip().splitlines()[-1]  # after the log line that says what it evaluates
    assert line == 'rllib-gpuenv: error: pygame is not installed: pip install "rllib_gpuenv[video]"', line


@pytest.mark.parametrize(
    "err, said",
    [
        (ModuleNotFoundError("No module named 'tensorboardX'", name="tensorboardX"), "tensorboardX is not installed"),
        (ModuleNotFoundError("No module named 'jax.numpy'", name="jax.numpy"), "jax is not installed"),
        # a walkthrough's: this package's own module (a job's working dir deleted under it) is no missing extra ...
        (
            ModuleNotFoundError(
                "No module named 'rllib_gpuenv.experiments.tensorboard'", name="rllib_gpuenv.experiments.tensorboard"
            ),
            None,
        ),
        # ... nor is an installed jax of another version
        (ImportError("cannot import name 'tree_map' from 'jax' (/site-packages/jax/__init__.py)", name="jax"), None),
    ],
)
def test_only_an_optional_package_that_is_missing_is_a_missing_extra(err, said):
    """Anything else keeps its traceback, which says what is wrong: before, any import error that
    mentioned an optional package's name was reported as that package not installed."""
    from rllib_gpuenv.cli.errors import missing_extra

    found = missing_extra(err)
    assert found == said if said is None else found.startswith(said), found


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_saves_the_main_job_and_resume_goes_on(tmp_path, stop_signal):
    """Ctrl-C, or SIGTERM as `ray job stop` sends, stops the main job after its iteration and saves."""
    tiny = tiny_main_job_file(tmp_path, rollout_length=8, iterations=100_000)
    args = ["train", "--config-file", tiny, "--device", "cpu", "--storage-path", str(tmp_path)]

    def started(out: str) -> bool:
        return any(line.startswith("iter ") for line in out.splitlines())

    job, _ = interrupted("rllib_gpuenv.cli.main", args, started, stop_signal)
    out, err = job.stdout, job.stderr
    assert job.returncode == 0 and "Traceback" not in err, err[-3000:]
    assert "stopping after this iteration and saving a checkpoint (Ctrl-C again to quit at once)" in err
    stopped_at, seconds = re.search(r"interrupted after (\d+) iterations? \(([0-9.]+) s\)", out).groups()  # "1 iteration"
    stopped_at = int(stopped_at)
    checkpoint = re.search(r"checkpoint saved to (\S+)", out).group(1)
    assert f"go on from it with: rllib-gpuenv train --resume {checkpoint}" in out

    resumed = run_module("rllib_gpuenv.cli", *args, "--resume", checkpoint, "--max-iterations", str(stopped_at + 1))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming {checkpoint} at iteration {stopped_at}" in resumed.stdout
    assert "starting Ray" not in resumed.stdout  # its start-up line: the local job resumes without a Ray cluster
    assert [line.split()[1] for line in resumed.stdout.splitlines() if line.startswith("iter ")] == [str(stopped_at + 1)]
    # The checkpoint keeps the training time: the resumed run's counts from the first run's start.
    went_on = float(re.search(rf"after {stopped_at + 1} iterations \(([0-9.]+) s\)", resumed.stdout).group(1))
    assert went_on >= float(seconds), resumed.stdout[-1500:]


NOTICES = ("on the new API stack!", "Token authentication is enabled", "RLModule(config=", "Install gputil")


def test_the_main_job_starts_quietly(tmp_path):
    out = command(
        "train",
        "--config-file",
        tiny_main_job_file(tmp_path, rollout_length=8),
        "--device",
        "cpu",
        "--max-iterations",
        "1",
        "--storage-path",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert [n for n in NOTICES if n in out.stdout + out.stderr] == [], out.stderr[-3000:]


def test_a_users_own_script_keeps_every_notice():
    """Importing the package (or running its algorithms) filters nothing: only its commands do."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import logging, rllib_gpuenv.rllib, rllib_gpuenv.cli.main\n"
            "from rllib_gpuenv.cli.quiet import NOTICES\n"
            "print(sum(len(logging.getLogger(name).filters) for name in NOTICES))",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
        cwd=ROOT,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stderr[-2000:]


def test_tunes_advice_on_a_slow_build_is_dropped_by_the_commands(monkeypatch, caplog, tmp_path):
    """An algorithm whose build takes over 10 s (a Brax env's first compile) makes Tune's Trainable
    advise reuse_actors=True, an option neither command has: they drop it, as the other notices."""
    import logging

    from ray.tune.trainable import trainable

    from rllib_gpuenv.cli import quiet

    class Built(trainable.Trainable):
        def step(self):
            return {}

    monkeypatch.setattr(trainable, "SETUP_TIME_THRESHOLD", -1)  # every setup is slow
    monkeypatch.setattr(trainable, "DEFAULT_STORAGE_PATH", str(tmp_path))  # its folder: not in ~/ray_results
    caplog.set_level(logging.INFO)
    Built().stop()
    assert "Trainable.setup took" in caplog.text  # Tune's own, where it logs it
    caplog.clear()
    target = logging.getLogger(trainable.logger.name)
    quiet.quiet_start()
    try:
        Built().stop()
        assert "Trainable.setup took" not in caplog.text
    finally:  # this test process's loggers as they were
        for name in quiet.NOTICES:
            for dropped in [f for f in logging.getLogger(name).filters if isinstance(f, quiet._DropNotice)]:
                logging.getLogger(name).removeFilter(dropped)
    assert not [f for f in target.filters if isinstance(f, quiet._DropNotice)]


ENDING = """
from rllib_gpuenv.cli.quiet import quiet_start


class Finalized:
    def __init__(self, error):
        self.error = error

    def __del__(self):
        raise self.error


Finalized(SystemExit(1))  # a user's own script: printed, as Python prints it
quiet_start()
Finalized(SystemExit(1))  # as Ray's SIGTERM handler raises it in a trial's finalizer at the end: not printed
Finalized(RuntimeError("a real error"))  # printed
"""


def test_a_trials_exit_in_a_finalizer_is_not_printed_as_an_error():
    """The end of a `rllib train` run: Ray's SIGTERM reaches a trial's process while it is still
    exiting, and Ray's handler raises SystemExit in a finalizer (RLlib's LearnerGroup.__del__).
    The commands' workers drop that one exception; any other in a finalizer is printed."""
    out = run_code(ENDING)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("Exception ignored in") == 2, out.stderr
    assert out.stderr.count("SystemExit") == 1 and "RuntimeError: a real error" in out.stderr, out.stderr


def test_sigterm_ends_a_benchmark_and_the_run_it_started(tmp_path):
    """`kill` (SIGTERM) of `rllib-gpuenv bench training` ends it as Ctrl-C does, and the run it
    started in a process of its own ends with it rather than going on to its budget."""
    import time

    import psutil

    args = ["bench", "training", "--contenders", "device", "--seeds", "0", "--target", "1000", "--budget", "600"]
    with started_module("rllib_gpuenv.cli", *args, "--out", str(tmp_path)) as (process, finished):
        command = psutil.Process(process.pid)
        deadline = time.monotonic() + 600  # a hang guard: the wait is for the run's process
        while not (runs := [p for p in command.children() if "rllib_gpuenv.bench.training" in " ".join(p.cmdline())]):
            assert process.is_alive() and time.monotonic() < deadline, "the benchmark started no run"
            time.sleep(0.1)
        os.kill(process.pid, signal.SIGTERM)
        out = finished(600)
    _, running = psutil.wait_procs(runs, timeout=60)
    for run in running:  # this test's own leftovers, so that a failure leaves none behind
        run.kill()
    assert not running, running
    assert out.returncode == 130 and "rllib-gpuenv bench training: interrupted" in out.stderr, out.stderr[-3000:]


def test_sigterm_ends_a_benchmark_that_started_ray_as_ctrl_c_does(tmp_path):
    """``ray.init`` puts its core worker's crash report in SIGTERM's place ("*** SIGTERM received
    ... ***" and exit 15); a benchmark's Ray (bench/common.start_local_ray) keeps the command's
    meaning of it, and the Ray it started ends with it. The signal comes once the benchmark says
    it is measuring, which is after Ray's start."""
    import subprocess
    import sys
    import time

    import psutil

    args = ["bench", "learners", "--learners", "1", "--seeds", "", "--iterations", "100000", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "rllib_gpuenv.cli", *args]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    try:
        seen, deadline = "", time.monotonic() + 600  # a hang guard: the wait is for the line
        while "throughput ..." not in seen:
            assert job.poll() is None and time.monotonic() < deadline, seen[-3000:]
            seen += job.stdout.readline()
        rays = [p for p in psutil.Process(job.pid).children(recursive=True) if "raylet" in " ".join(p.cmdline())]
        assert rays, "no Ray of its own"
        job.send_signal(signal.SIGTERM)
        out, _ = job.communicate(timeout=600)
    finally:
        job.kill()
    _, running = psutil.wait_procs(rays, timeout=60)
    for ray_process in running:  # this test's own leftovers
        ray_process.kill()
    assert job.returncode == 130 and "rllib-gpuenv bench learners: interrupted" in out, out[-3000:]
    assert "SIGTERM received" not in out and not running, (out[-3000:], running)
