"""A user's env definition tried once on tensors of two envs (the torch backend's way) before it is
registered, so that the usual mistakes in writing one are named where they are made, with the
rule that fixes them, not met later as torch's or numba's words deep inside a step."""

from __future__ import annotations

import torch

from rllib_gpuenv.core.jit import is_jitable
from rllib_gpuenv.envs.vector_env import GPUVectorEnv

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
        "values to unpack",
        "step(state, action, p) returns (state, reward, terminated), the state with one number per state_names "
        "(then the array, for an env with one), and observe(state, p) one number per observation (obs_size)",
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
    lows, highs = definition.reset_bounds(None, definition.params())
    if not len(lows) == len(highs) == definition.state_size:
        raise ValueError(
            f"{definition.id}: reset_bounds gives {len(lows)} lows and {len(highs)} highs, one per number of the "
            f"state: state_names has {definition.state_size} ({', '.join(definition.state_names)})"
        )
    try:
        env = env_class(2, backend="torch", device="cpu")
        env.reset(seed=0)
        for _ in range(2):
            env.step(torch.as_tensor(env.action_space.sample()))
    except Exception as err:
        hint = next((rule for words, rule in HINTS if words in str(err)), None)
        if hint is None:
            raise  # the env's own error, from its own line
        raise TypeError(f"{definition.id}: {err}: {hint}") from err
