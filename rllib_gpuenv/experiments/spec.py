"""Experiment files in RLlib's old ``rllib train`` format, read safely and checked whole.

A YAML file holds one or more experiments::

    my-experiment:
      run: DevicePPO            # or any RLlib algorithm: PPO, APPO, DQN, ...
      env: GPUCartPole-v1       # a gymnasium id or a Tune-registered env
      stop: {env_runners/episode_return_mean: 475, training_iteration: 200}
      num_samples: 1
      checkpoint_config: {checkpoint_at_end: true}
      failure_config: {max_failures: 2}   # optional: a trial that fails starts again (from its latest checkpoint, if any)
      restore: path/to/checkpoint   # optional: every trial starts from this checkpoint (restore.py)
      config: {num_env_runners: 0, lr: 0.0005, ...}   # AlgorithmConfig settings

A Python file defines ``config`` (an ``AlgorithmConfig``) and ``stop`` (and optionally ``name``).

Old names and settings are translated or dropped with a warning each (``legacy.py``); the
config section is applied by ``settings.py``, the env checked by ``envs.py``, values and stop
metrics by ``checks.py``. A failure is one ``ExperimentError`` line,
``<file>: experiment '<name>': <key>: <problem and fix>``.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import sys
import traceback
import types
from typing import Any

import yaml

from rllib_gpuenv.experiments.checks import check_metric, check_name, check_stop, check_values, one_line
from rllib_gpuenv.experiments.envs import check_env_runner, rllib_env_id, vectorize_our_env
from rllib_gpuenv.experiments.errors import ExperimentError, key_error
from rllib_gpuenv.experiments.legacy import translate_experiment_keys, translate_metric
from rllib_gpuenv.experiments.resource_space import ResourceSpace
from rllib_gpuenv.experiments.restore import check_restore
from rllib_gpuenv.experiments.settings import (
    algorithm_config,
    apply_config,
    build_config,
    current_settings,
    merge_overrides,
    prepare_settings,
    validate_python_config,
)
from rllib_gpuenv.experiments.shipped import config_file, shipped_settings

logger = logging.getLogger(__name__)

EXPERIMENT_KEYS = {
    "run",
    "env",
    "stop",
    "config",
    "num_samples",
    "checkpoint_config",
    "failure_config",
    "storage_path",
    "restore",
    "resource_search",
}
MAIN_JOB_FILE = "gpu_cartpole_ppo.yaml"  # the main job's experiment: PPO on GPUCartPole-v1


@dataclasses.dataclass
class Experiment:
    """One runnable experiment: an algorithm config plus Tune's stop and run settings."""

    name: str
    config: Any  # an AlgorithmConfig
    stop: dict
    num_samples: int = 1
    checkpoint_config: dict = dataclasses.field(default_factory=dict)
    failure_config: dict = dataclasses.field(default_factory=dict)  # tune.FailureConfig's arguments
    storage_path: str | None = None  # a folder, or a URI (s3://..., gs://...) that Tune writes to
    restore: str | None = None  # a checkpoint every trial starts from (absolute path, checked)
    resource_search: dict | None = None
    code_folder: str | None = None  # a Python file's folder: its trials import the file's neighbours from there

    @property
    def algo_class(self):
        return self.config.algo_class


def experiment_where(source: str, name: str) -> str:
    """How errors and warnings name an experiment: ``<file>: experiment '<name>'``."""
    return f"{source}: experiment {name!r}"


RUN_SETTINGS = {"checkpoint_config": "CheckpointConfig", "failure_config": "FailureConfig"}  # key: its tune class


def _run_setting(key: str, values: Any, where: str) -> dict:
    """An experiment's ``checkpoint_config`` or ``failure_config``: the arguments of Tune's
    class of that name, checked by making one."""
    from ray import tune

    name = RUN_SETTINGS[key]
    if not isinstance(values, dict):
        raise key_error(where, key, f"expected a mapping of tune.{name} arguments, got {values!r}")
    try:
        getattr(tune, name)(**values)
    except (TypeError, ValueError) as err:
        raise key_error(where, key, one_line(err)) from None
    return dict(values)


def storage_location(storage: str, base_dir: str = ".") -> str:
    """Where Tune writes an experiment's results: a URI as it is (Tune writes to ``s3://``,
    ``gs://``, ``file://``, ... through pyarrow), a folder relative to ``base_dir``."""
    if "://" in storage:
        return storage
    return os.path.abspath(os.path.join(base_dir, os.path.expanduser(storage)))


