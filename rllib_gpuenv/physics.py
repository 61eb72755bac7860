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

from rllib_gpuenv._jit import float_floor, jitable

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


# Cody-Waite split of pi/2 (fdlibm's pio2_1 and pio2_1t): k * _PIO2_HI is exact for |k| < 2**20.
_PIO2_HI = 1.57079632673412561417
_PIO2_LO = 6.07710050650619224932e-11
_TWO_OVER_PI = 0.63661977236758134308


@jitable
def sin_cos(theta, exact):
    """``(sin(theta), cos(theta))`` for compiled kernels.

    ``exact`` (float64 envs): libm, as gymnasium. Otherwise (float32 envs) branch-free
    arithmetic that LLVM can vectorise: theta is reduced to ``r`` in [-pi/4, pi/4] and a
    quadrant, and ``sin(r)``, ``cos(r)`` are Taylor polynomials in Horner form, accurate to
    2e-9 in float64 arithmetic for |theta| < 1e5 rad, and to float32 rounding in the float32
    kernels (``_jit.single_precision``), which is what float32 state keeps anyway. libm's
    scalar sin and cos cost ~75 cycles per env on x86 and cannot be vectorised without Intel's
    SVML; a last-bit difference is nothing in float32, but over a 500-step balanced episode it
    grows past 1e-9 in float64.
    """
    if exact:
        sin, cos = math.sin(theta), math.cos(theta)
    else:
        # Floats throughout: AVX2 has no vector float64 -> int64 conversion.
        k = float_floor(theta * _TWO_OVER_PI + 0.5)  # CartPole's live angles (< 0.21 rad): k = 0
        r = (theta - k * _PIO2_HI) - k * _PIO2_LO
        r2 = r * r
        s = r * (1.0 + r2 * (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880)))))
        c = 1.0 + r2 * (-0.5 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 + r2 * (-1.0 / 3628800)))))
        # theta = r + quadrant * pi/2: odd quadrants swap sin and cos, the signs follow the quadrant.
        quadrant = k - 4.0 * float_floor(k * 0.25)
        odd = (quadrant == 1.0) | (quadrant == 3.0)
        sin = (-1.0 if quadrant >= 2.0 else 1.0) * (c if odd else s)
        cos = (-1.0 if (quadrant == 1.0) | (quadrant == 2.0) else 1.0) * (s if odd else c)
    return sin, cos  # one return: numba's alias analysis counts a second returned tuple as an alias


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
