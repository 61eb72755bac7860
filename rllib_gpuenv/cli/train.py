"""The main job: PPO on GPUCartPole-v1 on the default device, until the mean return hits 475.

``rllib-gpuenv train`` (or ``./run.sh train``) reads ``gpu_cartpole_ppo.yaml`` (shipped with the
package, ``configs/`` in the repository) and trains in this process, so ``--device cuda:N``
means that GPU. While it trains it prints one line per iteration (return, episodes ended,
env steps, env-steps/s of that iteration, elapsed time) and, on a terminal, a tqdm progress
bar with an ETA toward the iteration limit. Tune's own logger callbacks write the metrics of
every iteration (``progress.csv``, ``result.json`` and TensorBoard events) into a run folder,
where the final checkpoint goes too; the job prints where.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import time
from pathlib import Path

import rllib_gpuenv.options as options
from rllib_gpuenv.cli import collector
from rllib_gpuenv.cli.errors import StopAfterThisIteration
from rllib_gpuenv.cli.result_files import ResultLoggers
from rllib_gpuenv.experiments.metric_names import (
    ENV_STEPS_METRIC,
    EPISODES_METRIC,
    EVALUATION_RETURN_METRIC,
    RETURN_METRIC,
    lookup,
)
from rllib_gpuenv.experiments.shipped import config_file
from rllib_gpuenv.experiments.spec import MAIN_JOB_FILE, importable_folders_env, load_config

# RLlib, Tune and Ray load in the functions that train (2-3 s): ``rllib-gpuenv --help`` and a
# mistaken option are answered without them.
logger = logging.getLogger(__name__)

DEFAULT_CONFIG_FILE = config_file(MAIN_JOB_FILE)
DEFAULT_STORAGE_PATH = "results"
DEFAULT_MAX_ITERATIONS = 200  # when the file's stop criteria set no iteration limit
RUN_FILE = "main_job.json"  # in the job's checkpoint: its experiment file, name, stop criteria and clocks, for --resume
EPISODE_KEYS = tuple(f"episode_{what}_{stat}" for what in ("return", "len") for stat in ("mean", "min", "max"))


@dataclasses.dataclass
class TrainingRun:
    """Where a run of the main job left its results."""

    directory: str  # progress.csv, result.json, params.json, TensorBoard events
    checkpoint: str
    reached_target: bool


SETUP_SECONDS = "RLLIB_GPUENV_SETUP_S"  # set by ./run.sh when it installed before running the command (run.sh)


class StartupTimes:
    """Where the seconds before the first iteration went: ``./run.sh``'s setup where it just
    installed (the command then runs in its process), Python and imports (the rest since the
    process started), then each step named by ``done``."""

    def __init__(self):
        setup = float(os.environ.pop(SETUP_SECONDS, "") or 0)  # this run's, not its child processes'
        since_start = _seconds_since_process_start()
        self.parts = [("setup (./run.sh)", setup, "")] if setup else []
        self.parts.append(("Python and imports", max(since_start - setup, 0.0), ""))
        self._last = time.perf_counter()

    def done(self, part: str, detail: str = "") -> None:
        """``part`` took the seconds since the last one; ``detail`` says where some of them went."""
        now = time.perf_counter()
        self.parts.append((part, now - self._last, detail))
        self._last = now

    def summary(self) -> str:
        total = sum(seconds for _, seconds, _ in self.parts)
        parts = (f"{part} {seconds:.1f} s" + (f" ({detail})" if detail else "") for part, seconds, detail in self.parts)
        return f"ready after {total:.1f} s: " + ", ".join(parts)


def _seconds_since_process_start() -> float:
    """To the clock tick on Linux (psutil's start time is off by up to a second there: it counts
    from the boot time in whole seconds)."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError):
        import psutil

        return time.time() - psutil.Process().create_time()


def _stop_reached(result: dict, stop: dict) -> bool:
    """Tune's rule for a stop dict: stop when any metric reaches its value."""
    return any(lookup(result, key, float("nan")) >= value for key, value in stop.items())


