"""``GPUBreakout-MinAtar``: MinAtar's Breakout (Young & Tian, 2019) as gymnax writes it, on every backend.

The model of an env with an array of its own (``EnvDef.array_shape``): a 10x10 screen of four
channels that is both the state's array and the observation. gymnax's ``Breakout-MinAtar``
(``gymnax/environments/minatar/breakout.py``) is followed rule for rule, so that the two agree
step for step from the same state (``tests/envs/test_array_envs.py``).

## Screen (the array and the observation, ``(10, 10, 4)``, rows top to bottom)
| channel | shows                                    |
|---------|------------------------------------------|
| 0       | the paddle, on the bottom row             |
| 1       | the ball                                 |
| 2       | the trail: where the ball was a step ago |
| 3       | the bricks                               |

## State numbers
The ball's row and column, its direction (0 up-left, 1 up-right, 2 down-right, 3 down-left), the
paddle's column, whether the ball struck a brick on the last step, the trail's row and column, and
the bricks left (gymnax counts the brick map's nonzeros; a counter is cheaper in a kernel).

## Actions, reward, start, end
``Discrete(3)``: 0 stays, 1 moves the paddle left, 2 right (MinAtar's minimal action set).
+1 per brick broken. Three rows of bricks (rows 1-3); all broken, three new rows appear when the
ball next reaches the bottom. The ball starts on row 3 in column 0 moving down-right or in column
9 moving down-left, with equal chance. Terminated when the ball passes the paddle; truncated
after 1,000 steps (gymnax's ``max_steps_in_episode``).
"""

from __future__ import annotations

from typing import NamedTuple

from gymnasium import spaces

from rllib_gpuenv.core.env_def import EnvDef
from rllib_gpuenv.core.jit import jitable
from rllib_gpuenv.core.ops import clip, get, put, select, to_int
from rllib_gpuenv.envs.vector_env import GPUVectorEnv

PADDLE, BALL, TRAIL, BRICK = 0, 1, 2, 3
SIZE = 10


class BreakoutParams(NamedTuple):
    """MinAtar's Breakout has no physical parameters; gymnax's time limit is the core's."""


@jitable
def lookup(d, at0, at1, at2, at3):
    """``(at0, at1, at2, at3)[d]`` for a direction ``d`` held as a float."""
    return select(d == 0.0, at0, select(d == 1.0, at1, select(d == 2.0, at2, at3)))


@jitable(returns_array=True)
def set_cell(screen, y, x, channel, value):
    return put(screen, (to_int(y), to_int(x), channel), value)


@jitable(returns_array=True)
def draw_bricks(screen, where):
    """Rows 1-3 full of bricks in the envs ``where`` holds (a new wall, or the first one)."""
    for row in range(1, 4):
        for column in range(SIZE):
            screen = put(screen, (row, column, BRICK), select(where, 1.0, screen[row, column, BRICK]))
    return screen


@jitable
def initial(state, p):
    """The uniform draw of ``ball_x`` in [0, 1) picks the start: column 0 or 9."""
    ball_y, start, _, pos, strike, last_y, _, bricks, screen = state
    ball_x = select(start < 0.5, 0.0, 9.0)
    ball_dir = select(start < 0.5, 2.0, 3.0)
    screen = draw_bricks(screen, True)
    screen = set_cell(screen, 9.0, pos, PADDLE, 1.0)
    screen = set_cell(screen, ball_y, ball_x, BALL, 1.0)
    screen = set_cell(screen, last_y, ball_x, TRAIL, 1.0)
    return (ball_y, ball_x, ball_dir, pos, strike, last_y, ball_x, bricks, screen)


