"""What every benchmark shares: timing, result files, tables, machine facts."""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import torch

from rllib_gpuenv.options import sizes

logger = logging.getLogger(__name__)


def parse_sizes(text: str) -> list[int]:
    """'1,16,256' or '1..65536' (powers of 4 between the bounds): a benchmark's default sizes
    (its options parse what a user gives with ``options.sizes``, which this is)."""
    return sizes()(text)


def suite_env(value: str) -> str:
    """argparse type of ``--env`` where a benchmark steps an env of this package directly: an
    unknown id ends the command in argparse's one line, before the first of several envs runs."""
    import argparse

    from rllib_gpuenv.envs import SHIPPED_DEFS, env_definition

    if env_definition(value) is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not an env of this package: {', '.join(SHIPPED_DEFS)}")
    return value


def default_sizes(cpu: str, gpu: str) -> str:
    """A benchmark's default sizes: larger where there is a GPU."""
    return gpu if torch.cuda.is_available() else cpu


def machine_info() -> dict:
    """Hardware and versions, recorded next to every figure."""
    import numba
    import numpy

    info = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numba": numba.__version__,
        "numpy": numpy.__version__,
        "torch_threads": torch.get_num_threads(),
        "numba_threads": numba.get_num_threads(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def synchronize(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Callable[[int], object], min_seconds: float, min_calls: int, device=None, warmup: int = 3) -> float:
    """Seconds per call of ``fn(i)``, called until both ``min_calls`` and ``min_seconds`` pass,
    after ``warmup`` calls (fewer where they already took ``min_seconds``: one call of RLlib's
    stock runner at 4,096 envs takes ~9 s)."""
    start = time.perf_counter()
    for i in range(warmup):
        fn(i)
        synchronize(device)
        if time.perf_counter() - start >= min_seconds:
            break
    calls, start = 0, time.perf_counter()
    while True:
        for _ in range(max(1, min_calls // 4)):
            fn(calls)
            calls += 1
        synchronize(device)
        elapsed = time.perf_counter() - start
        if calls >= min_calls and elapsed >= min_seconds:
            return elapsed / calls


def start_local_ray(**kwargs) -> None:
    """A Ray of the benchmark's own (``address="local"``: not a cluster someone else started on this
    machine), quiet. SIGTERM keeps the meaning the command gave it (``cli/errors.py``: it ends the
    command as Ctrl-C does), where ``ray.init``'s core worker puts its crash report in its place."""
    import ray

    before = signal.getsignal(signal.SIGTERM)
    ray.init(**{"address": "local", "include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True, **kwargs})
    if before is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, before)  # Python's handler, in C's place again


def write_results(rows: list[dict], out_dir: str, name: str, meta: dict) -> str:
    """Write ``<name>.json`` (rows + machine facts) and ``<name>.csv``; return the JSON path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.json")
    with open(path, "w") as f:
        json.dump({"machine": machine_info(), "meta": meta, "rows": rows}, f, indent=1)
    if rows:
        keys = list(dict.fromkeys(k for row in rows for k in row))
        with open(os.path.join(out_dir, f"{name}.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
    return path


def report(rows: list[dict], out_dir: str, name: str, meta: dict, plot: Callable[[], str] | None = None) -> str:
    """Write the raw results (and the plot, when ``plot`` draws one); say where; return the JSON
    path. The ``<name>.partial`` files a benchmark kept while it ran (``write_results``, what a
    cut run leaves) are removed: the finished results replace them."""
    path = write_results(rows, out_dir, name, meta)
    for ext in ("json", "csv"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(out_dir, f"{name}.partial.{ext}"))
    print(f"\nraw results: {path}")
    if plot is not None:
        print(f"plot: {plot()}")
    return path


def run_child(module: str, args: list[str], label: str, timeout_s: float) -> dict:
    """``python -m module ARGS --write FILE`` in a fresh process (one benchmark run, so that no
    run inherits another's state); returns the JSON it wrote. ``label`` names the run if it fails."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        # python -m module, its interrupts made harmless after the first (``interrupted_once``)
        run = f"from {__name__} import interrupted_once; interrupted_once(); import runpy; runpy.run_module({module!r}, "
        run += "run_name='__main__', alter_sys=True)"
        cmd = [sys.executable, "-c", run, *args, "--write", out]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            try:
                _, stderr = proc.communicate(timeout=timeout_s)
            except BaseException:  # Ctrl-C, SIGTERM, the timeout: the child cleans up as it stops
                _stop_child(proc)
                raise
        if proc.returncode:
            raise RuntimeError(f"{label} failed:\n{stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def _stop_child(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Let a benchmark's child process stop as an interrupted command does (its algorithm stopped,
    its empty log folder in ~/ray_results removed): interrupt it (``interrupted_once`` makes a
    second interrupt, a Ctrl-C at the terminal that reached it too, harmless) and kill it only if
    it has not ended ``grace_s`` later. (``subprocess.run`` killed the child at once, which left
    its log folder behind.)"""
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def interrupted_once() -> None:
    """In a benchmark's child process: SIGINT and SIGTERM interrupt it once (KeyboardInterrupt);
    later ones are ignored, so that the cleanup the first one starts (``finally``: the algorithm
    stopped, its log folder removed) is not cut short by the parent's interrupt after the
    terminal's."""

    def once(signum, frame):
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, once)


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (benchmarks run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, out_dir: str, name: str) -> str:
    """Lay out, write ``<out_dir>/<name>.png`` (legends placed outside the axes included), close;
    return the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = os.path.join(out_dir, f"{name}.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


@contextlib.contextmanager
def busy_processes(count: int):
    """``count`` processes that keep a core busy each, for as long as the block runs: a shared
    machine on purpose, to measure what another tenant costs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.2 * bool(hogs))  # let the scheduler place them
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
