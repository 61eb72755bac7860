"""Experiment files in RLlib's old ``rllib train`` format, read safely, checked, run with Ray Tune.

A YAML file holds one or more experiments::

    my-experiment:
      run: DevicePPO            # or any RLlib algorithm: PPO, APPO, DQN, ...
      env: GPUCartPole-v1       # a gymnasium id or a Tune-registered env
      stop: {env_runners/episode_return_mean: 475, training_iteration: 200}
      num_samples: 1
      checkpoint_config: {checkpoint_at_end: true}
      config: {num_env_runners: 0, lr: 0.0005, ...}   # AlgorithmConfig settings

A Python file defines ``config`` (an ``AlgorithmConfig``) and ``stop`` (and optionally ``name``).

Old names and settings are translated or dropped with a warning each (``rllib_gpuenv.legacy``).
Everything else is checked before Ray starts (``rllib_gpuenv.experiment_checks``): keys, values,
RLlib's own ``validate()``, stop metrics and the name. A failure is one ``ExperimentError`` line,
``<file>: experiment '<name>': <key>: <problem and fix>``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib
import inspect
import itertools
import logging
import os
import runpy
from typing import Any, Collection

import yaml

from rllib_gpuenv.experiment_checks import (
    check_name,
    check_stop,
    check_values,
    flatten_settings,
    is_search_space,
    key_label,
    one_line,
    validate_config,
)
from rllib_gpuenv.experiment_errors import ExperimentError, key_error
from rllib_gpuenv.legacy import (
    CONFIG_RENAMES as LEGACY_CONFIG_KEYS,
    EXPERIMENT_RENAMES as LEGACY_EXPERIMENT_KEYS,
    METRIC_RENAMES as LEGACY_METRICS,
    RETURN_METRIC,
    translate_config,
    translate_experiment_keys,
    translate_metric,
    translate_model_config,
)

logger = logging.getLogger(__name__)

__all__ = [
    "Experiment", "ExperimentError", "LEGACY_CONFIG_KEYS", "LEGACY_EXPERIMENT_KEYS", "LEGACY_METRICS", "RETURN_METRIC",
    "apply_config", "check_env", "check_fits_cluster", "experiment_from_spec", "inline_experiment", "load_experiments",
    "rllib_env_id", "run_experiment", "translate_metric",
]  # fmt: skip

PACKAGE = __name__.split(".")[0]
EXPERIMENT_KEYS = {"run", "env", "stop", "config", "num_samples", "checkpoint_config", "storage_path", "resource_search"}
# Our own config sections: DevicePPOConfig methods taking keyword arguments.
METHOD_SECTIONS = ("device_rollouts", "devices")
# AlgorithmConfig methods whose keyword arguments set settings (and check some values).
SETTER_METHODS = (
    "training", "environment", "env_runners", "learners", "evaluation", "fault_tolerance", "reporting",
    "debugging", "checkpointing", "multi_agent", "rl_module", "offline_data",
)  # fmt: skip
# Keys that RLlib's update_from_dict resolves specially (class paths, sub-dict merges).
UPDATE_FROM_DICT_KEYS = {"callbacks", "callbacks_class", "multiagent", "exploration_config", "replay_buffer_config", "optimizer", "sample_collector"}
MAX_VALIDATED_VARIANTS = 64  # grid-search variants whose config is validated before Ray starts


@dataclasses.dataclass
class Experiment:
    """One runnable experiment: an algorithm config plus Tune's stop and run settings."""

    name: str
    config: Any  # an AlgorithmConfig
    stop: dict
    num_samples: int = 1
    checkpoint_config: dict = dataclasses.field(default_factory=dict)
    storage_path: str | None = None
    resource_search: dict | None = None

    @property
    def algo_class(self):
        return self.config.algo_class


def experiment_where(source: str, name: str) -> str:
    """How errors and warnings name an experiment: ``<file>: experiment '<name>'``."""
    return f"{source}: experiment {name!r}"


