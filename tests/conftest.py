import pytest

from tests.helpers import CPU_BACKENDS


@pytest.fixture(params=CPU_BACKENDS)
def backend(request):
    return request.param
