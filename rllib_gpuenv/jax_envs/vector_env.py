"""What JAX envs share on the device env runner: ``JaxVectorEnv``, a torch ``VectorEnv`` over one
jit-compiled, vmapped ``reset`` and ``step`` on the JAX device that is the runner's torch device
(``cpu`` to JAX's CPU, ``cuda:i`` to JAX's GPU ``i``), with arrays handed across through DLPack
both ways: torch and JAX read the same memory, so actions and observations never visit the host.

A family of JAX envs (``gymnax_envs.py``, ``brax_envs.py``) only says how its env is reset and
stepped over ``num_envs`` envs, as two functions compiled by ``jit_functions``:

* ``reset(key, params) -> (key, state, obs)``
* ``step(key, state, actions, params) -> (key, state, (obs, final_obs), rewards, (terminated, truncated))``

where each call splits ``key`` (one key per env), an env that ended starts its next episode in
the same call (SAME_STEP autoreset: the observation it ended on is ``final_obs``, so a truncated
episode bootstraps from its real last observation and no step is spent on a reset) and where both
flags hold the termination wins, as in gymnasium. Everything here (seeding, the crossing to and
from torch, checkpoints) is written once for every family.

On a GPU, JAX would take 75% of the GPU's memory when it first uses it; ``import_jax_package``
turns that off (``XLA_PYTHON_CLIENT_PREALLOCATE=false`` where it is not set), so that torch has the rest.
It also turns on JAX's persistent compilation cache where nobody chose one (``use_compilation_cache``):
a physics env compiles once per machine, not in every run and every env runner.
"""

from __future__ import annotations

import functools
import importlib
import os
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from rllib_gpuenv.core.actions import ActionCheck
from rllib_gpuenv.core.devices import canonical_device

# Entries are a few hundred KB (Brax's pendulum: 0.6 MB for reset and step); past this JAX drops the
# least recently used.
COMPILATION_CACHE_MAX_BYTES = 2 * 2**30


def import_jax_package(name: str, extra: str, what: str):
    """The module ``name`` (a JAX env library), or a one-line error naming the extra that installs it."""
    # read when JAX first uses a GPU: leave its memory to torch, unless told otherwise
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        module = importlib.import_module(name)
    except ImportError as err:
        missing = (err.name or name).split(".")[0]  # the package that is not there
        raise ModuleNotFoundError(
            f'{what} need jax and {name.split(".")[0]}, and {missing} is not installed: pip install "rllib_gpuenv[{extra}]"',
            name=missing,
        ) from None
    use_compilation_cache()
    return module


