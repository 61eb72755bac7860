"""Experiment files trained to their own stop criteria, seed by seed: does each shipped file
still solve its env on this machine, and how fast?

Every env of the suite has a shipped file that stops once a return reaches a threshold
(gymnasium's ``reward_threshold`` where it has one, on the training window or on evaluation
episodes: the file says which). ``rllib-gpuenv bench files`` trains each file (``SUITE_FILES`` by
default, or any others) seed by seed, each run in a fresh process, as the main job does: the
algorithm's ``train()`` in a loop, in this process without Ray where nothing is remote, stopped
when one of the file's criteria is met (Tune's rule) or the time budget runs out. It prints, per
file, how many seeds reached the target and the median and worst time from the first
``train()`` (evaluations included, and how much of it they took), iterations and env steps.
``bench training`` races a file against other libraries; this one checks the files themselves.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import pyplot, report, run_child, save_figure, start_local_ray, write_results
from rllib_gpuenv.experiments.envs import unqualified_env_id
from rllib_gpuenv.experiments.metric_names import ENV_STEPS_METRIC, EVALUATION_RETURN_METRIC, RETURN_METRIC, lookup
from rllib_gpuenv.experiments.tables import format_table

# One file per env of the suite (the algorithm that solves it; Pendulum also by SAC, CartPole by DQN).
SUITE_FILES = (
    "gpu_cartpole_ppo.yaml",
    "gpu_acrobot_ppo.yaml",
    "gpu_mountaincar_dqn.yaml",
    "gpu_pendulum_ppo.yaml",
    "gpu_mountaincar_continuous_ppo.yaml",
    "gpu_cartpole_dqn.yaml",
    "gpu_pendulum_sac.yaml",
)


def targets(stop: dict) -> dict:
    """The criteria of ``stop`` that say the env is solved: those on a return. The others
    (iterations, time, env steps) are limits; meeting one stops the run without reaching."""
    return {metric: value for metric, value in stop.items() if "return" in metric}


def _resolve(name: str) -> str:
    """A shipped file's name (``gpu_acrobot_ppo.yaml``) or a path."""
    from rllib_gpuenv.experiments.shipped import config_file

    return name if os.path.sep in name or os.path.exists(name) else str(config_file(name))


def run_one(path: str, seed: int, device: str | None, budget_s: float) -> dict:
    """One run in this process: ``path``'s first experiment, seeded, until a stop criterion or the budget."""
    import ray

    from rllib_gpuenv.experiments import load_experiments
    from rllib_gpuenv.experiments.progress import EvaluationTime
    from rllib_gpuenv.rllib.in_process import InProcess, builds_without_ray
    from rllib_gpuenv.rllib.logdir import stop_algorithm

    experiment = load_experiments(path)[0]
    config = experiment.config.debugging(seed=seed)
    if device is not None:
        config.devices(learner=device, env_runners=device)
    goal = targets(experiment.stop)
    if not (issubclass(config.algo_class, InProcess) and builds_without_ray(config)):
        start_local_ray(num_cpus=os.cpu_count())
    start = time.perf_counter()
    algo = config.build_algo()
    build_s = time.perf_counter() - start
    evaluating = EvaluationTime(algo)
    curve, start = [], time.perf_counter()
    try:
        while True:
            result = algo.train()
            elapsed = time.perf_counter() - start
            values = {metric: float(lookup(result, metric, float("nan"))) for metric in experiment.stop}
            steps = int(lookup(result, ENV_STEPS_METRIC, 0))
            curve.append({"seconds": elapsed, "env_steps": steps, **{m: values[m] for m in goal}})
            met = [metric for metric, value in values.items() if value >= experiment.stop[metric]]
            if met or elapsed >= budget_s:
                break
    finally:
        stop_algorithm(algo)
        ray.shutdown()
    reached = any(metric in goal for metric in met)
    return {
        "experiment": experiment.name,
        "algo": config.algo_class.__name__,
        "env": str(unqualified_env_id(config.env)),
        "target": goal,
        "reached": reached,
        "seconds": elapsed,
        "evaluation_s": evaluating.seconds,  # of ``seconds``
        "iterations": len(curve),
        "env_steps": curve[-1]["env_steps"],
        "build_s": build_s,
        "stopped_by": met or ["budget"],
        "curve": curve,
    }


def _run_in_subprocess(path: str, seed: int, device: str | None, budget_s: float) -> dict:
    args = [path, "--seed", str(seed), "--budget", str(budget_s)] + (["--device", device] if device else [])
    return run_child("rllib_gpuenv.bench.files", args, f"{os.path.basename(path)} seed {seed}", timeout_s=budget_s * 3 + 300)


