"""Train PPO on GPUCartPole-v1 with the env, policy, rollouts and GAE on one device.

What it shows: the Python API of the device path: ``DevicePPOConfig`` (RLlib's PPO with
``DeviceEnvRunner``), ``devices(...)`` to place the learner and the env runner, and a plain
``algo.train()`` loop with RLlib's standard metrics.

How to run it: ``.venv/bin/python examples/train_device_ppo.py [--device cpu|cuda] [--target 475]``

What to expect: one line per iteration. On a 2-core CPU, ``episode_return_mean`` (the device env
runner's mean over the last 100 episodes) passes 475 after 49 iterations (about 1.5 s) with
seed 0; seeds 0-5 took 1.4-2.8 s (benchmarks/RESULTS.md). On a GPU the env runner and the
learner say ``cuda:0``. No Ray cluster starts: the env runner and the learner both live in this
process (``num_env_runners=0``, no remote learners), so none is needed.
"""

import argparse
import time

from rllib_gpuenv import options
from rllib_gpuenv.rllib import DevicePPOConfig

parser = argparse.ArgumentParser()
parser.add_argument("--device", type=options.device, default="auto")
parser.add_argument("--target", type=options.number, default=475.0)
parser.add_argument("--max-iterations", type=options.count(1), default=200)
args = parser.parse_args()

config = (
    DevicePPOConfig()
    .environment("GPUCartPole-v1")
    .env_runners(num_env_runners=0, num_envs_per_env_runner=32)  # one runner, in this process
    .devices(learner=args.device, env_runners=args.device)
    .device_rollouts(rollout_length=64)  # 32 envs x 64 steps = 2048 env steps per iteration
    .training(
        lr=4e-3,
        gamma=0.98,
        lambda_=0.8,
        num_epochs=4,
        minibatch_size=512,
        vf_loss_coeff=0.5,
        vf_clip_param=float("inf"),
        use_kl_loss=False,
        grad_clip=1.0,
    )  # why: configs/gpu_cartpole_ppo.yaml
    .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
    .debugging(seed=0)
)
algo = config.build_algo()
print(f"env runner on {algo.env_runner._device}, learner on {algo.learner_group._learner._device}")
start = time.perf_counter()
for _ in range(args.max_iterations):
    result = algo.train()
    ret = result["env_runners"].get("episode_return_mean", float("nan"))
    print(f"iter {result['training_iteration']:3d}  return {ret:6.1f}  {time.perf_counter() - start:6.1f} s")
    if ret >= args.target:
        break
algo.stop()
