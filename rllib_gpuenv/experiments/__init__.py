"""Experiment files: everything ``rllib train`` and the main job read, checked before Ray starts.

Where each part lives:

* ``spec.py``: ``Experiment``, reading YAML and Python files (``load_experiments``), one
  experiment from the command line (``inline_experiment``), the main job's file (``load_config``);
* ``settings.py``: a ``config:`` section applied to an ``AlgorithmConfig`` (``apply_config``);
* ``envs.py``: env ids checked and named so that every process builds them;
* ``checks.py``: values, RLlib's own validation, stop metrics, names; ``errors.py``: the one
  error type, ``ExperimentError``, one line naming file, experiment and key;
* ``legacy.py``: old RLlib names and settings translated, one warning each;
* ``running.py``: the cluster checked, then Ray Tune (``run_experiment``); ``restore.py``: trials
  that start from a checkpoint, an interrupted experiment resumed;
* ``metric_names.py``: the metric paths commands read; ``progress.py``: progress output;
  ``shipped.py``: the files in ``configs/``;
* ``tune_resources.py``: Tune chooses the resources.
"""

from __future__ import annotations

import importlib

# Name -> (module, name there). The modules load when a name is first asked for: reading one
# module (``experiments.errors`` for a command's ``--help``) imports neither Tune nor RLlib.
_EXPORTS = {
    "ENV_STEPS_METRIC": ("metric_names", "ENV_STEPS_METRIC"),
    "EPISODES_METRIC": ("metric_names", "EPISODES_METRIC"),
    "RETURN_METRIC": ("metric_names", "RETURN_METRIC"),
    "Experiment": ("spec", "Experiment"),
    "ExperimentError": ("errors", "ExperimentError"),
    "LEGACY_CONFIG_KEYS": ("legacy", "CONFIG_RENAMES"),
    "LEGACY_EXPERIMENT_KEYS": ("legacy", "EXPERIMENT_RENAMES"),
    "LEGACY_METRICS": ("legacy", "METRIC_RENAMES"),
    "algorithm_config": ("settings", "algorithm_config"),
    "apply_config": ("settings", "apply_config"),
    "cartpole_config": ("spec", "cartpole_config"),
    "check_env": ("envs", "check_env"),
    "check_fits_cluster": ("running", "check_fits_cluster"),
    "experiment_from_spec": ("spec", "experiment_from_spec"),
    "inline_experiment": ("spec", "inline_experiment"),
    "load_config": ("spec", "load_config"),
    "load_experiments": ("spec", "load_experiments"),
    "rllib_env_id": ("envs", "rllib_env_id"),
    "run_experiment": ("running", "run_experiment"),
    "translate_metric": ("legacy", "translate_metric"),
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    globals()[name] = value  # once
    return value


__all__ = sorted(_EXPORTS)


def __dir__() -> list[str]:
    return __all__
