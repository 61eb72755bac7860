import os

import pytest

from tests.helpers import CPU_BACKENDS

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One of several test processes on this machine's cores (setup.cfg: -n 2): torch's thread per
    # core in each would make them fight (benchmarks/RESULTS.md, "Several learners"). One compute
    # thread per process, and per subprocess it starts.
    import torch

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


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
