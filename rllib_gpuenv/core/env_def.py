"""What one environment declares, and nothing more: ``EnvDef``.

An env definition is data plus two pure elementwise functions, in the style of gymnax and
Brax: the core (``core/step.py``, ``core/vector_env.py``) adds everything else (autoreset,
counters, time limits, episode statistics, seeding, checks, outputs, rendering) once for all
envs, and the backends (``backends/``) execute it. A new env is one file: see
``envs/cartpole.py`` for the model and ``examples/write_your_own_env.py`` for a new one.

The two functions, written with arithmetic and the primitives of ``core/ops.py`` only, so that
the same code runs on whole torch tensors and on one env's numbers in numba kernels:

* ``step(state, action, p) -> (next_state, reward, terminated)``: ``state`` and ``next_state``
  are tuples of ``len(state_names)`` numbers (or tensors) in gymnasium's state order; ``action``
  is one integer for ``Discrete`` spaces, a tuple of floats for ``Box`` spaces (unclipped: the
  env clips where gymnasium does; float32 values, held in the state's precision); ``p`` is the
  env's ``Params``; ``terminated`` a boolean.

Numba types an integer mixed with a float32 as float64: write ``to_float(n)`` for an integer in
float arithmetic (float32 kernels make it a float32).
* ``observe(state, p) -> obs``: a tuple of ``obs_size`` numbers.

## Envs with an array (grids, images, sets of bodies)
An env may keep one array per env besides its numbers (``array_shape``, e.g. ``(10, 10, 4)``:
several grids are channels of one array). ``state`` then ends with it: ``(*numbers, array)``.
The same code runs on tensors, where the array is ``(*array_shape, N)`` (every env's at once,
envs last, so that a constant index ``array[9, 4, 0]`` is every env's element), and in kernels,
where it is the env's own ``array_shape`` view. Per-env positions read and write it through
``ops.get(array, (y, x, c))`` and ``array = ops.put(array, (y, x, c), value)``: ``put`` writes in
place (on tensors, into a copy the core gives ``step``) and returns the array, so ``step`` reads as
a pure function does. Loops need bounds that are the same for
every env (``for c in range(10)``). An env whose ``obs_size`` is a shape (``(10, 10, 4)``)
observes an array: ``observe`` returns its array or a part of it with constant indices
(``array[:, :, :4]``); the core copies it out. A function that returns an array other than an
argument as it came (``observe``, a helper returning ``put``'s result) is marked
``@jitable(returns_array=True)``: numba-cuda cannot return a new array from a device function,
so CUDA kernels inline it. ``initial(state, p) -> state`` (optional, for any
env) turns the uniform draw of ``reset_bounds`` (the array zeroed) into the initial state, e.g.
places bricks and picks a discrete start. Backends: all three (torch, numba-cpu, numba-cuda);
``envs/minatar_breakout.py`` is the model.

``p`` is a ``NamedTuple`` of the env's physical parameters, named as gymnasium's env attributes
with gymnasium's defaults; users override them per env instance (``GPUPendulum-v1``'s
``g=9.81``). In a compiled kernel they are compile-time constants (each distinct set of values
compiles, and is cached, once), so that a default env costs what hand-written constants cost.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from rllib_gpuenv.core.jit import jitable


@dataclasses.dataclass(frozen=True)
class EnvDef:
    """One environment, declared once for every backend.

    Attributes:
        id: the id it is registered under (``"GPUCartPole-v1"``).
        gymnasium_env: ``"module:Class"`` of the gymnasium env it reproduces (tests compare
            against it, rendering draws with it, ``gym.make`` builds it); None for an env of
            your own (then there is no ``render`` and no single-env ``gym.make``).
        params: the ``NamedTuple`` class of physical parameters, defaults = gymnasium's.
        state_names: the state's numbers, in the order of gymnasium's ``env.state``.
        obs_size: numbers per observation, or the shape of an array observation.
        observation_bounds: ``p -> (low, high)`` of the observation space (float32 Box; a
            bound may be one number for every element).
        action_space: ``p -> Discrete(n) or Box(low, high, (k,), float32)``.
        reset_bounds: ``(options, p) -> (low, high)``, one bound per state component: the
            initial state is uniform in between (a component with ``low == high`` starts
            there). ``options`` is what ``reset(options=...)`` got, parsed as gymnasium does.
        step, observe: the jitable functions described in the module doc.
        max_episode_steps: gymnasium's time limit for this id.
        reward_threshold: gymnasium's, for the registry.
        prepare_render: optional ``(renderer, p, last_action) -> None`` for what a gymnasium
            renderer reads besides ``state`` and the parameters (Pendulum's ``last_u``).
        float32_initial_state: gymnasium stores the initial state as float32 (Acrobot).
        array_shape: the shape of the env's own array, ``()`` for none (module doc).
        initial: optional jitable ``(state, p) -> state`` from the uniform draw to the initial state.
    """

    id: str
    gymnasium_env: str | None
    params: type
    state_names: tuple[str, ...]
    obs_size: int | tuple[int, ...]
    observation_bounds: Callable[[Any], tuple[Any, Any]]
    action_space: Callable[[Any], spaces.Space]
    reset_bounds: Callable[[dict | None, Any], tuple[tuple[float, ...], tuple[float, ...]]]
    step: Callable
    observe: Callable
    max_episode_steps: int
    reward_threshold: float | None = None
    prepare_render: Callable | None = None
    float32_initial_state: bool = False
    array_shape: tuple[int, ...] = ()
    initial: Callable | None = None

    def __post_init__(self):
        shapes = {"array_shape": self.array_shape, "obs_size": self.obs_shape}
        for name, shape in shapes.items():
            if not all(isinstance(n, int) and n >= 1 for n in shape):
                raise ValueError(f"{self.id}: {name} must be positive integers, got {shape!r}")
        if not self.state_names:
            raise ValueError(f"{self.id}: state_names must name at least one number of the state")

    @property
    def state_size(self) -> int:
        """Numbers in the state (its array, if any, not counted)."""
        return len(self.state_names)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """One observation's shape: ``(obs_size,)``, or the shape of an array observation."""
        return tuple(self.obs_size) if isinstance(self.obs_size, tuple) else (self.obs_size,)

    @property
    def array_observation(self) -> bool:
        """``observe`` returns (part of) the array, not a tuple of numbers."""
        return isinstance(self.obs_size, tuple)

    def make_params(self, **overrides: Any) -> NamedTuple:
        """The parameters with ``overrides`` applied, checked by name and type."""
        fields = self.params._fields
        unknown = sorted(set(overrides) - set(fields))
        if unknown:
            close = [match for name in unknown for match in difflib.get_close_matches(name, fields, n=2)]
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise TypeError(
                f"{self.id} has no parameter(s) {unknown}{hint}; its parameters are {', '.join(fields)} "
                f"(gymnasium's attribute names, defaults {self.params()})"
            )
        defaults = self.params()
        for name, value in overrides.items():
            kind = type(getattr(defaults, name))
            if kind is bool and not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{self.id} parameter {name} must be True or False, got {value!r}")
            if kind is int and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
                raise TypeError(f"{self.id} parameter {name} must be an integer, got {value!r}")
            if kind is int and value < 1 <= getattr(defaults, name):  # a count (substeps): its default is one
                raise TypeError(f"{self.id} parameter {name} must be a positive integer, got {value!r}")
            if kind is float and (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.integer, np.floating))
                or not math.isfinite(value)
            ):
                raise TypeError(f"{self.id} parameter {name} must be a finite number, got {value!r}")
        return defaults._replace(**{k: type(getattr(defaults, k))(v) for k, v in overrides.items()})

    def spaces(self, p) -> tuple[spaces.Box, spaces.Space]:
        """``(single_observation_space, single_action_space)`` for parameters ``p``."""
        low, high = (np.array(np.broadcast_to(np.asarray(b, np.float32), self.obs_shape)) for b in self.observation_bounds(p))
        obs_space = spaces.Box(low, high, dtype=np.float32)
        return obs_space, self.action_space(p)

    def gymnasium_class(self) -> type | None:
        import importlib

        if self.gymnasium_env is None:
            return None
        module, name = self.gymnasium_env.split(":")
        return getattr(importlib.import_module(module), name)


def uniform_reset_bounds(default_low: float, default_high: float, size: int):
    """``reset_bounds`` for envs that draw every component from one ``[low, high)``, with
    gymnasium's ``options={"low": ..., "high": ...}`` (CartPole, Acrobot)."""
    from gymnasium.envs.classic_control import utils

    def reset_bounds(options, p):
        low, high = utils.maybe_parse_reset_bounds(options, default_low, default_high)
        return (float(low),) * size, (float(high),) * size

    return reset_bounds


@jitable
def observe_state(state, p):
    """``observe`` for envs whose observation is their state (CartPole, MountainCar)."""
    return state
