"""``GPUPendulum-v1``: gymnasium's ``Pendulum-v1``, one definition for every backend.

The inverted pendulum swing-up: a frictionless pendulum on a pivot, to be swung up and held
upright with a limited torque. gymnasium's equations, constants, clipping and operation order.
Its float32 action brings float32 arithmetic into some terms (numpy computes ``0.001 * u**2``
and ``3.0 / (m * l**2) * u`` in float32 for a float32 ``u``); the float64 env rounds those
terms to float32 where numpy does.

## State (gymnasium's ``env.state`` order) and observation

| index | state                      | observation           |
|-------|----------------------------|-----------------------|
| 0     | ``th``: angle (rad, 0 up)  | cos(th), sin(th)      |
| 1     | ``thdot`` (rad/s), ±8      | thdot                 |

## Actions, reward, start, end
``Box(-2, 2, (1,), float32)``: the torque, clipped to ``max_torque``. Reward
``-(angle_normalize(th)**2 + 0.1 * thdot**2 + 0.001 * u**2)`` from the state before the step.
Starts uniform in ``[-pi, pi) x [-1, 1)`` (``reset(options={"x_init", "y_init"})``). Never
terminates; truncated after 200 steps.

## Parameters
gymnasium's attributes: ``max_speed``, ``max_torque``, ``dt``, ``g`` (also its constructor
argument), ``m``, ``l``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control import utils

from rllib_gpuenv.core.env_def import EnvDef
from rllib_gpuenv.core.jit import jitable
from rllib_gpuenv.core.ops import clip, cos, sin, square, to_float32
from rllib_gpuenv.envs.vector_env import GPUVectorEnv

PI = math.pi
DEFAULT_X, DEFAULT_Y = math.pi, 1.0  # gymnasium's default initial-state bounds


class PendulumParams(NamedTuple):
    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0  # noqa: E741 (gymnasium's name)


@jitable
def angle_normalize(x):
    return ((x + PI) % (2.0 * PI)) - PI


@jitable
def step(state, action, p):
    th, thdot = state
    (u,) = action
    u = clip(u, -p.max_torque, p.max_torque)  # a float32 value: numpy computes its terms in float32
    an = angle_normalize(th)
    costs = square(an) + 0.1 * square(thdot) + to_float32(to_float32(0.001) * to_float32(u * u))
    torque_term = to_float32(to_float32(3.0 / (p.m * square(p.l))) * u)
    newthdot = thdot + (3.0 * p.g / (2.0 * p.l) * sin(th) + torque_term) * p.dt
    newthdot = clip(newthdot, -p.max_speed, p.max_speed)
    newth = th + newthdot * p.dt
    return (newth, newthdot), -costs, False


@jitable
def observe(state, p):
    th, thdot = state
    return cos(th), sin(th), thdot


def reset_bounds(options, p):
    """gymnasium's: symmetric bounds ``x_init`` (angle) and ``y_init`` (angular velocity)."""
    options = options or {}
    x = utils.verify_number_and_cast(options.get("x_init", DEFAULT_X))
    y = utils.verify_number_and_cast(options.get("y_init", DEFAULT_Y))
    return (-float(x), -float(y)), (float(x), float(y))


def prepare_render(renderer, p, last_action) -> None:
    """gymnasium draws the last torque as an arrow (none right after a reset)."""
    renderer.last_u = None if last_action is None else np.clip(last_action, -p.max_torque, p.max_torque)[0]


PENDULUM = EnvDef(
    id="GPUPendulum-v1",
    gymnasium_env="gymnasium.envs.classic_control.pendulum:PendulumEnv",
    params=PendulumParams,
    state_names=("th", "thdot"),
    obs_size=3,
    observation_bounds=lambda p: ((-1.0, -1.0, -p.max_speed), (1.0, 1.0, p.max_speed)),
    action_space=lambda p: spaces.Box(np.float32(-p.max_torque), np.float32(p.max_torque), (1,), np.float32),
    reset_bounds=reset_bounds,
    step=step,
    observe=observe,
    max_episode_steps=200,
    prepare_render=prepare_render,
)


class PendulumVectorEnv(GPUVectorEnv):
    """``GPUPendulum-v1``: gymnasium's Pendulum-v1, ``num_envs`` copies stepped at once on a device."""

    definition = PENDULUM
