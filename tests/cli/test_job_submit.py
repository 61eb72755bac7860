"""The README's `ray job submit` recipe, run line by line on a real head (token authentication),
and a job stopped early going on when submitted again with `--resume` (the command takes SIGTERM,
which `ray job stop` sends, as Ctrl-C: this is also the test of Ctrl-C in a Tune run).

The lines are read from README.md, so the test and the README cannot drift. They run as written,
in a shell in the repository, with the test's own PATH (no venv on it). Three things differ, none
in what the lines do: free ports replace 6379, 8265 and the head's other fixed ports, so a head
someone else runs on this machine does not clash; `ray start` gets `--block`, so the head's
processes are this test's children and it stops exactly them (SIGTERM, which `ray start --block`
passes on to them) instead of running the README's `ray stop`, which stops every Ray process on
the machine, and a temp dir of its own, so that no `ray.init()` elsewhere on the machine (later
tests included) takes this head, or its stale address, for the local cluster; and HOME is a
temporary folder, where Tune writes the job's results. The head gives a stopped job 60 s rather
than 3 to end before it is killed, so that a loaded machine does not decide the test.

Readiness is waited for, never assumed: the head's start, then the job agent (a submit answered
"No available agent to submit job" is retried). The deadlines only stop a test that would hang.
"""

import glob
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from tests.helpers import ROOT, free_port

SECTION = "### On a cluster: `ray job submit`"
NOT_READY = ("No available agent to submit job", "Connection refused", "Failed to connect", "Cannot connect")
HANG_GUARD_S = 900