def _devices(algo) -> str:
    config = algo.config
    if getattr(config, "colocated_learners", False):
        devices = sorted(set(algo.call_learners(_learner_device)))
        return (
            f"{config.num_learners} learners, each stepping its own {config.num_envs_per_env_runner} envs "
            f"(on {', '.join(devices)}), gradients all-reduced"
        )
    runner = algo.env_runner
    learner = algo.learner_group._learner._device if algo.learner_group.is_local else "remote learners"
    backend = getattr(getattr(runner, "env", None), "backend", None)
    return (
        f"env runner on {getattr(runner, '_device', 'cpu')}"
        + (f" (backend {backend})" if backend else "")
        + f", learner on {learner}"
    )


def _learner_device(learner) -> str:
    return str(learner._device)


def target_metric(stop: dict) -> str:
    """The return a run stops at: the file's criterion on the training window's return or, where
    it has only one on the evaluation's (Acrobot's, the MountainCars'), that one; the training
    window's when it has neither (``--target`` then sets it, 475 by default)."""
    return EVALUATION_RETURN_METRIC if EVALUATION_RETURN_METRIC in stop and RETURN_METRIC not in stop else RETURN_METRIC


def evaluates_every(config) -> int:
    """Iterations between evaluations (0: none)."""
    return int(getattr(config, "evaluation_interval", None) or 0)


def save_experiment(checkpoint: str, config_file, name: str, stop: dict, algo, code_folders=()) -> None:
    """Write beside the checkpoint's state what ``--resume`` goes on with: the experiment file,
    its name, the stop criteria in force (the file's, with ``--target`` and ``--max-iterations``)
    and the run's clocks, which RLlib's own algorithms do not keep (``restore_clocks``); and, for
    ``evaluate`` and ``--resume`` from another folder, the folders its user code came from."""
    from rllib_gpuenv.rllib.checkpointing import record_code_folders

    clocks = {"time_total_s": algo._time_total, "evaluation_time_total_s": getattr(algo, "evaluation_time_total_s", 0.0)}
    with open(os.path.join(checkpoint, RUN_FILE), "w") as f:
        json.dump({"config_file": os.path.abspath(config_file), "name": name, "stop": stop, "clocks": clocks}, f, indent=2)
    record_code_folders(checkpoint, algo.config, code_folders)


def restore_clocks(algo, checkpoint) -> None:
    """Seconds trained and evaluated before a resume, for an algorithm whose checkpoint does not
    keep them: ``Algorithm.from_checkpoint`` starts RLlib's own (a stock PPO's) at 0, and the run's
    summary would give only the resumed part's time. The device algorithms keep their own
    (``rllib.checkpointing.ResumesExactly``)."""
    from rllib_gpuenv.rllib.checkpointing import ResumesExactly

    record = Path(checkpoint) / RUN_FILE
    if isinstance(algo, ResumesExactly) or not record.is_file():
        return
    clocks = json.loads(record.read_text()).get("clocks")
    if clocks:
        algo._time_total = clocks["time_total_s"]
        algo.evaluation_time_total_s = clocks["evaluation_time_total_s"]


def _storage_path_of(checkpoint: str | None) -> str:
    """Where a resumed run writes its folder: beside the run that saved ``checkpoint`` (the main
    job's ``<storage>/<run>/checkpoint``, which holds ``RUN_FILE``), not in the folder the command
    happens to run from; else the default."""
    if checkpoint and (Path(checkpoint) / RUN_FILE).is_file():
        return str(Path(checkpoint).resolve().parent.parent)
    return DEFAULT_STORAGE_PATH


def resumed_experiment(checkpoint, config_file, device, seed, num_learners) -> tuple[str, str, dict]:
    """What a resumed run goes on with: its experiment file, name and stop criteria. Those the
    checkpoint's run saved (``RUN_FILE``), unless ``--config-file`` names a file, whose algorithm,
    env and networks must then be the checkpoint's (as for a checkpoint without that record,
    checked against the main job's file). Its settings are the checkpoint's: a ``--device``,
    ``--seed`` or ``--num-learners`` other than the checkpoint's is an error, not ignored."""
    from rllib_gpuenv.experiments.errors import ExperimentError
    from rllib_gpuenv.experiments.restore import check_restore
    from rllib_gpuenv.rllib.checkpointing import check_checkpoint_files, saved_config

    check_checkpoint_files(checkpoint)  # a damaged checkpoint is named before anything starts
    _check_resumed_settings(checkpoint, saved_config(checkpoint), device, seed, num_learners)
    record = Path(checkpoint) / RUN_FILE
    if config_file is None and record.is_file():
        saved = json.loads(record.read_text())
        return saved["config_file"], saved["name"], saved["stop"]
    config_file = config_file or DEFAULT_CONFIG_FILE
    experiment = load_config(config_file)
    try:
        check_restore(checkpoint, experiment.config, where=str(config_file), key="--resume")
    except ExperimentError as err:
        raise ExperimentError(f"{err}; give its own experiment file with --config-file") from None
    return str(config_file), experiment.name, dict(experiment.stop)


