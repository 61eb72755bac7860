"""``GPUCartPole-v1``: gymnasium's ``CartPole-v1``, one definition for every backend.

The classic cart-pole of Barto, Sutton & Anderson (1983) with the corrected equations of
Florian (2007, https://coneural.org/florian/papers/05_cart_pole.pdf), as gymnasium writes them:
same constants, same operation order, so that float64 results match gymnasium to the last bit.

## State (gymnasium's ``env.state`` order) and observation (the state itself)

| index | quantity               | unit  | episode terminates when           |
|-------|------------------------|-------|-----------------------------------|
| 0     | cart position ``x``     | m     | ``|x| > x_threshold`` (2.4)       |
| 1     | cart velocity           | m/s   |                                   |
| 2     | pole angle ``theta``    | rad   | ``|theta| > 12°``                  |
| 3     | pole angular velocity   | rad/s |                                   |

## Actions, reward, start, end
``Discrete(2)``: 0 pushes the cart left with ``force_mag`` newtons, 1 pushes it right. Reward
+1 per step, the terminating one included (``sutton_barto_reward``: 0 per step, -1 on
termination). Every component starts uniform in [-0.05, 0.05) (``reset(options={"low": l,
"high": h})`` changes the range). Truncated after 500 steps.

## Parameters
gymnasium's attributes (``gravity``, ``masscart``, ``masspole``, ``length`` (half the pole),
``force_mag``, ``tau``, ``theta_threshold_radians``, ``x_threshold``), its
``sutton_barto_reward`` option, and ``substeps``, this package's knob for more work per step:
each step integrates ``substeps`` Euler steps of ``tau / substeps`` (1 is CartPole-v1).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gymnasium import spaces

from rllib_gpuenv.core.env_def import EnvDef, observe_state, uniform_reset_bounds
from rllib_gpuenv.core.jit import jitable
from rllib_gpuenv.core.ops import cos, select, sin, to_float
from rllib_gpuenv.envs.vector_env import GPUVectorEnv


class CartPoleParams(NamedTuple):
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02  # seconds between two observations (one env step)
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    sutton_barto_reward: bool = False
    substeps: int = 1


@jitable
def step(state, action, p):
    """One CartPole step (explicit Euler, gymnasium's default integrator)."""
    x, x_dot, theta, theta_dot = state
    force = select(action == 1, p.force_mag, -p.force_mag)
    total_mass = p.masspole + p.masscart
    polemass_length = p.masspole * p.length
    dt = p.tau / to_float(p.substeps)
    for _ in range(p.substeps):
        costheta = cos(theta)
        sintheta = sin(theta)
        temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass
        thetaacc = (p.gravity * sintheta - costheta * temp) / (
            p.length * (4.0 / 3.0 - p.masspole * (costheta * costheta) / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x, x_dot, theta, theta_dot = x + dt * x_dot, x_dot + dt * xacc, theta + dt * theta_dot, theta_dot + dt * thetaacc
    terminated = (
        (x < -p.x_threshold) | (x > p.x_threshold) | (theta < -p.theta_threshold_radians) | (theta > p.theta_threshold_radians)
    )
    # +1 per step; Sutton & Barto's: 0 per step, -1 on termination.
    reward = select(terminated, -1.0, 0.0) if p.sutton_barto_reward else 1.0
    return (x, x_dot, theta, theta_dot), reward, terminated


def observation_bounds(p: CartPoleParams):
    """gymnasium's: twice the termination thresholds, so that a failing observation is in bounds."""
    high = (p.x_threshold * 2, math.inf, p.theta_threshold_radians * 2, math.inf)
    return tuple(-h for h in high), high


CARTPOLE = EnvDef(
    id="GPUCartPole-v1",
    gymnasium_env="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
    params=CartPoleParams,
    state_names=("x", "x_dot", "theta", "theta_dot"),
    obs_size=4,
    observation_bounds=observation_bounds,
    action_space=lambda p: spaces.Discrete(2),
    reset_bounds=uniform_reset_bounds(-0.05, 0.05, 4),
    step=step,
    observe=observe_state,
    max_episode_steps=500,
    reward_threshold=475.0,
)


class CartPoleVectorEnv(GPUVectorEnv):
    """``GPUCartPole-v1``: gymnasium's CartPole-v1, ``num_envs`` copies stepped at once on a device."""

    definition = CARTPOLE
