"""`ray job submit` to a real head node on 127.0.0.1 (with the dashboard), as the README shows."""

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def head():
    """A one-node cluster: head on 127.0.0.1, token authentication, 2 CPUs."""
    gcs, dashboard = free_port(), free_port()
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_ADDRESS": "",
    }
    start = [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}", "--dashboard-host=127.0.0.1",
             f"--dashboard-port={dashboard}", "--include-dashboard=true", "--num-cpus=2", "--disable-usage-stats"]  # fmt: skip
    started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield env, f"http://127.0.0.1:{dashboard}"
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)


def ray_cli(env, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_submit_training_job_follow_it_and_read_its_logs(head, tmp_path):
    env, address = head
    stop = json.dumps({"training_iteration": 3})
    out = ray_cli(env, "job", "submit", "--address", address, "--working-dir", ".", "--no-wait", "--",
                  "python", "-m", "rllib_gpuenv.rllib_cli", "train", "file", "configs/gpu_cartpole_ppo.yaml",
                  "--stop", stop, "--storage-path", str(tmp_path / "results"))  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    job_id = re.search(r"raysubmit_\w+", out.stdout + out.stderr).group(0)

    deadline, status = time.time() + 300, ""
    while time.time() < deadline:
        status = ray_cli(env, "job", "status", "--address", address, job_id).stdout
        if re.search(r"succeeded|failed|stopped", status, re.I):
            break
        time.sleep(2)
    logs = ray_cli(env, "job", "logs", "--address", address, job_id).stdout
    assert "succeeded" in status.lower(), status + logs[-3000:]
    assert "Trial status: 1 TERMINATED" in logs and "experiment 'gpu-cartpole-ppo': 1 trial(s)" in logs
    assert os.path.isdir(tmp_path / "results" / "gpu-cartpole-ppo")