def _check_resumed_settings(checkpoint, saved, device, seed, num_learners) -> None:
    from rllib_gpuenv.core.devices import resolve_device

    differ = []
    if seed is not None and seed != saved.seed:
        differ.append(f"--seed {seed} (the checkpoint's: {saved.seed})")
    if num_learners is not None and num_learners != (saved.num_learners or 0):
        differ.append(f"--num-learners {num_learners} (the checkpoint's: {saved.num_learners or 0})")
    if device is not None:

        def resolved(name) -> str:  # a GPU the checkpoint used but this machine lacks stays named as it was
            try:
                return str(resolve_device(name))
            except ValueError:
                return str(name)

        learner = getattr(saved, "learner_device", None) or ("cuda" if saved.num_gpus_per_learner else "cpu")  # None: RLlib's
        runners = getattr(saved, "env_runner_device", "cpu")  # RLlib's own runners step on the CPU
        theirs = {resolved(runners), resolved(learner)}
        if theirs != {str(resolve_device(device))}:
            differ.append(f"--device {device} (the checkpoint's: {', '.join(sorted(theirs))})")
    if differ:
        raise ValueError(
            f"{' and '.join(differ)} with --resume: a resumed run goes on with its checkpoint's settings; to train "
            f"from the checkpoint with others, start a run of its experiment file from it: rllib train file FILE "
            f"--restore {checkpoint}"
        )


def _check_fits_this_machine(config) -> None:
    """The local Ray instance's CPUs and GPUs (Ray's own count: this machine's, within its cgroup)
    can hold what ``config`` asks for; else the resource check's line, with the job's own way to
    change it. Before, it came after Ray had started (~13 s on a 2-core machine)."""
    from ray._private.utils import get_num_cpus
    from torch.cuda import device_count as cuda_device_count

    from rllib_gpuenv.rllib.resources import ResourceError, check_cluster_fits

    try:
        check_cluster_fits(config, {"CPU": get_num_cpus(), "GPU": cuda_device_count()}, main_process_here=True)
    except ResourceError as err:
        raise ResourceError(
            f"{err} (this job: --num-learners; num_cpus_per_learner and the rest in a --config-file's config:)"
        ) from None


