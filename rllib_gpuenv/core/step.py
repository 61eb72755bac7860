"""The step every env shares, written once: NEXT_STEP autoreset, counters, time limit, returns.

``advance`` is one step of one env, or of all envs at once: a pure function of numbers that
runs on whole torch tensors (the torch backend) and on one env's numbers in numba kernels
(one CUDA thread, or one iteration of a vectorised CPU loop). It calls the env definition's
``step`` and ``observe`` through the global names ``ENV_STEP`` and ``ENV_OBSERVE``, which
``BoundEnv`` binds to one env definition and one set of parameters (``PARAMS``). Every backend
runs this same function; they differ only in how they call it.

Autoreset (gymnasium's NEXT_STEP, as its ``CartPoleVectorEnv``): when an episode ends
(``terminated`` or ``truncated``), the *next* step of that env ignores its action, starts a new
episode and returns the new initial observation with reward 0 and both flags False. The new
initial state is drawn first (``begin_episode``, or ``initial_states`` on tensors) from the
counter-based hash of ``rng.py``; ``advance`` then keeps it instead of the stepped state.

Envs with an array (``EnvDef.array_shape``) write it in place in kernels, so there the step of a
resetting env must not run at all: their kernels call ``advance_in_place``, which branches
(one env per thread or loop iteration can), where tensors still compute and discard it.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rllib_gpuenv.core import ops, tuples
from rllib_gpuenv.core.buffers import StepConstants
from rllib_gpuenv.core.env_def import EnvDef
from rllib_gpuenv.core.jit import bind, jitable, single_precision, source_fingerprint
from rllib_gpuenv.core.ops import select, tensor_float, to_float32
from rllib_gpuenv.core.rng import bits_to_uniform, env_bits, episode_bits, reset_bits

logger = logging.getLogger(__name__)

# Bound per env by ``BoundEnv``; placeholders until then.
ENV_STEP = ENV_OBSERVE = ENV_INITIAL = PARAMS = SELECT_STATE = ADVANCE = FLOAT32_INITIAL_STATE = STATE_SIZE = None
LOAD_STATE = STORE_STATE = STORE_OBS = LOAD_ACTION = CLEAR_ARRAY = BEGIN_STATE = None


@jitable
def advance(resetting, action, state, steps, ep_return, max_steps):
    """One step after the reset draw: ``(state, obs, reward, terminated, truncated, steps, ep_return)``.

    A ``resetting`` env (its episode ended on the previous step; its new initial state is
    already in ``state``) keeps that state and reports reward 0 and no flags. The env's step
    is computed for it anyway and discarded, which costs a vector loop less than a branch.
    """
    next_state, reward, terminated = ENV_STEP(state, action, PARAMS)
    state = SELECT_STATE(resetting, state, next_state)
    terminated = select(resetting, False, terminated)
    steps = select(resetting, 0, steps + 1)
    truncated = steps >= max_steps
    reward = select(resetting, 0.0, reward)
    ep_return = select(resetting, 0.0, ep_return + reward)
    return state, ENV_OBSERVE(state, PARAMS), reward, terminated, truncated, steps, ep_return


@jitable
def advance_in_place(resetting, action, state, steps, ep_return, max_steps):
    """``advance`` for kernels of envs with an array, which their step writes in place: a
    resetting env is not stepped (its array already holds the new episode's)."""
    reward = 0.0
    terminated = False
    if not resetting:
        state, reward, terminated = ENV_STEP(state, action, PARAMS)
    steps = 0 if resetting else steps + 1
    truncated = steps >= max_steps
    ep_return = 0.0 if resetting else ep_return + reward
    return state, ENV_OBSERVE(state, PARAMS), reward, terminated, truncated, steps, ep_return


@jitable
def initial_value(seed32, env_index, episode, component, low, high):
    """Component ``component`` of the initial state of episode ``episode`` of env ``env_index``."""
    return bits_to_uniform(reset_bits(seed32, env_index, episode, component), low, high)


@jitable
def begin_episode(i, state, array, episode, seed32, lows, highs):
    """Kernels: count env ``i``'s next episode and draw its initial state into ``state``."""
    e = episode[i] + 1
    episode[i] = e
    for k in range(STATE_SIZE):  # a constant: the compiler unrolls the loop
        value = initial_value(seed32, i, e, k, lows[k], highs[k])
        state[k, i] = to_float32(value) if FLOAT32_INITIAL_STATE else value
    BEGIN_STATE(state, array, i)


@jitable
def apply_initial(state, array, i):
    """Kernels: the env's ``initial`` turns env ``i``'s uniform draw (its array zeroed) into its
    initial state."""
    CLEAR_ARRAY(array, i)
    STORE_STATE(state, i, ENV_INITIAL(LOAD_STATE(state, array, i), PARAMS))


@jitable
def keep_drawn_state(state, array, i):
    """Kernels of envs without ``initial``: the uniform draw is the initial state."""
    return None


@jitable
def advance_env(
    i,
    actions,
    state,
    array,
    steps,
    prev_done,
    ep_return,
    obs,
    reward,
    terminated,
    truncated,
    final_return,
    final_length,
    final_mask,
    max_steps,
):
    """Kernels: ``advance`` env ``i``, reading its numbers from the arrays and writing back.

    Flags are stored as 0/1 integers: numba's alias analysis counts bool values as possible
    aliases, and would then not mark the loop's arrays as non-overlapping, which LLVM needs to
    vectorise the loop on a CPU.
    """
    new_state, new_obs, r, term, trunc, n, ret = ADVANCE(
        prev_done[i], LOAD_ACTION(actions, i), LOAD_STATE(state, array, i), steps[i], ep_return[i], max_steps
    )
    term = 1 if term else 0
    trunc = 1 if trunc else 0
    done = term | trunc
    STORE_STATE(state, i, new_state)
    STORE_OBS(obs, i, new_obs)
    steps[i] = n
    ep_return[i] = ret
    prev_done[i] = done
    reward[i] = r
    terminated[i] = term
    truncated[i] = trunc
    final_mask[i] = done
    final_return[i] = ret if done else 0.0
    final_length[i] = n if done else 0


@jitable
def _load_scalar(array, i):
    return array[i]


@dataclass(frozen=True)
class DrawConstants:
    """What drawing initial states on tensors keeps for one seed and one set of bounds
    (``draw_constants``): every component's ``env_bits`` of every env, ``(S, N)``, the part of
    the hash without the episode, and the bounds as ``(S, 1)`` tensors (to draw every component
    at once)."""

    key: tuple
    bits: torch.Tensor
    lows: torch.Tensor
    highs: torch.Tensor


def draw_key(constants: StepConstants, num_envs: int, device: torch.device) -> tuple:
    """What ``DrawConstants`` depend on: a draw made for another key must be made again."""
    return (constants.seed32, constants.lows, constants.highs, num_envs, device)


def draw_constants(constants: StepConstants, num_envs: int, device: torch.device) -> DrawConstants:
    component = torch.arange(len(constants.lows), device=device, dtype=torch.int64)[:, None]
    env_index = torch.arange(num_envs, device=device, dtype=torch.int64)
    lows, highs = torch.tensor([constants.lows, constants.highs], dtype=torch.float64, device=device)[..., None]
    bits = env_bits(constants.seed32, env_index, component)
    return DrawConstants(key=draw_key(constants, num_envs, device), bits=bits, lows=lows, highs=highs)


def initial_states(episode: torch.Tensor, lows, highs, draw: DrawConstants, float32: bool = False) -> torch.Tensor:
    """Tensors: ``(S, N)`` float64 initial states of each env's episode ``episode[i]``
    (rounded to float32 values for envs that gymnasium starts in float32): the kernels'
    ``reset_bits``, bit for bit, with only the episode mixed in here.

    On a GPU, which draws for every env at every step (``TorchBackend.step``), every component
    at once: each op is a kernel launch, and a component at a time would launch S times as many
    (CartPole's draw: 17 ops against 66). On the CPU a component at a time: ``(N,)`` temporaries, which
    the allocator reuses, where it maps ``(S, N)`` ones afresh at a million envs."""
    if ops.host_reads_are_free(episode.device):
        rows = zip(draw.bits, lows, highs)
        states = torch.stack([bits_to_uniform(episode_bits(b, episode).double(), lo, hi) for b, lo, hi in rows])
    else:
        states = bits_to_uniform(episode_bits(draw.bits, episode).double(), draw.lows, draw.highs)
    return states.float().double() if float32 else states


def _float32_params(params):
    """``params`` with float fields as numpy float32 (float32 kernels compute in float32)."""
    return params._replace(**{k: np.float32(v) for k, v in params._asdict().items() if type(v) is float})


@dataclass(frozen=True)
class BoundEnv:
    """One env definition with one set of parameters, bound into the core step.

    ``advance`` runs on tensors (the torch backend); ``advance_env(dtype)`` is what a kernel
    calls per env (numba backends), with float32 constants for float32 envs; ``kernel_name``
    names a kernel built from it uniquely, for numba's on-disk cache.
    """

    definition: EnvDef
    params: Any

    @property
    def discrete(self) -> bool:
        return isinstance(self.definition.action_space(self.params), spaces.Discrete)

    @property
    def has_array(self) -> bool:
        return bool(self.definition.array_shape)

    @property
    def advance(self) -> Callable:
        d = self.definition
        return _cached(
            ("advance", d, self.params),  # the definition itself: one registered again under its id is another
            lambda: bind(
                advance,
                ENV_STEP=_on_own_array(d.step) if self.has_array else d.step,
                ENV_OBSERVE=d.observe,
                PARAMS=self.params,
                SELECT_STATE=tuples.select_each(d.state_size + self.has_array),
            ),
        )

    def kernel_functions(self, dtype: torch.dtype) -> tuple[Callable, Callable]:
        """``(begin_episode, advance_env)`` bound to this env, as kernels call them for state of
        ``dtype`` (with float32 constants for float32 state)."""
        d = self.definition
        params = _float32_params(self.params) if dtype == torch.float32 else self.params
        space = d.action_space(self.params)
        load_action = _load_scalar if self.discrete else tuples.load_row(int(np.prod(space.shape)))
        load_state = tuples.load_state(d.state_size, len(d.array_shape))
        store_state = tuples.store_column(d.state_size)  # the array, if any, is written in place
        if self.has_array:
            bound_advance = bind(advance_in_place, ENV_STEP=d.step, ENV_OBSERVE=d.observe, PARAMS=params)
        else:
            bound_advance = bind(
                advance, ENV_STEP=d.step, ENV_OBSERVE=d.observe, PARAMS=params, SELECT_STATE=tuples.select_each(d.state_size)
            )
        if d.initial is None:
            begin_state = keep_drawn_state
        else:
            begin_state = bind(
                apply_initial,
                ENV_INITIAL=d.initial,
                PARAMS=params,
                LOAD_STATE=load_state,
                STORE_STATE=store_state,
                CLEAR_ARRAY=tuples.clear_column(len(d.array_shape)),
            )
        begin = bind(
            begin_episode, FLOAT32_INITIAL_STATE=d.float32_initial_state, STATE_SIZE=d.state_size, BEGIN_STATE=begin_state
        )
        store_obs = tuples.store_array_column(len(d.obs_shape)) if d.array_observation else tuples.store_column(d.obs_size)
        step = bind(
            advance_env,
            ADVANCE=bound_advance,
            LOAD_ACTION=load_action,
            LOAD_STATE=load_state,
            STORE_STATE=store_state,
            STORE_OBS=store_obs,
        )
        if dtype == torch.float32:
            return single_precision(begin), single_precision(step)
        return begin, step

    def initial_states(
        self, episode: torch.Tensor, constants, draw: DrawConstants | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Tensors: the ``(S, N)`` float64 initial numbers of each env's current episode, and its
        ``(*array_shape, N)`` float64 initial array (None for envs without one). ``draw``: the
        caller's ``draw_constants`` for ``constants``, kept between draws (else made here)."""
        d = self.definition
        if draw is None:
            draw = draw_constants(constants, episode.shape[0], episode.device)
        numbers = initial_states(episode, constants.lows, constants.highs, draw, d.float32_initial_state)
        array = None
        if self.has_array:  # made on every draw: on a GPU a step draws, so an env without one makes none
            array = torch.zeros((*d.array_shape, episode.shape[0]), dtype=torch.float64, device=episode.device)
        if d.initial is None:
            return numbers, array
        with tensor_float(torch.float64):
            items = d.initial(self.state_items(numbers, array), self.params)
        rows = [
            torch.as_tensor(x, dtype=torch.float64, device=episode.device).expand(episode.shape[0])
            for x in items[: d.state_size]
        ]
        return torch.stack(rows), (items[-1] if self.has_array else None)

    def action_items(self, actions: torch.Tensor, dtype: torch.dtype):
        """Tensors: the ``(N,)`` actions as ``step`` sees them, or a ``Box`` action's components as
        rows (float32 values, in the state's precision)."""
        return actions if self.discrete else tuple(actions.T.to(dtype))

    def state_items(self, numbers: torch.Tensor, array: torch.Tensor | None) -> tuple:
        """The state as ``step`` sees it on tensors: ``(S, N)`` numbers as rows, then the array."""
        return (*numbers, array) if self.has_array else tuple(numbers)

    def observation(self, obs) -> torch.Tensor:
        """What ``observe`` returned on tensors, as the float32 ``(*obs_shape, N)`` output (a copy)."""
        if self.definition.array_observation:
            return obs.to(torch.float32, copy=True)
        return torch.stack(obs).to(torch.float32)

    def kernel_name(self, kernel: str, dtype: torch.dtype) -> str | None:
        """``<kernel>__<env>__<dtype>__<digest of the sources and parameters>``, or None when
        a source cannot be read (an env defined in a notebook, or by ``exec`` in a namespace that
        is no module): then nothing is cached on disk."""
        digest = hashlib.sha256(repr((self.params, str(dtype))).encode())
        functions = [advance, select, bits_to_uniform, tuples.load_row, bind, self.definition.step, self.definition.observe]
        if self.definition.initial is not None:
            functions.append(self.definition.initial)
        modules = {sys.modules.get(f.__module__) for f in functions}
        if None in modules:
            return None
        for module in sorted(modules, key=lambda m: m.__name__):
            try:
                digest.update(inspect.getsource(module).encode())
            except (OSError, TypeError):
                return None
        if not source_fingerprint(functions, digest):  # what they call and read, in other modules too
            return None
        slug = "".join(c if c.isalnum() else "_" for c in self.definition.id)
        return f"{kernel}__{slug}__{str(dtype).replace('torch.', '')}__{digest.hexdigest()[:16]}"


def _on_own_array(step: Callable) -> Callable:
    """Tensors: ``step`` given a copy of the array to write in place (``ops.put``), so that
    ``advance`` still holds the array as it was for the envs that reset instead of stepping."""

    def step_on_a_copy(state, action, p):
        return step((*state[:-1], state[-1].clone()), action, p)

    return step_on_a_copy


_BOUND: dict = {}


def _cached(key, make):
    if key not in _BOUND:
        _BOUND[key] = make()
    return _BOUND[key]


class KernelArguments:
    """A kernel's parameter list filled by name: the one place where the numba backends' arrays
    and constants meet the kernels' signatures. Per step only the arrays that change (actions,
    fresh outputs) are put into a prepared list."""

    def __init__(self, kernel: Callable):
        self.kernel_name = kernel.__name__
        self.names = tuple(inspect.signature(kernel).parameters)
        self.position = {name: i for i, name in enumerate(self.names)}
        self._prepared: list | None = None

    def prepare(self, **named) -> None:
        """Set every argument (those that change per step too, as placeholders)."""
        missing = [n for n in self.names if n not in named]
        if missing:
            raise TypeError(f"{self.kernel_name} needs {missing}")
        self._prepared = [named[n] for n in self.names]

    def fill(self, **changed) -> list:
        """The prepared arguments with ``changed`` put in (a new list)."""
        args = list(self._prepared)
        for name, value in changed.items():
            args[self.position[name]] = value
        return args