def summarise(runs: list[dict]) -> list[dict]:
    """A row per file: seeds that reached its target; median and worst seconds, median
    iterations and env steps over the seeds that reached it."""

    def median(runs: list[dict], key: str):
        values = [r[key] for r in runs if key in r]  # runs recorded before evaluation_s have none
        return statistics.median(values) if values else None

    rows = []
    for file in dict.fromkeys(r["file"] for r in runs):
        mine = [r for r in runs if r["file"] == file]
        hit = [r for r in mine if r["reached"]]
        first = mine[0]
        rows.append(
            {
                "file": file,
                "algo": first["algo"],
                "env": first["env"],
                "target": ", ".join(f"{_metric_name(m)} >= {v:g}" for m, v in first["target"].items()),
                "reached": f"{len(hit)}/{len(mine)}",
                "median_s": median(hit, "seconds"),
                "worst_s": max(r["seconds"] for r in hit) if hit else None,
                "median_evaluation_s": median(hit, "evaluation_s"),
                "median_iterations": median(hit, "iterations"),
                "median_env_steps": median(hit, "env_steps"),
                "build_s": median(mine, "build_s"),
            }
        )
    return rows


def _metric_name(metric: str) -> str:
    """A stop metric as the table names it: the training window's return or the evaluation's."""
    names = {RETURN_METRIC: "last-100 mean", EVALUATION_RETURN_METRIC: "evaluation mean"}
    return names.get(metric, metric)


def summary_text(rows: list[dict]) -> str:
    def num(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    headers = [
        "file",
        "algorithm on env",
        "target",
        "reached",
        "median s (worst)",
        "of which evaluating",
        "median iterations",
        "median env steps",
        "build s",
    ]
    table = [
        [
            r["file"],
            f"{r['algo']} on {r['env']}",
            r["target"],
            r["reached"],
            f"{num(r['median_s'], '.1f')} ({num(r['worst_s'], '.1f')})",
            num(r.get("median_evaluation_s"), ".1f"),
            num(r["median_iterations"], "g"),
            num(r["median_env_steps"], ",.0f"),
            num(r["build_s"], ".1f"),
        ]
        for r in rows
    ]
    return "each file to its own stop criteria, seconds of training from the first train()\n" + format_table(headers, table)


def plot_files(runs: list[dict], out_dir: str) -> str:
    """Seconds to the target, a point per seed (a cross where the seed missed, at its last second)."""
    plt = pyplot()
    files = list(dict.fromkeys(r["file"] for r in runs))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(files)), 4.0))
    for i, file in enumerate(files):
        for r in (r for r in runs if r["file"] == file):
            ax.scatter(i, r["seconds"], marker="o" if r["reached"] else "x", color="C0" if r["reached"] else "C3")
    ax.set_xticks(range(len(files)), [f.removesuffix(".yaml") for f in files], rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("seconds of training to the target")
    ax.set_title("each file to its own target, a point per seed (x: missed)")
    ax.grid(True, which="both", axis="y", alpha=0.3)
    return save_figure(fig, out_dir, "files")


def run(
    files: list[str],
    seeds: list[int],
    device: str | None = None,
    budget_s: float = 120.0,
    out_dir: str = "bench_results",
    plot: bool = False,
) -> list[dict]:
    """Every file × seed in a fresh process (seed by seed, the files in turn); print the table; write JSON/CSV (and PNG)."""
    from rllib_gpuenv.experiments import load_experiments

    paths = {name: _resolve(name) for name in files}  # a missing file is named before the first run
    for name, path in paths.items():
        if not targets(load_experiments(path)[0].stop):
            raise ValueError(
                f"{name}: its stop criteria name no return to reach (as env_runners/episode_return_mean: 475 does), "
                "so it cannot be solved"
            )
    runs = []
    for seed in seeds:
        for name, path in paths.items():
            print(f"  {name:<40} seed {seed} ...", end="", file=sys.stderr, flush=True)
            result = {"file": os.path.basename(name), "seed": seed, **_run_in_subprocess(path, seed, device, budget_s)}
            runs.append(result)
            write_results([{k: v for k, v in r.items() if k != "curve"} for r in runs], out_dir, "files.partial", {})
            outcome = "reached" if result["reached"] else f"stopped by {', '.join(result['stopped_by'])}"
            print(f" {outcome} in {result['seconds']:.1f} s, {result['iterations']} iterations", file=sys.stderr)
    rows = summarise(runs)
    print(summary_text(rows))
    meta = {"files": files, "seeds": seeds, "device": device, "budget_s": budget_s, "summary": rows, "curves": runs}
    flat = [{k: v for k, v in r.items() if k != "curve"} for r in runs]
    report(flat, out_dir, "files", meta, plot=(lambda: plot_files(runs, out_dir)) if plot else None)
    return rows


def add_arguments(parser) -> None:
    parser.add_argument(
        "--files",
        nargs="+",
        default=list(SUITE_FILES),
        help="shipped file names or paths (default: one for every env of the suite: %(default)s)",
    )
    parser.add_argument("--seeds", type=options.sizes(0), default="0,1,2", help="seeds (default: %(default)s)")
    parser.add_argument("--device", type=options.device, help="every role's device (default: the file's, auto)")
    parser.add_argument("--budget", type=options.seconds, default=120.0, help="seconds of training per run before giving up")


def run_from_args(args) -> None:
    run(args.files, args.seeds, device=args.device, budget_s=args.budget, out_dir=args.out, plot=args.plot)


def main(argv: list[str] | None = None) -> None:
    """The child process: one run, written as JSON."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device")
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--write", required=True)
    args = parser.parse_args(argv)
    result = run_one(args.path, args.seed, args.device, args.budget)
    with open(args.write, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
