"""Make the suite's ids known to gymnasium, so that gymnasium, RLlib and Tune can build them by name.

``gym.make_vec("GPUCartPole-v1", num_envs=N, **kwargs)`` builds a ``CartPoleVectorEnv`` (numpy
output unless ``output="torch"``): with no ``vectorization_mode`` (or ``"vector_entry_point"``)
gymnasium takes the spec's vector entry point. The mode asked for is honoured:
``vectorization_mode="sync"`` / ``"async"`` give gymnasium's ``SyncVectorEnv`` /
``AsyncVectorEnv`` over ``N`` single envs (``gym.make("GPUCartPole-v1")``: gymnasium's own
``CartPoleEnv`` with the same parameters), with gymnasium's ``wrappers`` and ``vector_kwargs``;
an env without a single-env form (its definition's ``gymnasium_env`` is None) says so in one
line. RLlib's stock env runner asks for ``sync`` unless told otherwise, so it needs
``gym_env_vectorize_mode="vector_entry_point"`` to use the batched env (experiment files run by
``rllib train`` get it when they leave the mode unset: ``experiments/envs.py``).

The gymnasium registry is per process. In a process that has not imported this package (a Ray
worker of stock RLlib, a Tune trial), name the env ``"rllib_gpuenv:GPUCartPole-v1"``: gymnasium
then imports the package first. Nothing is registered with Ray Tune: RLlib finds gymnasium ids
by itself, and a Tune-registered creator would be called once per sub-env under RLlib's default
``sync`` vectorisation.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from typing import Any

import gymnasium as gym

from rllib_gpuenv.core.env_def import EnvDef
from rllib_gpuenv.envs import SHIPPED_DEFS, add_definition, env_definition, make_vector_env

ENV_IDS = tuple(SHIPPED_DEFS)  # every id this package ships
PACKAGE = "rllib_gpuenv"


def registering_module(env_id: str) -> str | None:
    """The module another process imports to have ``env_id``: this package for the suite's ids;
    for a user's definition, the module its ``step`` is written in (README's pattern: the module
    that defines an env registers it when imported). None where no other process can import it:
    a definition made in ``__main__``, in an experiment file run as a file, or by ``exec``."""
    bare = env_id.split(":", 1)[-1]
    definition = env_definition(bare)
    if bare in SHIPPED_DEFS or definition is None:  # the suite's, or a gymnasium id pointed at its entry points
        return PACKAGE
    module = getattr(definition.step, "__module__", None)
    if not module or module == "__main__":
        return None
    try:
        return module if importlib.util.find_spec(module) is not None else None
    except (ImportError, ValueError):  # a name no finder knows
        return None


def make_vector_entry_point(num_envs: int = 1, *, env_id: str, **kwargs: Any):
    """gymnasium's vector entry point: numpy output unless told otherwise (RLlib's stock runner)."""
    kwargs.setdefault("output", "numpy")
    return make_vector_env(env_id, num_envs, **kwargs)


# What GPUVectorEnv takes besides the env's parameters: meaningless for one gymnasium env.
VECTOR_ONLY_ARGUMENTS = (
    "backend",
    "device",
    "dtype",
    "output",
    "threads_per_block",
    "num_threads",
    "reuse_outputs",
    "validate_actions",
    "episode_statistics",
)


def make_single_env(*, env_id: str, render_mode: str | None = None, **params: Any):
    """gymnasium's entry point (``gym.make``, and ``make_vec``'s ``sync``/``async`` modes): the
    gymnasium env ``env_id`` reproduces, one copy, with the same parameters."""
    definition = env_definition(env_id)
    if definition.gymnasium_env is None:
        raise ValueError(
            f"{env_id} is a vector env only (its definition's gymnasium_env is None), so gym.make and make_vec's "
            f"'sync'/'async' modes, which build single envs, cannot make it: use gym.make_vec({env_id!r}, num_envs=N)"
        )
    vector_only = sorted(set(params) & set(VECTOR_ONLY_ARGUMENTS))
    if vector_only:
        raise ValueError(
            f"the argument(s) {', '.join(vector_only)} belong to this package's batched {env_id}, but a single env was "
            f"asked for (gym.make, or make_vec with vectorization_mode 'sync'/'async', which steps N copies of gymnasium's "
            f"own env): leave vectorization_mode unset (RLlib: gym_env_vectorize_mode='vector_entry_point') or drop them"
        )
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


def unimportable_prefix(env_id: str, module: str, err: ImportError) -> str:
    """Why the module of a ``"module:Env-v0"`` id cannot be imported, and the fix. A console
    script (``rllib-gpuenv``, ``rllib``) does not search the folder it runs from, where a user's
    env module often is: that case names ``PYTHONPATH=.``."""
    missing = getattr(err, "name", None) or module
    file = f"{missing.replace('.', os.sep)}.py"
    if os.path.exists(file) and "" not in sys.path and os.getcwd() not in sys.path:
        fix = f"{file} is in this folder, which a command does not search: run it with PYTHONPATH=."
    else:
        fix = f"install it, put its folder on PYTHONPATH, or drop the '{module}:' prefix"
    return f"{env_id!r}: no module {missing!r} to import: {fix}"


def register_env(definition: EnvDef) -> None:
    """Make an env definition (yours, or the suite's) an id that ``make_vector_env``, gymnasium
    (``gym.make_vec``), RLlib and the device env runner know; safe to call repeatedly. In other
    processes (remote env runners) name it ``"your_module:YourEnv-v0"``, so that importing your
    module registers it there too. An id that gymnasium has for an env of its own (``CartPole-v1``)
    is refused: ``gym.make_vec`` would make that one."""
    spec = gym.registry.get(definition.id)
    if spec is not None and spec.kwargs.get("env_id") != definition.id:
        raise ValueError(
            f"gymnasium already has an env {definition.id!r} ({spec.entry_point}): give yours another id, "
            f"e.g. 'My{definition.id}'"
        )
    if spec is not None and env_definition(definition.id) is definition:
        return
    add_definition(definition)
    gym.registry.pop(definition.id, None)  # a definition given again: its spec (time limit, threshold) too
    gym.register(
        id=definition.id,
        entry_point=make_single_env,
        vector_entry_point=make_vector_entry_point,
        max_episode_steps=definition.max_episode_steps,
        reward_threshold=definition.reward_threshold,
        kwargs={"env_id": definition.id},
    )


def register() -> None:
    """Register the shipped envs with gymnasium; safe to call repeatedly."""
    for definition in SHIPPED_DEFS.values():
        register_env(definition)
