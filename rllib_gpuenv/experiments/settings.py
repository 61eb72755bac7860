"""An experiment's ``config:`` section applied to an AlgorithmConfig: old names translated,
unknown keys rejected with close matches, values checked, every grid-search variant validated
by RLlib before Ray starts."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import itertools
from collections.abc import Collection
from typing import Any

from rllib_gpuenv.experiments.checks import (
    check_values,
    flatten_settings,
    is_search_space,
    key_label,
    one_line,
    validate_config,
)
from rllib_gpuenv.experiments.envs import check_env_runner, rllib_env_id, vectorize_our_env
from rllib_gpuenv.experiments.errors import ExperimentError, key_error
from rllib_gpuenv.experiments.legacy import (
    REMOVED_ALGORITHMS,
    removed_algorithm_hint,
    translate_config,
    translate_model_config,
)

# Our own config sections: DevicePPOConfig methods taking keyword arguments.
METHOD_SECTIONS = ("device_rollouts", "devices")
# AlgorithmConfig methods whose keyword arguments set settings (and check some values).
SETTER_METHODS = (
    "training",
    "environment",
    "env_runners",
    "learners",
    "evaluation",
    "fault_tolerance",
    "reporting",
    "debugging",
    "checkpointing",
    "multi_agent",
    "rl_module",
    "offline_data",
)
# Keys that RLlib's update_from_dict resolves specially (class paths, sub-dict merges).
UPDATE_FROM_DICT_KEYS = {
    "callbacks",
    "callbacks_class",
    "multiagent",
    "exploration_config",
    "replay_buffer_config",
    "optimizer",
    "sample_collector",
}
MAX_VALIDATED_VARIANTS = 64  # grid-search variants whose config is validated before Ray starts


def algorithm_config(run: Any, where: str = "<command line>"):
    """The default config of an algorithm named as in ``run:`` (``DevicePPO``, ``DeviceDQN``, ``DeviceSAC`` or
    RLlib's names)."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    from rllib_gpuenv.rllib import DeviceDQNConfig, DevicePPOConfig, DeviceSACConfig

    device_algorithms = {"DevicePPO": DevicePPOConfig, "DeviceDQN": DeviceDQNConfig, "DeviceSAC": DeviceSACConfig}
    if run in device_algorithms:
        return device_algorithms[run]()
    if run not in ALGORITHMS:
        names = list(dict.fromkeys([*device_algorithms, *sorted(ALGORITHMS)]))  # RLlib's registry may hold ours too
        removed = removed_algorithm_hint(str(run))
        if removed:
            available = "" if REMOVED_ALGORITHMS[run] else f"; available: {', '.join(names)}"
            raise key_error(where, "run", f"unknown algorithm {run!r}: {removed}{available}")
        same_letters = [name for name in names if name.lower() == str(run).lower()]
        close = same_letters or difflib.get_close_matches(str(run), names, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise key_error(where, "run", f"unknown algorithm {run!r}; {hint}available: {', '.join(names)}")
    return ALGORITHMS[run]()[1]


@functools.cache
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
    if isinstance(
        settings.get("n_step"), list
    ):  # YAML has no tuples; RLlib reads a range (DQN's n_step: [2, 5]) only from one
        settings["n_step"] = tuple(settings["n_step"])
    setters = _setter_of(type(config))
    unknown = []  # every misspelt key at once, one line each
    for key in settings:
        if key in METHOD_SECTIONS:
            if getattr(config, key, None) is None:
                raise key_error(where, key, "a section of the device algorithms: needs run: DevicePPO, DeviceDQN or DeviceSAC")
            if not isinstance(settings[key], dict):
                raise key_error(where, key, f"expected a mapping of {key}() arguments, got {settings[key]!r}")
            arguments = [name for name in inspect.signature(getattr(config, key)).parameters]
            for name in settings[key]:
                if name not in arguments:
                    close = difflib.get_close_matches(name, arguments, n=1)
                    hint = f"did you mean {close[0]}? " if close else ""
                    raise key_error(
                        where, f"{key}.{name}", f"not an argument of {key}(); {hint}they are: {', '.join(arguments)}"
                    )
            continue
        attribute = config._translate_special_keys(key, warn_deprecated=False)
        if key not in setters and not hasattr(config, attribute) and key != "env_config":
            names = sorted(set(setters) | {k for k in vars(config) if not k.startswith("_")})
            close = difflib.get_close_matches(key, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            unknown.append(str(key_error(where, key, f"not a {type(config).__name__} setting{hint}")))
    if unknown:
        raise ExperimentError("\n".join(unknown))
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


def merged(current: Any, override: Any, key: str = "") -> Any:
    """``override`` laid over ``current``, as ``--config`` lays itself over a file's ``config:``:
    mappings merge key by key, all the way down (``{"model_config": {"fcnet_activation": "relu"}}``
    keeps the file's ``fcnet_hiddens``); any other value, a search space among them, replaces.
    A replay buffer of another ``type`` replaces the whole mapping, as RLlib's ``training()`` does."""
    if not (isinstance(current, dict) and isinstance(override, dict)) or is_search_space(current) or is_search_space(override):
        return override
    if key == "replay_buffer_config" and override.get("type", current.get("type")) != current.get("type"):
        return override
    return {**current, **{k: merged(current.get(k), v, k) for k, v in override.items()}}


def merge_overrides(settings: dict, overrides: dict) -> dict:
    """A ``config:`` section with the command line's ``--config`` laid over it (``merged``)."""
    return {**settings, **{k: merged(settings.get(k), v, k) for k, v in overrides.items()}}


def current_settings(config, keys: Collection[str]) -> dict:
    """The mappings an AlgorithmConfig holds under ``keys`` (``model_config``, ``env_config``,
    ``replay_buffer_config``, ...), for ``merge_overrides`` over a Python file's config; a key
    whose value is no mapping (or a method, such as ``devices``) is left out."""
    found = {}
    for key in keys:
        value = getattr(config, "_model_config" if key == "model_config" else key, None)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        if isinstance(value, dict):
            found[key] = value
    return found


def contains_search_space(value: Any) -> bool:
    if is_search_space(value):
        return True
    return isinstance(value, dict) and any(contains_search_space(v) for v in value.values())


def named_variants(settings: dict) -> list[tuple[str, dict]]:
    """The settings of each variant Tune would run of a grid search or sampled space (at most
    MAX_VALIDATED_VARIANTS), each with the values that make it that variant
    (``"num_envs_per_env_runner=4"``): each trial's config must be valid, not the unresolved one."""
    from ray.tune.search.variant_generator import generate_variants

    found = itertools.islice(generate_variants({"config": settings}), MAX_VALIDATED_VARIANTS)
    return [
        (", ".join(f"{'.'.join(map(str, path[1:]))}={value!r}" for path, value in resolved.items()), spec["config"])
        for resolved, spec in found
    ]


def variants(settings: dict) -> list[dict]:
    return [variant for _, variant in named_variants(settings)]


def config_variants(config) -> list:
    """The AlgorithmConfig of each variant Tune would run of ``config`` (at most
    MAX_VALIDATED_VARIANTS): ``[config]`` itself when it holds no search space. What RLlib derives
    from a config (``validate()``, the resources it asks for) needs a variant's values."""
    settings = config.to_dict()
    if not contains_search_space(settings):
        return [config]
    return [config.copy(copy_frozen=False).update_from_dict(variant) for variant in variants(settings)]


def build_config(run: Any, env: Any, settings: dict, where: str, from_command_line: Collection[str] = ()):
    """The algorithm config of an experiment, every variant validated by RLlib before Ray starts."""
    config = algorithm_config(run, where)
    env = rllib_env_id(env, where)
    config.environment(env)
    settings = prepare_settings(config, settings, where)
    set_settings(config, settings, where, from_command_line)
    vectorize_our_env(config, settings)
    check_env_runner(config, where)
    if not contains_search_space(settings):
        validate_config(config, flatten_settings(settings, METHOD_SECTIONS), where, from_command_line)
        return config
    for name, variant in named_variants(settings):
        candidate = algorithm_config(run, where).environment(env)
        try:
            set_settings(candidate, variant, where, from_command_line)
            vectorize_our_env(candidate, variant)
            validate_config(candidate, flatten_settings(variant, METHOD_SECTIONS), where, from_command_line)
        except ExperimentError as err:
            raise ExperimentError(f"{err} (in the search's variant {name})") from None
    return config


def validate_python_config(config: Any, where: str, overrides: dict) -> None:
    """A Python file's config validated as Tune will run it: each variant of its search spaces."""
    settings = config.to_dict()
    if not contains_search_space(settings):
        check_values(settings, where, set(overrides))
        validate_config(config, overrides, where, from_command_line=set(overrides))
        return
    for variant in variants(settings):
        check_values(variant, where, set(overrides))
        validate_config(type(config)().update_from_dict(variant), overrides, where, from_command_line=set(overrides))
