"""The harness's forked commands (``tests/helpers.py``: a fork server that has loaded Ray) run as a
new interpreter would, with what the test process's environment says now."""

from tests.helpers import run_code


def test_a_forked_command_reads_rays_settings_from_its_own_environment(monkeypatch):
    run_code("pass")  # the fork server is up, its Ray loaded with the environment of then
    # What a local ray.init() in the test process does (Ray 2.60 turns on token authentication
    # for a new local cluster): a forked ray.init() then started a GCS that wanted a token and a
    # driver that sent none (a failure that came and went with the order the tests ran in).
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    out = run_code(
        "from ray._private.authentication.authentication_utils import get_authentication_mode_name\n"
        "from ray._raylet import get_authentication_mode\n"
        "print(get_authentication_mode_name(get_authentication_mode()))\n"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1].lower() == "token"
