"""Let Ray Tune choose the resources: GPUs and envs per env runner, runners, learners and their GPUs.

Each candidate is one Tune trial of the same experiment with other resource settings; Tune
gives each trial what RLlib computes it needs (``Algorithm.default_resource_request``), so
nothing is passed as ``resources_per_trial``. Trials run one at a time (at most one
concurrent trial, and a Tune callback checks that each ran alone): side by side on a small
machine they would measure each other's load, not their own configuration. The objective is
what users care about: the wall time to reach the target return (misses ranked by the return,
then by throughput). The winner is written whole, every setting that differs from the
algorithm's defaults and the trial's stop criteria, as an experiment file that
``rllib train file`` runs as it is. The return is ``env_runners/episode_return_mean``: on the
device env runner the mean of the last 100 episodes, on RLlib 2.60's stock runner the mean of
the episodes that ended in one iteration. The search space is built from what the cluster
has: without GPUs the GPU options drop out (logged), ``num_learners: auto`` tries 0, 1, 2,
4, ... learners as far as the cluster holds them beside each candidate's env runners (with
env runners the learners are fed by them, without they step their own envs: both layouts),
and a candidate that asks for more than the cluster has is an error before any trial
starts, not a trial PENDING forever.

From a file (an experiment with a ``resource_search`` section, see
``configs/tune_resources.yaml``)::

    rllib train file configs/tune_resources.yaml

or from Python: ``search_resources(experiment, ResourceSpace(...))``.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import math
import os
from collections.abc import Callable

import yaml
from ray import tune

from rllib_gpuenv.experiments.errors import ExperimentError
from rllib_gpuenv.experiments.metric_names import ENV_STEPS_METRIC, RETURN_METRIC, lookup
from rllib_gpuenv.experiments.progress_csv import ProgressCSVCallback
from rllib_gpuenv.experiments.resource_space import ResourceSpace
from rllib_gpuenv.experiments.running import (
    check_fits_cluster,
    console_options,
    trial_name,
    tune_progress_reporter_output,
)
from rllib_gpuenv.experiments.spec import Experiment
from rllib_gpuenv.experiments.tables import format_table
from rllib_gpuenv.experiments.tensorboard import TensorBoardCallback

logger = logging.getLogger(__name__)

GPU_KEYS = ("num_gpus_per_env_runner", "num_gpus_per_learner")


def layout(combo: dict) -> str:
    """Where a candidate's envs are: beside its one learner ("local"), in its learners
    ("colocated"), in env runners that feed remote learners ("separate")."""
    if not combo.get("num_learners"):
        return "local"
    return "colocated" if combo["num_env_runners"] == 0 else "separate"


AUTO_LEARNERS = (0, 1, 2, 4, 8, 16, 32, 64)


def candidates(space: ResourceSpace, cluster: dict, fits=None) -> list[dict]:
    """The combinations to try on this cluster (GPU options dropped when it has no GPU; with
    ``num_learners: auto``, the learner counts that ``fits(combo)`` says the cluster can hold)."""
    auto = space.num_learners == "auto"
    learners = list(AUTO_LEARNERS) if auto else list(space.num_learners)
    if auto and fits is None:
        raise ValueError("num_learners='auto' needs to know what fits the cluster (search_resources passes it)")
    values = {k: list(getattr(space, k)) for k in ("num_envs_per_env_runner", "num_env_runners", *GPU_KEYS)}
    if cluster.get("GPU", 0) <= 0:
        dropped = {k: [v for v in values[k] if v] for k in GPU_KEYS if any(values[k])}
        if dropped:
            logger.warning("the cluster has no GPU: dropping the GPU options %s from the search", dropped)
        for k in GPU_KEYS:
            values[k] = [0]
    combos = []
    for envs, runners, runner_gpus, learner_gpus, count in itertools.product(*values.values(), learners):
        if runners == 0 and runner_gpus:
            continue  # the local runner has no GPU share of its own: it uses the driver's device
        combo = {
            "num_envs_per_env_runner": envs,
            "num_env_runners": runners,
            "num_gpus_per_env_runner": runner_gpus,
            "num_gpus_per_learner": learner_gpus,
            "num_learners": count,
        }
        if auto and count and not fits(combo):
            continue  # more learners than the cluster holds beside this candidate's runners
        if combo not in combos:
            combos.append(combo)
    return combos


def check_candidate(experiment: Experiment, combo: dict, cluster: dict) -> None:
    """A candidate's config is valid and fits the cluster, or an ``ExperimentError`` says why."""
    try:
        check_fits_cluster(_with(experiment, combo), cluster)
    except ValueError as err:  # RLlib's validate(), or DevicePPO's batch shape, for this candidate
        if isinstance(err, ExperimentError):
            raise
        raise ExperimentError(f"experiment {experiment.name!r}: the candidate {combo}: {err}") from None


