"""What the benchmark smoke tests share: running a benchmark as a user does, and reading what it wrote."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

from tests.helpers import ROOT, run_module


def bench(tmp_path, *args, env=None, timeout=600) -> subprocess.CompletedProcess:
    """``rllib-gpuenv bench ARGS --out TMP_PATH --plot``, which must succeed; with ``env`` (read
    at import time: numba's simulator) in a fresh interpreter, else forked (``run_module``)."""
    args = ["bench", *args, "--out", str(tmp_path), "--plot"]
    if env:
        cmd = [sys.executable, "-m", "rllib_gpuenv.cli", *args]
        full_env = {**os.environ, "PYTHONPATH": ROOT, **env}
        out = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT, check=False)
    else:
        out = run_module("rllib_gpuenv.cli", *args, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def tiny_dqn_file(tmp_path, env: str = "GPUCartPole-v1") -> pathlib.Path:
    """DeviceDQN settings small enough for a smoke test (12 envs x 4 steps per round)."""
    path = tmp_path / "dqn.yaml"
    path.write_text(
        textwrap.dedent(f"""
        tiny-dqn:
          run: DeviceDQN
          env: {env}
          stop: {{training_iteration: 5}}
          config:
            num_envs_per_env_runner: 12
            device_rollouts: {{rollout_length: 4}}
            train_batch_size_per_learner: 64
            num_steps_sampled_before_learning_starts: 128
            replay_buffer_config: {{capacity: 5000}}
    """)
    )
    return path


def outputs(tmp_path, name):
    for ext in ("json", "csv", "png"):
        assert (tmp_path / f"{name}.{ext}").stat().st_size > 0, ext
    with open(tmp_path / f"{name}.json") as f:
        return json.load(f)
