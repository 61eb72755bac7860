"""Make ``GPUCartPole-v1`` known to gymnasium (``gym.make_vec``) and to Ray Tune / RLlib.

* gymnasium: ``gym.make_vec("rllib_gpuenv:GPUCartPole-v1", num_envs=N,
  vectorization_mode="vector_entry_point", **kwargs)`` builds a ``CartPoleVectorEnv``; the
  ``rllib_gpuenv:`` prefix makes gymnasium import this package first, so it also works in fresh
  processes such as Ray workers. ``gym.make("GPUCartPole-v1")`` gives gymnasium's single
  CartPole, for code that wants one env.
* Ray Tune: ``tune.register_env("GPUCartPole-v1", creator)``; RLlib calls the creator with the
  env config plus ``num_envs``.

Both default to numpy output, which is what RLlib's stock env runner consumes.
"""

from __future__ import annotations

import gymnasium as gym

from rllib_gpuenv import physics

ENV_ID = "GPUCartPole-v1"


def make_vector_env(num_envs: int = 1, **kwargs):
    """Vector entry point: a ``CartPoleVectorEnv`` with numpy output unless told otherwise."""
    from rllib_gpuenv.vector_env import CartPoleVectorEnv

    kwargs.setdefault("output", "numpy")
    return CartPoleVectorEnv(num_envs=num_envs, **kwargs)


def tune_env_creator(env_config: dict):
    """Ray Tune env creator: the env config's keys are ``CartPoleVectorEnv`` arguments."""
    config = dict(env_config)
    return make_vector_env(num_envs=config.pop("num_envs", 1), **config)


def register() -> None:
    """Register with gymnasium and (if Ray is importable) with Tune; safe to call repeatedly."""
    if ENV_ID not in gym.registry:
        gym.register(
            id=ENV_ID,
            entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
            vector_entry_point="rllib_gpuenv.registration:make_vector_env",
            max_episode_steps=physics.MAX_EPISODE_STEPS,
            reward_threshold=475.0,
        )
    try:
        from ray.tune.registry import register_env
    except ImportError:  # Ray is a dependency; without it only the gymnasium id exists
        return
    register_env(ENV_ID, tune_env_creator)
