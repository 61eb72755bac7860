"""Checks an experiment passes before Ray starts: values, RLlib's own validation, stop metrics, name.

Every failure is one line naming file, experiment and key (``ExperimentError``), so that a bad
file never gets as far as a trial: a value RLlib would accept and a trial would then fail on
(``num_envs_per_env_runner: 0``), RLlib's own ``AlgorithmConfig.validate()`` errors (APPO with
``vtrace: false``, a minibatch that does not fit the batch, a GPU that is not there), a stop
metric no result will ever contain (``env_runners/episode_retrun_mean``: the run would never
stop), and a name that would write results outside the storage path (``../../x``).
"""

from __future__ import annotations

import difflib
import functools
import logging
import math
import os
import re
from collections.abc import Collection, Iterable
from typing import Any

from rllib_gpuenv.experiments.errors import key_error
from rllib_gpuenv.experiments.legacy import METRIC_RENAMES
from rllib_gpuenv.options import MAX_SEED

logger = logging.getLogger(__name__)

# Settings whose values RLlib accepts and a trial later fails on (or trains nonsense with).
POSITIVE_INTS = (
    "num_envs_per_env_runner",
    "num_epochs",
    "train_batch_size_per_learner",
    "train_batch_size",
    "minibatch_size",
    "rollout_length",
    "metrics_num_episodes_for_smoothing",
    "num_samples",
)
NON_NEGATIVE_INTS = (
    "num_env_runners",
    "num_learners",
    "evaluation_num_env_runners",
    "num_steps_sampled_before_learning_starts",
)
NON_NEGATIVE_NUMBERS = (
    "num_cpus_per_env_runner",
    "num_gpus_per_env_runner",
    "num_gpus_per_learner",
    "vf_loss_coeff",
    "kl_coeff",
)
POSITIVE_NUMBERS = ("clip_param", "vf_clip_param", "grad_clip", "initial_alpha")
LEARNING_RATES = ("lr", "actor_lr", "critic_lr", "alpha_lr")  # SAC's three, for its actor, critics and temperature
SCHEDULABLE_NON_NEGATIVE = (*LEARNING_RATES, "entropy_coeff")  # a number or a [[timestep, value], ...] schedule
UNIT_INTERVAL = ("gamma", "lambda_", "tau")

_SUPPRESS_HINT = re.compile(r"\s*To suppress all validation errors.*$", re.S)

# Result keys RLlib 2.60 reports that have no constant in ray.rllib.utils.metrics.
_UNNAMED_RESULT_KEYS = {
    "agent_episode_return_mean",
    "module_episode_return_mean",
    "perf",
    "cpu_util_percent",
    "ram_util_percent",
    "gpu_util_percent0",
    "vram_util_percent0",
    "num_healthy_workers",
    "num_remote_worker_restarts",
    "num_env_runners_dropped_lifetime",
    "env_runner_group",
    "actor_manager_num_outstanding_async_reqs",
    "throughput_since_last_reduce",
    "throughput_since_last_restore",
    "num_in_flight_async_sample_reqs",
    "learner_group_ts_dropped_lifetime",
}
# Names built from another name: "<metric>_throughput" (MetricsLogger), "<optimizer>_learning_rate"
# and "gradients_<optimizer>_global_norm" (Learner).
_DERIVED_NAMES = re.compile(r"^(?:gradients_)?(?P<name>.+?)(?:_throughput|_learning_rate|_global_norm)$")
_FREE_NAME_AFTER = "connectors"  # ".../timers/connectors/<connector piece name>"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and not math.isnan(value)


def _is_schedule(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value)


def is_search_space(value: Any) -> bool:
    """A Tune search space (``{grid_search: [...]}`` or a ``tune.choice``-like domain)."""
    from ray.tune.search.sample import Domain

    return isinstance(value, Domain) or (isinstance(value, dict) and "grid_search" in value)


