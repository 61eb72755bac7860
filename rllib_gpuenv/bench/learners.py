"""One learner against several: training env-steps/s and time to a target return, both layouts.

Weak scaling, as GPU-env training scales: every sampler steps the same number of envs
(``num_envs_per_env_runner`` of the experiment file), so N samplers collect N times the env
steps per iteration, and each learner trains on its share. The setups, side by side in one run:

- "1 learner, local": the main job's setup, env runner and learner in the algorithm's process;
- "N learners, colocated": N learner actors, each stepping its own envs on its own device
  (one CPU each here, a GPU each on a GPU cluster), gradients all-reduced (``colocated.py``);
- "N learners, separate": N env runners (one CPU each) feeding N learners through Ray.

``--layouts`` picks the layouts beside the local learner (both by default).

Each setup trains, per seed, from a fresh start until the last-100 mean return reaches
``--target`` (or ``--budget`` seconds): the time to target; then, after the first seed's run,
``--iterations`` more iterations after a warm-up for the throughput (env steps sampled and
trained per second of ``train()``, learning included). The weak-scaling efficiency is N learners' env-steps/s over N times one
colocated learner's; a machine with fewer cores than processes shows the sharing, not the
layout (the table says how many CPUs Ray was given against the cores there are).

A second table times what the separate layout adds per rollout: its trip from an env runner
to a learner in another process (to the host, through Ray's object store, onto the learner's
device), at the main job's rollout size and a GPU-sized one. The colocated layout has no trip.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import pyplot, report, save_figure, start_local_ray
from rllib_gpuenv.experiments.metric_names import RETURN_METRIC, lookup
from rllib_gpuenv.experiments.tables import format_table

LAYOUTS = ("colocated", "separate")  # of several learners, each measured beside the local learner


def setups(counts: list[int], layouts: tuple[str, ...] = LAYOUTS) -> list[dict]:
    """The local learner, then each of ``layouts`` for each count."""
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown:
        raise ValueError(f"unknown layout(s) {', '.join(unknown)}: choose from {', '.join(LAYOUTS)}")
    rows = [{"setup": "1 learner, local", "layout": "local", "learners": 1, "num_learners": 0, "num_env_runners": 0}]
    for n in counts:
        for layout in LAYOUTS:
            if layout in layouts:
                rows.append(
                    {
                        "setup": f"{n} learner(s), {layout}",
                        "layout": layout,
                        "learners": n,
                        "num_learners": n,
                        "num_env_runners": n if layout == "separate" else 0,
                    }
                )
    return rows


def _config(setup: dict, config_file: str | None, seed: int, device: str = "cpu"):
    """The setup's config: one CPU per learner and env runner; on ``device="cuda"`` a GPU per
    colocated learner, and in the separate layout each env runner shares a GPU with a learner."""
    from rllib_gpuenv.experiments import load_config

    config = load_config(config_file, device=device, seed=seed).config
    gpus = 0.0 if device == "cpu" else (1.0 if setup["layout"] == "colocated" else 0.5)
    if setup["num_learners"]:
        config.devices(learner=None, env_runners="auto")
        config.learners(num_learners=setup["num_learners"], num_cpus_per_learner=1, num_gpus_per_learner=gpus)
    runner_gpus = gpus if setup["num_env_runners"] else 0.0
    return config.env_runners(
        num_env_runners=setup["num_env_runners"], num_cpus_per_env_runner=1, num_gpus_per_env_runner=runner_gpus
    )


def _throughput(algo, iterations: int) -> dict:
    """Env steps per second of ``train()`` (sampling and learning) over ``iterations``, after a warm-up."""
    for _ in range(2):  # compilation, allocations, DDP's first all-reduce
        algo.train()
    seconds, steps = [], []
    for _ in range(iterations):
        start = time.perf_counter()
        result = algo.train()
        seconds.append(time.perf_counter() - start)
        steps.append(int(result["env_runners"]["num_env_steps_sampled"]))
    return {
        "env_steps_per_iteration": statistics.median(steps),
        "env_steps_per_s": statistics.median(s / t for s, t in zip(steps, seconds)),
    }


def _time_to_target(algo, target: float, budget_s: float) -> dict:
    """Seconds of ``train()`` from a fresh start to a last-100 mean of ``target`` (None: not within ``budget_s``)."""
    start, result = time.perf_counter(), {}
    while time.perf_counter() - start < budget_s:
        result = algo.train()
        if lookup(result, RETURN_METRIC, float("nan")) >= target:
            return {"seconds": time.perf_counter() - start, "iterations": result["training_iteration"]}
    return {"seconds": None, "iterations": result.get("training_iteration")}


def measure(
    setup: dict,
    config_file: str | None,
    seeds: list[int],
    iterations: int,
    target: float,
    budget_s: float,
    device: str = "cpu",
) -> dict:
    """A setup's time to target per seed, each from a fresh start, and its throughput after the
    first seed's run (same algorithm: one build less per setup; or a run of its own without seeds)."""
    from rllib_gpuenv.rllib.logdir import stop_algorithm

    runs, throughput = [], None
    for seed in seeds or [0]:
        algo = _config(setup, config_file, seed, device).build_algo()
        try:
            if seeds:
                print(f"  {setup['setup']}: seed {seed} to {target:g} ...", file=sys.stderr, flush=True)
                runs.append({"seed": seed, **_time_to_target(algo, target, budget_s)})
            if throughput is None:
                print(f"  {setup['setup']}: throughput ...", file=sys.stderr, flush=True)
                throughput = _throughput(algo, iterations)
        finally:
            stop_algorithm(algo)
    reached = [r["seconds"] for r in runs if r["seconds"] is not None]
    median = statistics.median(reached) if len(reached) * 2 > len(runs) else None
    return {**throughput, "runs": runs, "median_s_to_target": median, "reached": f"{len(reached)}/{len(runs)}"}


