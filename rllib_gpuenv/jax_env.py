"""gymnax's JAX envs as a torch ``VectorEnv`` on the env runner's device, without a copy.

gymnax (classic control, bsuite, MinAtar) writes one env as pure JAX functions. ``GymnaxVectorEnv``
vmaps them over ``num_envs`` envs, jit-compiles them on the JAX device that is the runner's torch
device (``cpu`` to JAX's CPU, ``cuda:i`` to JAX's GPU ``i``) and hands arrays across through
DLPack both ways: torch and JAX read the same memory, so actions and observations never visit
the host. ``DevicePPOConfig().environment("gymnax:Breakout-MinAtar")`` builds one
(``make_gymnax_env``); ``env_config`` entries set fields of gymnax's env params
(``max_steps_in_episode``, ...) or arguments of the env's constructor.

* **Autoreset: SAME_STEP**, gymnax's own. ``Environment.step`` starts a finished env's next
  episode in the same call and keeps the observation it ended on, which goes to
  ``infos["final_obs"]`` (mask ``infos["_final_obs"]``): a truncated episode bootstraps from its
  real last observation and no step is spent on a reset (NEXT_STEP would waste one step in
  ``max_steps_in_episode`` and a call for it). gymnax's ``step`` is used as it is, not
  re-assembled from ``step_env``/``reset_env``, because some envs override it (DeepSea keeps its
  statistics across resets).
* **Terminated and truncated stay apart**: gymnax 1.x returns both, ``truncated`` being its time
  limit (``state.time >= params.max_steps_in_episode``), so PPO bootstraps a time-out and not a
  real end. Where both hold, the termination wins (no bootstrap), as in gymnasium.
* **Spaces**: observations are float32 (MinAtar's 10×10×C images too: RLlib's CNN encoder takes
  channels-last floats), a ``Discrete`` observation one-hot; actions ``Discrete`` or float32 ``Box``.
* **Seeds**: ``reset(seed=s)`` starts a ``jax.random.key(s)``; every reset and step splits it,
  one key per env. The env keeps no episode statistics: the runner keeps them.

On a GPU, JAX would take 75% of the GPU's memory when it first uses it; the envs here turn that off
(``XLA_PYTHON_CLIENT_PREALLOCATE=false`` where it is not set), so that torch has the rest.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import os

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

PREFIX = "gymnax:"
INSTALL = 'pip install "rllib_gpuenv[jax]"'


def import_gymnax():
    """gymnax (and JAX), or a one-line error naming the extra that installs them."""
    # read when JAX first uses a GPU: leave its memory to torch, unless told otherwise
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import gymnax
    except ImportError as err:
        name = err.name or "gymnax"
        raise ModuleNotFoundError(
            f"gymnax envs need jax and gymnax, and {name} is not installed: {INSTALL}", name=name
        ) from None
    return gymnax


def check_gymnax_id(env_spec: str) -> str:
    """The env name of a ``"gymnax:<id>"`` id that gymnax registers, else a one-line error listing gymnax's."""
    name = env_spec[len(PREFIX) :]
    registered = import_gymnax().registered_envs
    if name not in registered:
        close = difflib.get_close_matches(name, registered, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(f"{env_spec!r}: gymnax has no env {name!r}: {hint}gymnax's envs: {', '.join(registered)}")
    return name


def make_gymnax_env(env_spec: str, num_envs: int, device: torch.device, env_config: dict) -> GymnaxVectorEnv:
    """``num_envs`` of gymnax's env ``"gymnax:<id>"`` on ``device``; ``env_config`` sets fields of
    its params or arguments of its constructor (any other name is an error that lists both)."""
    name = check_gymnax_id(env_spec)
    env, params = _make(name)
    fields = [f.name for f in dataclasses.fields(params)]
    arguments = [a for a in inspect.signature(type(env)).parameters if a not in ("self", "args", "kwargs")]
    unknown = sorted(set(env_config) - set(fields) - set(arguments))
    if unknown:
        raise ValueError(
            f"{env_spec!r}: env_config {', '.join(map(repr, unknown))} is neither a field of gymnax's params for it "
            f"({', '.join(fields)}) nor an argument of {type(env).__name__}() ({', '.join(arguments) or 'none'})"
        )
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


def jax_device(device: torch.device):
    """The JAX device that is torch's ``device``: its CPU, or the GPU of the same index."""
    import jax

    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type != "cuda":
        raise ValueError(f"gymnax envs run on a CPU or a CUDA GPU, not on {device}")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        raise ValueError(
            f"the env runner works on {device}, but this jax sees no GPU (the CPU build): install its CUDA build "
            '(pip install -U "jax[cuda]"), or put the env runner on the CPU (devices(env_runners="cpu"))'
        ) from None
    return gpus[torch.cuda.current_device() if device.index is None else device.index]


def gymnasium_space(space, observation: bool) -> gym.Space:
    """gymnax's ``space`` as gymnasium's: a float32 ``Box`` for observations (one-hot for a
    ``Discrete`` one), ``Discrete`` or float32 ``Box`` for actions."""
    from gymnax.environments import spaces

    if isinstance(space, spaces.Discrete):
        if observation:
            return gym.spaces.Box(0.0, 1.0, (space.n,), np.float32)
        return gym.spaces.Discrete(space.n)
    if isinstance(space, spaces.Box):
        shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        return gym.spaces.Box(low, high, shape, np.float32)
    raise TypeError(f"the device env runner takes Discrete and Box spaces, and this gymnax env has {space!r}")


class GymnaxVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of a gymnax ``Environment`` (with ``params``), stepped as one
    jit-compiled, vmapped function on ``device``; tensors in and out, shared with JAX (DLPack)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env, num_envs: int, device: str | torch.device = "cpu", params=None):
        import jax
        from gymnax.environments import spaces

        self.gymnax_env = env
        self.params = env.default_params if params is None else params
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.jax_device = jax_device(self.device)
        gymnax_observations = env.observation_space(self.params)
        self.single_observation_space = gymnasium_space(gymnax_observations, observation=True)
        self.single_action_space = gymnasium_space(env.action_space(self.params), observation=False)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.max_episode_steps = int(getattr(self.params, "max_steps_in_episode", 0)) or None
        self._action_dtype = torch.int32 if isinstance(self.single_action_space, gym.spaces.Discrete) else torch.float32
        self._params = jax.device_put(self.params, self.jax_device)
        one_hot = gymnax_observations.n if isinstance(gymnax_observations, spaces.Discrete) else None
        self._reset, self._step = vector_functions(env, num_envs, one_hot)
        self._key = self._state = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        import jax

        if seed is not None or self._key is None:
            seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else int(seed)
            self._key = jax.device_put(jax.random.key(seed), self.jax_device)
        self._key, self._state, obs = self._reset(self._key, self._params)
        return torch.from_dlpack(obs), {}

    def step(self, actions):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        self._key, self._state, *out = self._step(self._key, self._state, self._to_jax(actions), self._params)
        observations, rewards, flags = map(torch.from_dlpack, out)  # three arrays: each crossing costs ~10 us
        (obs, final_obs), (terminated, truncated) = observations, flags
        infos = {"final_obs": final_obs, "_final_obs": terminated | truncated}
        return obs, rewards, terminated, truncated, infos

    def _to_jax(self, actions):
        """The actions as a JAX array on the env's device; a tensor's memory is shared (an
        int64 action is cast to int32 first: JAX's default integers)."""
        import jax

        if not isinstance(actions, torch.Tensor):
            actions = torch.as_tensor(np.asarray(actions))
        return jax.dlpack.from_dlpack(actions.detach().to(self.device, self._action_dtype).contiguous())

    # ------------------------------------------------------------------ checkpoints
    def get_state(self) -> dict:
        """The envs' states and the random key, as host numpy (for exact resume)."""
        import jax

        return {"key": np.asarray(jax.random.key_data(self._key)), "state": jax.device_get(self._state)}

    def set_state(self, saved: dict) -> None:
        import jax

        self._key = jax.device_put(jax.random.wrap_key_data(saved["key"]), self.jax_device)
        self._state = jax.device_put(saved["state"], self.jax_device)

    def __repr__(self) -> str:
        return f"GymnaxVectorEnv({self.gymnax_env.name}, num_envs={self.num_envs})"


