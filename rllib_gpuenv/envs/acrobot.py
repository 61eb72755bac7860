"""``GPUAcrobot-v1``: gymnasium's ``Acrobot-v1``, one definition for every backend.

Two links hanging from a pivot, the joint between them actuated (Sutton 1996; the dynamics of
Sutton & Barto's book, gymnasium's default ``book_or_nips="book"``), integrated with one
fourth-order Runge-Kutta step of ``dt`` seconds per env step, as gymnasium's ``rk4`` does:
same constants, same operation order, the same C ``pow`` for squares (``ops.square``). The
double pendulum is chaotic: a last-bit difference would grow until trajectories part.

## State (gymnasium's ``env.state`` order) and observation

| index | state                                   | observation                       |
|-------|-----------------------------------------|-----------------------------------|
| 0     | ``theta1``: first link's angle (rad)    | cos(theta1), sin(theta1)          |
| 1     | ``theta2``: second link, relative (rad) | cos(theta2), sin(theta2)          |
| 2     | ``dtheta1`` (rad/s), within ±4π          | dtheta1                           |
| 3     | ``dtheta2`` (rad/s), within ±9π          | dtheta2                           |

## Actions, reward, start, end
``Discrete(3)``: torque -1, 0 or +1 on the joint. Reward -1 per step, 0 on the step that
terminates: the free end rises above the bar, ``-cos(theta1) - cos(theta1 + theta2) > 1``.
Every component starts uniform in [-0.1, 0.1), stored as float32 as gymnasium stores it
(``reset(options={"low", "high"})``). Truncated after 500 steps.

## Parameters
gymnasium's class attributes: ``dt``, ``LINK_LENGTH_1``, ``LINK_LENGTH_2``, ``LINK_MASS_1``,
``LINK_MASS_2``, ``LINK_COM_POS_1``, ``LINK_COM_POS_2``, ``LINK_MOI``, ``MAX_VEL_1``,
``MAX_VEL_2``. Not provided: ``book_or_nips="nips"`` and ``torque_noise_max`` (0 in gymnasium).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gymnasium import spaces

from rllib_gpuenv.core.env_def import EnvDef, uniform_reset_bounds
from rllib_gpuenv.core.jit import jitable
from rllib_gpuenv.core.ops import clip, cos, select, sin, square, to_float, wrap
from rllib_gpuenv.envs.vector_env import GPUVectorEnv

PI = math.pi
GRAVITY = 9.8  # gymnasium's _dsdt hard-codes it


class AcrobotParams(NamedTuple):
    dt: float = 0.2
    LINK_LENGTH_1: float = 1.0  # [m]
    LINK_LENGTH_2: float = 1.0  # [m]
    LINK_MASS_1: float = 1.0  # [kg]
    LINK_MASS_2: float = 1.0  # [kg]
    LINK_COM_POS_1: float = 0.5  # [m] position of the center of mass of link 1
    LINK_COM_POS_2: float = 0.5  # [m] position of the center of mass of link 2
    LINK_MOI: float = 1.0  # moments of inertia for both links
    MAX_VEL_1: float = 4 * PI
    MAX_VEL_2: float = 9 * PI


@jitable
def derivatives(theta1, theta2, dtheta1, dtheta2, a, p):
    """gymnasium's ``_dsdt``: the time derivatives of the state under torque ``a`` (book dynamics)."""
    m1, m2, l1 = p.LINK_MASS_1, p.LINK_MASS_2, p.LINK_LENGTH_1
    lc1, lc2, i1, i2 = p.LINK_COM_POS_1, p.LINK_COM_POS_2, p.LINK_MOI, p.LINK_MOI
    g = GRAVITY
    d1 = m1 * square(lc1) + m2 * (square(l1) + square(lc2) + 2.0 * l1 * lc2 * cos(theta2)) + i1 + i2
    d2 = m2 * (square(lc2) + l1 * lc2 * cos(theta2)) + i2
    phi2 = m2 * lc2 * g * cos(theta1 + theta2 - PI / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * square(dtheta2) * sin(theta2)
        - 2.0 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * cos(theta1 - PI / 2.0)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * square(dtheta1) * sin(theta2) - phi2) / (
        m2 * square(lc2) + i2 - square(d2) / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@jitable
def step(state, action, p):
    """One Acrobot step: one RK4 step of ``dt`` under the chosen torque, then wrap and bound."""
    s0, s1, s2, s3 = state
    a = to_float(action) - 1.0  # AVAIL_TORQUE = [-1.0, 0.0, +1]
    dt = p.dt
    dt2 = dt / 2.0
    k1 = derivatives(s0, s1, s2, s3, a, p)
    k2 = derivatives(s0 + dt2 * k1[0], s1 + dt2 * k1[1], s2 + dt2 * k1[2], s3 + dt2 * k1[3], a, p)
    k3 = derivatives(s0 + dt2 * k2[0], s1 + dt2 * k2[1], s2 + dt2 * k2[2], s3 + dt2 * k2[3], a, p)
    k4 = derivatives(s0 + dt * k3[0], s1 + dt * k3[1], s2 + dt * k3[2], s3 + dt * k3[3], a, p)
    h = dt / 6.0
    n0 = s0 + h * (k1[0] + 2.0 * k2[0] + 2.0 * k3[0] + k4[0])
    n1 = s1 + h * (k1[1] + 2.0 * k2[1] + 2.0 * k3[1] + k4[1])
    n2 = s2 + h * (k1[2] + 2.0 * k2[2] + 2.0 * k3[2] + k4[2])
    n3 = s3 + h * (k1[3] + 2.0 * k2[3] + 2.0 * k3[3] + k4[3])
    n0 = wrap(n0, -PI, PI)
    n1 = wrap(n1, -PI, PI)
    n2 = clip(n2, -p.MAX_VEL_1, p.MAX_VEL_1)
    n3 = clip(n3, -p.MAX_VEL_2, p.MAX_VEL_2)
    terminated = -cos(n0) - cos(n1 + n0) > 1.0
    reward = select(terminated, 0.0, -1.0)
    return (n0, n1, n2, n3), reward, terminated


@jitable
def observe(state, p):
    theta1, theta2, dtheta1, dtheta2 = state
    return cos(theta1), sin(theta1), cos(theta2), sin(theta2), dtheta1, dtheta2


def observation_bounds(p: AcrobotParams):
    high = (1.0, 1.0, 1.0, 1.0, p.MAX_VEL_1, p.MAX_VEL_2)
    return tuple(-h for h in high), high


ACROBOT = EnvDef(
    id="GPUAcrobot-v1",
    gymnasium_env="gymnasium.envs.classic_control.acrobot:AcrobotEnv",
    params=AcrobotParams,
    state_names=("theta1", "theta2", "dtheta1", "dtheta2"),
    obs_size=6,
    observation_bounds=observation_bounds,
    action_space=lambda p: spaces.Discrete(3),
    reset_bounds=uniform_reset_bounds(-0.1, 0.1, 4),
    step=step,
    observe=observe,
    max_episode_steps=500,
    reward_threshold=-100.0,
    float32_initial_state=True,
)


class AcrobotVectorEnv(GPUVectorEnv):
    """``GPUAcrobot-v1``: gymnasium's Acrobot-v1, ``num_envs`` copies stepped at once on a device."""

    definition = ACROBOT