def _fits(experiment: Experiment, combo: dict, cluster: dict) -> bool:
    try:
        check_candidate(experiment, combo, cluster)
    except ExperimentError:
        return False
    return True


def _with(experiment: Experiment, combo: dict) -> Experiment:
    config = copy.deepcopy(experiment.config)
    config.env_runners(
        num_env_runners=combo["num_env_runners"],
        num_envs_per_env_runner=combo["num_envs_per_env_runner"],
        num_gpus_per_env_runner=combo["num_gpus_per_env_runner"],
    )
    config.learners(num_gpus_per_learner=combo["num_gpus_per_learner"], num_learners=combo["num_learners"])
    if hasattr(config, "devices"):  # DevicePPO: let Ray's assignment decide, not a fixed device
        config.devices(learner=None, env_runners="auto")
    return dataclasses.replace(experiment, config=config, resource_search=None)


def search_resources(
    experiment: Experiment,
    space: ResourceSpace | None = None,
    storage_path: str | None = None,
    best_file: str | None = None,
    verbose: int = 1,
    interrupted: Callable[[], bool] = lambda: False,
) -> list[dict]:
    """Run one Tune trial per candidate, one at a time; print the table and the best; write the
    winning experiment whole to ``best_file`` (default ``<results>/best.yaml``). When
    ``interrupted()`` says Ctrl-C stopped the run, the table is printed and no winner is chosen
    (the trials cut short would compete with times they did not finish).

    Returns the rows of the table, best first; each keeps the trial's Tune ``result`` (its
    config as Tune ran it, its metrics per iteration).
    """
    import ray
    from ray.tune.search.basic_variant import BasicVariantGenerator

    space = space or ResourceSpace.from_dict(experiment.resource_search or {})
    cluster = ray.cluster_resources()
    combos = candidates(space, cluster, fits=lambda combo: _fits(experiment, combo, cluster))
    for combo in combos:  # every candidate must be valid and fit before anything runs
        check_candidate(experiment, combo, cluster)
    target = experiment.stop.get(RETURN_METRIC)
    if target is None:
        raise ExperimentError(f"experiment {experiment.name!r}: the resource search needs a stop value for {RETURN_METRIC}")
    stop = {**experiment.stop, "time_total_s": space.time_budget_s}
    print(
        f"resource search {experiment.name!r}: {len(combos)} candidates on a cluster with "
        f"{cluster.get('CPU', 0):g} CPUs and {cluster.get('GPU', 0):g} GPUs. Trials run one at a time "
        "(at most 1 concurrent trial), so each measures its own configuration, not its neighbours' load."
    )

    # The resource keys are searchable (so Tune takes each candidate's values from
    # points_to_evaluate); everything else is the experiment's config.
    param_space = _with(experiment, combos[0]).config.to_dict()
    param_space.update({key: tune.choice(sorted({c[key] for c in combos})) for key in combos[0]})
    starts = _TrialStarts()
    tuner = tune.Tuner(
        experiment.algo_class,
        param_space=param_space,
        # One trial at a time. (TuneConfig's max_concurrent_trials would be ignored with a
        # search generator, as Tune warns; the generator's own limit is the one that holds.)
        tune_config=tune.TuneConfig(
            search_alg=BasicVariantGenerator(points_to_evaluate=[dict(c) for c in combos], max_concurrent=1),
            num_samples=len(combos),
            trial_name_creator=trial_name,
        ),
        run_config=tune.RunConfig(
            name=experiment.name,
            stop=stop,
            storage_path=storage_path or experiment.storage_path,
            failure_config=tune.FailureConfig(**experiment.failure_config),
            **console_options(verbose),  # a row per result, as `rllib train` prints a run's
            # in place of Tune's (experiments/tensorboard.py, progress_csv.py)
            callbacks=[starts, TensorBoardCallback(), ProgressCSVCallback()],
        ),
    )
    with tune_progress_reporter_output():
        results = tuner.fit()
    rows = rank(trial_rows(results, list(combos[0]), target))
    _print_table(rows, target)
    if interrupted():
        return rows
    shared = sum(1 for n in starts.others_running.values() if n)
    if shared:
        logger.warning("%d trial(s) started while others ran: their throughput reflects shared resources", shared)
    else:
        print(f"each of the {len(rows)} trials ran alone")
    best = rows[0]
    print("best:", {k: best[k] for k in combos[0]})
    best_file = best_file or os.path.join(results.experiment_path, "best.yaml")
    comment = f"The winner of the resource search {experiment.name!r} ({len(rows)} trials, one at a time): " + (
        f"{best['time_to_target_s']:.1f} s and {best['env_steps_to_target']:,} env steps to a return of {target:g}."
        if best["reached"]
        else f"none reached a return of {target:g}; this one got {best['return']:.1f}."
    )
    winner = _with(experiment, {k: best[k] for k in combos[0]}).config  # the config its trial ran (Tune got its to_dict())
    write_experiment(
        f"{experiment.name}-best",
        winner,
        stop,
        best_file,
        comment=comment,
        checkpoint_config=experiment.checkpoint_config,
        failure_config=experiment.failure_config,
        always=tuple(combos[0]),
    )
    print(f"the winning experiment is written whole to {best_file}; run it with: rllib train file {best_file}")
    return rows