TRIP_SHAPES = ((128, 16), (4096, 32))  # (envs, steps): the main job's rollout, a GPU-sized one


def _zero_rollout(envs: int, steps: int, device: str):
    """A CartPole-shaped PPO rollout of zeros (what travels is its size, not its values)."""
    import torch

    from rllib_gpuenv.rllib.rollout import Rollout

    def zeros(*shape, dtype=torch.float32):
        return torch.zeros(*shape, dtype=dtype, device=device)

    flags = zeros(steps, envs, dtype=torch.bool)
    return Rollout(
        obs=zeros(steps, envs, 4),
        actions=zeros(steps, envs, dtype=torch.int64),
        logp=zeros(steps, envs),
        dist_inputs=zeros(steps, envs, 2),
        rewards=zeros(steps, envs),
        terminated=flags,
        truncated=flags,
        valid=flags,
        last_obs=zeros(envs, 4),
    )


def rollout_trips(device: str = "cpu", repeats: int = 10) -> list[dict]:
    """Milliseconds per rollout trip from this process to an actor that takes it onto ``device``."""
    import ray

    from rllib_gpuenv.rllib.rollout import Rollout

    @ray.remote(num_cpus=0, num_gpus=0 if device == "cpu" else 0.5)
    class Learner:
        def take(self, rollout: Rollout) -> int:
            return rollout.to(device).num_env_steps

    learner = Learner.remote()
    rows = []
    for envs, steps in TRIP_SHAPES:
        rollout = _zero_rollout(envs, steps, device)  # on the sending runner's device
        size = sum(t.numel() * t.element_size() for t in vars(rollout).values() if t is not None)
        ray.get(learner.take.remote(rollout.to("cpu")))  # warm-up
        start = time.perf_counter()
        for _ in range(repeats):
            ray.get(learner.take.remote(rollout.to("cpu")))  # what a remote runner's sample() returns
        rows.append(
            {
                "envs": envs,
                "steps": steps,
                "megabytes": size / 1e6,
                "ms_per_trip": (time.perf_counter() - start) / repeats * 1e3,
            }
        )
    ray.kill(learner)
    return rows


