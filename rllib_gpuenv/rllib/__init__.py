"""The RLlib side: the device env runner, its rollouts, and PPO, DQN and SAC fed with them."""

from rllib_gpuenv.rllib.dqn import DeviceDQN, DeviceDQNConfig
from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner
from rllib_gpuenv.rllib.learner import DevicePPOTorchLearner
from rllib_gpuenv.rllib.ppo import DevicePPO, DevicePPOConfig
from rllib_gpuenv.rllib.rollout import Rollout
from rllib_gpuenv.rllib.sac import DeviceSAC, DeviceSACConfig

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
