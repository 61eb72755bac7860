"""The GPU session's plan names what it runs: a lease is too rare to lose a benchmark to a typo.

``benchmarks/gpu_session.sh`` runs a benchmark only if its key is in ``GPU_ONLY``; a key there
that no ``bench`` call has runs nothing, silently. These checks read the script and the plan in
RESULTS.md as text (nothing runs: the script needs a GPU); each ``bench`` call's command line is
parsed by the CLI's own parser."""

import re
import shlex
from pathlib import Path

import pytest
import torch

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


def bench_calls() -> dict[str, list[str]]:
    """The words after ``bench`` of the command line each ``bench CAP DIR NAME ARGS...`` call runs,
    by key (lines ending in a backslash joined, a case's closing ``;;`` left out). A config the
    script writes into ``$RES`` is replaced by the shipped file it is made from (parsing reads it),
    and ``--device cuda`` by the CPU where there is no GPU (parsing checks that the device is there).
    """
    script = SCRIPT.replace("\\\n", " ")
    made_from = {name: source for source, name in re.findall(r'(configs/\S+\.yaml).*> *"\$RES/(\w+)\.yaml"', script)}
    calls = {}
    gpu = "cuda" if torch.cuda.is_available() else "cpu"
    for folder, name, args in re.findall(r"^\s*bench \d+ (\S+) (\S+) (.*?)(?: ;;)?$", script, flags=re.M):
        words = [re.sub(r"^\$RES/(\w+)\.yaml$", lambda m: made_from[m.group(1)], word) for word in shlex.split(args)]
        words = [gpu if word == "cuda" and before == "--device" else word for before, word in zip(["", *words], words)]
        calls[name if folder == "." else folder] = words
    return calls


@pytest.mark.parametrize("key", sorted(bench_keys()))
def test_every_bench_call_is_a_command_line_the_cli_takes(key, monkeypatch):
    """Each call's benchmark and options parse as ``rllib-gpuenv bench`` parses them: before
    2026-11-29 two calls had lost the benchmark's name, and a lease ran neither."""
    from rllib_gpuenv.cli.main import build_parser

    monkeypatch.chdir(ROOT)  # the script runs from the repository's root, where configs/ is
    words = bench_calls()[key]
    args = build_parser().parse_args(["bench", *words, "--out", "bench_results"])
    assert args.benchmark == words[0]