def run(
    counts: list[int],
    seeds: list[int],
    iterations: int = 5,
    target: float = 475.0,
    budget_s: float = 120.0,
    config_file: str | None = None,
    out_dir: str = "bench_results",
    plot: bool = False,
    device: str = "cpu",
    layouts: tuple[str, ...] = LAYOUTS,
) -> list[dict]:
    """Every setup's throughput, then its time to target per seed; print the table, write the results."""
    rows = setups(counts, layouts)
    _config(rows[0], config_file, 0, device)  # the file's mistakes in one line before Ray starts
    needed = max(1 + r["num_learners"] + r["num_env_runners"] for r in rows)  # the driver, learners and runners: a CPU each
    cores = os.cpu_count() or 1
    start_local_ray(num_cpus=max(cores, needed))
    for row in rows:
        row.update(measure(row, config_file, seeds, iterations, target, budget_s, device))
    one = next((r for r in rows if r["layout"] == "colocated" and r["learners"] == 1), rows[0])
    for row in rows:
        row["vs_local"] = row["env_steps_per_s"] / rows[0]["env_steps_per_s"]
        row["weak_scaling"] = row["env_steps_per_s"] / (row["learners"] * one["env_steps_per_s"])
    print(
        f"Ray given {max(cores, needed)} CPUs on a machine with {cores} cores; one CPU per learner and per env runner\n"
        + table(rows, target)
    )
    trips = rollout_trips(device) if "separate" in layouts else []  # the colocated layout has no trip
    if trips:
        lines = [[f"{t['envs']} x {t['steps']}", f"{t['megabytes']:.2f}", f"{t['ms_per_trip']:.2f}"] for t in trips]
        print("\na rollout's trip from an env runner to a learner (separate layout; none when colocated)")
        print(format_table(["envs x steps", "MB", "ms per trip"], lines))
    meta = {
        "counts": counts,
        "layouts": list(layouts),
        "seeds": seeds,
        "iterations": iterations,
        "target": target,
        "budget_s": budget_s,
        "config_file": config_file,
        "ray_cpus": max(cores, needed),
        "cores": cores,
        "rollout_trips": trips,
        "device": device,
    }
    report(rows, out_dir, "learners", meta, plot=(lambda: plot_learners(rows, out_dir)) if plot else None)
    return rows


def table(rows: list[dict], target: float) -> str:
    headers = ["setup", "env steps/iter", "env-steps/s", "vs local", "weak scaling", f"s to {target:g} (median)", "reached"]
    lines = []
    for r in rows:
        to_target = "-" if r["median_s_to_target"] is None else f"{r['median_s_to_target']:.1f}"
        lines.append(
            [
                r["setup"],
                r["env_steps_per_iteration"],
                f"{r['env_steps_per_s']:,.0f}",
                f"{r['vs_local']:.2f}x",
                f"{r['weak_scaling']:.2f}",
                to_target,
                r["reached"],
            ]
        )
    return format_table(headers, lines)


def plot_learners(rows: list[dict], out_dir: str) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    names = [r["setup"] for r in rows]
    axes[0].barh(names, [r["env_steps_per_s"] / 1e3 for r in rows])
    axes[0].set(xlabel="thousand env-steps/s, learning included", title="Training throughput")
    axes[1].barh(names, [r["median_s_to_target"] or 0 for r in rows])
    axes[1].set(xlabel="seconds to the target (median; 0: not reached)", title="Time to target")
    for ax in axes:
        ax.invert_yaxis()
    return save_figure(fig, out_dir, "learners")


def add_arguments(parser) -> None:
    parser.add_argument(
        "--learners",
        type=options.sizes(),
        default="2",
        help="learner counts beside the local learner, e.g. '2' or '1,2,4' (default: %(default)s)",
    )
    parser.add_argument(
        "--layouts",
        default=",".join(LAYOUTS),
        help="layouts beside the local learner: colocated, separate or both (default: %(default)s)",
    )
    parser.add_argument(
        "--seeds",
        type=options.sizes(0, allow_empty=True),
        default="0,1,2",
        help="seeds of the time-to-target runs ('' for none: throughput only; default: %(default)s)",
    )
    parser.add_argument("--iterations", type=options.count(), default=5, help="timed iterations per setup for the throughput")
    parser.add_argument(
        "--target", type=options.number, default=475.0, help="last-100 mean return to reach (default: %(default)s)"
    )
    parser.add_argument("--budget", type=options.seconds, default=120.0, help="seconds of training per run before giving up")
    parser.add_argument(
        "--config-file", metavar="PATH", help="the experiment file (default: the main job's, gpu_cartpole_ppo.yaml)"
    )
    parser.add_argument(
        "--device",
        type=options.device,  # a GPU this machine lacks: one line while parsing
        choices=["cpu", "cuda"],
        default="cpu",
        help="cuda: a GPU per colocated learner; separate: each env runner shares a GPU with a learner",
    )


def run_from_args(args) -> None:
    run(
        args.learners,
        args.seeds,
        args.iterations,
        args.target,
        args.budget,
        args.config_file,
        args.out,
        args.plot,
        args.device,
        tuple(args.layouts.split(",")),
    )
