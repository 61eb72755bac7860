"""Let Ray Tune choose the resources of the device path.

What it shows: ``search_resources`` runs one Tune trial per combination of envs per env
runner, env runners, GPUs per env runner and learner GPUs (the GPU options drop out on a
machine without one), each with the resources RLlib computes for it and one at a time, and
ranks them by the wall time to a target return.

How to run it: ``.venv/bin/python examples/tune_resources.py [--target 200]`` (on a CPU: 4
trials of at most 60 s each).

What to expect: Tune's progress, then a table of the trials (resources, iterations, return,
seconds and env steps to the target, env-steps/s), a line saying each trial ran alone, the best
resources, and the path of ``best.yaml``: the winning experiment whole (every setting that
differs from DevicePPO's defaults, here the PPO settings below, and the stop criteria), which
``rllib train file <path>`` runs as it is.
"""

import argparse

import ray

from rllib_gpuenv import options
from rllib_gpuenv.experiments import inline_experiment
from rllib_gpuenv.experiments.tune_resources import ResourceSpace, search_resources

parser = argparse.ArgumentParser()
parser.add_argument("--target", type=options.number, default=200.0)
args = parser.parse_args()

ray.init(include_dashboard=False)
experiment = inline_experiment(
    "DevicePPO",
    "GPUCartPole-v1",
    config={
        "seed": 0,
        "device_rollouts": {"rollout_length": 32},
        "lr": 5e-4,
        "num_epochs": 8,
        "minibatch_size": 512,
        "vf_clip_param": float("inf"),
        "use_kl_loss": False,
    },  # why: configs/gpu_cartpole_ppo.yaml
    stop={"env_runners/episode_return_mean": args.target},
    name="tune-resources-example",
)
space = ResourceSpace(
    num_envs_per_env_runner=[64, 256],
    num_env_runners=[0, 1],
    num_gpus_per_env_runner=[0, 0.5],
    num_gpus_per_learner=[0, 1],
    time_budget_s=60,
)
search_resources(experiment, space)