def readme_recipe() -> dict[str, str]:
    """The recipe's lines (continuations joined), keyed by what they do."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text[text.index(SECTION) :]
    start = section.index("```bash\n") + len("```bash\n")
    lines = section[start : section.index("```", start)].replace("\\\n", "").splitlines()
    keys = {
        "export ": "export",
        "ray start": "start",
        "ray job submit": "submit",
        "ray job list": "list",
        "ray job logs": "logs",
        "ray job status": "status",
        "ray job stop": "stop",
        "ray stop": "ray stop",
    }
    recipe = {}
    for line in lines:
        (key,) = [k for marker, k in keys.items() if marker in line]
        recipe[key] = line
    assert list(recipe) == list(keys.values()), lines
    return recipe


def bash(line: str, env: dict, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def recipe_and_head(tmp_path):
    """The README's head, started as written (plus --block and free ports); stopped by this test only."""
    if not os.path.isfile(os.path.join(ROOT, ".venv", "bin", "ray")):
        pytest.skip("the README's recipe runs from ./run.sh's venv, ./.venv")
    ports = {"6379": str(free_port()), "8265": str(free_port())}
    recipe = {key: re.sub(r"\b(6379|8265)\b", lambda m: ports[m.group(1)], line) for key, line in readme_recipe().items()}

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VIRTUAL_ENV"))}
    env.update(
        HOME=str(tmp_path / "home"),
        RAY_USAGE_STATS_ENABLED="0",
        AUTOSCALER_METRIC_PORT=str(free_port()),
        DASHBOARD_METRIC_PORT=str(free_port()),
        # `ray job stop` sends SIGTERM, then SIGKILL 3 s later; a loaded machine gets longer to save
        RAY_JOB_STOP_WAIT_TIME_S="60",
    )
    exported = bash(recipe["export"] + '; printf "%s %s" "$RAY_AUTH_MODE" "$RAY_AUTH_TOKEN"', env, timeout=60)
    env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN"] = exported.stdout.split()

    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must stay short
    start = (
        f"{recipe['start']} --block --temp-dir={temp_dir} "
        f"--ray-client-server-port={free_port()} --dashboard-agent-listen-port={free_port()}"
    )
    log_path = tmp_path / "head.log"
    with open(log_path, "w") as log:
        head = subprocess.Popen(["bash", "-c", f"exec {start}"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while "Ray runtime started" not in log_path.read_text():
            assert head.poll() is None, "the head did not start:\n" + log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the head has not started after a long wait:\n" + log_path.read_text()[-3000:]
            time.sleep(1)
        yield recipe, env
    finally:
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops the processes it started
        try:
            head.wait(timeout=120)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def submit_when_the_agent_is_ready(line: str, env: dict) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        out = bash(line, env)
        if out.returncode == 0 or not any(marker in out.stdout + out.stderr for marker in NOT_READY):
            return out
        assert time.monotonic() < deadline, "the job agent never became ready:\n" + out.stderr[-3000:]
        time.sleep(2)


def iterations(text: str) -> list[int]:
    """The iterations of the progress rows a job printed."""
    return [int(m) for m in re.findall(r"^DevicePPO_\S+\s+(\d+)\s", text, re.M)]


def test_readme_recipe_submits_follows_and_reads_a_training_job(recipe_and_head, tmp_path):
    recipe, env = recipe_and_head
    submitted = submit_when_the_agent_is_ready(recipe["submit"], env)
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-3000:]
    job_id = re.search(r"raysubmit_\w+", submitted.stdout + submitted.stderr).group(0)

    listed = bash(recipe["list"], env, timeout=300)
    assert listed.returncode == 0 and job_id in listed.stdout, listed.stderr[-3000:]
    # --follow returns when the job ends: the wait is the job itself
    logs = bash(recipe["logs"].replace("<id>", job_id), env)
    status = bash(recipe["status"].replace("<id>", job_id), env, timeout=300)
    assert "succeeded" in status.stdout.lower(), status.stdout + status.stderr[-2000:] + logs.stdout[-5000:]
    assert (
        ": TERMINATED after 20 iteration(s)" in logs.stdout and "experiment 'gpu-cartpole-ppo': 1 trial(s)" in logs.stdout
    ), logs.stdout[-5000:]
    assert os.path.isdir(os.path.join(env["HOME"], "ray_results", "gpu-cartpole-ppo"))

    stopped = bash(recipe["stop"].replace("<id>", job_id), env, timeout=300)  # a finished job: nothing to stop
    assert job_id in stopped.stdout + stopped.stderr, stopped.stdout + stopped.stderr

    # The stop line's comment: a job stopped early goes on when submitted again with --resume. This
    # job's working folder holds a Python experiment in a subfolder, beside the module that defines
    # its env: the trials (other processes) import that module from the subfolder, named relative
    # to the working folder (``importable_folders_env``), which is theirs on every node. From its
    # sixth iteration on, the trial waits for the test to have stopped the job (a file appears),
    # so that the stop always comes before the run's end, however slow the machine.
    project = tmp_path / "project"
    (project / "exps").mkdir(parents=True)
    readme = open(os.path.join(ROOT, "README.md")).read()
    source = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if 'id="Reach1D-v0"' in b)
    (project / "exps" / "reach1d_job_env.py").write_text(source.replace("Reach1D-v0", "Reach1DJob-v0"))
    stopped_mark = tmp_path / "stopped"
    (project / "exps" / "reach.py").write_text(
        "import os, time\n"
        "import reach1d_job_env  # registers Reach1DJob-v0\n"
        "from ray.rllib.callbacks.callbacks import RLlibCallback\n"
        "from rllib_gpuenv.rllib import DevicePPOConfig\n\n\n"
        "class WaitForTheStop(RLlibCallback):\n"
        "    def on_train_result(self, *, algorithm, result, **kwargs):\n"
        f"        while result['training_iteration'] > 5 and not os.path.exists({str(stopped_mark)!r}):\n"
        "            time.sleep(0.1)\n\n\n"
        'config = DevicePPOConfig().environment("Reach1DJob-v0", env_config={"backend": "torch"})\n'
        "config.env_runners(num_envs_per_env_runner=16).callbacks(WaitForTheStop)\n"
        "config.device_rollouts(rollout_length=32).training(minibatch_size=256, num_epochs=2)\n"
    )
    longer = (
        recipe["submit"]
        .replace("--working-dir .", f"--working-dir {project}")
        .replace("configs/gpu_cartpole_ppo.yaml", "exps/reach.py")
        .replace(
            """--stop '{"training_iteration": 20}'""",
            # a return Reach1D never reaches (10 at most), so that only the 12 iterations end it
            f"""--stop '{{"training_iteration": 12, "env_runners/episode_return_mean": 1000}}' --checkpoint-freq 2 """
            f"""--storage-path {env["HOME"]}/stopped""",
        )
    )
    assert longer.count(str(project)) == 1 and "exps/reach.py" in longer and "1000" in longer
    running = submit_when_the_agent_is_ready(longer, env)
    assert running.returncode == 0, running.stdout[-2000:] + running.stderr[-3000:]
    running_id = re.search(r"raysubmit_\w+", running.stdout + running.stderr).group(0)
    deadline = time.monotonic() + HANG_GUARD_S  # the wait is for the job's fifth row, not for a time
    for poll in itertools.count():
        logs = bash(recipe["logs"].replace("--follow <id>", running_id), env).stdout
        if max(iterations(logs), default=0) >= 5:
            break
        assert time.monotonic() < deadline, "the job printed no fifth row"
        if poll % 3 == 2:  # a job that ended (a trial that failed) prints no more rows: said at once
            status = bash(recipe["status"].replace("<id>", running_id), env, timeout=300).stdout
            assert "RUNNING" in status or "PENDING" in status, status + logs[-5000:]
        time.sleep(5)  # each look is a `ray job logs` process (1-2 CPU-s of imports on a 2-core machine)
    bash(recipe["stop"].replace("<id>", running_id), env, timeout=300)
    logs = bash(recipe["logs"].replace("<id>", running_id), env).stdout  # --follow: until the job has ended
    stopped_mark.touch()
    assert "interrupted: the same command with --resume goes on with its unfinished trials" in logs, logs[-3000:]
    stopped_at = max(iterations(logs))
    assert stopped_at == 5, logs[-3000:]
    status = bash(recipe["status"].replace("<id>", running_id), env, timeout=300).stdout
    assert "was stopped" in status, status

    # The same command with --resume; a --stop given now is not Tune's to apply (it goes on to 12, not 7)
    resumed = submit_when_the_agent_is_ready(
        longer.replace("--no-wait", "") + """ --resume --stop '{"training_iteration": 7}'""", env
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout and ": TERMINATED after 12 iteration(s)" in resumed.stdout, resumed.stdout[-5000:]
    assert "DevicePPO_Reach1DJob-v0_" in resumed.stdout, resumed.stdout[-3000:]  # the trials trained on it
    went_on = iterations(resumed.stdout)
    assert went_on and 1 < min(went_on) <= stopped_at + 1 and max(went_on) == 12, went_on  # from a checkpoint
    # the same trial, not a new one, whose processes imported the env by the module that registers it
    (params,) = glob.glob(os.path.join(env["HOME"], "stopped", "*", "*", "params.json"))
    assert len(glob.glob(os.path.join(env["HOME"], "stopped", "*", "*", "progress.csv"))) == 1
    assert json.load(open(params))["env"] == "reach1d_job_env:Reach1DJob-v0"
