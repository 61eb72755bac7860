"""``GPUMountainCarContinuous-v0``: gymnasium's ``MountainCarContinuous-v0``, for every backend.

MountainCar with a continuous force and a reward for reaching the goal, as gymnasium writes
it, including one quirk that a faithful copy has to keep: gymnasium stores this env's state as
float32 after every step, and numpy then computes the next step in float32 (a Python float
meeting a float32 becomes float32, NEP 50), while the first step after a reset, from the
float64 initial state, computes in float64. The float64 env here does the same: where its state
holds float32 values it rounds each operation to float32 exactly where numpy does.

## State (gymnasium's ``env.state`` order) and observation (the state itself)

| index | quantity             | range         |
|-------|----------------------|---------------|
| 0     | position (m)         | [-1.2, 0.6]   |
| 1     | velocity (m/step)    | [-0.07, 0.07] |

## Actions, reward, start, end
``Box(-1, 1, (1,), float32)``: the force, clipped to [min_action, max_action]. Reward
``-0.1 * action**2`` per step (the unclipped action), plus 100 on reaching the goal. The
position starts uniform in [-0.6, -0.4) (``reset(options={"low", "high"})``), the velocity
at 0. Terminates when ``position >= goal_position`` (0.45) and ``velocity >= goal_velocity``
(0); truncated after 999 steps.

## Parameters
gymnasium's attributes: ``min_action``, ``max_action``, ``min_position``, ``max_position``,
``max_speed``, ``goal_position``, ``goal_velocity``, ``power``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from gymnasium import spaces

from rllib_gpuenv.core.env_def import EnvDef, observe_state
from rllib_gpuenv.core.jit import jitable
from rllib_gpuenv.core.ops import clip, cos, select, to_float32
from rllib_gpuenv.envs.mountain_car import reset_bounds
from rllib_gpuenv.envs.vector_env import GPUVectorEnv


class MountainCarContinuousParams(NamedTuple):
    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015


@jitable
def in_precision(x, single):
    """``x`` as numpy holds it: rounded to float32 where the step computes in float32."""
    return select(single, to_float32(x), x)


@jitable
def step(state, action, p):
    position, velocity = state
    (a,) = action
    # float32 arithmetic where the state holds float32 values (every step but the first).
    single = (to_float32(position) == position) & (to_float32(velocity) == velocity)
    # gymnasium: force = min(max(action[0], min_action), max_action): a float32, or, where
    # clipped, the Python float bound; force * power is float32 for a float32 force.
    clipped = (a < p.min_action) | (a > p.max_action)
    force = clip(a, p.min_action, p.max_action)
    push = select(clipped, force * p.power, to_float32(force * to_float32(p.power)))
    slope = 0.0025 * cos(in_precision(3.0 * position, single))
    change = select(clipped, push - slope, to_float32(push - to_float32(slope)))
    velocity = in_precision(velocity + in_precision(change, single), single)
    max_speed = in_precision(p.max_speed, single)
    velocity = select(velocity > max_speed, max_speed, select(velocity < -max_speed, -max_speed, velocity))
    position = in_precision(position + velocity, single)
    max_position, min_position = in_precision(p.max_position, single), in_precision(p.min_position, single)
    position = select(position > max_position, max_position, select(position < min_position, min_position, position))
    velocity = select((position == min_position) & (velocity < 0.0), 0.0, velocity)
    terminated = (position >= in_precision(p.goal_position, single)) & (velocity >= in_precision(p.goal_velocity, single))
    reward = select(terminated, 100.0, 0.0) - (a * a) * 0.1
    # gymnasium stores the new state as float32.
    return (to_float32(position), to_float32(velocity)), reward, terminated


MOUNTAIN_CAR_CONTINUOUS = EnvDef(
    id="GPUMountainCarContinuous-v0",
    gymnasium_env="gymnasium.envs.classic_control.continuous_mountain_car:Continuous_MountainCarEnv",
    params=MountainCarContinuousParams,
    state_names=("position", "velocity"),
    obs_size=2,
    observation_bounds=lambda p: ((p.min_position, -p.max_speed), (p.max_position, p.max_speed)),
    action_space=lambda p: spaces.Box(np.float32(p.min_action), np.float32(p.max_action), (1,), np.float32),
    reset_bounds=reset_bounds,
    step=step,
    observe=observe_state,
    max_episode_steps=999,
    reward_threshold=90.0,
)


class MountainCarContinuousVectorEnv(GPUVectorEnv):
    """``GPUMountainCarContinuous-v0``: gymnasium's MountainCarContinuous-v0, ``num_envs`` copies
    stepped at once on a device."""

    definition = MOUNTAIN_CAR_CONTINUOUS
