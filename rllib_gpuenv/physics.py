"""CartPole-v1 physics: the one source of truth for every backend.

The equations, constants and thresholds are gymnasium's ``CartPole-v1`` (classic cart-pole of
Barto, Sutton & Anderson, 1983, with the corrected equations of Florian, 2007:
https://coneural.org/florian/papers/05_cart_pole.pdf), written in the same operation order so
that float64 results match gymnasium to the last bits.

Every function here is elementwise arithmetic. The same function runs on Python floats, on
whole torch tensors (the torch backend), and inside numba kernels, one environment per thread
(the numba backends); ``@jitable`` makes numba compile it. Backends differ only in how they
execute these functions, never in what they compute.

State, per environment: ``(x, x_dot, theta, theta_dot)``

| index | quantity               | unit  | episode ends when   |
|-------|------------------------|-------|---------------------|
| 0     | cart position ``x``     | m     | ``|x| > 2.4``        |
| 1     | cart velocity           | m/s   |                     |
| 2     | pole angle ``theta``    | rad   | ``|theta| > 12°``    |
| 3     | pole angular velocity   | rad/s |                     |

Action 0 pushes the cart left with ``FORCE_MAG`` newtons, action 1 pushes it right.
"""

from __future__ import annotations

import math

from rllib_gpuenv._jit import jitable

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds between two observations (one env step)

THETA_THRESHOLD_RADIANS = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_EPISODE_STEPS = 500  # CartPole-v1's time limit

# Initial states are drawn uniformly from [RESET_LOW, RESET_HIGH) for all four components.
RESET_LOW = -0.05
RESET_HIGH = 0.05

# Bounds of the observation space (gymnasium's: twice the termination thresholds).
OBSERVATION_HIGH = (X_THRESHOLD * 2, math.inf, THETA_THRESHOLD_RADIANS * 2, math.inf)


@jitable
def push_force(action):
    """Force on the cart for a discrete action (1 → right, anything else → left)."""
    return FORCE_MAG if action == 1 else -FORCE_MAG


_SMALL_ANGLE = 0.5  # rad; CartPole terminates at 0.21, so the polynomial covers every live state


@jitable
def sin_cos(theta, exact):
    """``(sin(theta), cos(theta))`` for compiled kernels.

    ``exact`` (float64 envs): libm, as gymnasium. Otherwise Taylor polynomials in Horner form
    for |theta| < 0.5 rad (within 1 ulp of libm; the truncation error is below 1e-20) and libm
    beyond. libm's scalar sin and cos cost ~75 cycles per env on x86, most of a numba CPU step,
    and numba cannot vectorise them without Intel's SVML. A 1-ulp difference is nothing in
    float32, but over a 500-step balanced episode it grows past 1e-9 in float64.
    """
    if not exact and abs(theta) < _SMALL_ANGLE:
        t2 = theta * theta
        s = theta * (1.0 + t2 * (-1.0 / 6 + t2 * (1.0 / 120 + t2 * (-1.0 / 5040 + t2 * (
            1.0 / 362880 + t2 * (-1.0 / 39916800 + t2 * (1.0 / 6227020800 + t2 * (
                -1.0 / 1307674368000))))))))  # fmt: skip
        c = 1.0 + t2 * (-0.5 + t2 * (1.0 / 24 + t2 * (-1.0 / 720 + t2 * (1.0 / 40320 + t2 * (
            -1.0 / 3628800 + t2 * (1.0 / 479001600 + t2 * (-1.0 / 87178291200 + t2 * (
                1.0 / 20922789888000))))))))  # fmt: skip
        return s, c
    return math.sin(theta), math.cos(theta)


@jitable
def euler_step(x, x_dot, theta, theta_dot, force, costheta, sintheta, dt):
    """Advance the state by ``dt`` seconds with explicit Euler (gymnasium's default integrator).

    ``costheta``/``sintheta`` are passed in because each backend has its own cos/sin
    (``math.cos`` in a kernel, ``torch.cos`` on a tensor); everything else is shared.
    """
    temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    return (
        x + dt * x_dot,
        x_dot + dt * xacc,
        theta + dt * theta_dot,
        theta_dot + dt * thetaacc,
    )


@jitable
def is_terminated(x, theta):
    """The pole fell past 12° or the cart left the track (works on scalars and tensors)."""
    return (
        (x < -X_THRESHOLD)
        | (x > X_THRESHOLD)
        | (theta < -THETA_THRESHOLD_RADIANS)
        | (theta > THETA_THRESHOLD_RADIANS)
    )


@jitable
def step_reward(terminated, sutton_barto_reward):
    """+1 per step (CartPole-v1), or with ``sutton_barto_reward`` 0 per step and -1 on failure.

    Written as arithmetic, not a branch, so that it also runs on whole tensors.
    """
    return 1.0 - sutton_barto_reward * (1.0 + terminated)
