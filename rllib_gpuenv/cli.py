"""``rllib-gpuenv``: one subcommand per job: ``train`` (the main job), ``evaluate`` (watch a
checkpoint's policy), ``bench <name>`` (the benchmarks, the CUDA block-size search among them)."""

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


def _default_sizes(cpu: str, gpu: str) -> str:
    import torch

    return gpu if torch.cuda.is_available() else cpu


def _bench_scaling(args) -> None:
    from rllib_gpuenv.bench import throughput

    sizes = _sizes(args.num_envs or _default_sizes("1..65536", "1..4194304"))
    for env_id in args.env:
        name = "scaling" if len(args.env) == 1 else f"scaling_{env_id}"
        throughput.run(sizes, min_seconds=args.min_seconds, only=args.only, out_dir=args.out, plot=args.plot, rounds=args.rounds,
                       env_id=env_id, reference=args.reference, name=name, load=args.load)  # fmt: skip


def _bench_block_size(args) -> None:
    from rllib_gpuenv.bench import block_size

    sizes = _sizes(args.num_envs or "4096,65536,1048576,4194304")
    block_size.run(sizes, _sizes(args.candidates), steps=args.steps, out_dir=args.out, plot=args.plot)


def _bench_workload(args) -> None:
    from rllib_gpuenv.bench import workload

    sizes = _sizes(args.num_envs or _default_sizes("256,65536", "4096,1048576"))
    workload.run(sizes, _sizes(args.substeps), min_seconds=args.min_seconds, out_dir=args.out, plot=args.plot)


def _bench_sampling(args) -> None:
    from rllib_gpuenv.bench import sampling

    sizes = _sizes(args.num_envs or _default_sizes("16,256,4096", "256,4096,65536,1048576"))
    sampling.run(sizes, rollout_length=args.rollout_length, device=args.device, rounds=args.rounds, min_seconds=args.min_seconds,
                 out_dir=args.out, plot=args.plot)  # fmt: skip


def _bench_training(args) -> None:
    from rllib_gpuenv.bench import training

    try:
        training.run(args.contenders, _sizes(args.seeds), target=args.target, budget_s=args.budget, out_dir=args.out, plot=args.plot,
                     task=args.task, device_config=args.device_config)  # fmt: skip
    except (ValueError, FileNotFoundError) as err:  # a contender the task lacks, a missing experiment file
        raise SystemExit(f"rllib-gpuenv bench training: error: {err}") from None


