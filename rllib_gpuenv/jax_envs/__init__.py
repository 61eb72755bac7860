"""JAX envs on the device env runner, without a copy: gymnax's (``"gymnax:<id>"``,
``gymnax_envs.py``) and Brax's (``"brax:<name>"``, ``brax_envs.py``), each vmapped and
jit-compiled on the runner's device and sharing its arrays with torch (``vector_env.py``).

``make_jax_env`` builds either from its id; ``check_jax_id`` checks an id before anything is
built (the package must be installed and have the env), ``check_jax_env_config`` its
env_config. Nothing here imports JAX until an env is asked for.
"""

from __future__ import annotations

import importlib

import torch

# prefix -> (module here, its id's check, its constructor, its env_config's check)
FAMILIES = {
    "gymnax:": ("gymnax_envs", "check_gymnax_id", "make_gymnax_env", "check_gymnax_config"),
    "brax:": ("brax_envs", "check_brax_id", "make_brax_env", "check_brax_config"),
}


def is_jax_id(env_spec) -> bool:
    return isinstance(env_spec, str) and env_spec.startswith(tuple(FAMILIES))


def _family(env_spec: str, which: int):
    prefix = next(p for p in FAMILIES if env_spec.startswith(p))
    module = importlib.import_module(f"{__name__}.{FAMILIES[prefix][0]}")
    return getattr(module, FAMILIES[prefix][which])


def check_jax_id(env_spec: str) -> str:
    """The env's name in its library, else a one-line error (a missing extra, an unknown env)."""
    return _family(env_spec, 1)(env_spec)


def check_jax_env_config(env_spec: str, env_config: dict) -> None:
    """``env_config``'s names and values for the JAX env ``env_spec``, else a one-line error:
    before Ray starts, not in each runner."""
    _family(env_spec, 3)(env_spec, env_config)


def make_jax_env(env_spec: str, num_envs: int, device: torch.device, env_config: dict):
    """``num_envs`` of the JAX env ``env_spec`` on ``device`` (a ``JaxVectorEnv``)."""
    return _family(env_spec, 2)(env_spec, num_envs, device, env_config)


__all__ = ["FAMILIES", "check_jax_env_config", "check_jax_id", "is_jax_id", "make_jax_env"]
