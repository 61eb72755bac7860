"""``rllib``: the command line RLlib used to ship, kept alive for experiment files.

    rllib train file configs/gpu_cartpole_ppo.yaml          # an experiment file (YAML or Python)
    rllib train -f old_tuned_example.yaml                   # the old spelling
    rllib train --algo PPO --env GPUCartPole-v1 --stop '{"training_iteration": 2}'

Every file and setting is checked before Ray starts: a mistake is one line,
``rllib: error: <file>: experiment '<name>': <key>: <problem and fix>``. Old key and metric names,
RLlib's transition flags and old-stack settings are translated or dropped with a warning each
(``rllib_gpuenv.experiments.legacy``). Experiments run with Ray Tune, one progress row per result; results
go to Tune's storage (``~/ray_results`` unless ``--storage-path``). An experiment with a
``resource_search`` section runs the Tune resource search (``rllib_gpuenv.experiments.tune_resources``).
Inside ``ray job submit`` the command joins the job's cluster.

Subcommands register themselves in ``build_parser`` through one ``add_<name>_command(subparsers)``
function each.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import yaml

import rllib_gpuenv.options as options
from rllib_gpuenv.cli import collector
from rllib_gpuenv.cli.errors import TuneInterrupted, run_command
from rllib_gpuenv.cli.parsing import parse_args
from rllib_gpuenv.cli.quiet import SETUP_HOOK, quiet_start
from rllib_gpuenv.experiments.errors import ExperimentError
from rllib_gpuenv.experiments.legacy import DROPPED, REPLACED

logger = logging.getLogger(__name__)

TRAIN_DESCRIPTION = """\
Run experiments with Ray Tune, from files or from --algo/--env.

  rllib train file EXPERIMENTS.yaml|.py [MORE FILES] [options]     (or: rllib train -f FILE)
  rllib train --algo PPO --env GPUCartPole-v1 [--config JSON] [--stop JSON] [options]

A YAML file holds {name: {run, env, stop, config, num_samples, checkpoint_config, failure_config,
storage_path, restore, resource_search}}; `config` holds AlgorithmConfig settings (DevicePPO adds `devices` and
`device_rollouts`). A Python file defines `config` (an AlgorithmConfig) and `stop`.

Old files run: renamed keys (num_workers, num_envs_per_worker, sgd_minibatch_size, num_sgd_iter,
model, lr_schedule, episode_reward_mean, timesteps_total, local_dir, checkpoint_freq, max_failures, ...) are
translated; RLlib's transition flags (_enable_learner_api, enable_connectors, use_pytorch, ...)
and settings only the old API stack read are dropped, each with a warning that names the
replacement; observation_filter: MeanStdFilter becomes RLlib's MeanStdFilter connector, and
old replay settings (buffer_size, prioritized_replay, old buffer types) replay_buffer_config's.

Everything is checked before Ray starts; a mistake is one line naming file, experiment and key.
A run needs a stop criterion on a metric RLlib or Tune reports (--no-stop runs until Ctrl-C).
Progress: one row per result (return, env steps, env-steps/s, time); -v adds each trial's config.
With `resource_search`, Tune tries the resource settings and writes the best as a file.
Going on: --restore CHECKPOINT starts the trials from a checkpoint; after Ctrl-C, the same
command with --resume goes on with the interrupted experiment."""


MAX_CHECKPOINT_LINES = 4  # more trials: one line for them all

# Options of the old `rllib train` whose work is done otherwise today: each is parsed, so that the
# command says what replaced it (an error: the run would not be the one asked for), where argparse
# would only say "unrecognized arguments". Flag: (whether it takes a value, what to do instead).
OLD_OPTIONS = {
    "--resources-per-trial": (True, REPLACED["resources_per_trial"] + " (--config)"),
    "--export-formats": (True, REPLACED["export_formats"] + " (--checkpoint-at-end keeps one)"),
    "--ray-num-nodes": (
        True,
        "Ray dropped the emulated multi-node cluster: start nodes with `ray start` and join them with --ray-address "
        "(README: On a cluster)",
    ),
    "--eager": (False, "TensorFlow's eager mode: RLlib's new API stack runs torch only: drop --eager"),
    "--trace": (False, "TensorFlow's eager tracing: RLlib's new API stack runs torch only: drop --trace"),
}


def checkpoint_lines(results) -> list[str]:
    """Where each trial's latest checkpoint is: what `rllib evaluate` and `--restore` take."""
    paths = [result.checkpoint.path for result in results if result.checkpoint is not None]
    if len(paths) > MAX_CHECKPOINT_LINES:
        return [f"{len(paths)} trials kept checkpoints, each in its trial's folder (checkpoint_<n>, the latest the highest)"]
    return [f"latest checkpoint: {path}" for path in paths]