def algorithm_config(run: Any, where: str = "<command line>"):
    """The default config of an algorithm named as in ``run:`` (``DevicePPO``, ``DeviceDQN`` or
    RLlib's names)."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    from rllib_gpuenv.rllib import DeviceDQNConfig, DevicePPOConfig

    device_algorithms = {"DevicePPO": DevicePPOConfig, "DeviceDQN": DeviceDQNConfig}
    if run in device_algorithms:
        return device_algorithms[run]()
    if run not in ALGORITHMS:
        names = [*device_algorithms, *sorted(ALGORITHMS)]
        close = difflib.get_close_matches(str(run), names, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise key_error(where, "run", f"unknown algorithm {run!r}; {hint}available: {', '.join(names)}")
    return ALGORITHMS[run]()[1]


# --- envs ---------------------------------------------------------------------------------------


def _entry_point_module(entry_point: Any) -> str:
    if entry_point is None:
        return ""
    if callable(entry_point):
        return getattr(entry_point, "__module__", "") or ""
    return str(entry_point).split(":", 1)[0]


def is_package_env(env_id: str) -> bool:
    """Whether gymnasium's spec for ``env_id`` comes from this package (its entry points live here)."""
    import gymnasium as gym

    importlib.import_module(PACKAGE)  # registers our ids with gymnasium
    spec = gym.registry.get(env_id)
    if spec is None:
        return False
    modules = (_entry_point_module(spec.entry_point), _entry_point_module(spec.vector_entry_point))
    return any(m == PACKAGE or m.startswith(PACKAGE + ".") for m in modules)


def rllib_env_id(env: Any, where: str = "<command line>") -> Any:
    """``env`` as RLlib should get it, checked now rather than inside a trial.

    Our ids go module-qualified (``rllib_gpuenv:GPUCartPole-v1``): Tune's trial actors are
    fresh processes, and the prefix makes gymnasium import this package there before it looks
    the id up, without any Tune registration. Other ids pass unchanged.
    """
    if not isinstance(env, str):
        return env  # an env class or creator: Python users know what they pass
    module, _, name = env.rpartition(":")
    if module in ("", PACKAGE) and is_package_env(name):
        return f"{PACKAGE}:{name}"
    check_env(env, where)
    return env


