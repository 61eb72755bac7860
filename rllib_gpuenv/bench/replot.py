"""Draw the plots and print the tables of recorded benchmark results again, from their JSON.

    python -m rllib_gpuenv.bench.replot benchmarks/     # every result there of a kind below (REPLOTS)

A result is ``<kind>.json`` or ``<kind>_<variant>.json`` (``scaling_GPUPendulum-v1.json``); its
plot is drawn again as ``<same name>.png``.

A change to how results are shown (a labelled line, a legend moved, a new column computed from
the recorded curves) then reaches the committed figures without rerunning the benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable

import rllib_gpuenv.options as options


def _scaling(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import scaling

    rows, turning = result["rows"], result["meta"].get("turning_points")
    text = scaling.summary(rows) + (scaling.turning_table(turning) if turning else "")
    return text, scaling.plot_scaling(rows, out_dir, "scaling", turning)


def _training(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import training

    meta = result["meta"]
    runs, target, task = meta["curves"], meta["target"], training.TASKS[meta.get("task", training.DEFAULT_TASK)]
    return training.summary_text(training.summarise(runs, target, task), target, task), training.plot_curves(
        runs, target, out_dir, task
    )


def _breakdown(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import breakdown

    rows = result["rows"]
    return breakdown.table(rows), breakdown.plot_breakdown(rows, out_dir, name)


def _workload(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import workload

    rows = result["rows"]
    return workload.summary(rows), workload.plot_workload(rows, out_dir)


def _ops(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import step_ops

    rows = result["rows"]
    return step_ops.summary_text(rows), step_ops.plot_ops(rows, out_dir)


def _sampling(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import sampling

    rows = result["rows"]
    return sampling.summary(rows), sampling.plot_sampling(rows, out_dir)


def _learners(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import learners

    rows = result["rows"]
    return learners.table(rows, result["meta"]["target"]), learners.plot_learners(rows, out_dir)


def _update(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import update

    return update.tables(result["rows"], result["meta"]), update.plot_update(result["rows"], out_dir)


def _files(result: dict, out_dir: str, name: str) -> tuple[str, str]:
    from rllib_gpuenv.bench import files

    runs = result["meta"]["curves"]
    return files.summary_text(files.summarise(runs)), files.plot_files(runs, out_dir)


REPLOTS: dict[str, Callable[[dict, str, str], tuple[str, str]]] = {
    "scaling": _scaling,
    "training": _training,
    "breakdown": _breakdown,
    "workload": _workload,
    "sampling": _sampling,
    "learners": _learners,
    "update": _update,
    "ops": _ops,
    "files": _files,
}


def replot(folder: str, out_dir: str | None = None) -> list[str]:
    """Every ``<kind>.json`` and ``<kind>_<variant>.json`` in ``folder`` (``training_<task>.json``,
    ``scaling_<env>.json``): print its table, write ``<same name>.png`` to ``out_dir`` (default:
    the same folder); return the plots' paths."""
    if os.path.isfile(folder):
        raise ValueError(f"{folder} is a file: give the folder it is in ({os.path.dirname(folder) or '.'})")
    if not os.path.isdir(folder):
        raise ValueError(f"{folder}: no such folder")
    out_dir = out_dir or folder
    os.makedirs(out_dir, exist_ok=True)
    written, skipped = [], []
    for file in sorted(os.listdir(folder)):
        name, ext = os.path.splitext(file)
        kind = name.split("_", 1)[0]
        if ext != ".json" or kind not in REPLOTS:
            continue
        path = os.path.join(folder, file)
        try:
            with open(path) as f:
                result = json.load(f)
            with tempfile.TemporaryDirectory() as scratch:  # each kind draws <kind>.png; this result's is <name>.png
                text, drawn = REPLOTS[kind](result, scratch, name)
                plot = os.path.join(out_dir, f"{name}.png")
                shutil.move(drawn, plot)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:  # not a result of its kind
            why = f"{type(err).__name__}: {err}" if not isinstance(err, json.JSONDecodeError) else f"not valid JSON ({err})"
            skipped.append(f"{path}: not a {kind} result this tool can read ({why})")
            print(f"replot: skipped {skipped[-1]}", file=sys.stderr)
            continue
        print(f"== {name} ({path})\n{text}\nplot: {plot}\n")
        written.append(plot)
    if not written:
        found = "; ".join(skipped) if skipped else f"none of {', '.join(f'{n}.json' for n in REPLOTS)} found"
        raise ValueError(f"{folder}: {found}")
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rllib_gpuenv.bench.replot", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="where the results' JSON files are (e.g. benchmarks/)")
    parser.add_argument("--out", type=options.output_folder, help="where to write the plots (default: the same folder)")
    args = parser.parse_args(argv)
    try:
        replot(args.folder, args.out)
    except ValueError as err:  # no such folder, no results in it: a mistake in the command line (exit 2)
        parser.error(str(err))


if __name__ == "__main__":
    main()