class _TrialStarts(tune.Callback):
    """Notes how many other trials were running when each trial started (0: it ran alone)."""

    def __init__(self):
        self.others_running: dict[str, int] = {}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.others_running[trial.trial_id] = sum(t is not trial and t.status == "RUNNING" for t in trials)


def trial_rows(results, keys: list[str], target: float) -> list[dict]:
    """A row per trial that reported: a trial that Ctrl-C stopped before its first result has no
    config to show (its row's keys were a ``TypeError``, after the trials so far)."""
    return [_row(result, keys, target) for result in results if result.config is not None]


def _row(result, keys: list[str], target: float) -> dict:
    """One trial's line: its resources, final return, and when (time, env steps) it first reached the target."""
    config, metrics = result.config, result.metrics or {}
    seconds = metrics.get("time_total_s", math.nan)
    steps = lookup(metrics, ENV_STEPS_METRIC, 0)
    frame = result.metrics_dataframe
    hit = None
    if frame is not None and RETURN_METRIC in frame:
        reached = frame[frame[RETURN_METRIC] >= target]
        hit = None if reached.empty else reached.iloc[0]
    return {
        **{k: config[k] for k in keys},
        "iterations": metrics.get("training_iteration", 0),
        "return": lookup(metrics, RETURN_METRIC, math.nan),
        "reached": hit is not None,
        "time_to_target_s": float(hit["time_total_s"]) if hit is not None else math.inf,
        "env_steps_to_target": int(hit[ENV_STEPS_METRIC]) if hit is not None else None,
        "env_steps_per_s": steps / seconds if seconds else 0.0,
        "error": None if result.error is None else type(result.error).__name__,
        "result": result,
    }


def rank(rows: list[dict]) -> list[dict]:
    """Best first: the trials that reached the target by time to it, then the others by return,
    then by throughput (a failed trial's NaN return counts as the lowest)."""
    return sorted(rows, key=lambda r: (r["time_to_target_s"], -_finite(r["return"]), -r["env_steps_per_s"]))


def _finite(x: float) -> float:
    return x if x == x else -math.inf


def _print_table(rows: list[dict], target: float) -> None:
    headers = [
        "envs/runner",
        "runners",
        "GPUs/runner",
        "learner GPUs",
        "learners",
        "layout",
        "iterations",
        "return",
        f"s to {target:g}",
        f"env steps to {target:g}",
        "env-steps/s",
        "error",
    ]
    table = [
        [
            r["num_envs_per_env_runner"],
            r["num_env_runners"],
            r["num_gpus_per_env_runner"],
            r["num_gpus_per_learner"],
            r["num_learners"],
            layout(r),
            r["iterations"],
            f"{r['return']:.1f}",
            f"{r['time_to_target_s']:.1f}" if r["reached"] else "-",
            r["env_steps_to_target"],
            f"{r['env_steps_per_s']:,.0f}",
            r["error"] or "",
        ]
        for r in rows
    ]
    print(format_table(headers, table))