def check_env(env: Any, where: str) -> None:
    """Fail now, not inside a trial, when ``env`` is neither a gymnasium id nor a Tune-registered env."""
    import gymnasium as gym

    if not isinstance(env, str):
        return
    module, _, name = env.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise key_error(where, "env", f"{env!r}: cannot import {module!r} ({err}); install it or drop the '{module}:' prefix") from None
    else:
        importlib.import_module(PACKAGE)
    try:
        gym.spec(name)
        return
    except gym.error.DeprecatedEnv as err:
        raise key_error(where, "env", one_line(err)) from None
    except (gym.error.Error, ModuleNotFoundError, ImportError):
        pass
    if not module:
        from ray.tune.registry import ENV_CREATOR, _global_registry

        if _global_registry.contains(ENV_CREATOR, env):
            return
    close = difflib.get_close_matches(name, list(gym.registry), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; register it with gymnasium or ray.tune.register_env"
    raise key_error(where, "env", f"unknown env {env!r}{hint}")


def _vectorize_our_env(config: Any) -> None:
    """RLlib's stock env runner builds our ids as the vector envs they are (gymnasium's
    ``vector_entry_point``), not as N copies of a single env, unless the config chose a mode."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    stock = config.env_runner_cls in (None, SingleAgentEnvRunner)
    ours = isinstance(config.env, str) and config.env.startswith(PACKAGE + ":")
    if stock and ours and config.gym_env_vectorize_mode == type(config)().gym_env_vectorize_mode:
        config.env_runners(gym_env_vectorize_mode="vector_entry_point")


# --- config settings ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _setter_of(config_cls: type) -> dict[str, str]:
    """Setting name -> the AlgorithmConfig method that takes it as a keyword argument."""
    setters: dict[str, str] = {}
    for method in SETTER_METHODS:
        function = getattr(config_cls, method, None)
        if function is None:
            continue
        for param in inspect.signature(function).parameters.values():
            if param.kind is param.KEYWORD_ONLY or param.kind is param.POSITIONAL_OR_KEYWORD:
                setters.setdefault(param.name, method)
    setters.pop("self", None)
    return setters


def prepare_settings(config: Any, settings: dict, where: str) -> dict:
    """Old names translated (a warning each), model keys checked, unknown keys rejected."""
    settings = translate_config(settings, config, where)
    if isinstance(settings.get("model_config"), dict):
        settings["model_config"] = translate_model_config(settings["model_config"], where)
    if isinstance(settings.get("n_step"), list):  # YAML has no tuples; RLlib reads a range (DQN's n_step: [2, 5]) only from one
        settings["n_step"] = tuple(settings["n_step"])
    setters = _setter_of(type(config))
    for key in settings:
        if key in METHOD_SECTIONS:
            if getattr(config, key, None) is None:
                raise key_error(where, key, "a section of the device algorithms: needs run: DevicePPO or DeviceDQN")
            if not isinstance(settings[key], dict):
                raise key_error(where, key, f"expected a mapping of {key}() arguments, got {settings[key]!r}")
            continue
        attribute = config._translate_special_keys(key, warn_deprecated=False)
        if key not in setters and not hasattr(config, attribute) and key != "env_config":
            names = sorted(set(setters) | {k for k in vars(config) if not k.startswith("_")})
            close = difflib.get_close_matches(key, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise key_error(where, key, f"not a {type(config).__name__} setting{hint}")
    return settings


def set_settings(config: Any, settings: dict, where: str, from_command_line: Collection[str] = ()):
    """Apply prepared settings through RLlib's config methods (their own value checks run)."""
    check_values(flatten_settings(settings, METHOD_SECTIONS), where, from_command_line)
    setters = _setter_of(type(config))
    for key, value in settings.items():
        try:
            if key in METHOD_SECTIONS:
                getattr(config, key)(**value)
            elif key in setters and key not in UPDATE_FROM_DICT_KEYS and not is_search_space(value):
                getattr(config, setters[key])(**{key: value})
            else:
                config.update_from_dict({key: value})
        except (TypeError, ValueError, AssertionError) as err:
            raise key_error(where, key_label(key, from_command_line), one_line(err)) from None
    return config


def apply_config(config, settings: dict, source: str, from_command_line: Collection[str] = ()):
    """Apply a ``config:`` section (old names translated) to an AlgorithmConfig; unknown keys
    and bad values are errors naming ``source`` and the key."""
    return set_settings(config, prepare_settings(config, dict(settings), source), source, from_command_line)


def _contains_search_space(value: Any) -> bool:
    if is_search_space(value):
        return True
    return isinstance(value, dict) and any(_contains_search_space(v) for v in value.values())


def _variants(settings: dict) -> list[dict]:
    """The settings of each variant Tune would run of a grid search or sampled space (at most
    MAX_VALIDATED_VARIANTS): each trial's config must be valid, not the unresolved one."""
    from ray.tune.search.variant_generator import generate_variants

    return [spec["config"] for _, spec in itertools.islice(generate_variants({"config": settings}), MAX_VALIDATED_VARIANTS)]


def build_config(run: Any, env: Any, settings: dict, where: str, from_command_line: Collection[str] = ()):
    """The algorithm config of an experiment, every variant validated by RLlib before Ray starts."""
    config = algorithm_config(run, where)
    env = rllib_env_id(env, where)
    config.environment(env)
    settings = prepare_settings(config, settings, where)
    set_settings(config, settings, where, from_command_line)
    _vectorize_our_env(config)
    if not _contains_search_space(settings):
        validate_config(config, flatten_settings(settings, METHOD_SECTIONS), where, from_command_line)
        return config
    for variant in _variants(settings):
        candidate = algorithm_config(run, where).environment(env)
        set_settings(candidate, variant, where, from_command_line)
        _vectorize_our_env(candidate)
        validate_config(candidate, flatten_settings(variant, METHOD_SECTIONS), where, from_command_line)
    return config


def _validate_python_config(config: Any, where: str, overrides: dict) -> None:
    """A Python file's config validated as Tune will run it: each variant of its search spaces."""
    settings = config.to_dict()
    if not _contains_search_space(settings):
        check_values(settings, where, set(overrides))
        validate_config(config, overrides, where, from_command_line=set(overrides))
        return
    for variant in _variants(settings):
        check_values(variant, where, set(overrides))
        validate_config(type(config)().update_from_dict(variant), overrides, where, from_command_line=set(overrides))


# --- experiments --------------------------------------------------------------------------------


def _checkpoint_config(values: Any, where: str) -> dict:
    from ray import tune

    if not isinstance(values, dict):
        raise key_error(where, "checkpoint_config", f"expected a mapping of tune.CheckpointConfig arguments, got {values!r}")
    try:
        tune.CheckpointConfig(**values)
    except (TypeError, ValueError) as err:
        raise key_error(where, "checkpoint_config", one_line(err)) from None
    return dict(values)


def _stop(stop: Any, where: str) -> dict:
    if not isinstance(stop, dict):
        raise key_error(where, "stop", f"expected a mapping such as {{training_iteration: 100}}, got {stop!r}")
    return {translate_metric(k, where): v for k, v in stop.items()}


def experiment_from_spec(
    name: str, spec: Any, source: str, base_dir: str = ".", *,
    config_overrides: dict | None = None, stop_overrides: dict | None = None, allow_no_stop: bool = False,
) -> Experiment:  # fmt: skip
    """An ``Experiment`` from one ``{run, env, stop, config, ...}`` entry of a file, checked whole.

    ``config_overrides``/``stop_overrides`` come from the command line (``--config``/``--stop``)
    and win over the file's; errors about them say so.
    """
    where = experiment_where(source, name)
    check_name(name, where)
    if not isinstance(spec, dict):
        raise ExperimentError(f"{where}: expected a mapping with run, env, stop, config; got {type(spec).__name__}")
    checkpoint_config = _checkpoint_config(spec.get("checkpoint_config") or {}, where)
    spec = translate_experiment_keys({k: v for k, v in spec.items() if k != "checkpoint_config"}, checkpoint_config, where)
    unknown = sorted(set(spec) - EXPERIMENT_KEYS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(EXPERIMENT_KEYS), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise key_error(where, unknown[0], f"not an experiment key; {hint}an experiment has {', '.join(sorted(EXPERIMENT_KEYS))}")
    if "run" not in spec:
        raise key_error(where, "run", "missing: the algorithm, e.g. run: DevicePPO or run: PPO")
    settings = spec.get("config") or {}
    if not isinstance(settings, dict):
        raise key_error(where, "config", f"expected a mapping of AlgorithmConfig settings, got {settings!r}")
    settings = {**settings, **(config_overrides or {})}
    env = spec.get("env", settings.pop("env", None))
    if env is None:
        raise key_error(where, "env", "missing: the env, e.g. env: GPUCartPole-v1")
    config = build_config(spec["run"], env, settings, where, from_command_line=set(config_overrides or {}))
    stop = {**_stop(spec.get("stop") or {}, where), **_stop(stop_overrides or {}, "--stop")}
    check_stop(stop, config, where, allow_no_stop)
    num_samples = spec.get("num_samples", 1)
    check_values({"num_samples": num_samples}, where)
    storage = spec.get("storage_path")
    return Experiment(
        name=name,
        config=config,
        stop=stop,
        num_samples=num_samples,
        checkpoint_config=checkpoint_config,
        storage_path=os.path.abspath(os.path.join(base_dir, os.path.expanduser(storage))) if storage else None,
        resource_search=spec.get("resource_search"),
    )


def load_experiments(
    path: str | os.PathLike, *, config_overrides: dict | None = None, stop_overrides: dict | None = None, allow_no_stop: bool = False,
) -> list[Experiment]:  # fmt: skip
    """Every experiment of a YAML file (old ``rllib train`` format) or a Python file, checked.

    A bad file raises one ``ExperimentError`` with one line per bad experiment."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ExperimentError(f"{path}: no such experiment file")
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


def _python_experiment(path: str, config_overrides=None, stop_overrides=None, allow_no_stop=False) -> Experiment:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    namespace = runpy.run_path(path)
    name = str(namespace.get("name") or os.path.splitext(os.path.basename(path))[0])
    where = experiment_where(path, name)
    check_name(name, where)
    config = namespace.get("config")
    if not isinstance(config, AlgorithmConfig):
        raise key_error(where, "config", f"a Python experiment file must define `config`, an AlgorithmConfig (got {type(config).__name__})")
    config.environment(rllib_env_id(config.env, where))
    if config_overrides:
        apply_config(config, config_overrides, where, from_command_line=set(config_overrides))
    _vectorize_our_env(config)
    _validate_python_config(config, where, dict(config_overrides or {}))
    stop = {**_stop(dict(namespace.get("stop") or {}), where), **_stop(stop_overrides or {}, "--stop")}
    check_stop(stop, config, where, allow_no_stop)
    return Experiment(name=name, config=config, stop=stop)


def inline_experiment(
    algo: str, env: str, config: dict | None = None, stop: dict | None = None, name: str | None = None, *, allow_no_stop: bool = False,
) -> Experiment:  # fmt: skip
    """What ``rllib train --algo X --env Y --config {...} --stop {...}`` runs: the shipped
    experiment's settings for this algorithm and env when there is one (``--config`` on top),
    the algorithm's defaults otherwise (always for RLlib's own algorithms, as RLlib's CLI did)."""
    from rllib_gpuenv.config_files import shipped_settings

    shipped = shipped_settings(algo, env) if algo.startswith("Device") else None
    if shipped is not None:
        logger.info("%s on %s: starting from the settings of the shipped %s (--config overrides them)", algo, env, shipped[0])
    spec = {"run": algo, "env": env, "config": {**(shipped[1] if shipped else {}), **(config or {})}, "stop": stop or {}}
    default_name = f"{algo}_{env}".replace(":", "_").replace("/", "_").replace("\\", "_")
    return experiment_from_spec(name or default_name, spec, "<command line>", allow_no_stop=allow_no_stop)


# --- running ------------------------------------------------------------------------------------


def check_fits_cluster(experiment: Experiment, cluster: dict | None = None) -> None:
    """Fail at once when a trial would ask for more than the cluster has (``check_cluster_fits``:
    what RLlib asks Ray for, role by role), naming the experiment.

    Ray would otherwise leave the trial PENDING forever, waiting for resources that never come.
    """
    from rllib_gpuenv.rllib.resources import ResourceError, check_cluster_fits

    try:
        check_cluster_fits(experiment.config, cluster)
    except ResourceError as err:
        raise ExperimentError(f"experiment {experiment.name!r}: {err}") from None


@contextlib.contextmanager
def _tune_progress_reporter_output():
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


def run_experiment(experiment: Experiment, storage_path: str | None = None, verbose: int = 1):
    """Run with Ray Tune, one progress row per result (and each trial's config at ``verbose >= 2``);
    return the ResultGrid. ``verbose >= 3`` adds Tune's own trial messages."""
    from ray import tune

    from rllib_gpuenv.progress import ResultRows

    check_fits_cluster(experiment)
    run_config = tune.RunConfig(
        name=experiment.name,
        stop=experiment.stop,
        storage_path=storage_path or experiment.storage_path,
        checkpoint_config=tune.CheckpointConfig(**experiment.checkpoint_config),
        progress_reporter=ResultRows(show_config=verbose >= 2),
        verbose=min(max(verbose - 1, 1), 3) if verbose > 0 else 0,
    )
    tuner = tune.Tuner(
        experiment.algo_class,
        param_space=experiment.config,
        run_config=run_config,
        tune_config=tune.TuneConfig(num_samples=experiment.num_samples),
    )
    with _tune_progress_reporter_output():
        return tuner.fit()