def _mapping(text: str) -> dict:
    """A JSON (or YAML flow) mapping from the command line."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise argparse.ArgumentTypeError(f"not a JSON mapping: {text!r} ({' '.join(str(err).split())})") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON mapping such as '{{\"lr\": 0.001}}', got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rllib",
        description="Train RLlib algorithms from experiment files or the command line (rllib_gpuenv's `rllib`).",
        epilog="Run `rllib <command> --help` for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train = add_train_command(sub)
    from rllib_gpuenv.cli.examples import add_example_command

    add_example_command(sub, train)

    from rllib_gpuenv.cli import evaluate

    evaluate.add_arguments(
        sub.add_parser("evaluate", aliases=["rollout"], help="play a checkpoint's policy: returns, and a video with --video")
    )
    return parser


def add_train_command(subparsers) -> argparse.ArgumentParser:
    train = subparsers.add_parser(
        "train",
        help="run experiments with Ray Tune",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=TRAIN_DESCRIPTION,
    )
    # options of `rllib-gpuenv train` (the main job) that `rllib train` spells otherwise
    train.option_hints = {
        "--device": 'rllib train sets devices in the config: --config \'{"devices": {"learner": "cuda", '
        '"env_runners": "cuda"}}\'',
        "--num-learners": "rllib train sets them in the config: --config '{\"num_learners\": 2}'",
    }
    train.add_argument("source", nargs="*", metavar="file PATH", help="`file` followed by one or more experiment files")
    train.add_argument(
        "-f",
        "--config-file",
        action="append",
        default=[],
        metavar="PATH",
        help="an experiment file (old spelling of `file PATH`)",
    )
    train.add_argument(
        "--algo",
        "--run",
        "-a",
        "-r",
        dest="algo",
        help="algorithm: DevicePPO, DeviceDQN, DeviceSAC, or RLlib's (PPO, APPO, DQN, SAC, ...) (without a file)",
    )
    train.add_argument("--env", "-e", help="env id (without a file), e.g. GPUCartPole-v1 or CartPole-v1")
    train.add_argument(
        "--experiment-name",
        "-n",
        help="the experiment's name with --algo/--env (default ALGO_ENV): its folder in the storage path",
    )
    train.add_argument(
        "--config",
        "-c",
        type=_mapping,
        default={},
        help="JSON mapping of AlgorithmConfig settings; with a file, overrides its config",
    )
    train.add_argument(
        "--stop",
        "-s",
        type=_mapping,
        default={},
        help="JSON mapping of stop criteria, e.g. '{\"training_iteration\": 10}'; with a file, added to its stop",
    )
    train.add_argument(
        "--no-stop", action="store_true", help="allow experiments without stop criteria (they run until interrupted)"
    )
    train.add_argument("--framework", help="accepted for old command lines: torch is the only framework")
    train.add_argument("--torch", action="store_true", help="accepted for old command lines: torch is the only framework")
    train.add_argument("--num-samples", type=options.count(1), help="trials per experiment")
    train.add_argument(
        "--storage-path",
        "--local-dir",
        dest="storage_path",
        help="where Tune writes results: a folder (default ~/ray_results) or a URI (s3://..., gs://...)",
    )
    train.add_argument(
        "--upload-dir",
        metavar="URI",
        help="old spelling of --storage-path URI: Tune writes the results there (old Tune copied them there)",
    )
    train.add_argument("--checkpoint-freq", type=options.count(0), help="checkpoint every N iterations")
    train.add_argument("--checkpoint-at-end", action="store_true", help="checkpoint when a trial ends")
    train.add_argument(
        "--max-failures",
        type=options.count(-1),
        metavar="N",
        help="start a trial that failed again, at most N times (-1: always; default 0), from its latest checkpoint "
        "if it kept one (--checkpoint-freq), else from the start; as failure_config: {max_failures: N} in a file",
    )
    train.add_argument(
        "--keep-checkpoints-num", type=options.count(1), help="keep each trial's N best checkpoints (default: all)"
    )
    train.add_argument(
        "--checkpoint-score-attr",
        help="the metric that ranks checkpoints for --keep-checkpoints-num (default: the latest are best); a min- "
        "prefix: lower is better",
    )
    train.add_argument(
        "--scheduler",
        default="FIFO",
        help="Tune's trial scheduler: FIFO (default), ASHA (async_hyperband), HyperBand, MedianStopping, PBT, ...",
    )
    train.add_argument(
        "--scheduler-config",
        type=_mapping,
        default={},
        help='JSON mapping of the scheduler\'s settings, e.g. \'{"grace_period": 10, "max_t": 100}\' (metric: '
        "the mean return unless given)",
    )
    train.add_argument(
        "--restore",
        metavar="CHECKPOINT",
        help="every trial starts from this algorithm checkpoint (its weights, optimizer, counters), with the "
        "experiment's config; as `restore:` in a file",
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="go on with the experiments of a run stopped by Ctrl-C or SIGTERM, kept in STORAGE_PATH/NAME, as started "
        "(their stop criteria and configs): their unfinished trials, each from its latest checkpoint "
        "(--checkpoint-freq); an experiment not found there starts",
    )
    train.add_argument(
        "--ray-address",
        help="join this Ray cluster (default: the job's cluster inside `ray job submit`, else a new local one)",
    )
    train.add_argument("--ray-num-cpus", type=options.count(1), help="CPUs of a local Ray instance")
    train.add_argument("--ray-num-gpus", type=options.count(0), help="GPUs of a local Ray instance")
    train.add_argument(
        "--ray-object-store-memory", type=options.count(1), help="bytes of object store of a local Ray instance"
    )
    train.add_argument(
        "--ray-ui", action="store_true", help="start Ray's dashboard with a local Ray instance (off unless asked, as before)"
    )
    train.add_argument(
        "--local-mode",
        action="store_true",
        help="accepted for old command lines: Ray dropped its local mode; trials run in Ray's processes",
    )
    train.add_argument(
        "-v", "--verbose", action="count", default=1, help="-v: also each trial's config; -vv: also Tune's trial messages"
    )
    old = train.add_argument_group("options of the old `rllib train` whose work is done otherwise today")
    for flag, (takes_value, replacement) in OLD_OPTIONS.items():
        old.add_argument(flag, **({"metavar": "VALUE"} if takes_value else {"action": "store_true"}), help=replacement)
    old.add_argument(
        "--sync-on-checkpoint", action="store_true", help=f"dropped with a warning: {DROPPED['sync_on_checkpoint']}"
    )
    train.set_defaults(func=train_command)
    return train


def _experiment_files(args) -> list[str]:
    files = list(args.config_file)
    if args.source:
        if args.source[0] != "file" or len(args.source) < 2:
            raise ExperimentError(
                f"expected `rllib train file PATH [PATH ...]` or `rllib train -f PATH`, got `rllib train "
                f"{' '.join(args.source)}`"
            )
        files += args.source[1:]
    return files


def _check_framework(framework: str | None) -> None:
    if framework in (None, "torch"):
        return
    if framework in ("tf", "tf2", "tfe"):
        raise ExperimentError(
            f"--framework {framework}: RLlib's new API stack runs torch only: drop --framework (or pass --framework torch)"
        )
    raise ExperimentError(f"--framework {framework}: unknown framework; torch is the only one: drop --framework")


def experiments_from_args(args) -> list:
    """Every experiment the command line asks for, each checked; all errors at once, one line each."""
    from rllib_gpuenv.experiments import inline_experiment, load_experiments
    from rllib_gpuenv.experiments.running import make_scheduler

    _check_framework(args.framework)
    for flag in OLD_OPTIONS:
        if getattr(args, flag[2:].replace("-", "_")) not in (None, False):
            raise ExperimentError(f"{flag}: {OLD_OPTIONS[flag][1]}")
    if args.sync_on_checkpoint:
        logger.warning("--sync-on-checkpoint: dropped: %s", DROPPED["sync_on_checkpoint"])
    if args.num_samples is not None and args.num_samples < 1:
        raise ExperimentError(f"--num-samples {args.num_samples}: must be a positive integer")
    if args.checkpoint_freq is not None and args.checkpoint_freq < 0:
        raise ExperimentError(f"--checkpoint-freq {args.checkpoint_freq}: must be 0 (never) or a positive integer")
    make_scheduler(args.scheduler, args.scheduler_config)  # checked, then made anew for each experiment
    files = _experiment_files(args)
    if files and (args.algo or args.env):
        raise ExperimentError("give either experiment files or --algo/--env, not both")
    if not files and not (args.algo and args.env):
        raise ExperimentError("give an experiment file (`rllib train file PATH`) or both --algo and --env")
    if files and args.experiment_name:
        raise ExperimentError("--experiment-name names the experiment of --algo/--env; a file names its experiments")
    overrides = dict(stop_overrides=args.stop, allow_no_stop=args.no_stop)
    if not files:
        experiments = [
            inline_experiment(args.algo, args.env, args.config, args.stop, args.experiment_name, allow_no_stop=args.no_stop)
        ]
        return _restoring_from(args.restore, experiments, "<command line>")
    experiments, errors = [], []
    for path in files:
        try:
            loaded = load_experiments(path, config_overrides=args.config, **overrides)
            experiments += _restoring_from(args.restore, loaded, path)
        except ExperimentError as err:
            errors.append(str(err))
    if errors:
        raise ExperimentError("\n".join(errors))
    return experiments


def _restoring_from(checkpoint: str | None, experiments: list, source: str) -> list:
    """``--restore``: every experiment's trials start from ``checkpoint`` (checked per experiment:
    its algorithm, env and model must be theirs)."""
    from rllib_gpuenv.experiments.restore import check_restore
    from rllib_gpuenv.experiments.spec import experiment_where

    for experiment in experiments if checkpoint is not None else ():
        where = experiment_where(source, experiment.name)
        experiment.restore = check_restore(checkpoint, experiment.config, where, key="--restore", stop=experiment.stop)
    return experiments


def local_runtime_env(experiments) -> dict:
    """The runtime env of the Ray this command starts: its processes start quietly, and import
    what the Python experiment files import from their own folders (Ray gives its workers the
    driver's working folder, not the folders of the files it ran)."""
    from rllib_gpuenv.experiments.spec import importable_folders_env

    return {"worker_process_setup_hook": SETUP_HOOK, **importable_folders_env(e.code_folder for e in experiments)}


def cluster_runtime_env(experiments) -> dict | None:
    """The runtime env asked for in a cluster this command joins (a job's, or ``--ray-address``):
    the Python experiment files' folders, so that the trials import what the files import."""
    from rllib_gpuenv.experiments.spec import importable_folders_env

    return importable_folders_env(e.code_folder for e in experiments) or None


def apply_run_options(experiments: list, args) -> str | None:
    """The command line's Tune run options (trials, checkpoints, retries) on every experiment;
    returns the storage path it asks for (``--upload-dir`` or ``--storage-path``), if any."""
    from rllib_gpuenv.experiments.checks import check_metric
    from rllib_gpuenv.experiments.legacy import checkpoint_score

    for experiment in experiments:
        if args.num_samples is not None:
            experiment.num_samples = args.num_samples
        if args.checkpoint_freq is not None:
            experiment.checkpoint_config["checkpoint_frequency"] = args.checkpoint_freq
        if args.checkpoint_at_end:
            experiment.checkpoint_config["checkpoint_at_end"] = True
        if args.keep_checkpoints_num is not None:
            experiment.checkpoint_config["num_to_keep"] = args.keep_checkpoints_num
        where = f"<command line>: experiment {experiment.name!r}"
        if args.checkpoint_score_attr is not None:
            experiment.checkpoint_config.update(checkpoint_score(args.checkpoint_score_attr))
            score = experiment.checkpoint_config["checkpoint_score_attribute"]
            check_metric(score, experiment.config, where, "--checkpoint-score-attr")
        if args.scheduler is not None and (args.scheduler_config or {}).get("metric") is not None:
            check_metric(args.scheduler_config["metric"], experiment.config, where, "--scheduler-config metric")
        if args.max_failures is not None:
            experiment.failure_config["max_failures"] = args.max_failures
        if experiment.resource_search is not None and experiment.num_samples != 1:  # it ran one trial per candidate
            raise ExperimentError(
                f"experiment {experiment.name!r}: num_samples is {experiment.num_samples}, but a resource search runs "
                "one trial per candidate: leave num_samples at 1"
            )
    if args.upload_dir and args.storage_path:
        logger.warning("--storage-path: not used: Tune writes the results to --upload-dir %s", args.upload_dir)
    return args.upload_dir or args.storage_path


def _check_fits(experiments, cluster: dict | None) -> None:
    """All of them fit ``cluster`` (None: the Ray joined), or none runs; a resource search finds its own."""
    from rllib_gpuenv.experiments import check_fits_cluster

    for experiment in experiments:
        if experiment.resource_search is None:
            check_fits_cluster(experiment, cluster)


def train_command(args) -> int:
    import ray

    from rllib_gpuenv.experiments import run_experiment

    experiments = experiments_from_args(args)  # every check before Ray starts
    storage_path = apply_run_options(experiments, args)
    # A job's driver joins its cluster (Ray sets RAY_ADDRESS); otherwise a local instance of our
    # own, never some other `ray start` cluster that happens to run on this machine.
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or "local"
    if args.local_mode:
        logger.warning("--local-mode: dropped: Ray no longer has a local mode; the trials run in Ray's processes")
    if address == "local":  # a Ray of our own: every trial must fit what it will have, checked before it starts
        from rllib_gpuenv.rllib.resources import cluster_resources

        here = cluster_resources()
        here.update({k: float(v) for k, v in (("CPU", args.ray_num_cpus), ("GPU", args.ray_num_gpus)) if v is not None})
        _check_fits(experiments, here)
    ray.init(
        address=address,
        num_cpus=args.ray_num_cpus,
        num_gpus=args.ray_num_gpus,
        object_store_memory=args.ray_object_store_memory,
        include_dashboard=args.ray_ui if address == "local" else None,  # 0.7 s to start, 0.3 s to stop here
        ignore_reinit_error=True,
        # A Ray of our own: its trial processes start quietly too. A cluster's job keeps its own runtime
        # env, to which only the Python files' folders are added (``importable_folders_env``).
        runtime_env=local_runtime_env(experiments) if address == "local" else cluster_runtime_env(experiments),
    )
    if address != "local":  # a cluster's resources are known once it is joined
        _check_fits(experiments, None)
    for experiment in experiments:
        if experiment.resource_search is not None:
            from rllib_gpuenv.experiments.tune_resources import search_resources

            with TuneInterrupted() as interrupted:
                search_resources(experiment, storage_path=storage_path, verbose=args.verbose, interrupted=interrupted.so_far)
            if interrupted.happened:
                print(
                    f"rllib: experiment {experiment.name!r} interrupted: its resource search wrote no winner (run it again "
                    "to search anew)",
                    file=sys.stderr,
                )
                return 130
            continue
        with TuneInterrupted() as interrupted:
            results = run_experiment(
                experiment,
                storage_path=storage_path,
                verbose=args.verbose,
                resume=args.resume,
                scheduler=(args.scheduler, args.scheduler_config),
            )
        errors = [r.error for r in results if r.error is not None]
        print(f"experiment {experiment.name!r}: {len(results)} trial(s), results in {results.experiment_path}")
        for line in checkpoint_lines(results):
            print(line)
        if interrupted.happened:  # Tune saved the experiment's state: --resume goes on with it
            how = (
                "each from its latest checkpoint"
                if experiment.checkpoint_config.get("checkpoint_frequency")
                else "from the start: they kept no checkpoints (--checkpoint-freq N keeps them)"
            )
            print(
                f"rllib: experiment {experiment.name!r} interrupted: the same command with --resume goes on with its "
                f"unfinished trials ({how})",
                file=sys.stderr,
            )
            return 130
        if errors:
            last_line = (str(errors[0]).strip().splitlines() or [type(errors[0]).__name__])[-1]
            print(
                f"rllib: error: experiment {experiment.name!r}: {len(errors)} trial(s) failed, the first with: {last_line}",
                file=sys.stderr,
            )
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    # Beside Tune's and RLlib's lines, the package's say whose they are; evaluate's are its output, as
    # under `rllib-gpuenv evaluate`.
    plain = args.command in ("evaluate", "rollout")
    logging.basicConfig(level=logging.INFO, format="%(message)s" if plain else "%(levelname)s %(name)s: %(message)s")
    collector.resume()  # its trials build in Tune's actors
    quiet_start()
    return run_command("rllib", args.func, args)


if __name__ == "__main__":
    sys.exit(main())
