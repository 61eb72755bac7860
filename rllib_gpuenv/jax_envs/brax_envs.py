"""Brax's JAX envs (``ant``, ``hopper``, ``inverted_pendulum``, ...) on the device env runner:
``DevicePPOConfig().environment("brax:inverted_pendulum")`` builds a ``BraxVectorEnv``
(``make_brax_env``); ``env_config`` sets ``episode_length`` (the time limit, 1000 by default as
in ``brax.envs.create``) and any argument of the env's constructor (``backend``, ``n_frames``,
...).

A Brax env is one env as two pure functions, ``reset(rng) -> State`` and ``step(State, action)
-> State``; Brax's own wrappers add the time limit (``EpisodeWrapper``) and an autoreset that
starts every episode of an env from the same first state (``AutoResetWrapper``). Here:

* **Autoreset: SAME_STEP, from a fresh start.** An env whose episode ended is reset in the same
  call with a new key, as gymnasium's envs are (not to its first state again), and the
  observation it ended on goes to ``infos["final_obs"]``.
* **Terminated and truncated stay apart**: ``terminated`` is the env's own ``done`` (a fall);
  ``truncated`` is the time limit, counted here per env, where the env did not terminate in
  the same step (``EpisodeWrapper``'s ``info["truncation"]``), so PPO bootstraps a time-out.
* **Spaces**: observations a float32 ``Box`` of ``observation_size`` (envs with dict
  observations are refused); actions a float32 ``Box`` of ``[-1, 1]``, what Brax's envs take
  (those whose actuators reach further scale the action in ``step``, as Brax's training assumes).

Seeding, DLPack and checkpoints are ``JaxVectorEnv``'s (``vector_env.py``).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import io
import sys

import numpy as np
import torch

from rllib_gpuenv.jax_envs.vector_env import JaxVectorEnv, float_box, import_jax_package, jit_functions, split_keys

PREFIX = "brax:"
EPISODE_LENGTH = 1000  # brax.envs.create's default


def import_brax_envs():
    """``brax.envs``, or a one-line error naming the extra that installs it. MuJoCo's MJX prints
    that it found no NVIDIA Warp when Brax imports it (Brax does not use it): that line is dropped."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        envs = import_jax_package("brax.envs", "brax", "Brax envs")
    for line in printed.getvalue().splitlines():
        if not line.startswith(("Failed to import warp", "Failed to import mujoco_warp")):
            print(line, file=sys.stdout)
    return envs


def registered_envs() -> list[str]:
    return sorted(import_brax_envs()._envs)  # Brax's registry (get_environment and register_environment fill it)


