"""Workload scaling (the CS267 paper's figures 5 and 6): time per step vs work per step.

``substeps=k`` integrates each step in k sub-steps of tau/k: the same env with k times the
arithmetic. Where the time per step stays flat as k grows, the step is bound by overhead (Python,
launches, memory traffic), not by the physics; where it grows linearly, by compute.
"""

from __future__ import annotations

import sys

import torch

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import default_sizes, parse_sizes, pyplot, report, save_figure, time_calls
from rllib_gpuenv.bench.scaling import _ours
from rllib_gpuenv.experiments.tables import format_table


def backends() -> list[tuple[str, str, str]]:
    """(label, backend, device) of every backend that runs here."""
    from rllib_gpuenv.backends import available_backends

    found = [("torch (cpu)", "torch", "cpu"), ("numba-cpu", "numba-cpu", "cpu")]
    if torch.cuda.is_available():
        found.append(("torch (cuda)", "torch", "cuda"))
        if "numba-cuda" in available_backends(torch.device("cuda")):
            found.append(("numba-cuda", "numba-cuda", "cuda"))
    return found


def run(
    num_envs: list[int], substeps: list[int], min_seconds: float = 0.3, out_dir: str = "bench_results", plot: bool = False
) -> list[dict]:
    rows = []
    for label, backend, device in backends():
        for n in num_envs:
            if device == "cpu" and n > (1 << 20):
                continue
            for k in substeps:
                print(f"  {label:<14} num_envs={n:>9,} substeps={k:>4} ...", end="", file=sys.stderr, flush=True)
                seconds = time_calls(_ours("GPUCartPole-v1", backend, device, substeps=k)(n), min_seconds, 10, device=device)
                rows.append({"backend": label, "num_envs": n, "substeps": k, "seconds_per_step": seconds})
                print(f" {seconds * 1e3:.3f} ms", file=sys.stderr)
    print(summary(rows))
    meta = {"num_envs": num_envs, "substeps": substeps}
    report(rows, out_dir, "workload", meta, plot=(lambda: plot_workload(rows, out_dir)) if plot else None)
    return rows


def summary(rows: list[dict]) -> str:
    columns = list(dict.fromkeys((r["backend"], r["num_envs"]) for r in rows))
    substeps = sorted({r["substeps"] for r in rows})
    ms = {(r["backend"], r["num_envs"], r["substeps"]): r["seconds_per_step"] * 1e3 for r in rows}
    table = [[k] + [ms.get((b, n, k)) for b, n in columns] for k in substeps]
    text = "ms per step() call (lower is better)\n" + format_table(["substeps"] + [f"{b} n={n:,}" for b, n in columns], table)
    if len(substeps) > 1:
        lo, hi = substeps[0], substeps[-1]
        growth = [
            [f"{b} n={n:,}", ms[(b, n, hi)] / ms[(b, n, lo)]] for b, n in columns if (b, n, lo) in ms and (b, n, hi) in ms
        ]
        text += f"\n\ntime growth from substeps={lo} to {hi} ({hi // lo}x the work)\n" + format_table(
            ["backend", "growth"], growth
        )
    return text


def plot_workload(rows: list[dict], out_dir: str) -> str:
    plt = pyplot()

    sizes = sorted({r["num_envs"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes), 4), squeeze=False)
    for ax, n in zip(axes[0], sizes):
        for b in dict.fromkeys(r["backend"] for r in rows):
            mine = sorted((r for r in rows if r["backend"] == b and r["num_envs"] == n), key=lambda r: r["substeps"])
            ax.plot([r["substeps"] for r in mine], [r["seconds_per_step"] * 1e3 for r in mine], marker="o", label=b)
        ax.set(xscale="log", yscale="log", xlabel="substeps (work per step)", ylabel="ms per step", title=f"num_envs={n:,}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside the data
    return save_figure(fig, out_dir, "workload")


def add_arguments(parser) -> None:
    parser.add_argument("--num-envs", type=options.sizes(), help="sizes (default 256,65536 on CPU; 4096,1048576 on GPU)")
    parser.add_argument("--substeps", type=options.sizes(), default="1,4,16,64", help="substeps values")
    parser.add_argument("--min-seconds", type=options.seconds, default=0.3, help="time each point at least this long")


def run_from_args(args) -> None:
    num_envs = args.num_envs or parse_sizes(default_sizes(cpu="256,65536", gpu="4096,1048576"))
    run(num_envs, args.substeps, min_seconds=args.min_seconds, out_dir=args.out, plot=args.plot)
