"""The GPU session's plan names what it runs: a lease is too rare to lose a benchmark to a typo.

``benchmarks/gpu_session.sh`` runs a benchmark only if its key is in ``GPU_ONLY``; a key there
that no ``bench`` call has runs nothing, silently. These checks read the script and the plan in
RESULTS.md as text (nothing runs: the script needs a GPU)."""

import re
from pathlib import Path

from tests.helpers import ROOT

SCRIPT = (Path(ROOT) / "benchmarks" / "gpu_session.sh").read_text()


def bench_keys() -> set[str]:
    """The key of every ``bench CAP DIR NAME ...`` call: NAME in ``.``, else DIR."""
    calls = re.findall(r"^\s*bench \d+ (\S+) (\S+) ", SCRIPT, flags=re.M)
    assert calls, "no bench calls found in gpu_session.sh"
    return {name if folder == "." else folder for folder, name in calls}


def test_the_script_s_header_lists_every_benchmark_key():
    listed = re.search(r"GPU_ONLY names the benchmarks to run\n# \(([^)]*)\)", SCRIPT)
    assert listed, "gpu_session.sh's header no longer lists the GPU_ONLY keys"
    assert set(listed.group(1).replace("#", " ").split()) == bench_keys()


def test_the_next_lease_s_commands_name_only_keys_the_script_runs():
    plans = re.findall(
        r'GPU_ONLY="([^"]*)" bash benchmarks/gpu_session.sh run "?([a-z ]+)"?',
        (Path(ROOT) / "benchmarks" / "RESULTS.md").read_text(),
    )
    assert plans, "RESULTS.md gives the next lease no GPU_ONLY command"
    stages = set(re.findall(r"^        (\w+)\)", SCRIPT, flags=re.M)) - {"pack"}
    for keys, run_stages in plans:
        assert set(keys.split()) <= bench_keys(), f"unknown keys: {set(keys.split()) - bench_keys()}"
        assert set(run_stages.split()) <= stages, f"unknown stages: {set(run_stages.split()) - stages}"
