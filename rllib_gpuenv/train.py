"""The main job: PPO on GPUCartPole-v1 on the default device, until the mean return hits 475.

``rllib-gpuenv train`` (or ``./run.sh train``) reads ``configs/gpu_cartpole_ppo.yaml``, prints
one progress line per iteration (return, env steps, env-steps/s, elapsed time), then saves a
checkpoint and prints where.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import yaml

logger = logging.getLogger(__name__)

DEFAULT_CONFIG_FILE = Path(__file__).resolve().parent.parent / "configs" / "gpu_cartpole_ppo.yaml"
RETURN_METRIC = "env_runners/episode_return_mean"


def load_experiment(path: str | os.PathLike = DEFAULT_CONFIG_FILE) -> tuple[str, dict]:
    """The single experiment of a YAML file in RLlib's old format: ``{name: {run, env, stop, config}}``."""
    with open(path) as f:
        experiments = yaml.safe_load(f)
    if not isinstance(experiments, dict) or len(experiments) != 1:
        raise ValueError(f"{path}: expected one experiment, {{name: {{run, env, stop, config}}}}")
    name, spec = next(iter(experiments.items()))
    return name, spec


def build_config(spec: dict, device: str | None = None, seed: int | None = None):
    """A ``DevicePPOConfig`` from an experiment's ``env`` and ``config`` sections."""
    from rllib_gpuenv.rllib import DevicePPOConfig

    settings = dict(spec.get("config", {}))
    rollouts = settings.pop("device_rollouts", {})
    model_config = settings.pop("model_config", None)
    if device is not None:
        rollouts["device"] = device
    if seed is not None:
        settings["seed"] = seed
    config = DevicePPOConfig().environment(spec["env"]).device_rollouts(**rollouts)
    config.update_from_dict(settings)
    if model_config:
        config.rl_module(model_config=model_config)
    return config


def cartpole_config(device: str | None = None, seed: int | None = None):
    """The main job's ``DevicePPOConfig`` (from ``configs/gpu_cartpole_ppo.yaml``)."""
    return build_config(load_experiment()[1], device=device, seed=seed)


def _lookup(result: dict, path: str, default=float("nan")):
    for key in path.split("/"):
        if not isinstance(result, dict) or key not in result:
            return default
        result = result[key]
    return result


def train(config_file=DEFAULT_CONFIG_FILE, device: str | None = None, seed: int | None = None,
          target: float | None = None, max_iterations: int | None = None, checkpoint_dir: str = "checkpoints") -> str:  # fmt: skip
    """Train until the target return (or the iteration limit); save a checkpoint; return its path."""
    import ray

    name, spec = load_experiment(config_file)
    stop = spec.get("stop", {})
    target = stop.get(RETURN_METRIC, 475.0) if target is None else target
    max_iterations = stop.get("training_iteration", 200) if max_iterations is None else max_iterations
    config = build_config(spec, device=device, seed=seed)
    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    algo = config.build_algo()
    runner = algo.env_runner
    print(f"{name}: PPO on {spec['env']}, {runner.num_envs} envs x {config.rollout_length} steps per iteration "
          f"on {runner._device} (backend {getattr(runner.env, 'backend', 'gymnasium')}); target mean return {target}")  # fmt: skip
    start = time.perf_counter()
    try:
        for _ in range(max_iterations):
            result = algo.train()
            elapsed = time.perf_counter() - start
            ret = _lookup(result, RETURN_METRIC)
            steps = _lookup(result, "env_runners/num_env_steps_sampled_lifetime", 0)
            print(f"iter {result['training_iteration']:4d}  return {ret:7.1f}  env steps {int(steps):>10,}  "
                  f"{steps / elapsed:>10,.0f} env-steps/s  {elapsed:7.1f} s", flush=True)  # fmt: skip
            if ret >= target:
                print(f"reached mean return {ret:.1f} >= {target} in {elapsed:.1f} s")
                break
        else:
            print(f"stopped after {max_iterations} iterations below the target {target}")
        path = algo.save(os.path.abspath(os.path.join(checkpoint_dir, name))).checkpoint.path
        print(f"checkpoint saved to {path}")
        return path
    finally:
        algo.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-file", default=str(DEFAULT_CONFIG_FILE), help="experiment YAML (default: %(default)s)")
    parser.add_argument("--device", help="override the runners' device: auto, cpu, cuda, cuda:N")
    parser.add_argument("--seed", type=int, help="override the seed")
    parser.add_argument("--target", type=float, help="stop at this mean episode return (default: the file's, or 475)")
    parser.add_argument("--max-iterations", type=int, help="stop after this many iterations")
    parser.add_argument("--checkpoint-dir", default="checkpoints", help="where to save the checkpoint")
    parser.set_defaults(func=lambda a: train(a.config_file, a.device, a.seed, a.target, a.max_iterations, a.checkpoint_dir) and 0)
