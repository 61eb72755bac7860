"""A user's env definition tried once on tensors of two envs (the torch backend's way) before it is
registered, so that the usual mistakes in writing one are named where they are made, with the
rule that fixes them, not met later as torch's or numba's words deep inside a step."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rllib_gpuenv.core.jit import global_functions, is_jitable, module_attributes
from rllib_gpuenv.core.ops import tensor_float
from rllib_gpuenv.envs.vector_env import GPUVectorEnv

PACKAGE = __name__.split(".")[0]

# torch's words for a mistake in an env function, and the rule it broke
HINTS = (
    (
        "Boolean value of Tensor with more than one value is ambiguous",
        "a Python if, and, or, not or chained comparison on the state (a tensor holds every env's value): "
        "use ops.select(condition, a, b), and &, |, ~ between conditions",
    ),
    (
        "only one element tensors can be converted to Python scalars",
        "math.* (or float(), int()) on the state: use ops' functions (ops.sin, ops.cos, ops.sqrt, ...) and ops.to_float",
    ),
    (
        "not implemented for 'Float'",
        "terminated, and conditions combined with &, | and ~, must be booleans (comparisons such as x > p.limit), not numbers",
    ),
    (
        "values to unpack",
        "step(state, action, p) returns (state, reward, terminated), the state with one number per state_names "
        "(then the array, for an env with one), and observe(state, p) one number per observation (obs_size); "
        "the action is one number per env for Discrete actions (not a tuple: no `(a,) = action`), a tuple of k "
        "numbers for a Box of shape (k,)",
    ),
)


def check_definition(env_class: type[GPUVectorEnv]) -> None:
    """Raise naming what is wrong in ``env_class.definition``: its parameters, its functions'
    marks, or what ``reset`` and two ``step`` calls on two envs of the class make of it."""
    definition = env_class.definition
    if not (isinstance(definition.params, type) and hasattr(definition.params, "_fields")):
        raise TypeError(
            f"{definition.id}: params must be a NamedTuple class of the env's parameters with their defaults "
            f"(class MyParams(NamedTuple): dt: float = 0.1), got {definition.params!r}"
        )
    for name in ("step", "observe", "initial"):
        function = getattr(definition, name)
        if function is not None and not is_jitable(function):
            raise TypeError(f"{definition.id}: {name} must be marked @jitable (from rllib_gpuenv import jitable)")
        if function is not None:
            _check_called_functions(definition.id, function)
    low, high = (np.asarray(bound, dtype=np.float64) for bound in definition.observation_bounds(definition.params()))
    for which, bound in (("lows", low), ("highs", high)):
        if bound.ndim and bound.shape != definition.obs_shape:
            raise ValueError(
                f"{definition.id}: observation_bounds gives {bound.size} {which} ({bound.shape}), one per number of the "
                f"observation: obs_size is {definition.obs_size} (observe returns that many)"
            )
    lows, highs = definition.reset_bounds(None, definition.params())
    if not len(lows) == len(highs) == definition.state_size:
        raise ValueError(
            f"{definition.id}: reset_bounds gives {len(lows)} lows and {len(highs)} highs, one per number of the "
            f"state: state_names has {definition.state_size} ({', '.join(definition.state_names)})"
        )
    try:
        env = env_class(2, backend="torch", device="cpu")
        _check_outputs(env)  # step's and observe's outputs, named before the env uses them
        env.reset(seed=0)
        for _ in range(2):
            env.step(torch.as_tensor(env.action_space.sample()))
    except Exception as err:
        hint = next((rule for words, rule in HINTS if words in str(err)), None)
        if hint is None:
            raise  # the env's own error (or this check's), from its own line
        raise TypeError(f"{definition.id}: {err}: {hint}") from err


def _check_outputs(env: GPUVectorEnv) -> None:
    """One step of the env's (fresh) state as the torch backend takes it, outputs kept whole: the
    state it returns, its reward and the observation of that state, one value per env each."""
    definition, bound, buffers = env.definition, env._bound, env._buffers
    state = bound.state_items(buffers.state, buffers.array)
    with tensor_float(env.dtype):
        if definition.initial is not None:
            drawn = definition.initial(state, env.params)
            if len(drawn) != len(state):
                raise TypeError(
                    f"{definition.id}: initial returns a state of {len(drawn)} values, the state has {len(state)} "
                    f"({', '.join(definition.state_names)}{', then the array' if definition.array_shape else ''}): "
                    "initial(state, p) returns the state it makes of the draw, one number per state_names"
                )
        returned, reward, _ = definition.step(
            state, bound.action_items(env._action_tensor(env.action_space.sample()), env.dtype), env.params
        )
        if len(returned) != len(state):
            raise TypeError(f"{definition.id}: step returns a state of {len(returned)} values: {HINTS[-1][1]}")
        observation = definition.observe(returned, env.params)
    _check_per_env(definition.id, {"step's reward": reward}, numbers_too=True)
    if not definition.array_observation:
        if len(observation) != definition.obs_size:
            raise TypeError(
                f"{definition.id}: observe returns {len(observation)} values, obs_size is {definition.obs_size}: "
                "one value per number of the observation (and observation_bounds one bound each)"
            )
        _check_per_env(definition.id, {f"observe's value {i}": value for i, value in enumerate(observation)})


def _check_per_env(env_id: str, values: dict[str, Any], numbers_too: bool = False) -> None:
    """Each value is one number per env: a tensor with one value for each of the two envs (or,
    where ``numbers_too``, a number every env shares, as CartPole's reward of 1.0)."""
    for name, value in values.items():
        shared = isinstance(value, (int, float)) and not isinstance(value, bool)
        shared = shared or (isinstance(value, torch.Tensor) and value.dim() == 0)
        if shared and numbers_too:
            continue
        if shared:
            raise TypeError(
                f"{env_id}: {name} is the single number {value!r}: each value of the observation is one per env, "
                f"made from the state (a constant c: x * 0.0 + c, with x a number of the state)"
            )
        if not isinstance(value, torch.Tensor) or value.shape != (2,):
            kind = (
                f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
            )
            raise TypeError(f"{env_id}: {name} is {kind}, not one number per env: write it from the state's numbers")


def _library_calls(function) -> list[str]:
    """The numpy and torch functions ``function`` reads from a module it names (``np.sin``):
    numpy turns the torch backend's tensors into arrays (or fails on a GPU's), torch has no place
    in a numba kernel, and numba-cuda compiles none of numpy's ufuncs (``np.abs``: a bare
    ``KeyError`` once the kernel compiles, on a GPU only). Types (``np.float32``) are casts."""
    return [
        f"{name}.{attribute}"
        for name, module, attribute in module_attributes(function)
        if module.__name__.split(".")[0] in ("numpy", "torch")
        and callable(getattr(module, attribute))
        and not isinstance(getattr(module, attribute), type)
    ]


def _check_called_functions(env_id: str, function, seen: set | None = None) -> None:
    """Every Python function that ``function`` calls by a global name (and those call, in turn)
    is marked @jitable: numba compiles the whole step into the kernels, and an unmarked helper
    would fail there, in numba's words, only on a numba backend. None calls numpy or torch."""
    seen = set() if seen is None else seen
    calls = _library_calls(function)
    if calls:
        raise TypeError(
            f"{env_id}: {function.__name__} calls {', '.join(calls)}, which run on one backend only (numpy turns "
            "tensors into arrays, torch has no place in a kernel, numba-cuda compiles no numpy ufunc): use ops' "
            "functions (ops.sin, ops.cos, ops.square, ops.clip, ops.select, ...), abs(), and ** for powers"
        )
    for name, called in global_functions(function).items():
        if called in seen or (called.__module__ or "").startswith(f"{PACKAGE}."):  # the package's own (ops) are jitable
            continue
        seen.add(called)
        if not is_jitable(called):
            raise TypeError(
                f"{env_id}: {function.__name__} calls {name}(), which is not marked @jitable: mark it @jitable "
                "(from rllib_gpuenv import jitable); the numba backends compile every function a step calls"
            )
        _check_called_functions(env_id, called, seen)
