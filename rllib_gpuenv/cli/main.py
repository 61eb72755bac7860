"""``rllib-gpuenv``: one subcommand per job: ``train`` (the main job), ``evaluate`` (watch a
checkpoint's policy), ``bench <name>`` (the benchmarks, the CUDA block-size search among them)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

import rllib_gpuenv.options as options
from rllib_gpuenv.bench import BENCHMARKS
from rllib_gpuenv.cli import collector, evaluate, train
from rllib_gpuenv.cli.errors import run_command
from rllib_gpuenv.cli.parsing import parse_args
from rllib_gpuenv.cli.quiet import quiet_start


def _add_benchmarks(subparsers) -> None:
    """``bench <name>``: each benchmark module adds its own options and runs from them."""
    bench = subparsers.add_parser("bench", help="benchmarks: each prints a table and writes JSON/CSV (and a PNG with --plot)")
    names = bench.add_subparsers(dest="benchmark", required=True)
    for name, (module_name, help, aliases) in BENCHMARKS.items():
        module = importlib.import_module(f"rllib_gpuenv.bench.{module_name}")
        parser = names.add_parser(name, help=help, aliases=list(aliases))
        parser.add_argument(
            "--out", type=options.output_folder, default="bench_results", help="folder for results (default: %(default)s)"
        )
        parser.add_argument("--plot", action="store_true", help="also write a PNG plot")
        module.add_arguments(parser)
        parser.set_defaults(func=module.run_from_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rllib-gpuenv",
        description="One subcommand per job: train (the main job), evaluate (watch a checkpoint's policy), "
        "bench NAME (the benchmarks, the CUDA block-size search among them).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    train.add_arguments(sub.add_parser("train", help="train PPO on GPUCartPole-v1 (the main job)"))
    evaluate.add_arguments(sub.add_parser("evaluate", help="play a checkpoint's policy: returns, and a video with --video"))
    _add_benchmarks(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    if args.command != "train":  # the main job resumes the collector once its algorithm is built
        collector.resume()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    quiet_start()
    prog = "rllib-gpuenv" if args.command != "bench" else f"rllib-gpuenv bench {args.benchmark}"
    return run_command(prog, args.func, args)


if __name__ == "__main__":
    sys.exit(main())