def _stop(stop: Any, where: str) -> dict:
    if not isinstance(stop, dict):
        raise key_error(where, "stop", f"expected a mapping such as {{training_iteration: 100}}, got {stop!r}")
    return {translate_metric(k, where): v for k, v in stop.items()}


def _config_key_errors(spec: dict, where: str) -> list[str]:
    """The lines a ``config:`` section's misspelt keys earn, where its algorithm is known: said
    with the experiment's own misspelt keys, not on the next run."""
    settings = spec.get("config")
    if "run" not in spec or not isinstance(settings, dict):
        return []
    try:
        prepare_settings(algorithm_config(spec["run"], where), dict(settings), where)
    except ExperimentError as err:
        return str(err).splitlines()
    return []


def experiment_from_spec(
    name: str,
    spec: Any,
    source: str,
    base_dir: str = ".",
    *,
    config_overrides: dict | None = None,
    stop_overrides: dict | None = None,
    allow_no_stop: bool = False,
) -> Experiment:
    """An ``Experiment`` from one ``{run, env, stop, config, ...}`` entry of a file, checked whole.

    ``config_overrides``/``stop_overrides`` come from the command line (``--config``/``--stop``)
    and win over the file's; errors about them say so.
    """
    where = experiment_where(source, name)
    check_name(name, where)
    if not isinstance(spec, dict):
        raise ExperimentError(f"{where}: expected a mapping with run, env, stop, config; got {type(spec).__name__}")
    run_settings = {key: _run_setting(key, spec.get(key) or {}, where) for key in RUN_SETTINGS}
    spec = translate_experiment_keys({k: v for k, v in spec.items() if k not in RUN_SETTINGS}, run_settings, where)
    run_settings = {key: _run_setting(key, values, where) for key, values in run_settings.items()}  # with the old keys'
    unknown = sorted(set(spec) - EXPERIMENT_KEYS)
    if unknown:  # each misspelt key, and the config's, at once: one line each
        lines = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(EXPERIMENT_KEYS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            lines.append(
                str(
                    key_error(
                        where, key, f"not an experiment key; {hint}an experiment has {', '.join(sorted(EXPERIMENT_KEYS))}"
                    )
                )
            )
        raise ExperimentError("\n".join(lines + _config_key_errors(spec, where)))
    if "run" not in spec:
        raise key_error(where, "run", "missing: the algorithm, e.g. run: DevicePPO or run: PPO")
    settings = spec.get("config") or {}
    if not isinstance(settings, dict):
        raise key_error(where, "config", f"expected a mapping of AlgorithmConfig settings, got {settings!r}")
    settings = merge_overrides(settings, config_overrides or {})
    env = spec.get("env", settings.pop("env", None))
    if env is None:
        raise key_error(where, "env", "missing: the env, e.g. env: GPUCartPole-v1")
    config = build_config(spec["run"], env, settings, where, from_command_line=set(config_overrides or {}))
    stop = {**_stop(spec.get("stop") or {}, where), **_stop(stop_overrides or {}, "--stop")}
    check_stop(stop, config, where, allow_no_stop)
    num_samples = spec.get("num_samples", 1)
    check_values({"num_samples": num_samples}, where)
    storage = spec.get("storage_path")
    restore = spec.get("restore")
    search = spec.get("resource_search")
    if search is not None:
        ResourceSpace.from_dict(search, f"{where}: resource_search")  # its values checked before Ray starts
    score = run_settings["checkpoint_config"].get("checkpoint_score_attribute")
    if score is not None:  # Tune ranks the checkpoints by it: a misspelt one was accepted without a word
        check_metric(score, config, where, "checkpoint_config.checkpoint_score_attribute")
    return Experiment(
        name=name,
        config=config,
        stop=stop,
        num_samples=num_samples,
        checkpoint_config=run_settings["checkpoint_config"],
        failure_config=run_settings["failure_config"],
        storage_path=storage_location(storage, base_dir) if storage else None,
        restore=None if restore is None else check_restore(restore, config, where, base_dir=base_dir, stop=stop),
        resource_search=None
        if search is None
        else dataclasses.asdict(ResourceSpace.from_dict(search, f"{where}: resource_search")),
    )


def load_experiments(
    path: str | os.PathLike,
    *,
    config_overrides: dict | None = None,
    stop_overrides: dict | None = None,
    allow_no_stop: bool = False,
) -> list[Experiment]:
    """Every experiment of a YAML file (old ``rllib train`` format) or a Python file, checked.

    A bad file raises one ``ExperimentError`` with one line per bad experiment."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        from rllib_gpuenv.experiments.shipped import config_file, config_names

        name = os.path.basename(path)
        shipped = f"; the package ships {name}: {config_file(name)}" if name in config_names() else ""
        raise ExperimentError(f"{path}: no such experiment file{shipped}")
    overrides = dict(config_overrides=config_overrides, stop_overrides=stop_overrides, allow_no_stop=allow_no_stop)
    if path.endswith(".py"):
        return [_python_experiment(path, **overrides)]
    try:
        with open(path) as f:
            experiments = yaml.safe_load(f)
    except yaml.YAMLError as err:
        raise ExperimentError(f"{path}: not valid YAML: {one_line(err)}") from None
    if not isinstance(experiments, dict) or not experiments:
        raise ExperimentError(f"{path}: expected experiments as {{name: {{run, env, stop, config}}}}")
    base_dir = os.path.dirname(os.path.abspath(path))
    loaded, errors = [], []
    for name, spec in experiments.items():  # every experiment's mistake, not only the first one's
        try:
            loaded.append(experiment_from_spec(str(name), spec, path, base_dir, **overrides))
        except ExperimentError as err:
            errors.append(str(err))
    if errors:
        raise ExperimentError("\n".join(errors))
    return loaded


def python_file_module(path: str) -> types.ModuleType:
    """The file run as a module of its own, whose classes and functions Ray pickles by value: no
    other process can import it. What it hands Tune and RLlib (a ``tune.register_env`` creator,
    which Tune pickles as it registers, an env class, callbacks) then reaches the trials, where
    with ``runpy.run_path`` they were pickled as ``<run_path>.X``, a module no trial has."""
    from ray import cloudpickle

    stem = os.path.splitext(os.path.basename(path))[0]
    module = types.ModuleType(f"rllib_experiment_{''.join(c if c.isalnum() else '_' for c in stem)}")
    module.__file__ = os.path.abspath(path)
    sys.modules[module.__name__] = module  # while the file runs, as runpy has it (dataclasses, typing look it up)
    cloudpickle.register_pickle_by_value(module)
    try:
        with open(path, encoding="utf-8") as f:
            exec(compile(f.read(), path, "exec"), module.__dict__)  # noqa: S102 (the user's own experiment file)
    finally:
        del sys.modules[module.__name__]
    return module


JOB_CONFIG_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray in a job's driver: the job's config, runtime env included


def importable_folders_env(folders) -> dict:
    """``runtime_env`` settings under which Ray's workers import what Python experiment files
    import from their own folders (``Experiment.code_folder``): Ray passes on only the driver's
    working folder and script folder.

    In a job (``ray job submit``), Ray merges these with the job's runtime env. A folder inside
    the job's working folder (``--working-dir``, every worker's working folder, on every node) is
    named relative to it, as no other node has the head's path. A job whose runtime env sets
    PYTHONPATH itself keeps it: Ray refuses a second."""
    folders = list(dict.fromkeys(f for f in folders if f))
    job = os.environ.get(JOB_CONFIG_VARIABLE)
    if job:
        import json

        job_env = (json.loads(job).get("runtime_env") or {}).get("env_vars") or {}
        if "PYTHONPATH" in job_env:
            return {}
        here = os.getcwd()
        folders = [os.path.relpath(f, here) if f == here or f.startswith(here + os.sep) else f for f in folders]
    if not folders:
        return {}
    from rllib_gpuenv.rllib.checkpointing import CODE_FOLDERS_VARIABLE

    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    # the folders again on their own: the checkpoints the trials save record them (``record_code_folders``)
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(folders + inherited), CODE_FOLDERS_VARIABLE: os.pathsep.join(folders)}}


def run_python_file(path: str) -> dict:
    """A Python experiment file's names, the file run as a module (its ``__main__`` block not
    run) with an argv of its own: RLlib's example scripts parse their command line when they
    load, and must see their own defaults, not ``rllib train``'s options. Anything it raises is
    one ``ExperimentError`` naming the file and line (RLlib's message for an old API call names
    the new one)."""
    argv = sys.argv
    sys.argv = [path]
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:  # as `python file.py` has it: the file imports its neighbours (``Experiment.code_folder``
        sys.path.insert(0, folder)  # takes the folder to Tune's trials)
    try:
        return vars(python_file_module(path))
    except SystemExit as err:  # its argument parser gave up (it printed why)
        raise ExperimentError(f"{path}: exited while it loaded (exit status {err.code})") from None
    except Exception as err:  # noqa: BLE001 (whatever the file raises: name the file and the line)
        frames = [f for f in traceback.extract_tb(err.__traceback__) if os.path.abspath(f.filename) == os.path.abspath(path)]
        line = f":{frames[-1].lineno}" if frames else ""
        raise ExperimentError(f"{path}{line}: {type(err).__name__}: {one_line(err)}") from None
    finally:
        sys.argv = argv


def _python_experiment(path: str, config_overrides=None, stop_overrides=None, allow_no_stop=False) -> Experiment:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    namespace = run_python_file(path)
    name = str(namespace.get("name") or os.path.splitext(os.path.basename(path))[0])
    where = experiment_where(path, name)
    check_name(name, where)
    config = namespace.get("config")
    if not isinstance(config, AlgorithmConfig):
        raise key_error(
            where, "config", f"a Python experiment file must define `config`, an AlgorithmConfig (got {type(config).__name__})"
        )
    config.environment(rllib_env_id(config.env, where))
    if config_overrides:  # a mapping the config holds is merged with the override, as a YAML file's is
        overrides = merge_overrides(current_settings(config, config_overrides), config_overrides)
        apply_config(config, overrides, where, from_command_line=set(config_overrides))
    vectorize_our_env(config, config_overrides)
    check_env_runner(config, where)
    validate_python_config(config, where, dict(config_overrides or {}))
    stop = {**_stop(dict(namespace.get("stop") or {}), where), **_stop(stop_overrides or {}, "--stop")}
    check_stop(stop, config, where, allow_no_stop)
    return Experiment(name=name, config=config, stop=stop, code_folder=os.path.dirname(os.path.abspath(path)))


def inline_experiment(
    algo: str,
    env: str,
    config: dict | None = None,
    stop: dict | None = None,
    name: str | None = None,
    *,
    allow_no_stop: bool = False,
) -> Experiment:
    """What ``rllib train --algo X --env Y --config {...} --stop {...}`` runs: the shipped
    experiment's settings for this algorithm and env when there is one (``--config`` on top),
    the algorithm's defaults otherwise (always for RLlib's own algorithms, as RLlib's CLI did)."""
    shipped = shipped_settings(algo, env) if algo.startswith("Device") else None
    if shipped is not None:
        logger.info("%s on %s: starting from the settings of the shipped %s (--config overrides them)", algo, env, shipped[0])
    spec = {"run": algo, "env": env, "config": {**(shipped[1] if shipped else {}), **(config or {})}, "stop": stop or {}}
    default_name = f"{algo}_{env}".replace(":", "_").replace("/", "_").replace("\\", "_")
    return experiment_from_spec(name or default_name, spec, "<command line>", allow_no_stop=allow_no_stop)


