"""gymnax's JAX envs (classic control, bsuite, MinAtar) on the device env runner:
``DevicePPOConfig().environment("gymnax:Breakout-MinAtar")`` builds a ``GymnaxVectorEnv``
(``make_gymnax_env``); ``env_config`` entries set fields of gymnax's env params
(``max_steps_in_episode``, ...) or arguments of the env's constructor.

* **Autoreset: SAME_STEP**, gymnax's own. ``Environment.step`` starts a finished env's next
  episode in the same call and keeps the observation it ended on (``info["final_observation"]``),
  which goes to ``infos["final_obs"]``. gymnax's ``step`` is used as it is, not re-assembled from
  ``step_env``/``reset_env``, because some envs override it (DeepSea keeps its statistics across
  resets).
* **Terminated and truncated stay apart**: gymnax 1.x returns both, ``truncated`` being its time
  limit (``state.time >= params.max_steps_in_episode``), so PPO bootstraps a time-out and not a
  real end.
* **Spaces**: observations are float32 (MinAtar's 10×10×C images too: RLlib's CNN encoder takes
  channels-last floats), a ``Discrete`` observation one-hot; actions ``Discrete`` or float32 ``Box``.

Seeding, DLPack and checkpoints are ``JaxVectorEnv``'s (``vector_env.py``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect

import gymnasium as gym
import numpy as np
import torch

from rllib_gpuenv.jax_envs.vector_env import JaxVectorEnv, float_box, import_jax_package, jit_functions, split_keys

PREFIX = "gymnax:"


def import_gymnax():
    """gymnax (and JAX), or a one-line error naming the extra that installs them."""
    return import_jax_package("gymnax", "jax", "gymnax envs")


def check_gymnax_id(env_spec: str) -> str:
    """The env name of a ``"gymnax:<id>"`` id that gymnax registers, else a one-line error listing gymnax's."""
    name = env_spec[len(PREFIX) :]
    registered = import_gymnax().registered_envs
    if name not in registered:
        close = difflib.get_close_matches(name, registered, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(f"{env_spec!r}: gymnax has no env {name!r}: {hint}gymnax's envs: {', '.join(registered)}")
    return name


def check_gymnax_config(env_spec: str, env_config: dict) -> tuple[list[str], list[str]]:
    """The fields of the env's params and the arguments of its constructor, once ``env_config``'s
    names are among them and its values are numbers where gymnax's are (else int() fails in the
    env, naming nothing); else a one-line error listing both. Cheap: no compilation."""
    name = check_gymnax_id(env_spec)
    env, params = _make(name)
    fields = [f.name for f in dataclasses.fields(params)]
    arguments = [a for a in inspect.signature(type(env)).parameters if a not in ("self", "args", "kwargs")]
    unknown = sorted(set(env_config) - set(fields) - set(arguments))
    if unknown:
        close = {c for k in unknown for c in difflib.get_close_matches(k, fields + arguments, n=1)}
        hint = f" (did you mean {', '.join(sorted(close))}?)" if close else ""
        raise ValueError(
            f"{env_spec!r}: env_config {', '.join(map(repr, unknown))}{hint} is neither a field of gymnax's params for "
            f"it ({', '.join(fields)}) nor an argument of {type(env).__name__}() ({', '.join(arguments) or 'none'})"
        )
    for key in (k for k in env_config if k in fields):
        default, value = getattr(params, key), env_config[key]
        same_kind = isinstance(value, (int, float)) and isinstance(value, bool) == isinstance(default, bool)
        if isinstance(default, (int, float)) and not same_kind:
            kind = "true or false" if isinstance(default, bool) else "a number"
            raise ValueError(
                f"{env_spec!r}: env_config {key}={value!r}: gymnax's params for it take {kind} there "
                f"({type(default).__name__}, default {default!r})"
            )
    return fields, arguments


def make_gymnax_env(env_spec: str, num_envs: int, device: torch.device, env_config: dict) -> GymnaxVectorEnv:
    """``num_envs`` of gymnax's env ``"gymnax:<id>"`` on ``device``; ``env_config`` sets fields of
    its params or arguments of its constructor (``check_gymnax_config``)."""
    name = check_gymnax_id(env_spec)
    fields, arguments = check_gymnax_config(env_spec, env_config)
    env, params = _make(name)
    constructor = tuple(sorted((k, v) for k, v in env_config.items() if k in arguments))
    if constructor:
        try:
            env, params = _make(name, constructor)
        except TypeError:  # an argument that cannot be a cache key (an array): made, and compiled, afresh
            env, params = import_gymnax().make(name, **dict(constructor))
    params = params.replace(**{k: v for k, v in env_config.items() if k in fields})
    return GymnaxVectorEnv(env, num_envs, device, params)


@functools.lru_cache(maxsize=64)
def _make(name: str, constructor: tuple = ()):
    """gymnax's env (and its default params), one instance per id and constructor arguments: the
    compiled step of an instance is kept (``vector_functions``), so envs made again (an evaluation
    runner, a rebuilt algorithm) do not compile again."""
    return import_gymnax().make(name, **dict(constructor))


def gymnasium_space(space, observation: bool) -> gym.Space:
    """gymnax's ``space`` as gymnasium's: a float32 ``Box`` for observations (one-hot for a
    ``Discrete`` one), ``Discrete`` or float32 ``Box`` for actions."""
    from gymnax.environments import spaces

    if isinstance(space, spaces.Discrete):
        if observation:
            return gym.spaces.Box(0.0, 1.0, (space.n,), np.float32)
        return gym.spaces.Discrete(space.n)
    if isinstance(space, spaces.Box):
        return float_box(space.low, space.high, tuple(space.shape))
    raise TypeError(f"the device env runner takes Discrete and Box spaces, and this gymnax env has {space!r}")


class GymnaxVectorEnv(JaxVectorEnv):
    """``num_envs`` copies of a gymnax ``Environment`` (with ``params``), stepped as one
    jit-compiled, vmapped function on ``device``."""

    def __init__(self, env, num_envs: int, device: str | torch.device = "cpu", params=None):
        from gymnax.environments import spaces

        self.gymnax_env = env
        self.params = env.default_params if params is None else params
        observations = env.observation_space(self.params)
        one_hot = observations.n if isinstance(observations, spaces.Discrete) else None
        super().__init__(
            num_envs,
            device,
            gymnasium_space(observations, observation=True),
            gymnasium_space(env.action_space(self.params), observation=False),
            vector_functions(env, num_envs, one_hot),
            self.params,
            int(getattr(self.params, "max_steps_in_episode", 0)) or None,
        )

    def __repr__(self) -> str:
        return f"GymnaxVectorEnv({self.gymnax_env.name}, num_envs={self.num_envs})"


@functools.lru_cache(maxsize=64)
def vector_functions(env, num_envs: int, one_hot: int | None = None):
    """gymnax's ``reset`` and ``step`` over ``num_envs`` envs, jit-compiled, as ``JaxVectorEnv``
    takes them. Observations become the float32 arrays ``gymnasium_space`` promises (``one_hot``: a
    ``Discrete`` one's size). Made once per env instance and size: JAX compiles a function once
    per input shape."""
    import jax
    import jax.numpy as jnp

    def observe(obs):
        return obs.astype(jnp.float32) if one_hot is None else jax.nn.one_hot(obs, one_hot, dtype=jnp.float32)

    def reset(key, params):
        key, env_keys = split_keys(key, num_envs)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(env_keys, params)
        return key, state, observe(obs)

    def step(key, state, actions, params):
        key, env_keys = split_keys(key, num_envs)
        obs, state, rewards, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            env_keys, state, actions, params
        )
        if "final_observation" not in info:
            raise TypeError(f"{env.name}.step() gives no info['final_observation']: the wrapper needs gymnax 1.0 or later")
        observations = jnp.stack([observe(obs), observe(info["final_observation"])])
        flags = jnp.stack([terminated.astype(bool), truncated.astype(bool)])
        return key, state, observations, rewards.astype(jnp.float32), flags

    return jit_functions(reset, step)
