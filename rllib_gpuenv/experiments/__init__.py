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
* ``progress.py``: metric names and progress output; ``shipped.py``: the files in ``configs/``;
* ``tune_resources.py``: Tune chooses the resources.
"""

from rllib_gpuenv.experiments.envs import check_env, rllib_env_id
from rllib_gpuenv.experiments.errors import ExperimentError
from rllib_gpuenv.experiments.legacy import CONFIG_RENAMES as LEGACY_CONFIG_KEYS
from rllib_gpuenv.experiments.legacy import EXPERIMENT_RENAMES as LEGACY_EXPERIMENT_KEYS
from rllib_gpuenv.experiments.legacy import METRIC_RENAMES as LEGACY_METRICS
from rllib_gpuenv.experiments.legacy import translate_metric
from rllib_gpuenv.experiments.progress import ENV_STEPS_METRIC, EPISODES_METRIC, RETURN_METRIC
from rllib_gpuenv.experiments.running import check_fits_cluster, run_experiment
from rllib_gpuenv.experiments.settings import algorithm_config, apply_config
from rllib_gpuenv.experiments.spec import (
    Experiment,
    cartpole_config,
    experiment_from_spec,
    inline_experiment,
    load_config,
    load_experiments,
)

__all__ = [
    "ENV_STEPS_METRIC",
    "EPISODES_METRIC",
    "Experiment",
    "ExperimentError",
    "LEGACY_CONFIG_KEYS",
    "LEGACY_EXPERIMENT_KEYS",
    "LEGACY_METRICS",
    "RETURN_METRIC",
    "algorithm_config",
    "apply_config",
    "cartpole_config",
    "check_env",
    "check_fits_cluster",
    "experiment_from_spec",
    "inline_experiment",
    "load_config",
    "load_experiments",
    "rllib_env_id",
    "run_experiment",
    "translate_metric",
]
