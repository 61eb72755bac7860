"""The GPU targets, read from recorded results: met, missed or unmeasured.

    python -m rllib_gpuenv.bench.targets benchmarks/gpu/2026-11-27-h100  # one lease's archives, unpacked
    python -m rllib_gpuenv.bench.targets benchmarks/gpu   # every lease: each target's latest measurement

Each target is read from the JSON that ``gpu_session.sh`` writes (``scaling.json``,
``block_size.json``, ``sampling.json``, ``training.json``, ``ppo_512envs/training.json``). A
target whose rows are not there (no GPU run yet, or a stage cut short) is "unmeasured", never
guessed. Given a folder of leases (folders named by date, each with its ``machine.txt``), each
target comes from the latest lease that measured it, and says which. The figures go into
benchmarks/RESULTS.md with the GPU model and versions of ``machine.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from rllib_gpuenv.experiments.tables import format_table

NUMBA_CUDA, TORCH_CUDA = "ours: numba-cuda", "ours: torch (cuda)"
DEVICE_RUNNER = "device runner"


@dataclass(frozen=True)
class Target:
    name: str
    goal: float  # met when the measured value is at least this (or at most, with ``at_most``)
    unit: str
    measure: Callable[[str], tuple[float, str] | None]  # results folder -> (value, where it comes from)
    at_most: bool = False


def _source(folder: str, name: str) -> str:
    """``name``, or where a cap cut the run before it wrote that, what it wrote as it went
    (``<name>.partial.json``: the sizes or seeds it finished)."""
    partial = name.removesuffix(".json") + ".partial.json"
    cut = not os.path.exists(os.path.join(folder, name)) and os.path.exists(os.path.join(folder, partial))
    return partial if cut else name


def _rows(folder: str, name: str) -> list[dict]:
    """The rows of ``folder/name`` (``_source``) if that result was measured with a GPU (its
    ``machine.gpu``), else none."""
    path = os.path.join(folder, _source(folder, name))
    if not os.path.exists(path):
        return []
    with open(path) as f:
        result = json.load(f)
    return result["rows"] if result.get("machine", {}).get("gpu") else []


def gpus(folder: str) -> set[str]:
    """The GPUs the results in ``folder`` were measured on."""
    found = set()
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".json"):
                with open(os.path.join(root, name)) as f:
                    gpu = json.load(f).get("machine", {}).get("gpu")
                found |= {gpu} if gpu else set()
    return found


def _rate(rows: list[dict], contender: str, num_envs: int) -> float | None:
    """A contender's env-steps/s at ``num_envs`` on a GPU. Sampling rows say their device; scaling
    rows have none, their contender's name says it ("ours: torch (cuda)")."""
    for row in rows:
        if row.get("contender") == contender and row["num_envs"] == num_envs and row.get("device", "cuda").startswith("cuda"):
            return row["env_steps_per_s"]
    return None


def numba_over_torch(folder: str):
    rows = _rows(folder, "scaling.json")
    numba, torch_ = _rate(rows, NUMBA_CUDA, 1 << 20), _rate(rows, TORCH_CUDA, 1 << 20)
    if numba is None or torch_ is None:
        return None
    return numba / torch_, f"scaling.json: {numba:.3g} / {torch_:.3g} env-steps/s"


def steps_at_2_24(folder: str):
    candidates = [
        (r["env_steps_per_s"], f"scaling.json: {r['contender']}")
        for r in _rows(folder, "scaling.json")
        if r["num_envs"] == 1 << 24 and r["contender"].startswith(NUMBA_CUDA)
    ]
    candidates += [
        (r["env_steps_per_s"], f"block_size.json: {r['threads_per_block']} threads per block")
        for r in _rows(folder, "block_size.json")
        if r["num_envs"] == 1 << 24
    ]
    return max(candidates, default=None)


def sampling_at_65536(folder: str):
    rate = _rate(_rows(folder, "sampling.json"), DEVICE_RUNNER, 65536)
    return None if rate is None else (rate, f"{_source(folder, 'sampling.json')}: device runner on cuda")


def time_to_475(file: str) -> Callable[[str], tuple[float, str] | None]:
    def measure(folder: str):
        rows = [r for r in _rows(folder, file) if r["contender"] == "device"]
        times = [r["time_to_target_s"] for r in rows]
        source = _source(folder, file)
        if not rows or None in times:  # a seed that did not get there is a miss, reported as infinite
            return (float("inf"), f"{source}: a seed missed the target") if rows else None
        return statistics.median(times), f"{source}: median of {len(times)} seeds"

    return measure


TARGETS = (
    Target("numba-cuda / torch at 2^20 CartPole envs", 3.0, "×", numba_over_torch),
    Target("CartPole env-steps/s at 2^24 envs", 20e9, "env-steps/s", steps_at_2_24),
    Target("sampling with the policy at 65,536 envs", 100e6, "env-steps/s", sampling_at_65536),
    Target("PPO to 475 (main job's file)", 5.0, "s", time_to_475("training.json"), at_most=True),
    Target("PPO to 475 (512-env file)", 5.0, "s", time_to_475(os.path.join("ppo_512envs", "training.json")), at_most=True),
)


def leases(folder: str) -> list[str]:
    """``folder`` if it holds one lease's results, else its lease folders (those with a
    ``machine.txt``), latest first (their names start with the date)."""
    if os.path.exists(os.path.join(folder, "machine.txt")):
        return [folder]
    found = [entry.path for entry in os.scandir(folder) if os.path.exists(os.path.join(entry.path, "machine.txt"))]
    return sorted(found, reverse=True) or [folder]


def _latest(target: Target, folder: str) -> tuple[float, str] | None:
    """The target's measurement from the latest lease in ``folder`` that has one."""
    many = len(found := leases(folder)) > 1
    for lease in found:
        measured = target.measure(lease)
        if measured is not None:
            value, source = measured
            return value, f"{os.path.basename(lease)}/{source}" if many else source
    return None


def check(folder: str) -> list[dict]:
    """One row per target: the measured value (None: unmeasured), where it comes from, and the verdict."""
    rows = []
    for target in TARGETS:
        measured = _latest(target, folder)
        if measured is None:
            verdict, value, source = "unmeasured", None, "no GPU rows"
        else:
            value, source = measured
            met = value <= target.goal if target.at_most else value >= target.goal
            verdict = "met" if met else "missed"
        rows.append({"target": target.name, "goal": target.goal, "unit": target.unit, "value": value, "verdict": verdict,
                     "source": source})  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    def show(value: float | None, unit: str) -> str:
        return "—" if value is None else f"{value:.3g} {unit}"

    return format_table(
        ["target", "goal", "measured", "verdict", "from"],
        [[r["target"], show(r["goal"], r["unit"]), show(r["value"], r["unit"]), r["verdict"], r["source"]] for r in rows],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rllib_gpuenv.bench.targets", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the unpacked results of gpu_session.sh (e.g. benchmarks/gpu)")
    args = parser.parse_args(argv)
    print(f"GPU: {', '.join(sorted(gpus(args.folder))) or 'none (no result here was measured with a GPU)'}")
    print(table(check(args.folder)))


if __name__ == "__main__":
    main()
