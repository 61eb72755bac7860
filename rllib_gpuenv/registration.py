"""Make the suite's ids known to gymnasium, so that gymnasium, RLlib and Tune can build them by name.

``gym.make_vec("GPUCartPole-v1", num_envs=N, **kwargs)`` builds a ``CartPoleVectorEnv`` (numpy
output unless ``output="torch"``), whatever ``vectorization_mode`` is asked for: the spec
carries ``vectorization_mode="vector_entry_point"``, which gymnasium lets a spec's kwargs decide.
That is what makes RLlib's stock env runner, which asks gymnasium for ``sync`` vectorisation
unless told otherwise, use the env as the one batched vector env it is
(``PPOConfig().environment("GPUCartPole-v1")``). ``gym.make("GPUCartPole-v1")`` gives
gymnasium's own single env of that kind, for code that wants one env.

The gymnasium registry is per process. In a process that has not imported this package (a Ray
worker of stock RLlib, a Tune trial), name the env ``"rllib_gpuenv:GPUCartPole-v1"``: gymnasium
then imports the package first. Nothing is registered with Ray Tune: RLlib finds gymnasium ids
by itself, and a Tune-registered creator would be called once per sub-env under RLlib's default
``sync`` vectorisation.
"""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym

from rllib_gpuenv.core.env_def import EnvDef
from rllib_gpuenv.envs import ENV_DEFS, add_definition, env_definition, make_vector_env

ENV_IDS = tuple(ENV_DEFS)
PACKAGE = "rllib_gpuenv"


def qualified_id(env_id: str) -> str:
    """``"rllib_gpuenv:<id>"`` for an id of the suite (any process can build it), else ``env_id``."""
    bare = env_id.split(":", 1)[-1]
    return f"{PACKAGE}:{bare}" if bare in ENV_DEFS else env_id


def make_vector_entry_point(num_envs: int = 1, *, env_id: str, **kwargs: Any):
    """gymnasium's vector entry point: numpy output unless told otherwise (RLlib's stock runner)."""
    kwargs.setdefault("output", "numpy")
    return make_vector_env(env_id, num_envs, **kwargs)


def make_single_env(*, env_id: str, vectorization_mode: str | None = None, render_mode: str | None = None, **params: Any):
    """gymnasium's entry point: the gymnasium env ``env_id`` reproduces, one copy, with the same
    parameters (``vectorization_mode`` belongs to ``make_vec`` and is ignored here)."""
    definition = env_definition(env_id)
    if definition.gymnasium_env is None:
        raise ValueError(f"{env_id} is a vector env only: gym.make_vec({env_id!r}, num_envs=N)")
    cls = definition.gymnasium_class()
    changed = {k: v for k, v in definition.make_params(**params)._asdict().items() if k in params}
    arguments = inspect.signature(cls).parameters
    env = cls(render_mode=render_mode, **{k: v for k, v in changed.items() if k in arguments})
    for name, value in changed.items():
        if name in arguments:
            continue
        if not hasattr(env, name):
            raise ValueError(
                f"gym.make({env_id!r}) gives gymnasium's own {cls.__name__}, which has no {name!r}: "
                f"use gym.make_vec({env_id!r}, num_envs=1, {name}=...) for this package's env"
            )
        setattr(env, name, value)
    return env


def register_env(definition: EnvDef) -> None:
    """Make an env definition (yours, or the suite's) an id that ``make_vector_env``, gymnasium
    (``gym.make_vec``), RLlib and the device env runner know; safe to call repeatedly. In other
    processes (remote env runners) name it ``"your_module:YourEnv-v0"``, so that importing your
    module registers it there too."""
    add_definition(definition)
    if definition.id in gym.registry:
        return
    gym.register(
        id=definition.id,
        entry_point=make_single_env,
        vector_entry_point=make_vector_entry_point,
        max_episode_steps=definition.max_episode_steps,
        reward_threshold=definition.reward_threshold,
        kwargs={"env_id": definition.id, "vectorization_mode": "vector_entry_point"},
    )


def register() -> None:
    """Register the suite with gymnasium; safe to call repeatedly."""
    for definition in ENV_DEFS.values():
        register_env(definition)
