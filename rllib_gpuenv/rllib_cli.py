"""``rllib``: the command line RLlib used to ship, kept alive for experiment files.

    rllib train file configs/gpu_cartpole_ppo.yaml          # an experiment file (YAML or Python)
    rllib train --algo PPO --env GPUCartPole-v1 \\
        --config '{"num_env_runners": 0}' --stop '{"training_iteration": 5}'

Experiments run with Ray Tune: progress as Tune shows it, results in Tune's storage
(``~/ray_results`` unless ``--storage-path``). Old key and metric names are translated with a
warning; unknown algorithms, envs and keys are errors naming the file and key. An experiment
with a ``resource_search`` section runs the Tune resource search (``rllib_gpuenv.tune_resources``).
Inside ``ray job submit`` the command joins the job's cluster.
"""

from __future__ import annotations

import argparse
import logging
import sys

import yaml

from rllib_gpuenv.experiments import (
    Experiment,
    ExperimentError,
    apply_config,
    inline_experiment,
    load_experiments,
    run_experiment,
    translate_metric,
)

logger = logging.getLogger(__name__)


def _mapping(text: str) -> dict:
    """A JSON (or YAML flow) mapping from the command line."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ExperimentError(f"not a JSON mapping: {text!r} ({err})") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExperimentError(f"expected a JSON mapping such as '{{\"lr\": 0.001}}', got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rllib",
        description="Train RLlib algorithms from experiment files or the command line (rllib_gpuenv's `rllib train`).",
        epilog="Run `rllib train --help` for the experiment file format and every option.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help="run experiments with Ray Tune",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run experiments with Ray Tune, from a file or from --algo/--env.\n\n"
            "  rllib train file EXPERIMENTS.yaml|.py [options]\n"
            "  rllib train --algo PPO --env GPUCartPole-v1 [--config JSON] [--stop JSON] [options]\n\n"
            "A YAML file holds {name: {run, env, stop, config, num_samples, checkpoint_config, storage_path,\n"
            "resource_search}}; `config` holds AlgorithmConfig settings (DevicePPO adds `devices` and\n"
            "`device_rollouts`). A Python file defines `config` (an AlgorithmConfig) and `stop`.\n"
            "Old names (num_workers, num_envs_per_worker, sgd_minibatch_size, num_sgd_iter, model,\n"
            "episode_reward_mean, timesteps_total, local_dir, checkpoint_freq, ...) are translated with a\n"
            "warning. With `resource_search`, Tune tries the resource settings and writes the best as a file."
        ),
    )
    train.add_argument("source", nargs="*", metavar="file PATH", help="`file` followed by an experiment file")
    train.add_argument("--algo", "--run", dest="algo", help="algorithm: DevicePPO, PPO, APPO, DQN, ... (without a file)")
    train.add_argument("--env", help="env id (without a file), e.g. GPUCartPole-v1 or CartPole-v1")
    train.add_argument("--config", type=_mapping, default={}, help="JSON mapping of AlgorithmConfig settings; with a file, overrides its config")
    train.add_argument("--stop", type=_mapping, default={}, help="JSON mapping of stop criteria, e.g. '{\"training_iteration\": 10}'; with a file, overrides its stop")
    train.add_argument("--num-samples", type=int, help="trials per experiment")
    train.add_argument("--storage-path", help="where Tune writes results (default ~/ray_results)")
    train.add_argument("--checkpoint-freq", type=int, help="checkpoint every N iterations")
    train.add_argument("--checkpoint-at-end", action="store_true", help="checkpoint when a trial ends")
    train.add_argument("--ray-address", help="join this Ray cluster (default: the job's cluster, else a local one)")
    train.add_argument("--ray-num-cpus", type=int, help="CPUs of a local Ray instance")
    train.add_argument("--ray-num-gpus", type=int, help="GPUs of a local Ray instance")
    train.add_argument("-v", "--verbose", action="count", default=1, help="more output (Tune's verbosity)")
    train.set_defaults(func=train_command)

    from rllib_gpuenv import evaluate

    evaluate.add_arguments(sub.add_parser("evaluate", help="play a checkpoint's policy: returns, and a video with --video"))
    return parser


def experiments_from_args(args) -> list[Experiment]:
    if args.source:
        if args.source[0] != "file" or len(args.source) != 2:
            raise ExperimentError(f"expected `rllib train file PATH`, got `rllib train {' '.join(args.source)}`")
        if args.algo or args.env:
            raise ExperimentError("give either an experiment file or --algo/--env, not both")
        experiments = load_experiments(args.source[1])
        for experiment in experiments:
            apply_config(experiment.config, dict(args.config), "--config")
            experiment.stop.update({translate_metric(k, "--stop"): v for k, v in args.stop.items()})
        return experiments
    if not (args.algo and args.env):
        raise ExperimentError("give an experiment file (`rllib train file PATH`) or both --algo and --env")
    return [inline_experiment(args.algo, args.env, args.config, args.stop)]


def train_command(args) -> int:
    import ray

    experiments = experiments_from_args(args)
    for experiment in experiments:
        if args.num_samples is not None:
            experiment.num_samples = args.num_samples
        if args.checkpoint_freq is not None:
            experiment.checkpoint_config["checkpoint_frequency"] = args.checkpoint_freq
        if args.checkpoint_at_end:
            experiment.checkpoint_config["checkpoint_at_end"] = True
    ray.init(address=args.ray_address, num_cpus=args.ray_num_cpus, num_gpus=args.ray_num_gpus, ignore_reinit_error=True)
    for experiment in experiments:
        if experiment.resource_search is not None:
            from rllib_gpuenv.tune_resources import search_resources

            search_resources(experiment, storage_path=args.storage_path, verbose=args.verbose)
            continue
        results = run_experiment(experiment, storage_path=args.storage_path, verbose=args.verbose)
        errors = [r.error for r in results if r.error is not None]
        print(f"experiment {experiment.name!r}: {len(results)} trial(s), results in {results.experiment_path}")
        if errors:
            print(f"{len(errors)} trial(s) failed: {errors[0]}", file=sys.stderr)
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ExperimentError as err:
        print(f"rllib: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
