"""Threads per block of the numba-cuda kernel: a sweep at several num_envs, best per size.

GPU only: under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs, so that CI can
check the code path, but the timings mean nothing and the table says so.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import parse_sizes, pyplot, report, save_figure, synchronize
from rllib_gpuenv.experiments.tables import format_table

logger = logging.getLogger(__name__)


@dataclass
class BlockSizeResult:
    threads_per_block: int
    env_steps_per_second: float


def search_threads_per_block(
    num_envs: int = 1 << 20,
    candidates: Sequence[int] = (32, 64, 128, 256, 512, 1024),
    steps: int = 200,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cuda",
    env_id: str = "GPUCartPole-v1",
) -> list[BlockSizeResult]:
    """Measure env-steps/s of the CUDA kernel for each threads-per-block value, best first.

    The kernel's speed depends on the GPU and on ``num_envs`` (occupancy, tail effects), so the
    right block size is found by measuring, as the CS267 paper did. Each candidate steps a
    fresh env ``steps`` times with actions from a pre-made pool, timed after a warm-up.
    """
    from rllib_gpuenv.envs import make_vector_env

    results = []
    for tpb in candidates:
        env = make_vector_env(
            env_id,
            num_envs,
            backend="numba-cuda",
            device=device,
            dtype=dtype,
            threads_per_block=tpb,
            reuse_outputs=True,
            validate_actions=False,
        )
        env.reset(seed=0)
        pool = torch.stack([torch.as_tensor(env.action_space.sample()) for _ in range(8)]).to(env.device)
        for t in range(3):  # warm-up: compile and fill caches
            env.step(pool[t % 8])
        synchronize(env.device)
        start = time.perf_counter()
        for t in range(steps):
            env.step(pool[t % 8])
        synchronize(env.device)
        elapsed = time.perf_counter() - start
        results.append(BlockSizeResult(tpb, num_envs * steps / elapsed))
        env.close()
        logger.info("threads_per_block=%d: %.3g env-steps/s", tpb, results[-1].env_steps_per_second)
    return sorted(results, key=lambda r: -r.env_steps_per_second)


def run(
    num_envs: list[int], candidates: list[int], steps: int = 200, out_dir: str = "bench_results", plot: bool = False
) -> list[dict]:
    from rllib_gpuenv.backends.numba_cuda import SIMULATED, cuda_available

    if not cuda_available():
        raise ValueError("bench block-size needs a CUDA GPU (or NUMBA_ENABLE_CUDASIM=1 to check the code path)")
    device = "cpu" if SIMULATED else "cuda"
    rows = []
    for n in num_envs:
        print(f"  num_envs={n:>9,} ...", file=sys.stderr, flush=True)
        for result in search_threads_per_block(n, candidates, steps=steps, device=device):
            rows.append(
                {"num_envs": n, "threads_per_block": result.threads_per_block, "env_steps_per_s": result.env_steps_per_second}
            )
    rate = {(r["num_envs"], r["threads_per_block"]): r["env_steps_per_s"] for r in rows}
    table = [[tpb] + [rate.get((n, tpb)) for n in num_envs] for tpb in candidates]
    best = [[n, max(candidates, key=lambda t: rate.get((n, t), 0))] for n in num_envs]
    note = " (CUDA SIMULATOR: timings mean nothing)" if SIMULATED else ""
    print(
        f"env-steps/s by threads per block{note}\n"
        + format_table(["threads_per_block"] + [f"n={n:,}" for n in num_envs], table)
    )
    print("\nbest threads per block\n" + format_table(["num_envs", "threads_per_block"], best))
    meta = {"num_envs": num_envs, "candidates": candidates, "simulated": SIMULATED, "best": best}
    report(rows, out_dir, "block_size", meta, plot=(lambda: plot_block_size(rows, out_dir)) if plot else None)
    return rows


def plot_block_size(rows: list[dict], out_dir: str) -> str:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for n in sorted({r["num_envs"] for r in rows}):
        mine = sorted((r for r in rows if r["num_envs"] == n), key=lambda r: r["threads_per_block"])
        ax.plot(
            [r["threads_per_block"] for r in mine], [r["env_steps_per_s"] for r in mine], marker="o", label=f"num_envs={n:,}"
        )
    ax.set(
        xscale="log", yscale="log", xlabel="threads per block", ylabel="env-steps / s", title="numba-cuda kernel: block size"
    )
    ax.set_xticks(
        sorted({r["threads_per_block"] for r in rows}), labels=[str(t) for t in sorted({r["threads_per_block"] for r in rows})]
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir, "block_size")


def add_arguments(parser) -> None:
    parser.add_argument("--num-envs", type=options.sizes(), help="sizes (default 4096,65536,1048576,4194304)")
    parser.add_argument(
        "--candidates", type=options.sizes(), default="32,64,128,256,512,1024", help="threads-per-block values"
    )
    parser.add_argument("--steps", type=options.count(), default=200, help="steps timed per point")


def run_from_args(args) -> None:
    num_envs = args.num_envs or parse_sizes("4096,65536,1048576,4194304")
    run(num_envs, args.candidates, steps=args.steps, out_dir=args.out, plot=args.plot)