@jitable
def step(state, action, p):
    """One step, in gymnax's order: move the paddle, move the ball, bounce off walls, bricks and paddle."""
    ball_y, ball_x, ball_dir, pos, strike, last_y, last_x, bricks, screen = state
    screen = set_cell(screen, 9.0, pos, PADDLE, 0.0)
    screen = set_cell(screen, ball_y, ball_x, BALL, 0.0)
    screen = set_cell(screen, last_y, last_x, TRAIL, 0.0)
    # The paddle, then the ball along its diagonal; the trail is where the ball was.
    pos = select(action == 1, clip(pos - 1.0, 0.0, 9.0), select(action == 2, clip(pos + 1.0, 0.0, 9.0), pos))
    last_x, last_y = ball_x, ball_y
    new_x = ball_x + lookup(ball_dir, -1.0, 1.0, 1.0, -1.0)
    new_y = ball_y + lookup(ball_dir, -1.0, -1.0, 1.0, 1.0)
    off_side = (new_x < 0.0) | (new_x > 9.0)
    new_x = clip(new_x, 0.0, 9.0)
    ball_dir = select(off_side, lookup(ball_dir, 1.0, 0.0, 3.0, 2.0), ball_dir)
    # The top wall.
    in_field = new_y >= 0.0
    new_y = select(in_field, new_y, 0.0)
    ball_dir = select(in_field, ball_dir, 3.0 - ball_dir)
    # A brick: broken unless the ball struck one on the last step; the ball bounces back.
    brick = get(screen, (to_int(new_y), to_int(new_x), BRICK))
    struck = in_field & (brick == 1.0)
    breaks = struck & (strike < 0.5)
    screen = set_cell(screen, new_y, new_x, BRICK, select(breaks, 0.0, brick))
    reward = select(breaks, 1.0, 0.0)
    bricks = bricks - reward
    new_y = select(breaks, last_y, new_y)
    ball_dir = select(breaks, 3.0 - ball_dir, ball_dir)
    # The bottom row: a new wall if none is left; the paddle, where it was or is now, bounces the
    # ball back; else the ball is lost.
    at_bottom = (brick != 1.0) & (new_y == 9.0)  # no brick struck (the top wall is never row 9)
    new_wall = at_bottom & (bricks == 0.0)
    screen = draw_bricks(screen, new_wall)
    bricks = select(new_wall, 30.0, bricks)
    hit_old = at_bottom & (ball_x == pos)
    hit_new = at_bottom & (ball_x != pos) & (new_x == pos)
    ball_dir = select(hit_old, 3.0 - ball_dir, select(hit_new, lookup(ball_dir, 2.0, 3.0, 0.0, 1.0), ball_dir))
    new_y = select(hit_old | hit_new, last_y, new_y)
    lost = at_bottom & (ball_x != pos) & (new_x != pos)
    strike = select(struck, 1.0, 0.0)
    screen = set_cell(screen, 9.0, pos, PADDLE, 1.0)
    screen = set_cell(screen, new_y, new_x, BALL, 1.0)
    screen = set_cell(screen, last_y, last_x, TRAIL, 1.0)
    return (new_y, new_x, ball_dir, pos, strike, last_y, last_x, bricks, screen), reward, lost


@jitable(returns_array=True)
def observe(state, p):
    """The screen itself."""
    return state[-1]


BREAKOUT = EnvDef(
    id="GPUBreakout-MinAtar",
    gymnasium_env=None,  # gymnax's, not gymnasium's: nothing to draw with
    params=BreakoutParams,
    state_names=("ball_y", "ball_x", "ball_dir", "pos", "strike", "last_y", "last_x", "bricks"),
    obs_size=(SIZE, SIZE, 4),
    observation_bounds=lambda p: (0.0, 1.0),
    action_space=lambda p: spaces.Discrete(3),
    # Row 3, the start drawn in [0, 1) (``initial``), paddle in column 4, 30 bricks.
    reset_bounds=lambda options, p: ((3.0, 0.0, 0.0, 4.0, 0.0, 3.0, 0.0, 30.0), (3.0, 1.0, 0.0, 4.0, 0.0, 3.0, 0.0, 30.0)),
    step=step,
    observe=observe,
    max_episode_steps=1000,
    array_shape=(SIZE, SIZE, 4),
    initial=initial,
)


class BreakoutMinAtarVectorEnv(GPUVectorEnv):
    """``GPUBreakout-MinAtar``: MinAtar's Breakout as gymnax writes it, ``num_envs`` at once on a device."""

    definition = BREAKOUT