def _bench_breakdown(args) -> None:
    from rllib_gpuenv.bench import breakdown

    try:
        breakdown.run(args.num_envs, args.rollout_length, args.iterations, device=args.device, out_dir=args.out, plot=args.plot,
                      algo=args.algo, env=args.env, config_file=args.device_config)  # fmt: skip
    except (ValueError, FileNotFoundError) as err:  # an algorithm or env it does not know, a missing experiment file
        raise SystemExit(f"rllib-gpuenv bench breakdown: error: {err}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rllib-gpuenv", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    from rllib_gpuenv import evaluate, train

    train.add_arguments(sub.add_parser("train", help="train PPO on GPUCartPole-v1 (the main job)"))
    evaluate.add_arguments(sub.add_parser("evaluate", help="play a checkpoint's policy: returns, and a video with --video"))

    bench = sub.add_parser("bench", help="benchmarks: each prints a table and writes JSON/CSV (and a PNG with --plot)")
    bench_sub = bench.add_subparsers(dest="benchmark", required=True)

    def benchmark(name: str, help: str, func, aliases=()):
        p = bench_sub.add_parser(name, help=help, aliases=list(aliases))
        p.add_argument("--out", default="bench_results", help="folder for results (default: %(default)s)")
        p.add_argument("--plot", action="store_true", help="also write a PNG plot")
        p.set_defaults(func=func)
        return p

    sc = benchmark("scaling", "env-steps/s and time per step vs num_envs: every backend vs gymnasium and plain torch", _bench_scaling, ["throughput"])
    sc.add_argument("--num-envs", help="sizes: '1,256,65536' or '1..65536' (powers of 4); default 1..65536 on CPU, ..4194304 on GPU")
    sc.add_argument("--min-seconds", type=float, default=0.5, help="time each point at least this long (over all rounds)")
    sc.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per size; each point is the median")
    sc.add_argument("--only", nargs="*", help="only contenders whose name contains one of these")
    sc.add_argument("--env", nargs="+", default=["GPUCartPole-v1"], metavar="ID",
                    help="env id(s) of the suite (default: %(default)s); several write scaling_<id>.* each")
    sc.add_argument("--load", type=int, default=0, metavar="N",
                    help="run N busy processes meanwhile: a machine shared with another tenant, on purpose")
    sc.add_argument("--reference", metavar="DIR",
                    help="another checkout of this package (a directory holding rllib_gpuenv/): its numba-cpu CartPole joins as a contender")
    bs = benchmark("block-size", "numba-cuda threads per block at several num_envs (GPU)", _bench_block_size)
    bs.add_argument("--num-envs", help="sizes (default 4096,65536,1048576,4194304)")
    bs.add_argument("--candidates", default="32,64,128,256,512,1024", help="threads-per-block values")
    bs.add_argument("--steps", type=int, default=200, help="steps timed per point")
    wl = benchmark("workload", "time per step vs substeps (work per step) for the torch and numba backends", _bench_workload)
    wl.add_argument("--num-envs", help="sizes (default 256,65536 on CPU; 4096,1048576 on GPU)")
    wl.add_argument("--substeps", default="1,4,16,64", help="substeps values")
    wl.add_argument("--min-seconds", type=float, default=0.3, help="time each point at least this long")
    sa = benchmark("sampling", "env-steps/s of an env runner's sample(), policy included: device runner vs env alone and RLlib's runner",
                   _bench_sampling)
    sa.add_argument("--num-envs", help="sizes (default 16,256,4096 on CPU; 256,4096,65536,1048576 on GPU)")
    sa.add_argument("--rollout-length", type=int, default=32, help="steps per sample() call (default: %(default)s)")
    sa.add_argument("--device", help="the device runner's device (default: the GPU if there is one)")
    sa.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per size; each point is the median")
    sa.add_argument("--min-seconds", type=float, default=1.0, help="time each point at least this long (over all rounds)")
    tr = benchmark("training", "reward vs wall time, side by side: our device path, stock RLlib, SB3 (PPO or DQN)", _bench_training)
    from rllib_gpuenv.bench.training import DEFAULT_TASK, TASKS

    tr.add_argument("--task", choices=list(TASKS), default=DEFAULT_TASK,
                    help="the race (default: %(default)s); pendulum-ppo: continuous PPO to -300; cartpole-dqn: DQN to 475")
    tr.add_argument("--contenders", nargs="*", help="a subset of the task's contenders (default: all of them); cartpole-ppo: "
                    "device stock-runner stock-rllib stock-rllib-8envs sb3; pendulum-ppo and cartpole-dqn: device stock-rllib sb3")
    tr.add_argument("--seeds", default="0,1,2", help="seeds (default: %(default)s)")
    tr.add_argument("--target", type=float, help="mean return of the last 100 episodes to reach (default: the task's, 475 or -300)")
    tr.add_argument("--budget", type=float, default=90.0, help="seconds of training per run before giving up")
    tr.add_argument("--device-config", metavar="PATH",
                    help="the device contender's experiment file (default: the task's shipped one, e.g. configs/gpu_cartpole_dqn.yaml)")
    bd = benchmark("breakdown", "where the time of a training iteration goes, device path (vs stock runner for PPO)", _bench_breakdown)
    bd.add_argument("--algo", choices=["DevicePPO", "DeviceDQN"], default="DevicePPO", help="the device path's algorithm (default: %(default)s)")
    bd.add_argument("--env", default="GPUCartPole-v1", help="an env of the suite, e.g. GPUPendulum-v1 (default: %(default)s)")
    bd.add_argument("--device-config", metavar="PATH",
                    help="the device path's experiment file (default: the algorithm's shipped one, gpu_pendulum_ppo.yaml for Pendulum PPO)")
    bd.add_argument("--num-envs", type=int, default=128)
    bd.add_argument("--rollout-length", type=int, default=32)
    bd.add_argument("--iterations", type=int, default=5)
    bd.add_argument("--device", help="device of the device path (default auto)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
