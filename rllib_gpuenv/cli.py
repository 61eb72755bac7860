"""``rllib-gpuenv``: train, benchmark and tune the CUDA block size from the command line."""

from __future__ import annotations

import argparse
import logging
import sys


def _sizes(text: str) -> list[int]:
    """'1,16,256' or '1..65536' (powers of 4 between the bounds)."""
    if ".." in text:
        low, high = (int(v) for v in text.split(".."))
        sizes, n = [], low
        while n <= high:
            sizes.append(n)
            n *= 4
        return sizes
    return [int(v) for v in text.split(",")]


def _bench_throughput(args) -> None:
    import torch

    from rllib_gpuenv.bench import throughput

    sizes = args.num_envs or ("1..4194304" if torch.cuda.is_available() else "1..65536")
    throughput.run(_sizes(sizes), min_seconds=args.min_seconds, only=args.only, out_dir=args.out, plot=args.plot)


def _tune_block_size(args) -> None:
    from rllib_gpuenv.backends.numba_cuda import search_threads_per_block
    from rllib_gpuenv.bench.common import format_table

    results = search_threads_per_block(args.num_envs, _sizes(args.candidates), steps=args.steps, device=args.device)
    print(format_table(["threads_per_block", "env-steps/s"], [[r.threads_per_block, r.env_steps_per_second] for r in results]))
    print(f"best: threads_per_block={results[0].threads_per_block}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rllib-gpuenv", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    from rllib_gpuenv import train as train_module

    train_module.add_arguments(sub.add_parser("train", help="train PPO on GPUCartPole-v1 (the main job)"))

    bench = sub.add_parser("bench", help="benchmarks: each prints a table and writes JSON/CSV (and a PNG with --plot)")
    bench_sub = bench.add_subparsers(dest="benchmark", required=True)
    tp = bench_sub.add_parser("throughput", help="env-steps/s per backend vs gymnasium and plain torch")
    tp.add_argument("--num-envs", help="sizes: '1,256,65536' or '1..65536' (powers of 4); default 1..65536 on CPU, ..4194304 on GPU")
    tp.add_argument("--min-seconds", type=float, default=0.5, help="time each point at least this long")
    tp.add_argument("--only", nargs="*", help="only contenders whose name contains one of these")
    tp.add_argument("--out", default="bench_results", help="folder for results")
    tp.add_argument("--plot", action="store_true", help="also write a PNG plot")
    tp.set_defaults(func=_bench_throughput)

    tpb = sub.add_parser("tune-block-size", help="measure the numba-cuda kernel over threads-per-block values")
    tpb.add_argument("--num-envs", type=int, default=1 << 20)
    tpb.add_argument("--candidates", default="32,64,128,256,512,1024")
    tpb.add_argument("--steps", type=int, default=200)
    tpb.add_argument("--device", default="cuda")
    tpb.set_defaults(func=_tune_block_size)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
