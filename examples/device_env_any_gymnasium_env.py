"""Train on any gymnasium env through the device path, with every tensor's device checked.

What it shows: ``DeviceEnv`` (made for you by ``DeviceEnvRunner`` for any gymnasium id other
than GPUCartPole-v1) turns a gymnasium vector env into one that takes and returns tensors on a
device; ``device_rollouts(check_devices=True)`` wraps env and module in ``CheckDevice``, which
raises an error naming any tensor on the wrong device.

How to run it: ``.venv/bin/python examples/device_env_any_gymnasium_env.py [--env Acrobot-v1]``

What to expect: Acrobot's mean return rises from about -500 within 40 iterations (about 10 s on
a 2-core CPU), to between -330 and -110 in four unseeded runs (2026-11-27), and no
DeviceMismatchError.
"""

import argparse

from rllib_gpuenv import options
from rllib_gpuenv.rllib import DevicePPOConfig

parser = argparse.ArgumentParser()
parser.add_argument("--env", default="Acrobot-v1")
parser.add_argument("--iterations", type=options.count(1), default=40)
args = parser.parse_args()

config = (
    DevicePPOConfig()
    .environment(args.env)
    .env_runners(num_envs_per_env_runner=16)
    .device_rollouts(device="auto", rollout_length=64, check_devices=True)
    .training(lr=1e-3, num_epochs=6, minibatch_size=256)
)
algo = config.build_algo()
for _ in range(args.iterations):
    result = algo.train()
    print(
        f"iter {result['training_iteration']:3d}  return {result['env_runners'].get('episode_return_mean', float('nan')):7.1f}"
    )
algo.stop()
