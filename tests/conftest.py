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
