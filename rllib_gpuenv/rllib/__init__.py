"""The RLlib side: the device env runner, its rollouts, and PPO, DQN and SAC fed with them."""

from functools import partial

from ray.rllib.algorithms.registry import ALGORITHMS

from rllib_gpuenv.rllib.dqn import DeviceDQN, DeviceDQNConfig
from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner
from rllib_gpuenv.rllib.learner import DevicePPOTorchLearner
from rllib_gpuenv.rllib.ppo import DevicePPO, DevicePPOConfig
from rllib_gpuenv.rllib.rollout import Rollout
from rllib_gpuenv.rllib.sac import DeviceSAC, DeviceSACConfig


def _class_and_config(algorithm: type) -> tuple:
    """An entry of RLlib's table of algorithms: the class and its default config."""
    return algorithm, algorithm.get_default_config()


# Tune finds RLlib's algorithms by name (`tune.Tuner("PPO", param_space=config)`) in RLlib's table
# of them, which it registers anew in any Ray session that lacks a name asked for: ours go in it
# too, so that "DevicePPO" is found as "PPO" is, in every session of a process that imported this.
for _algorithm in (DevicePPO, DeviceDQN, DeviceSAC):
    ALGORITHMS.setdefault(_algorithm.__name__, partial(_class_and_config, _algorithm))
del _algorithm

__all__ = [
    "DeviceDQN",
    "DeviceDQNConfig",
    "DeviceEnvRunner",
    "DevicePPO",
    "DevicePPOConfig",
    "DevicePPOTorchLearner",
    "DeviceSAC",
    "DeviceSACConfig",
    "Rollout",
]
