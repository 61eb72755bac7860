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

from rllib_gpuenv.config_files import config_file
from rllib_gpuenv.experiments import RETURN_METRIC, load_experiments

logger = logging.getLogger(__name__)

DEFAULT_CONFIG_FILE = config_file("gpu_cartpole_ppo.yaml")


def load_config(config_file: str | os.PathLike = DEFAULT_CONFIG_FILE, device: str | None = None, seed: int | None = None):
    """The experiment of a ``configs/`` file, with the device (all roles) and seed overridden."""
    experiment = load_experiments(config_file)[0]
    if device is not None:
        experiment.config.devices(learner=device, env_runners=device)
    if seed is not None:
        experiment.config.debugging(seed=seed)
    return experiment


def cartpole_config(device: str | None = None, seed: int | None = None):
    """The main job's ``DevicePPOConfig`` (from ``configs/gpu_cartpole_ppo.yaml``)."""
    return load_config(device=device, seed=seed).config


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

    experiment = load_config(config_file, device=device, seed=seed)
    name, config, stop = experiment.name, experiment.config, experiment.stop
    target = stop.get(RETURN_METRIC, 475.0) if target is None else target
    max_iterations = stop.get("training_iteration", 200) if max_iterations is None else max_iterations
    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    algo = config.build_algo()
    runner = algo.env_runner
    learner_device = algo.learner_group._learner._device if algo.learner_group.is_local else "remote learners"
    print(f"{name}: PPO on {config.env}, {runner.num_envs} envs x {config.rollout_length} steps per iteration; "
          f"env runner on {runner._device} (backend {getattr(runner.env, 'backend', 'gymnasium')}), "
          f"learner on {learner_device}; target mean return {target}")  # fmt: skip
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
    parser.add_argument("--device", help="override the device of the env runner and the learner: auto, cpu, cuda, cuda:N")
    parser.add_argument("--seed", type=int, help="override the seed")
    parser.add_argument("--target", type=float, help="stop at this mean episode return (default: the file's, or 475)")
    parser.add_argument("--max-iterations", type=int, help="stop after this many iterations")
    parser.add_argument("--checkpoint-dir", default="checkpoints", help="where to save the checkpoint")
    parser.set_defaults(func=lambda a: train(a.config_file, a.device, a.seed, a.target, a.max_iterations, a.checkpoint_dir) and 0)