def train(
    config_file=None,
    device: str | None = None,
    seed: int | None = None,
    target: float | None = None,
    max_iterations: int | None = None,
    storage_path: str = DEFAULT_STORAGE_PATH,
    progress_bar: bool | None = None,
    num_learners: int | None = None,
    resume: str | os.PathLike | None = None,
) -> TrainingRun:
    """Train until the stop criteria (the target return, the iteration limit); log every
    iteration; save a checkpoint. Returns where the results are. ``num_learners``: that many
    learners, each stepping the file's envs per env runner on its own device (a GPU each where
    ``device`` is a GPU), their gradients all-reduced. ``config_file``: by default the shipped
    main job's. ``resume``: a checkpoint of an earlier run to go on from, with its algorithm and
    settings, and the experiment file and stop criteria it ran with (``resumed_experiment``;
    ``target`` and ``max_iterations`` change those).

    Ctrl-C stops after the iteration that is running, saves the checkpoint and says how to go
    on from it; a second Ctrl-C quits at once."""
    import ray

    from rllib_gpuenv.experiments.progress import EvaluationTime, IterationLines
    from rllib_gpuenv.rllib.checkpointing import saved_config, use_code_folders
    from rllib_gpuenv.rllib.in_process import builds_without_ray
    from rllib_gpuenv.rllib.logdir import stop_algorithm

    code_folders = []  # a Python file's folder, whose modules remote runners import too
    if resume is not None:
        config_file, name, stop = resumed_experiment(resume, config_file, device, seed, num_learners)
        code_folders = use_code_folders(resume)  # the run's, as it trained (``checkpointing.record_code_folders``)
        config = None  # the checkpoint's
    else:
        config_file = config_file or DEFAULT_CONFIG_FILE
        experiment = load_config(config_file, device=device, seed=seed)
        name, config, stop = experiment.name, experiment.config, dict(experiment.stop)
        code_folders = [experiment.code_folder] if experiment.code_folder else []
        if experiment.resource_search is not None:
            logger.warning(
                "%s: its resource_search section is a Tune search, which `rllib train file %s` runs; this job trains "
                "the experiment's own settings once",
                config_file,
                config_file,
            )
        if num_learners:
            from rllib_gpuenv.core.devices import resolve_device

            on_gpu = resolve_device(device or "auto").type == "cuda"
            if hasattr(config, "devices"):
                config.devices(learner=None)  # Ray gives remote learners their devices
            config.learners(num_learners=num_learners, num_gpus_per_learner=1 if on_gpu else 0)
    metric = target_metric(stop)  # the training window's return, or the evaluation's where the file stops on that
    if target is not None:
        stop[metric] = target
    if max_iterations is not None:
        stop["training_iteration"] = max_iterations
    stop.setdefault(metric, 475.0)
    stop.setdefault("training_iteration", DEFAULT_MAX_ITERATIONS)
    target = stop[metric]
    directory = os.path.abspath(os.path.join(storage_path, f"{name}_{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"))
    if resume is None:
        config.copy(copy_frozen=False).validate()  # a device or setting that cannot work fails before Ray starts

    startup = StartupTimes()
    ray_was_running = ray.is_initialized()
    if not builds_without_ray(config if resume is None else saved_config(resume)):  # remote runners or learners
        # a local Ray instance (none running, no RAY_ADDRESS to join, as a `ray job submit` driver
        # has): what it will have is checked before it starts; a cluster's is checked at the build
        if resume is None and not ray_was_running and not os.environ.get("RAY_ADDRESS"):
            _check_fits_this_machine(config)
        runtime_env = importable_folders_env(code_folders) or None
        ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
        startup.done("starting Ray")
    if resume is not None:
        from ray.rllib.algorithms.algorithm import Algorithm

        algo = Algorithm.from_checkpoint(os.path.abspath(resume))
        restore_clocks(algo, resume)
        config = algo.config
        print(f"resuming {resume} at iteration {algo.iteration}")
    else:
        algo = config.build_algo()
    runner_env = getattr(getattr(algo, "env_runner", None), "env", None)
    compile_s = getattr(getattr(runner_env, "unwrapped", None), "compile_s", None)  # a JAX env's, made in the build
    startup.done("building the algorithm", f"of which compiling the JAX env {compile_s:.1f} s" if compile_s else "")
    collector.resume()  # the command paused it for the start-up (``collector.py``)
    loggers = ResultLoggers(directory, config.to_dict(), EPISODE_KEYS)
    criteria = " or ".join(f"{key} >= {value:g}" for key, value in stop.items())
    print(
        f"{name} ({config_file}): {type(algo).__name__} on {str(config.env).split(':')[-1]}, {_devices(algo)}; stops at "
        f"{criteria}"
    )
    print(f"logging every iteration to {directory} (progress.csv, result.json, TensorBoard events)")
    print(startup.summary(), flush=True)
    progress = IterationLines(
        stop["training_iteration"],
        target,
        bar=progress_bar,
        evaluation_interval=evaluates_every(config),
        evaluation_target=metric == EVALUATION_RETURN_METRIC,
        steps=int(algo.metrics.peek(tuple(ENV_STEPS_METRIC.split("/")), default=0)),  # a resumed run's, else 0
        episodes=int(algo.metrics.peek(tuple(EPISODES_METRIC.split("/")), default=0)),
    )
    evaluating = EvaluationTime(algo)
    failed = True
    try:
        with StopAfterThisIteration() as interrupt:
            while True:
                start = time.perf_counter()
                result = algo.train()
                progress.update(result, time.perf_counter() - start)
                loggers.log(result["training_iteration"], result)
                if _stop_reached(result, stop) or interrupt.requested:
                    break
        progress.close()
        evaluated = metric == EVALUATION_RETURN_METRIC
        ret = progress.last_evaluation if evaluated else lookup(result, RETURN_METRIC, float("nan"))
        elapsed = result.get("time_total_s", float("nan"))
        if evaluating.total_seconds:  # the files that stop on evaluation: on Acrobot about half their time
            elapsed_text = f"{elapsed:.1f} s, of which evaluating {evaluating.total_seconds:.1f} s"
        else:
            elapsed_text = f"{elapsed:.1f} s"
        reached = ret >= target
        done = result["training_iteration"]
        iterations = f"{done} iteration{'' if done == 1 else 's'}"
        what = "evaluation mean return" if evaluated else "mean return"
        at = f"at {what} {ret:.1f}" if ret == ret else ("before any evaluation" if evaluated else "before any episode ended")
        if interrupt.requested and not reached:
            print(f"interrupted after {iterations} ({elapsed_text}) {at}")
        elif reached:
            print(f"reached {what} {ret:.1f} >= {target:g} in {elapsed_text} ({iterations})")
        else:
            print(f"stopped after {iterations} ({elapsed_text}) {at}, below the target {target:g}")
        checkpoint = algo.save(os.path.join(directory, "checkpoint")).checkpoint.path
        save_experiment(checkpoint, config_file, name, stop, algo, code_folders)
        failed = False
    finally:
        progress.close()
        loggers.close(failed=failed)
        stop_algorithm(algo)  # and Tune's empty log folder, a stock RLlib algorithm's too
    if not ray_was_running:
        ray.shutdown()  # now, so that the summary is the last thing the user waits for
    print(f"checkpoint saved to {checkpoint}")
    if interrupt.requested and not reached:
        print(f"go on from it with: rllib-gpuenv train --resume {checkpoint}")
    print(f"metrics in {directory}/progress.csv; TensorBoard: tensorboard --logdir {directory}")
    return TrainingRun(directory, checkpoint, reached)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-file",
        help="experiment YAML (default: the shipped gpu_cartpole_ppo.yaml; with --resume, the one the checkpoint's run ran)",
    )
    parser.add_argument("--device", help="override the device of the env runner and the learner: auto, cpu, cuda, cuda:N")
    parser.add_argument("--seed", type=options.seed, help="override the seed (0 to 2**32 - 1)")
    parser.add_argument(
        "--target",
        type=options.number,
        help="stop at this mean episode return: the file's criterion's (the training window's, or its evaluation's), "
        "else the training window's (default: the file's, or 475)",
    )
    parser.add_argument(
        "--max-iterations",
        type=options.count(1),
        help=f"stop after this many iterations (default: the file's, or {DEFAULT_MAX_ITERATIONS})",
    )
    parser.add_argument(
        "--storage-path",
        help=f"each run writes a folder here: progress.csv, result.json, TensorBoard events, checkpoint/ (default: "
        f"{DEFAULT_STORAGE_PATH}; with --resume, where the checkpoint's own run wrote its folder)",
    )
    parser.add_argument(
        "--progress-bar",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the progress bar (default: only when stderr is a terminal)",
    )
    parser.add_argument(
        "--num-learners",
        type=options.count(0),
        help="that many learners (Ray actors), each stepping the file's envs on its own device (a GPU each where the "
        "device is a GPU), gradients all-reduced (default: the file's, one learner in this process)",
    )
    parser.add_argument(
        "--resume",
        metavar="CHECKPOINT",
        help="go on from a checkpoint of an earlier run, e.g. the one Ctrl-C saved: its settings, and the experiment "
        "file and stop criteria it ran with (--target and --max-iterations change those)",
    )
    parser.set_defaults(func=_command)


def _command(args) -> int:
    train(
        args.config_file,
        args.device,
        args.seed,
        args.target,
        args.max_iterations,
        args.storage_path or _storage_path_of(args.resume),
        args.progress_bar,
        args.num_learners,
        args.resume,
    )
    return 0