def _value_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for ``key`` (None when nothing, or when it is no key we check)."""
    if value is None or is_search_space(value):  # unset, or checked per variant
        return None
    if key in POSITIVE_INTS and not (_is_int(value) and value >= 1):
        if key == "train_batch_size_per_learner" and value == "auto":
            return None
        return f"must be a positive integer, got {value!r}"
    if key in NON_NEGATIVE_INTS and not (_is_int(value) and value >= 0):
        return f"must be an integer >= 0, got {value!r}"
    if key in NON_NEGATIVE_NUMBERS and not (_is_number(value) and value >= 0):
        return f"must be a number >= 0, got {value!r}"
    if key in POSITIVE_NUMBERS and not (_is_number(value) and value > 0):
        return f"must be a number > 0, got {value!r}"
    if key in SCHEDULABLE_NON_NEGATIVE:
        # A constant lr of 0 trains nothing; a schedule may anneal to 0 (as PureJaxRL's and SB3's do).
        schedule = _is_schedule(value)
        values = [v for _, v in value] if schedule else [value]
        constant_lr = key in LEARNING_RATES and not schedule
        if not all(_is_number(v) and (v > 0 if constant_lr else v >= 0) for v in values):
            number = "a number > 0" if key in LEARNING_RATES else "a number >= 0"
            return f"must be {number} or a schedule [[timestep, value], ...] of numbers >= 0, got {value!r}"
    if key in UNIT_INTERVAL and not (_is_number(value) and 0 <= value <= 1):
        return f"must be a number in [0, 1], got {value!r}"
    if key == "seed" and not (_is_int(value) and 0 <= value <= MAX_SEED):  # RLlib fails on it inside the trial
        return f"must be an integer from 0 to 2**32 - 1, got {value!r}"
    return None


def flatten_settings(settings: dict, sections: Iterable[str] = ()) -> dict:
    """``{"devices": {"env_runners": "cuda:7"}}`` -> ``{"devices.env_runners": "cuda:7"}`` for the
    method sections (DevicePPO's ``devices``, ``device_rollouts``); other keys as they are."""
    flat = {}
    for key, value in settings.items():
        if key in sections and isinstance(value, dict):
            flat.update({f"{key}.{inner}": v for inner, v in value.items()})
        else:
            flat[key] = value
    return flat


def key_label(key: str, from_command_line: Collection[str] = ()) -> str:
    """How errors name a setting (``devices.env_runners``), saying so when ``--config`` set it."""
    return f"{key} (from --config)" if key.split(".", 1)[0] in from_command_line else key


def check_values(flat_settings: dict, where: str, from_command_line: Collection[str] = ()) -> None:
    """Reject values that RLlib would accept and a trial would fail on."""
    for key, value in flat_settings.items():
        problem = _value_problem(key.rsplit(".", 1)[-1], value)
        if problem:
            raise key_error(where, key_label(key, from_command_line), problem)


def one_line(err: BaseException) -> str:
    """An exception's message on one line, without RLlib's "to suppress validation" footnote."""
    text = _SUPPRESS_HINT.sub("", str(err)).strip() or type(err).__name__
    return " ".join(text.split())


def blamed_key(message: str, flat_settings: dict, config: Any) -> str:
    """The setting an error message is about: a user setting it names (first mention wins), or
    whose value it quotes (first quoted wins), else any config attribute it names, else ``config``."""
    words = [(m.start(), m.group()) for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*", message)]
    leaves = {}
    for key in flat_settings:
        leaves.setdefault(key.rsplit(".", 1)[-1], key)
    named = [(pos, leaves[w]) for pos, w in words if w in leaves]
    if named:
        return min(named)[1]
    quoted = [
        (message.index(value), -len(value), key)
        for key, value in flat_settings.items()
        if isinstance(value, str) and len(value) > 1 and value in message
    ]
    if quoted:  # the value it quotes first: a fix's words later ("use 'auto'") quote other settings' values
        return min(quoted)[2]
    attributes = {a for a in vars(config) if not a.startswith("_")}
    for _, word in words:
        if word in attributes:
            return word
    return "config"


def _n_step_problem(config: Any, flat_settings: dict) -> tuple[str, str] | None:
    """SAC's (and CQL's) ``rollout_fragment_length`` shorter than ``n_step``: RLlib 2.60's own
    message for it indexes an integer ``n_step`` and fails with "'int' object is not subscriptable"."""
    from ray.rllib.algorithms.sac import SACConfig

    n_step, fragment = getattr(config, "n_step", None), config.rollout_fragment_length
    if not isinstance(config, SACConfig) or n_step is None or fragment == "auto" or config.in_evaluation:
        return None
    needed = n_step[1] if isinstance(n_step, (tuple, list)) else n_step
    if not (_is_int(needed) and _is_int(fragment)) or fragment >= needed:
        return None
    key = "rollout_fragment_length" if "rollout_fragment_length" in flat_settings else "n_step"
    return key, (
        f"rollout_fragment_length={fragment} is shorter than n_step={n_step!r} needs: set rollout_fragment_length: "
        f"{needed} (or auto), or a smaller n_step"
    )


def validate_config(config: Any, flat_settings: dict, where: str, from_command_line: Collection[str] = ()) -> None:
    """RLlib's own ``validate()`` on a copy, before Ray starts; its errors in the one-line format.

    Its errors name the setting they are about; where that setting is not in the file, the
    message says that RLlib's own default for the algorithm is what fails (CQL's ``lr``)."""
    problem = _n_step_problem(config, flat_settings)
    if problem:
        raise key_error(where, key_label(problem[0], from_command_line), problem[1])
    try:
        _check_env_options(config)
        config.copy(copy_frozen=False).validate()
    except (ValueError, TypeError, AssertionError, KeyError) as err:
        message = one_line(err)
        key = blamed_key(message, flat_settings, config)
        if key not in flat_settings and key not in ("config", "env") and hasattr(config, key):  # env: the experiment's
            algorithm = type(config).__name__.removesuffix("Config")
            fix = " (in the file: lr: null)" if key == "lr" and getattr(config, key) is not None else ""
            message = (
                f"not set in this file: RLlib's default for {algorithm} ({key}={getattr(config, key)!r}) fails RLlib's "
                f"own check; set {key} in the config{fix}: {message}"
            )
        raise key_error(where, key_label(key, from_command_line), message) from None


def _check_env_options(config: Any) -> None:
    """An env of this package's (or yours) with an ``env_config`` it cannot take (a misspelt
    parameter), under any algorithm: named here, not by each env runner once Ray has started."""
    from rllib_gpuenv.envs import env_definition
    from rllib_gpuenv.envs.vector_env import check_options
    from rllib_gpuenv.jax_envs import check_jax_env_config, is_jax_id

    env_config = config.env_config or {}
    if is_jax_id(config.env):  # gymnax's and Brax's: their params and constructors, less what the runner sets
        from rllib_gpuenv.rllib.env_runner import RUNNER_KEYS

        check_jax_env_config(config.env, {k: v for k, v in env_config.items() if k not in RUNNER_KEYS})
        return
    definition = env_definition(config.env) if isinstance(config.env, str) else None
    if definition is not None:
        check_options(definition, {k: v for k, v in env_config.items() if k not in ("num_envs", "device")})


def check_name(name: str, where: str) -> None:
    """An experiment name is one directory under the storage path: no separators, no ``..``."""
    separators = {"/", "\\", os.sep, os.altsep} - {None}
    if not name or name in (".", "..") or any(s in name for s in separators) or "\0" in name or os.path.isabs(name):
        raise key_error(
            where,
            "name",
            f"{name!r} is not a plain directory name, so results would land outside --storage-path: "
            "use letters, digits, '-', '_' or '.', without '/', '\\' or '..'",
        )


@functools.cache
def _constant_names(module_names: tuple[str, ...]) -> frozenset[str]:
    """String constants (UPPER_CASE names, and tuples of them) of these modules and their classes."""
    import importlib

    names: set[str] = set()
    for module_name in module_names:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        spaces = [vars(module)] + [
            vars(c) for c in vars(module).values() if isinstance(c, type) and c.__module__ == module_name
        ]
        for space in spaces:
            for attr, value in space.items():
                if not attr.isupper():
                    continue
                if isinstance(value, str):
                    names.add(value)
                elif isinstance(value, (tuple, list, frozenset, set)):
                    names.update(v for v in value if isinstance(v, str))
    return frozenset(names)


def known_metric_names(config: Any) -> set[str]:
    """Names a result dict's keys are made of: RLlib's metric constants, Tune's auto-filled result
    keys, the constants of this algorithm's config, algorithm and learner classes (and their
    bases: DevicePPO reports PPO's), module and agent ids, and the old names translated."""
    classes = [*type(config).__mro__, *getattr(config.algo_class, "__mro__", ())]
    try:
        classes += config.get_default_learner_class().__mro__
    except (NotImplementedError, ImportError, ValueError):  # no default learner: fewer names
        pass
    modules = (
        "ray.rllib.utils.metrics",
        "ray.tune.result",
        "ray.rllib.core",
        "ray.rllib.core.learner.learner",
        *sorted({c.__module__ for c in classes if c.__module__.startswith(("ray.", "rllib_gpuenv."))}),
    )
    names = set(_constant_names(tuple(m for m in modules if m))) | _UNNAMED_RESULT_KEYS
    for metric in list(METRIC_RENAMES) + list(METRIC_RENAMES.values()):
        names.update(metric.split("/"))
    policies = getattr(config, "policies", None) or {}
    names.update(str(p) for p in policies)
    return names


def is_known_metric(metric: str, names: set[str]) -> bool:
    """Whether every part of ``a/b/c`` is a known name (``names`` from ``known_metric_names``)."""
    parts = metric.split("/")
    for i, part in enumerate(parts):
        if part in names or (i and parts[i - 1] == _FREE_NAME_AFTER):
            continue
        derived = _DERIVED_NAMES.match(part)
        if not (derived and derived.group("name") in names):
            return False
    return True


def _uses_custom_callbacks(config: Any) -> bool:
    from ray.rllib.callbacks.callbacks import RLlibCallback

    if getattr(config, "callbacks_class", RLlibCallback) is not RLlibCallback:
        return True
    return any(value is not None for attr, value in vars(config).items() if attr.startswith("callbacks_on_"))


def check_stop(stop: dict, config: Any, where: str, allow_no_stop: bool = False) -> None:
    """Stop criteria are numbers on metrics a result will have (an evaluation metric, from a
    config that evaluates); a run without any is asked for.

    An unknown metric is an error with close matches: Tune would only warn, and a run whose
    only criterion is misspelt never ends. With custom callbacks (which may log any metric) it
    is a warning instead.
    """
    if not stop and not allow_no_stop:
        raise key_error(
            where,
            "stop",
            "no stop criteria, so the run would never end: add e.g. stop: {training_iteration: 100} "
            "(or --stop '{\"training_iteration\": 100}'), or pass --no-stop to run until interrupted",
        )
    for metric, threshold in stop.items():
        label = f"stop.{metric}"
        if not isinstance(metric, str) or not metric:
            raise key_error(where, label, "a stop criterion is a metric name, e.g. training_iteration")
        if not _is_number(threshold):
            raise key_error(where, label, f"the threshold must be a number, got {threshold!r}")
        check_metric(metric, config, where, label)


def check_metric(metric: str, config: Any, where: str, label: str) -> None:
    """``metric`` (a stop criterion's, a scheduler's, the checkpoints' score) is one a result of
    ``config`` will have; an evaluation metric only where the config evaluates. An unknown one is
    an error with close matches (a warning where the config sets callbacks, which may log any)."""
    names = known_metric_names(config)
    if is_known_metric(metric, names):
        if metric.startswith("evaluation/") and not getattr(config, "evaluation_interval", None):
            raise key_error(
                where,
                label,
                "an evaluation metric, but the config never evaluates: set evaluation_interval "
                "(e.g. evaluation_interval: 5, evaluation_duration: 100), or stop on env_runners/... instead",
            )
        return
    close = difflib.get_close_matches(metric, sorted(_candidate_paths(names)), n=3, cutoff=0.75)
    hint = (
        f"; did you mean {', '.join(close)}?"
        if close
        else "; e.g. training_iteration, time_total_s, env_runners/episode_return_mean"
    )
    problem = f"no RLlib or Tune result has this metric{hint}"
    if _uses_custom_callbacks(config):
        logger.warning("%s: %s: %s (assuming your callbacks log it)", where, label, problem)
        return
    raise key_error(
        where, label, f"{problem} (metrics logged by your own callbacks are accepted when the config sets callbacks)"
    )


def _candidate_paths(names: set[str]) -> set[str]:
    """Full paths to offer as close matches for a misspelt stop metric."""
    prefixes = ("", "env_runners/", "evaluation/env_runners/", "learners/default_policy/", "learners/__all_modules__/")
    return {prefix + name for prefix in prefixes for name in names}
