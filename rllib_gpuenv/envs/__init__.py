"""The env suite (one file per env: its definition and its vector env class), and the registry
of definitions that this package's ids and your own resolve through.

``ENV_DEFS`` maps every id of the suite (gymnasium's classic control, each checked against
gymnasium's own) to its definition; ``SHIPPED_DEFS`` adds the envs shipped beyond it (MinAtar's
Breakout, an env with an array); ``add_definition`` adds your own;
``make_vector_env`` builds any of them (or a definition given directly) as a ``GPUVectorEnv``.
An env joins the suite with its file (its definition and class) and its entry in ``SUITE`` below,
imported just above it.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import Any

from rllib_gpuenv.core.env_def import EnvDef
from rllib_gpuenv.envs.acrobot import AcrobotVectorEnv
from rllib_gpuenv.envs.cartpole import CartPoleVectorEnv
from rllib_gpuenv.envs.definition_check import check_definition
from rllib_gpuenv.envs.minatar_breakout import BreakoutMinAtarVectorEnv
from rllib_gpuenv.envs.mountain_car import MountainCarVectorEnv
from rllib_gpuenv.envs.mountain_car_continuous import MountainCarContinuousVectorEnv
from rllib_gpuenv.envs.pendulum import PendulumVectorEnv
from rllib_gpuenv.envs.vector_env import GPUVectorEnv

logger = logging.getLogger(__name__)

SUITE: tuple[type[GPUVectorEnv], ...] = (
    CartPoleVectorEnv,
    AcrobotVectorEnv,
    MountainCarVectorEnv,
    MountainCarContinuousVectorEnv,
    PendulumVectorEnv,
)
SHIPPED: tuple[type[GPUVectorEnv], ...] = (*SUITE, BreakoutMinAtarVectorEnv)
ENV_DEFS: dict[str, EnvDef] = {cls.definition.id: cls.definition for cls in SUITE}
SHIPPED_DEFS: dict[str, EnvDef] = {cls.definition.id: cls.definition for cls in SHIPPED}
_CLASSES: dict[EnvDef, type[GPUVectorEnv]] = {cls.definition: cls for cls in SHIPPED}
_DEFINITIONS: dict[str, EnvDef] = dict(SHIPPED_DEFS)  # the shipped envs and the user's definitions


def add_definition(definition: EnvDef) -> None:
    """Make ``definition.id`` known to ``make_vector_env`` and the device env runner. A definition
    of yours given again under its id (a notebook cell run again, a module reloaded) replaces the
    one before, as gymnasium's ``register`` does; the suite's ids stay the suite's."""
    if not isinstance(definition, EnvDef):
        raise TypeError(f"expected an EnvDef, got {type(definition).__name__}")
    vector_env_class(definition)  # a definition of yours is tried on two envs first (definition_check.py)
    known = _DEFINITIONS.get(definition.id)
    if known is not None and known is not definition:
        if definition.id in SHIPPED_DEFS:
            raise ValueError(f"{definition.id!r} is an env of this package: give yours another id")
        logger.warning("env definition %r: replaced by the one given now", definition.id)
    _DEFINITIONS[definition.id] = definition


def env_definition(env_id: str) -> EnvDef | None:
    """The definition of a registered id (``"rllib_gpuenv:"`` or ``"module:"`` prefixes allowed),
    or None for an id that is not a ``GPUVectorEnv`` (a plain gymnasium env)."""
    return _DEFINITIONS.get(env_id.split(":", 1)[-1])


@functools.cache
def vector_env_class(definition: EnvDef) -> type[GPUVectorEnv]:
    """The ``GPUVectorEnv`` subclass for a definition (the suite's named ones, or a new one)."""
    if definition in _CLASSES:
        return _CLASSES[definition]
    name = "".join(c for c in definition.id.split("-")[0].split("/")[-1] if c.isalnum()) + "VectorEnv"
    env_class = type(name, (GPUVectorEnv,), {"definition": definition, "__doc__": f"``{definition.id}``: a user-defined env."})
    check_definition(env_class)  # once: the class is cached, a definition that fails is not
    return env_class


def make_vector_env(env: EnvDef | str, num_envs: int = 1, **kwargs: Any) -> GPUVectorEnv:
    """``num_envs`` copies of ``env`` (a registered id such as ``"GPUPendulum-v1"``, or an
    ``EnvDef``); ``kwargs`` are ``GPUVectorEnv``'s options and the env's parameters."""
    if isinstance(env, str):
        module = env.split(":", 1)[0] if ":" in env else None
        if env_definition(env) is None and module:  # "your_module:Env-v0": importing it registers it, as in gymnasium
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise ValueError(f"{env!r}: cannot import {module!r} ({err}), the module that registers it") from None
        definition = env_definition(env)
        if definition is None:
            raise ValueError(
                f"unknown env {env!r}: known here are {', '.join(_DEFINITIONS)} (register yours with "
                f"rllib_gpuenv.register_env)"
            )
        env = definition
    return vector_env_class(env)(num_envs, **kwargs)
