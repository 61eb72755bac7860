"""Experiment files in RLlib's old ``rllib train`` format, read safely and run with Ray Tune.

A YAML file holds one or more experiments::

    my-experiment:
      run: DevicePPO            # or any RLlib algorithm: PPO, APPO, DQN, ...
      env: GPUCartPole-v1       # a gymnasium id or a Tune-registered env
      stop: {env_runners/episode_return_mean: 475, training_iteration: 200}
      num_samples: 1
      checkpoint_config: {checkpoint_at_end: true}
      config: {num_env_runners: 0, lr: 0.0005, ...}   # AlgorithmConfig settings

A Python file defines ``config`` (an ``AlgorithmConfig``) and ``stop`` (and optionally ``name``).

Users' files still carry RLlib's old key and metric names (``num_workers``,
``episode_reward_mean``, ...): they are translated, with a warning each. Anything else that is
not a setting is an error naming the file, the experiment and the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import runpy
from typing import Any

import yaml

logger = logging.getLogger(__name__)

RETURN_METRIC = "env_runners/episode_return_mean"

# Old AlgorithmConfig keys -> today's.
LEGACY_CONFIG_KEYS = {
    "num_workers": "num_env_runners",
    "num_rollout_workers": "num_env_runners",
    "num_envs_per_worker": "num_envs_per_env_runner",
    "num_cpus_per_worker": "num_cpus_per_env_runner",
    "num_gpus_per_worker": "num_gpus_per_env_runner",
    "num_gpus": "num_gpus_per_learner",
    "sgd_minibatch_size": "minibatch_size",
    "num_sgd_iter": "num_epochs",
    "lambda": "lambda_",
    "model": "model_config",
    "evaluation_num_workers": "evaluation_num_env_runners",
    "recreate_failed_workers": "restart_failed_env_runners",
    "ignore_worker_failures": "ignore_env_runner_failures",
    "num_cpus_for_driver": "num_cpus_for_main_process",
}
# Old keys that mean nothing on RLlib's new API stack: dropped, with a warning saying why.
DROPPED_CONFIG_KEYS = {
    "framework": "RLlib's new API stack runs torch only",
    "eager_tracing": "it was a TensorFlow option",
    "_enable_new_api_stack": "the new API stack is the default",
}
# Old result metric names (stop criteria, checkpoint scores) -> today's.
LEGACY_METRICS = {
    "episode_reward_mean": RETURN_METRIC,
    "episode_reward_max": "env_runners/episode_return_max",
    "episode_reward_min": "env_runners/episode_return_min",
    "episode_len_mean": "env_runners/episode_len_mean",
    "sampler_results/episode_reward_mean": RETURN_METRIC,
    "env_runners/episode_reward_mean": RETURN_METRIC,
    "evaluation/episode_reward_mean": "evaluation/" + RETURN_METRIC,
    "evaluation/sampler_results/episode_reward_mean": "evaluation/" + RETURN_METRIC,
    "timesteps_total": "env_runners/num_env_steps_sampled_lifetime",
    "episodes_total": "env_runners/num_episodes_lifetime",
}
# Top-level experiment keys -> where they go (old ones translated).
EXPERIMENT_KEYS = {"run", "env", "stop", "config", "num_samples", "checkpoint_config", "storage_path", "resource_search"}
LEGACY_EXPERIMENT_KEYS = {
    "local_dir": "storage_path",
    "checkpoint_freq": "checkpoint_config.checkpoint_frequency",
    "checkpoint_at_end": "checkpoint_config.checkpoint_at_end",
    "keep_checkpoints_num": "checkpoint_config.num_to_keep",
}
# Our own config sections: DevicePPOConfig methods taking keyword arguments.
METHOD_SECTIONS = ("device_rollouts", "devices")


class ExperimentError(ValueError):
    """A bad experiment file or command line, with the file, experiment and key it concerns."""


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


def _where(source: str, name: str) -> str:
    return f"{source}: experiment {name!r}"


def algorithm_config(run: str, source: str = "<command line>"):
    """The default config of an algorithm named as in ``run:`` (``DevicePPO`` or RLlib's names)."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    if run == "DevicePPO":
        from rllib_gpuenv.rllib import DevicePPOConfig

        return DevicePPOConfig()
    if run not in ALGORITHMS:
        names = ["DevicePPO", *sorted(ALGORITHMS)]
        raise ExperimentError(f"{source}: unknown algorithm run={run!r}; available: {', '.join(names)}")
    return ALGORITHMS[run]()[1]


def check_env(env: Any, source: str) -> None:
    """Fail now, not inside a trial, when ``env`` is not a known gymnasium or Tune env."""
    import gymnasium as gym
    from ray.tune.registry import ENV_CREATOR, _global_registry

    import rllib_gpuenv  # noqa: F401 (registers GPUCartPole-v1)

    if not isinstance(env, str):
        return  # an env class or creator: Python users know what they pass
    if _global_registry.contains(ENV_CREATOR, env):
        return
    try:
        gym.spec(env)
        return
    except (gym.error.Error, ModuleNotFoundError, ImportError):
        pass
    close = difflib.get_close_matches(env.split(":")[-1], list(gym.registry), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; register it with gymnasium or ray.tune.register_env"
    raise ExperimentError(f"{source}: unknown env {env!r}{hint}")


def translate_metric(metric: str, source: str) -> str:
    new = LEGACY_METRICS.get(metric)
    if new is None:
        return metric
    logger.warning("%s: metric %r is called %r today; using that", source, metric, new)
    return new


def translate_config(settings: dict, source: str) -> dict:
    """Old key names -> today's, with a warning for each; dropped keys are warned about too."""
    out = {}
    for key, value in settings.items():
        if key in DROPPED_CONFIG_KEYS:
            logger.warning("%s: ignoring config key %r: %s", source, key, DROPPED_CONFIG_KEYS[key])
            continue
        if key in LEGACY_CONFIG_KEYS:
            new = LEGACY_CONFIG_KEYS[key]
            logger.warning("%s: config key %r is called %r today; using that", source, key, new)
            key = new
        out[key] = value
    return out


def apply_config(config, settings: dict, source: str):
    """Apply a ``config:`` section to an AlgorithmConfig, rejecting keys that are not settings."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    settings = translate_config(settings, source)
    for section in METHOD_SECTIONS:
        if section in settings:
            method = getattr(config, section, None)
            if method is None:
                raise ExperimentError(f"{source}: config key {section!r} needs run: DevicePPO")
            try:
                method(**settings.pop(section))
            except TypeError as err:
                raise ExperimentError(f"{source}: config key {section!r}: {err}") from None
    model_config = settings.pop("model_config", None)
    if model_config:
        fields = {f.name for f in dataclasses.fields(DefaultModelConfig)}
        unknown = sorted(set(model_config) - fields)
        if unknown:
            raise ExperimentError(f"{source}: model_config key(s) {unknown} are not DefaultModelConfig fields")
        config.rl_module(model_config=model_config)
    for key in settings:
        attr = config._translate_special_keys(key, warn_deprecated=False)
        if not hasattr(config, attr) and key != "env_config":
            close = difflib.get_close_matches(key, [k for k in vars(config) if not k.startswith("_")], n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ExperimentError(f"{source}: config key {key!r} is not a {type(config).__name__} setting{hint}")
    try:
        config.update_from_dict(settings)
    except (TypeError, ValueError) as err:
        raise ExperimentError(f"{source}: {err}") from err
    return config


def experiment_from_spec(name: str, spec: dict, source: str, base_dir: str = ".") -> Experiment:
    """An ``Experiment`` from one ``{run, env, stop, config, ...}`` entry of a file."""
    where = _where(source, name)
    if not isinstance(spec, dict):
        raise ExperimentError(f"{where}: expected a mapping with run, env, stop, config; got {type(spec).__name__}")
    spec = dict(spec)
    checkpoint_config = dict(spec.pop("checkpoint_config", None) or {})
    for old, new in LEGACY_EXPERIMENT_KEYS.items():
        if old in spec:
            logger.warning("%s: key %r is %r today; using that", where, old, new)
            value = spec.pop(old)
            if new.startswith("checkpoint_config."):
                checkpoint_config[new.split(".", 1)[1]] = value
            else:
                spec[new] = value
    unknown = sorted(set(spec) - EXPERIMENT_KEYS)
    if unknown:
        raise ExperimentError(f"{where}: unknown key(s) {unknown}; an experiment has {sorted(EXPERIMENT_KEYS)}")
    if "run" not in spec:
        raise ExperimentError(f"{where}: missing 'run' (the algorithm, e.g. DevicePPO or PPO)")
    settings = dict(spec.get("config") or {})
    env = spec.get("env", settings.pop("env", None))
    if env is None:
        raise ExperimentError(f"{where}: missing 'env'")
    check_env(env, where)
    config = algorithm_config(spec["run"], where).environment(env)
    apply_config(config, settings, where)
    stop = {translate_metric(k, where): v for k, v in (spec.get("stop") or {}).items()}
    storage = spec.get("storage_path")
    return Experiment(
        name=name,
        config=config,
        stop=stop,
        num_samples=int(spec.get("num_samples", 1)),
        checkpoint_config=checkpoint_config,
        storage_path=os.path.abspath(os.path.join(base_dir, os.path.expanduser(storage))) if storage else None,
        resource_search=spec.get("resource_search"),
    )


def load_experiments(path: str | os.PathLike) -> list[Experiment]:
    """Every experiment of a YAML file (old ``rllib train`` format) or a Python file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ExperimentError(f"{path}: no such experiment file")
    if path.endswith(".py"):
        return [_python_experiment(path)]
    try:
        with open(path) as f:
            experiments = yaml.safe_load(f)
    except yaml.YAMLError as err:
        raise ExperimentError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(experiments, dict) or not experiments:
        raise ExperimentError(f"{path}: expected experiments as {{name: {{run, env, stop, config}}}}")
    base_dir = os.path.dirname(os.path.abspath(path))
    return [experiment_from_spec(str(name), spec, path, base_dir) for name, spec in experiments.items()]


def _python_experiment(path: str) -> Experiment:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    namespace = runpy.run_path(path)
    config = namespace.get("config")
    if not isinstance(config, AlgorithmConfig):
        raise ExperimentError(f"{path}: a Python experiment file must define `config`, an AlgorithmConfig (got {type(config).__name__})")
    check_env(config.env, path)
    stop = {translate_metric(k, path): v for k, v in dict(namespace.get("stop") or {}).items()}
    name = namespace.get("name") or os.path.splitext(os.path.basename(path))[0]
    return Experiment(name=name, config=config, stop=stop)


def inline_experiment(algo: str, env: str, config: dict | None = None, stop: dict | None = None, name: str | None = None) -> Experiment:
    """What ``rllib train --algo X --env Y --config {...} --stop {...}`` runs."""
    spec = {"run": algo, "env": env, "config": config or {}, "stop": stop or {}}
    return experiment_from_spec(name or f"{algo}_{env}".replace(":", "_"), spec, "<command line>")


def required_resources(experiment: Experiment) -> dict:
    """CPUs and GPUs one trial of this experiment asks Ray for (as RLlib computes them)."""
    return dict(experiment.algo_class.default_resource_request(experiment.config).required_resources)


def check_fits_cluster(experiment: Experiment, cluster: dict | None = None) -> None:
    """Fail at once when a trial would ask for more than the cluster has.

    Ray would otherwise leave the trial PENDING forever, waiting for resources that never come.
    """
    import ray

    cluster = ray.cluster_resources() if cluster is None else cluster
    need = required_resources(experiment)
    short = {r: (n, cluster.get(r, 0)) for r, n in need.items() if r in ("CPU", "GPU") and n > cluster.get(r, 0) + 1e-9}
    if short:
        what = ", ".join(f"{n:g} {r} (the cluster has {have:g})" for r, (n, have) in short.items())
        raise ExperimentError(
            f"experiment {experiment.name!r} needs {what} per trial: lower num_env_runners, num_cpus_per_env_runner, "
            "num_gpus_per_env_runner or num_gpus_per_learner, or add nodes to the cluster"
        )


def run_experiment(experiment: Experiment, storage_path: str | None = None, verbose: int = 1):
    """Run with Ray Tune (progress as Tune shows it, results in Tune's storage); return the ResultGrid."""
    from ray import tune

    check_fits_cluster(experiment)
    checkpoint = tune.CheckpointConfig(**experiment.checkpoint_config)
    run_config = tune.RunConfig(
        name=experiment.name,
        stop=experiment.stop,
        storage_path=storage_path or experiment.storage_path,
        checkpoint_config=checkpoint,
        verbose=verbose,
    )
    tuner = tune.Tuner(
        experiment.algo_class,
        param_space=experiment.config,
        run_config=run_config,
        tune_config=tune.TuneConfig(num_samples=experiment.num_samples),
    )
    return tuner.fit()
