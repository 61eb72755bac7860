"""``GPUMountainCar-v0``: gymnasium's ``MountainCar-v0``, one definition for every backend.

A car in a valley, too weak to drive up the right hill directly (Moore 1990): it has to swing
back and forth to build momentum. gymnasium's equations, constants, clipping and operation
order, in float64 as gymnasium computes them.

## State (gymnasium's ``env.state`` order) and observation (the state itself)

| index | quantity             | range         |
|-------|----------------------|---------------|
| 0     | position (m)         | [-1.2, 0.6]   |
| 1     | velocity (m/step)    | [-0.07, 0.07] |

## Actions, reward, start, end
``Discrete(3)``: accelerate left, don't, accelerate right. Reward -1 per step. The position
starts uniform in [-0.6, -0.4) (``reset(options={"low", "high"})``), the velocity at 0.
Terminates when ``position >= goal_position`` (0.5) and ``velocity >= goal_velocity`` (0);
truncated after 200 steps.

## Parameters
gymnasium's attributes: ``min_position``, ``max_position``, ``max_speed``, ``goal_position``,
``goal_velocity`` (also its constructor argument), ``force``, ``gravity``.
"""

from __future__ import annotations

from typing import NamedTuple

from gymnasium import spaces
from gymnasium.envs.classic_control import utils

from rllib_gpuenv.core.env_def import EnvDef, observe_state
from rllib_gpuenv.core.jit import jitable
from rllib_gpuenv.core.ops import clip, cos, select, to_float
from rllib_gpuenv.envs.vector_env import GPUVectorEnv


class MountainCarParams(NamedTuple):
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001
    gravity: float = 0.0025


@jitable
def step(state, action, p):
    position, velocity = state
    velocity = velocity + (to_float(action - 1) * p.force + cos(3.0 * position) * (-p.gravity))
    velocity = clip(velocity, -p.max_speed, p.max_speed)
    position = clip(position + velocity, p.min_position, p.max_position)
    velocity = select((position == p.min_position) & (velocity < 0.0), 0.0, velocity)
    terminated = (position >= p.goal_position) & (velocity >= p.goal_velocity)
    return (position, velocity), -1.0, terminated


def reset_bounds(options, p):
    low, high = utils.maybe_parse_reset_bounds(options, -0.6, -0.4)
    return (float(low), 0.0), (float(high), 0.0)


MOUNTAIN_CAR = EnvDef(
    id="GPUMountainCar-v0",
    gymnasium_env="gymnasium.envs.classic_control.mountain_car:MountainCarEnv",
    params=MountainCarParams,
    state_names=("position", "velocity"),
    obs_size=2,
    observation_bounds=lambda p: ((p.min_position, -p.max_speed), (p.max_position, p.max_speed)),
    action_space=lambda p: spaces.Discrete(3),
    reset_bounds=reset_bounds,
    step=step,
    observe=observe_state,
    max_episode_steps=200,
    reward_threshold=-110.0,
)


class MountainCarVectorEnv(GPUVectorEnv):
    """``GPUMountainCar-v0``: gymnasium's MountainCar-v0, ``num_envs`` copies stepped at once on a device."""

    definition = MOUNTAIN_CAR
