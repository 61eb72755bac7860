"""rllib_gpuenv: RLlib training on environments that live on the GPU (or the CPU).

Importing the package registers its env ids with gymnasium (``GPUCartPole-v1``, ...); it
imports neither Ray nor numba (the numba backends load on first use).
"""

from rllib_gpuenv.core import ops
from rllib_gpuenv.core.env_def import EnvDef
from rllib_gpuenv.core.jit import jitable
from rllib_gpuenv.envs import (
    ENV_DEFS,
    SUITE,
    AcrobotVectorEnv,
    BreakoutMinAtarVectorEnv,
    CartPoleVectorEnv,
    MountainCarContinuousVectorEnv,
    MountainCarVectorEnv,
    PendulumVectorEnv,
    make_vector_env,
)
from rllib_gpuenv.envs.vector_env import GPUVectorEnv
from rllib_gpuenv.registration import ENV_IDS, register, register_env

__version__ = "0.1.0"

ENV_ID = "GPUCartPole-v1"  # the main job's env

register()

__all__ = [
    "ENV_DEFS",
    "ENV_ID",
    "ENV_IDS",
    "AcrobotVectorEnv",
    "BreakoutMinAtarVectorEnv",
    "CartPoleVectorEnv",
    "EnvDef",
    "GPUVectorEnv",
    "MountainCarContinuousVectorEnv",
    "MountainCarVectorEnv",
    "PendulumVectorEnv",
    "SUITE",
    "__version__",
    "jitable",
    "make_vector_env",
    "ops",
    "register_env",
]