def check_brax_id(env_spec: str) -> str:
    """The env name of a ``"brax:<name>"`` id that Brax registers, else a one-line error listing Brax's."""
    name = env_spec[len(PREFIX) :]
    registered = registered_envs()
    if name not in registered:
        close = difflib.get_close_matches(name, registered, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(f"{env_spec!r}: Brax has no env {name!r}: {hint}Brax's envs: {', '.join(registered)}")
    return name


def constructor_arguments(cls) -> list[str]:
    """The keyword arguments ``cls(...)`` takes: its own, and those its ``**kwargs`` pass on to
    the classes it derives from (``PipelineEnv``'s ``backend``, ``n_frames``, ``debug``)."""
    names = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
        names += [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return [n for n in dict.fromkeys(names) if n not in ("self", "sys")]


def check_brax_config(env_spec: str, env_config: dict) -> None:
    """``env_config``'s names are ``episode_length`` (at least 1) and arguments of the env's
    constructor, else a one-line error listing them. Cheap: nothing is built."""
    name = check_brax_id(env_spec)
    env_config = dict(env_config)
    episode_length = int(env_config.pop("episode_length", EPISODE_LENGTH))
    if episode_length < 1:
        raise ValueError(f"{env_spec!r}: env_config episode_length must be at least 1, not {episode_length}")
    cls = import_brax_envs()._envs[name]
    arguments = constructor_arguments(cls)
    unknown = sorted(set(env_config) - set(arguments))
    if unknown:
        close = {c for k in unknown for c in difflib.get_close_matches(k, ["episode_length", *arguments], n=1)}
        hint = f" (did you mean {', '.join(sorted(close))}?)" if close else ""
        raise ValueError(
            f"{env_spec!r}: env_config {', '.join(map(repr, unknown))}{hint} is neither episode_length nor an argument "
            f"of {cls.__name__}() ({', '.join(arguments) or 'none'})"
        )


def make_brax_env(env_spec: str, num_envs: int, device: torch.device, env_config: dict) -> BraxVectorEnv:
    """``num_envs`` of Brax's env ``"brax:<name>"`` on ``device``; ``env_config`` sets
    ``episode_length`` and arguments of the env's constructor (any other name is an error that
    lists them)."""
    name = check_brax_id(env_spec)
    check_brax_config(env_spec, env_config)
    env_config = dict(env_config)
    episode_length = int(env_config.pop("episode_length", EPISODE_LENGTH))
    try:
        env = _make(name, tuple(sorted(env_config.items())))
    except TypeError:  # an argument that cannot be a cache key: made, and compiled, afresh
        env = import_brax_envs().get_environment(name, **env_config)
    return BraxVectorEnv(env, num_envs, device, episode_length, name=name)


@functools.lru_cache(maxsize=64)
def _make(name: str, constructor: tuple = ()):
    """Brax's env, one instance per name and constructor arguments: the compiled step of an
    instance is kept (``vector_functions``), so envs made again do not compile again."""
    return import_brax_envs().get_environment(name, **dict(constructor))


class BraxVectorEnv(JaxVectorEnv):
    """``num_envs`` copies of a Brax ``Env``, stepped as one jit-compiled, vmapped function on
    ``device``, with a time limit of ``episode_length`` steps."""

    def __init__(
        self, env, num_envs: int, device: str | torch.device = "cpu", episode_length: int = EPISODE_LENGTH, name: str = ""
    ):
        size = observation_size(env)
        if not isinstance(size, int):
            raise TypeError(
                f"Brax env {name or type(env).__name__} has dict observations ({size}): the device env runner takes "
                "one flat array (its default obs_mode)"
            )
        self.brax_env = env
        self.name = name or type(env).__name__
        super().__init__(
            num_envs,
            device,
            float_box(-np.inf, np.inf, (size,)),
            float_box(-1.0, 1.0, (env.action_size,)),
            vector_functions(env, num_envs, episode_length),
            None,
            episode_length,
        )

    def __repr__(self) -> str:
        return f"BraxVectorEnv({self.name}, num_envs={self.num_envs}, episode_length={self.max_episode_steps})"


def observation_size(env):
    """Brax's ``env.observation_size`` (an int, or the shapes of dict observations) from the shapes
    of a traced ``reset``: Brax's own property runs ``reset`` op by op, each op compiled on its
    own (11 s for the inverted pendulum on a 2-core CPU, against a fraction of a second)."""
    import jax

    obs = jax.eval_shape(env.unwrapped.reset, jax.random.PRNGKey(0)).obs
    if isinstance(obs, jax.ShapeDtypeStruct):
        return obs.shape[-1]
    return jax.tree.map(lambda x: x.shape, obs)


@functools.lru_cache(maxsize=64)
def vector_functions(env, num_envs: int, episode_length: int):
    """Brax's ``reset`` and ``step`` over ``num_envs`` envs, jit-compiled, as ``JaxVectorEnv``
    takes them. The envs' state is Brax's ``State`` and each env's step in its episode."""
    import jax
    import jax.numpy as jnp

    def starts(env_keys):
        return jax.vmap(env.reset)(jax.random.key_data(env_keys))  # Brax's envs take raw uint32 keys

    def reset(key, params):
        key, env_keys = split_keys(key, num_envs)
        state = starts(env_keys)
        return key, (state, jnp.zeros(num_envs, jnp.int32)), state.obs.astype(jnp.float32)

    def step(key, carry, actions, params):
        state, steps = carry
        key, env_keys = split_keys(key, num_envs)
        after = jax.vmap(env.step)(state, actions)
        steps = steps + 1
        terminated = after.done.astype(bool)
        truncated = (steps >= episode_length) & ~terminated
        done = terminated | truncated
        started = starts(env_keys)

        def select(new, old):
            return jnp.where(done.reshape(done.shape + (1,) * (new.ndim - 1)), new, old)

        state = jax.tree.map(select, started, after)
        steps = jnp.where(done, 0, steps)
        observations = jnp.stack([state.obs, after.obs]).astype(jnp.float32)
        flags = jnp.stack([terminated, truncated])
        return key, (state, steps), observations, after.reward.astype(jnp.float32), flags

    return jit_functions(reset, step)
