"""Running checked experiments with Ray Tune: the cluster checked first, one progress row per result."""

from __future__ import annotations

import contextlib
import os

from rllib_gpuenv.experiments.errors import ExperimentError
from rllib_gpuenv.experiments.spec import Experiment


def check_fits_cluster(experiment: Experiment, cluster: dict | None = None) -> None:
    """Fail at once when a trial would ask for more than the cluster has (``check_cluster_fits``:
    what RLlib asks Ray for, role by role, for every variant of a search space), naming the
    experiment.

    Ray would otherwise leave the trial PENDING forever, waiting for resources that never come.
    """
    from rllib_gpuenv.experiments.settings import config_variants
    from rllib_gpuenv.rllib.resources import ResourceError, check_cluster_fits

    try:
        for variant in config_variants(experiment.config):  # a grid over num_env_runners: each variant must fit
            check_cluster_fits(variant, cluster)
    except ResourceError as err:
        raise ExperimentError(f"experiment {experiment.name!r}: {err}") from None


def console_options(verbose: int) -> dict:
    """``RunConfig``'s console settings for a command's ``verbose``: one progress row per result
    (``ResultRows``), each trial's config at 2 and up, Tune's own trial messages at 3."""
    from rllib_gpuenv.experiments.progress import ResultRows

    return {
        "progress_reporter": ResultRows(show_config=verbose >= 2),
        "verbose": min(max(verbose - 1, 1), 3) if verbose > 0 else 0,
    }


@contextlib.contextmanager
def tune_progress_reporter_output():
    """Tune's new console output ignores a ``progress_reporter`` (RLlib's example utilities set
    ``RAY_AIR_NEW_OUTPUT=0`` for the same reason); switch to the reporter output for one run."""
    previous = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = previous


def trial_name(trial) -> str:
    """Tune's name for a trial (``<algorithm>_<env>_<trial id>``, as RLlib's old CLI showed it:
    ``DevicePPO_GPUCartPole-v1_3a477_00000``) with the env's bare id: the ``module:`` before it,
    which the trials import the env by (``rllib_gpuenv:``), is not part of the name."""
    env = trial.config.get("env")
    if isinstance(env, str):
        env = env.split(":", 1)[-1]
    elif isinstance(env, type):
        env = env.__name__
    name = f"{trial.trainable_name}_{env}" if env else trial.trainable_name
    return f"{name}_{trial.trial_id}".replace("/", "_")


def make_scheduler(name: str, settings: dict | None = None):
    """Tune's trial scheduler ``name`` with ``settings`` (old ``rllib train``'s ``--scheduler`` and
    ``--scheduler-config``), checked: an unknown name or setting is an ``ExperimentError`` (Tune's
    ``create_scheduler`` drops unknown settings silently). A scheduler that ranks trials by a
    metric and is given none ranks them by their mean return (``env_runners/episode_return_mean``,
    ``mode: max``). FIFO, Tune's default, is None."""
    import inspect

    from ray.tune.schedulers import SCHEDULER_IMPORT

    from rllib_gpuenv.experiments.checks import one_line
    from rllib_gpuenv.experiments.metric_names import RETURN_METRIC

    settings = dict(settings or {})
    key = {"asha": "async_hyperband"}.get(name.lower(), name.lower())  # Tune's ASHAScheduler
    if key not in SCHEDULER_IMPORT:
        raise ExperimentError(f"--scheduler {name}: not one of Tune's schedulers: asha, {', '.join(sorted(SCHEDULER_IMPORT))}")
    if key == "fifo":
        if settings:
            raise ExperimentError("--scheduler-config: FIFO (the default scheduler) takes no settings: name a --scheduler")
        return None
    try:
        scheduler_class = SCHEDULER_IMPORT[key]() if inspect.isfunction(SCHEDULER_IMPORT[key]) else SCHEDULER_IMPORT[key]
    except Exception as err:  # noqa: BLE001 (a missing extra: PB2 needs scikit-learn)
        raise ExperimentError(f"--scheduler {name}: {one_line(err)}") from None
    accepted = list(inspect.signature(scheduler_class).parameters)
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        raise ExperimentError(
            f"--scheduler-config: {unknown[0]}: not a setting of {scheduler_class.__name__}, which takes {', '.join(accepted)}"
        )
    if "metric" in accepted and "metric" not in settings:
        settings.update(metric=RETURN_METRIC, mode=settings.get("mode", "max"))
    try:
        return scheduler_class(**settings)
    except Exception as err:  # noqa: BLE001 (whatever the scheduler says of a setting: name it)
        raise ExperimentError(f"--scheduler-config: {scheduler_class.__name__}: {one_line(err)}") from None


def run_experiment(
    experiment: Experiment,
    storage_path: str | None = None,
    verbose: int = 1,
    resume: bool = False,
    scheduler: tuple[str, dict] | None = None,
):
    """Run with Ray Tune, one progress row per result (and each trial's config at ``verbose >= 2``);
    return the ResultGrid. ``verbose >= 3`` adds Tune's own trial messages. ``resume``: go on with
    the experiment Tune keeps in ``storage_path/name``, if there is one (``restore.py``).
    ``scheduler``: a Tune trial scheduler's name and settings (``make_scheduler``)."""
    from ray import tune
    from ray.util import log_once

    from rllib_gpuenv.experiments.progress_csv import ProgressCSVCallback
    from rllib_gpuenv.experiments.restore import experiment_folder, restoring
    from rllib_gpuenv.experiments.tensorboard import TensorBoardCallback
    from rllib_gpuenv.rllib.reset_in_place import resets_in_place

    check_fits_cluster(experiment)
    storage_path = storage_path or experiment.storage_path
    param_space = experiment.config if experiment.restore is None else restoring(experiment.config, experiment.restore)
    folder = experiment_folder(storage_path, experiment.name)
    if resume and tune.Tuner.can_restore(folder):
        print(f"experiment {experiment.name!r}: resuming {folder} (its unfinished trials, each from its latest checkpoint)")
        tuner = tune.Tuner.restore(
            folder, trainable=experiment.algo_class, resume_unfinished=True, resume_errored=True, param_space=param_space
        )
    else:
        if resume:
            print(f"experiment {experiment.name!r}: nothing to resume in {folder}: starting it")
        run_config = tune.RunConfig(
            name=experiment.name,
            stop=experiment.stop,
            storage_path=storage_path,
            checkpoint_config=tune.CheckpointConfig(**experiment.checkpoint_config),
            failure_config=tune.FailureConfig(**experiment.failure_config),
            **console_options(verbose),
            # in place of Tune's: a result's scalars as one event; every key a column (progress_csv.py)
            callbacks=[TensorBoardCallback(), ProgressCSVCallback()],
        )
        tuner = tune.Tuner(
            experiment.algo_class,
            param_space=param_space,
            run_config=run_config,
            tune_config=tune.TuneConfig(
                num_samples=experiment.num_samples,
                trial_name_creator=trial_name,
                scheduler=make_scheduler(*scheduler) if scheduler else None,
                # a trial's actor goes on with the next trial, or with PBT's new config, in its process
                reuse_actors=resets_in_place(experiment.algo_class),
            ),
        )
    # check_stop has checked every stop metric against the results the config will report, so
    # Tune's warning that one is "not found in result dict" (with every key of the result) would
    # only say that an evaluation metric is not there before the first evaluation: not said.
    log_once("tune_trial_stop_criterion_not_found")
    with tune_progress_reporter_output():
        return tuner.fit()