def compilation_cache_dir() -> str:
    """Where this package keeps JAX's compiled envs: ``$XDG_CACHE_HOME/rllib_gpuenv/jax`` (``~/.cache``)."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "rllib_gpuenv", "jax")


def use_compilation_cache() -> str:
    """JAX's persistent compilation cache, in ``compilation_cache_dir()`` unless a cache was chosen
    (``JAX_COMPILATION_CACHE_DIR``, ``jax.config``): Brax's inverted pendulum compiles in 15-20 s
    on a 2-core CPU, and in about 4 s from the cache (tracing is left). Compiles of under a
    second are not written (JAX's ``jax_persistent_cache_min_compile_time_secs``; on that CPU
    gymnax's resets, not their steps). The cache is keyed by the computation, JAX's version and
    the device: a stale entry is never used. Returns the folder in use."""
    import jax

    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", compilation_cache_dir())
        if jax.config.jax_compilation_cache_max_size == -1:  # JAX's default: no limit
            jax.config.update("jax_compilation_cache_max_size", COMPILATION_CACHE_MAX_BYTES)
    return jax.config.jax_compilation_cache_dir


def jax_device(device: torch.device):
    """The JAX device that is torch's ``device``: its CPU, or the GPU of the same index."""
    import jax

    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type != "cuda":
        raise ValueError(f"JAX envs run on a CPU or a CUDA GPU, not on {device}")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        raise ValueError(
            f"the env runner works on {device}, but this jax sees no GPU (the CPU build): install its CUDA build "
            '(pip install -U "jax[cuda]"), or put the env runner on the CPU (devices(env_runners="cpu"))'
        ) from None
    return gpus[torch.cuda.current_device() if device.index is None else device.index]


class JaxVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` JAX envs stepped by one family's jit-compiled ``functions`` (``reset``, ``step``)
    on ``device``; tensors in and out, shared with JAX (DLPack). ``params`` is passed to both
    functions as it is (a pytree, or None).

    Actions are checked as the suite's envs check them (``core/actions.py``): their shape, dtype
    and device always, their values (range, NaN) while ``validate_actions`` is on. On a GPU the
    values are read back to the host each step; the device env runner turns it off, its actions
    coming from the policy."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device,
        single_observation_space: gym.Space,
        single_action_space: gym.Space,
        functions: tuple[Callable, Callable],
        params=None,
        max_episode_steps: int | None = None,
    ):
        import jax

        self.num_envs = num_envs
        self.device = canonical_device(device)  # as a tensor's device reads ("cuda" -> cuda:N, "cpu:0" -> cpu)
        self.jax_device = jax_device(self.device)
        self.single_observation_space = single_observation_space
        self.single_action_space = single_action_space
        self.observation_space = batch_space(single_observation_space, num_envs)
        self.action_space = batch_space(single_action_space, num_envs)
        self.max_episode_steps = max_episode_steps
        self.validate_actions = True
        self._actions = ActionCheck(single_action_space, num_envs, self.device)
        discrete = isinstance(single_action_space, gym.spaces.Discrete)
        self._action_dtype = torch.int32 if discrete else torch.float32  # JAX's default integers
        self._params = None if params is None else jax.device_put(params, self.jax_device)
        self._reset, self._step = functions
        self._key = self._state = None
        self.compile_s: float | None = None  # seconds ``compile()`` took, once it has run

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Every env's first observation. ``seed`` starts a ``jax.random.key(seed)`` that every
        later reset and step splits; the env keeps no episode statistics (the runner does)."""
        import jax

        if seed is not None or self._key is None:
            seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else int(seed)
            self._key = jax.device_put(jax.random.key(seed), self.jax_device)
        self._key, self._state, obs = self._reset(self._key, self._params)
        return torch.from_dlpack(obs), {}

    def compile(self) -> float:
        """Compile ``reset`` and ``step`` now rather than at their first calls: the device env
        runner does it when it is built (where it will step the env), so that a physics env's
        compile (Brax's pendulum: 15-20 s on a 2-core CPU) is not counted in the first training
        iteration. One call of each on a throwaway key, whose results are dropped: nothing
        advances. Returns (and keeps, as ``compile_s``) the seconds it took; later calls compile
        nothing."""
        import jax

        if self.compile_s is None:
            start = time.perf_counter()
            key = jax.device_put(jax.random.key(0), self.jax_device)
            _, state, _ = self._reset(key, self._params)
            actions = torch.zeros(self.action_space.shape, dtype=self._action_dtype, device=self.device)
            jax.block_until_ready(self._step(key, state, self._to_jax(actions), self._params))
            self.compile_s = time.perf_counter() - start
        return self.compile_s

    def step(self, actions):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        actions = self._to_jax(self._actions(actions, self.validate_actions))
        self._key, self._state, *out = self._step(self._key, self._state, actions, self._params)
        observations, rewards, flags = map(torch.from_dlpack, out)  # three arrays: each crossing costs ~10 us
        (obs, final_obs), (terminated, truncated) = observations, flags
        infos = {"final_obs": final_obs, "_final_obs": terminated | truncated}
        return obs, rewards, terminated, truncated, infos

    def _to_jax(self, actions: torch.Tensor):
        """Checked actions as a JAX array on the env's device; a float32 tensor's memory is shared
        (int64 actions are cast to int32 first)."""
        import jax

        return jax.dlpack.from_dlpack(actions.to(self._action_dtype).contiguous())

    # ------------------------------------------------------------------ checkpoints
    def get_state(self) -> dict:
        """The envs' states and the random key, as host numpy (for exact resume)."""
        import jax

        return {"key": np.asarray(jax.random.key_data(self._key)), "state": jax.device_get(self._state)}

    def set_state(self, saved: dict) -> None:
        import jax

        self._key = jax.device_put(jax.random.wrap_key_data(saved["key"]), self.jax_device)
        self._state = jax.device_put(saved["state"], self.jax_device)


def jit_functions(reset: Callable, step: Callable) -> tuple[Callable, Callable]:
    """A family's ``reset`` and ``step`` jit-compiled, as ``JaxVectorEnv`` takes them, with the
    envs' state in one form whichever function made it: no leaf weakly typed. gymnax's resets
    make some from Python numbers (Pendulum's ``last_u = 0.0``), which its steps return strongly
    typed; JAX compiles a function once per input form, so the second step would compile the
    step again (1 s for gymnax's Pendulum on a 2-core CPU), as would a step after a restore."""
    import jax

    def settled(state):
        return jax.tree.map(lambda x: x if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x.astype(x.dtype), state)

    @functools.wraps(reset)  # the compiled functions keep their names (JAX's cache files: jit_reset-..., jit_step-...)
    def settled_reset(key, params):
        key, state, *out = reset(key, params)
        return key, settled(state), *out

    @functools.wraps(step)
    def settled_step(key, state, actions, params):
        key, state, *out = step(key, state, actions, params)
        return key, settled(state), *out

    return jax.jit(settled_reset), jax.jit(settled_step)


def split_keys(key, num_envs: int):
    """``key`` split into the next key and one key per env (inside a jit-compiled function)."""
    import jax

    key, now = jax.random.split(key)
    return key, jax.random.split(now, num_envs)


def float_box(low, high, shape) -> gym.spaces.Box:
    """A float32 ``Box`` of ``shape``, its bounds broadcast to it."""
    low = np.broadcast_to(np.asarray(low, np.float32), shape)
    high = np.broadcast_to(np.asarray(high, np.float32), shape)
    return gym.spaces.Box(low, high, shape, np.float32)
