"""rllib_gpuenv: RLlib training on environments that live on the GPU (or the CPU).

Importing the package registers ``GPUCartPole-v1`` with gymnasium and with Ray Tune.
"""

from rllib_gpuenv.registration import ENV_ID, register
from rllib_gpuenv.vector_env import CartPoleVectorEnv

__version__ = "0.1.0"

register()

__all__ = ["CartPoleVectorEnv", "ENV_ID", "__version__"]