@functools.lru_cache(maxsize=64)
def vector_functions(env, num_envs: int, one_hot: int | None = None):
    """gymnax's ``reset`` and ``step`` over ``num_envs`` envs, jit-compiled: ``reset(key, params)
    -> (key, state, obs)`` and ``step(key, state, actions, params) -> (key, state, (obs, final_obs),
    rewards, (terminated, truncated))``; each call splits ``key``, one key per env. Observations
    become the float32 arrays ``gymnasium_space`` promises (``one_hot``: a ``Discrete`` one's
    size). Made once per env instance and size: JAX compiles a function once per input shape."""
    import jax
    import jax.numpy as jnp

    def observe(obs):
        return obs.astype(jnp.float32) if one_hot is None else jax.nn.one_hot(obs, one_hot, dtype=jnp.float32)

    def keys(key):
        key, now = jax.random.split(key)
        return key, jax.random.split(now, num_envs)

    def reset(key, params):
        key, env_keys = keys(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(env_keys, params)
        return key, state, observe(obs)

    def step(key, state, actions, params):
        key, env_keys = keys(key)
        obs, state, rewards, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            env_keys, state, actions, params
        )
        if "final_observation" not in info:
            raise TypeError(f"{env.name}.step() gives no info['final_observation']: the wrapper needs gymnax 1.0 or later")
        observations = jnp.stack([observe(obs), observe(info["final_observation"])])
        flags = jnp.stack([terminated.astype(bool), truncated.astype(bool)])
        return key, state, observations, rewards.astype(jnp.float32), flags

    return jax.jit(reset), jax.jit(step)
