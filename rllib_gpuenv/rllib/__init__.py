"""The RLlib side: a device env runner, device GAE, and PPO fed with device batches."""

from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner
from rllib_gpuenv.rllib.learner import DevicePPOTorchLearner
from rllib_gpuenv.rllib.ppo import DevicePPO, DevicePPOConfig

__all__ = ["DeviceEnvRunner", "DevicePPO", "DevicePPOConfig", "DevicePPOTorchLearner"]
