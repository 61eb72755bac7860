import os
import tempfile

# OpenMP's idle threads sleep instead of spinning (set before torch or numba loads libgomp; the
# subprocesses and Ray workers the tests start inherit it). A thread of numba's parallel CPU
# backend or of torch's pool spins on its core for a while after each parallel region, waiting
# for the next: fine for a job that owns its cores, not for two test workers sharing two. Two
# RLlib test files on this 2-core machine: 111-160 s and 211-313 busy CPU-s spinning, 62 s and
# 114-116 CPU-s sleeping. (A job alone on its cores trains faster spinning: the package leaves
# the policy to the user.)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

# RLlib's utilities import JAX and flax wherever they are installed, for the old API stack's JAX
# models that nothing here uses. The package's commands skip that import (cli/quiet.py), and so do
# the tests, their subprocesses and the Ray workers they start (they inherit the environment
# variable it sets): 1-2 s less in every process that imports RLlib. The JAX envs' tests import
# JAX themselves.
from rllib_gpuenv.cli.quiet import without_rllib_jax_import

without_rllib_jax_import()

from tests.helpers import CPU_BACKENDS, no_module_for_the_harness_frames  # noqa: E402 (after the JAX import is turned off)

no_module_for_the_harness_frames()  # RLlib's connectors inspect the whole stack (tests/helpers.py)

# JAX's compiled envs, shared by the test processes, their subprocesses and Ray workers (Brax's
# pendulum compiles once, not in each), and kept out of the user's cache (jax_envs/vector_env.py).
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"rllib_gpuenv-tests-jax-{os.getuid()}")
)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One of several test processes on this machine's cores (setup.cfg: -n 2): torch's thread per
    # core in each would make them fight (benchmarks/RESULTS.md, "Several learners"). One compute
    # thread per process, and per subprocess it starts.
    import torch

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


# The files that take longest (seconds each on a 2-core machine under the full suite, from
# --durations), started first. The two workers take a file at a time (setup.cfg: --dist loadfile,
# --no-loadscope-reorder keeps this order), so long files first and short ones last lets both end
# together, rather than one waiting out the other's last long file (about 50 s when left to
# xdist's order, which puts the files with the most tests first).
LONGEST_FIRST = [  # summed test seconds per file under the full suite on a slow 2-core machine, 2026-11-28
    "cli/test_job_submit.py",  # 225 (148 alone; 119 once its stopped job waited for the stop): three jobs, the agent
    "rllib/test_learners.py",  # 222
    "cli/test_rllib_train.py",  # 221
    "bench/test_training_races.py",  # 205
    "bench/test_benchmarks.py",  # 147
    "cli/test_main_job.py",  # 126
    "rllib/test_training.py",  # 105
    "rllib/test_jax_envs.py",  # 70 with JAX's compilation cache empty (CI), ~34 with it warm
    "rllib/test_cluster.py",  # 70
    "rllib/test_brax_envs.py",  # 68 with JAX's compilation cache empty (CI), ~21 with it warm
    "rllib/test_sac.py",  # 66
    "experiments/test_tune_resources.py",  # 65
    "cli/test_evaluate.py",  # 57
    "cli/test_command_endings.py",  # 55
    "rllib/test_resume.py",  # 51, and about 30 more since its reset-in-place and PBT tests
    "cli/test_restore.py",  # 109 until its Ctrl-C test (59) joined test_job_submit.py
    "test_examples.py",  # 46
    "rllib/test_dqn.py",  # 45
    "envs/test_envs_vs_gymnasium.py",  # 38
    "rllib/test_lean_update.py",  # 35
    "backends/test_cuda_compile.py",  # 32
]


def pytest_collection_modifyitems(config, items):
    """Longest files first (``LONGEST_FIRST``); the others keep pytest's order, after them."""
    tests = os.path.dirname(__file__)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(os.path.relpath(str(item.path), tests).replace(os.sep, "/"), len(rank)))


def pytest_sessionstart(session):
    import time

    session.config._started_at = time.time()


def pytest_sessionfinish(session):
    """Once, in the main process (after every worker): the empty log folders Tune made in
    ``~/ray_results`` while the tests ran, for the RLlib algorithms the tests build outside a Tune
    run and stop themselves (the package's own commands and device algorithms leave none:
    ``rllib/logdir.py``). Only empty folders named as Tune names them, made since the session began."""
    import re

    from ray.train.constants import DEFAULT_STORAGE_PATH

    if hasattr(session.config, "workerinput") or not os.path.isdir(DEFAULT_STORAGE_PATH):
        return
    started = getattr(session.config, "_started_at", None)
    for entry in os.scandir(DEFAULT_STORAGE_PATH):
        tune_named = re.fullmatch(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}\w{8}", entry.name)
        if tune_named and entry.is_dir() and started is not None and entry.stat().st_mtime >= started:
            try:
                os.rmdir(entry.path)  # only an empty one
            except OSError:
                pass


@pytest.fixture(params=CPU_BACKENDS)
def backend(request):
    return request.param


@pytest.fixture(scope="module")
def ray_local(request):
    """A Ray instance of the module's own (``address="local"``: never a cluster that another test
    or person started on this machine), with ``RAY_CPUS`` logical CPUs (a module sets it; 2), shut
    down after the module. Modules whose algorithms all live in the test process need none."""
    import ray

    ray.init(
        address="local",
        num_cpus=getattr(request.module, "RAY_CPUS", 2),
        num_gpus=0,
        include_dashboard=False,
        log_to_driver=False,
        ignore_reinit_error=True,
    )
    yield
    ray.shutdown()