# ---------------------------------------------------------------------------- experiment files
# AlgorithmConfig.to_dict() keys written under today's public names.
_PUBLIC_NAMES = {
    "_model_config": "model_config",
    "_train_batch_size_per_learner": "train_batch_size_per_learner",
    "lambda": "lambda_",
}
# DevicePPOConfig attributes set through its own config sections.
_DEVICE_SECTIONS = {
    "rollout_length": ("device_rollouts", "rollout_length"),
    "check_devices": ("device_rollouts", "check_devices"),
    "env_runner_device": ("devices", "env_runners"),
    "learner_device": ("devices", "learner"),
    "eval_env_runner_device": ("devices", "evaluation"),
}
# Derived by the device configs' validate() from the rollout shape: written, they would pin it.
# Every device config's rollout_fragment_length (the replay algorithms set it to rollout_length
# for RLlib's n-step check), and DevicePPO's batch per learner.
_DEVICE_DERIVED = {"rollout_fragment_length", "_derived_rollout_fragment_length"}
_DEVICE_PPO_DERIVED = {"_train_batch_size_per_learner", "_derived_train_batch_size"}


def config_settings(config, always: tuple[str, ...] = ()) -> tuple[dict, list[str]]:
    """The ``config:`` section that rebuilds ``config``: every setting that differs from its
    algorithm's defaults (and those named in ``always``), under the names ``rllib train`` reads.
    Also returns the settings that have no YAML form (functions, objects), which the section
    cannot carry."""
    from rllib_gpuenv.rllib import DevicePPOConfig
    from rllib_gpuenv.rllib.device_config import DeviceRolloutsConfig

    device = isinstance(config, DeviceRolloutsConfig)
    derived = (_DEVICE_DERIVED | _DEVICE_PPO_DERIVED) if isinstance(config, DevicePPOConfig) else _DEVICE_DERIVED
    defaults = type(config)().to_dict()
    settings: dict = {}
    unwritable: list[str] = []
    for key, value in config.to_dict().items():
        if key == "env" or (device and key in derived):
            continue
        if key not in always and key in defaults and _same(value, defaults[key]):
            continue
        try:
            plain = _plain(value)
        except TypeError:
            unwritable.append(key)
            continue
        if device and key in _DEVICE_SECTIONS:
            section, name = _DEVICE_SECTIONS[key]
            settings.setdefault(section, {})[name] = plain
        else:
            settings[_PUBLIC_NAMES.get(key, key)] = plain
    return settings, unwritable


def _same(a, b) -> bool:
    try:
        return bool(a == b) or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
    except (TypeError, ValueError):  # e.g. arrays: compare what they print as
        return repr(a) == repr(b)


def _plain(value):
    """``value`` as YAML's safe types (classes by their import path); TypeError if it has none."""
    from ray.rllib.utils.serialization import serialize_type

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, type):
        return serialize_type(value)
    raise TypeError(f"no YAML form for {type(value).__name__}")


class _Dumper(yaml.SafeDumper):
    """Block style, with lists on one line (``fcnet_hiddens: [64, 64]``), as people write them."""


_Dumper.add_representer(list, lambda dumper, value: dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True))


def write_experiment(
    name: str,
    config,
    stop: dict,
    path: str,
    comment: str = "",
    checkpoint_config: dict | None = None,
    failure_config: dict | None = None,
    always: tuple[str, ...] = (),
) -> None:
    """Write ``config`` and ``stop`` as an experiment file that ``rllib train file`` runs as it is.

    Every setting that differs from the algorithm's defaults is written, and those named in
    ``always``; a setting without a YAML form (a function, an object) is named in a warning and
    in the file.
    """
    from rllib_gpuenv.rllib import DevicePPO

    settings, unwritable = config_settings(config, always)
    run = "DevicePPO" if config.algo_class is DevicePPO else config.algo_class.__name__
    if not isinstance(config.env, str):  # an env class or creator: only a registered name fits in a file
        unwritable.insert(0, "env")
    spec = {"run": run, "env": config.env if isinstance(config.env, str) else None, "stop": dict(stop), "config": settings}
    if checkpoint_config:
        spec["checkpoint_config"] = dict(checkpoint_config)
    if failure_config:
        spec["failure_config"] = dict(failure_config)
    if unwritable:
        logger.warning("%s: settings %s have no YAML form and are not in the file; set them again by hand", path, unwritable)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        for line in comment.splitlines():
            f.write(f"# {line}\n")
        if unwritable:
            f.write(f"# Not written (no YAML form): {', '.join(unwritable)}.\n")
        yaml.dump({name: spec}, f, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