def load_config(path: str | os.PathLike | None = None, device: str | None = None, seed: int | None = None) -> Experiment:
    """The (first) experiment of a file (default: the main job's, shipped), with the device of
    every role and the seed overridden."""
    experiment = load_experiments(config_file(MAIN_JOB_FILE) if path is None else path)[0]
    if device is not None:
        put_on_device(experiment.config, device)
    if seed is not None:
        experiment.config.debugging(seed=seed)
    return experiment


def put_on_device(config, device: str) -> None:
    """Every role of ``config`` on ``device`` (``auto``, ``cpu``, ``cuda[:N]``). A device
    algorithm's env runners and learner (``devices``); for RLlib's own algorithms, whose env
    runners step their envs on the CPU, the learner: RLlib's ``num_gpus_per_learner`` and
    ``local_gpu_idx``. A GPU this machine lacks is an error here, as on the device path."""
    if hasattr(config, "devices"):
        config.devices(learner=device, env_runners=device)
        return
    from rllib_gpuenv.core.devices import resolve_device

    resolved = resolve_device(device)
    if resolved.type == "cuda":
        config.learners(num_gpus_per_learner=1, local_gpu_idx=resolved.index)
    else:
        config.learners(num_gpus_per_learner=0)


def cartpole_config(device: str | None = None, seed: int | None = None):
    """The main job's ``DevicePPOConfig`` (``configs/gpu_cartpole_ppo.yaml``)."""
    return load_config(device=device, seed=seed).config
