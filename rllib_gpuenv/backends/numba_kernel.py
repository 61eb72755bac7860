"""One environment's step, shared by the numba CPU and numba CUDA backends.

``step_env`` advances environment ``i`` in place: the CPU backend calls it from a ``prange``
loop, the CUDA backend from one GPU thread per environment. It is the autoreset logic of
gymnasium's NEXT_STEP vector envs around the shared physics (``physics.py``) and initial-state
hash (``rng.py``). The torch backend runs the same physics and hash on whole tensors instead.
"""

from __future__ import annotations

from rllib_gpuenv._jit import jitable
from rllib_gpuenv.physics import euler_step, is_terminated, push_force, sin_cos, step_reward
from rllib_gpuenv.rng import bits_to_uniform, reset_bits


@jitable
def reset_env(i, state, episode, seed32, low, high):
    """Draw the initial state of env ``i``'s current episode from the counter-based hash."""
    e = episode[i]
    for k in range(4):
        state[i, k] = bits_to_uniform(reset_bits(seed32, i, e, k), low, high)


@jitable
def step_env(
    i,
    actions,
    state,
    steps,
    prev_done,
    episode,
    ep_return,
    ep_length,
    obs,
    reward,
    terminated,
    truncated,
    final_return,
    final_length,
    final_mask,
    seed32,
    low,
    high,
    max_steps,
    substeps,
    sutton_barto,
    dt,
    exact_math,
):
    """Step env ``i``: autoreset if its episode ended last step, else integrate the physics."""
    if prev_done[i]:
        # NEXT_STEP autoreset: this step starts the next episode; reward 0, no done flags.
        episode[i] += 1
        reset_env(i, state, episode, seed32, low, high)
        steps[i] = 0
        ep_return[i] = 0.0
        ep_length[i] = 0
        prev_done[i] = False
        r = 0.0
        term = False
        trunc = False
    else:
        force = push_force(actions[i])
        x = state[i, 0]
        x_dot = state[i, 1]
        theta = state[i, 2]
        theta_dot = state[i, 3]
        for _ in range(substeps):
            sintheta, costheta = sin_cos(theta, exact_math)
            x, x_dot, theta, theta_dot = euler_step(x, x_dot, theta, theta_dot, force, costheta, sintheta, dt)
        state[i, 0] = x
        state[i, 1] = x_dot
        state[i, 2] = theta
        state[i, 3] = theta_dot
        term = is_terminated(x, theta)
        n = steps[i] + 1
        steps[i] = n
        trunc = n >= max_steps
        r = step_reward(term, sutton_barto)
        ep_return[i] += r
        ep_length[i] += 1
        prev_done[i] = term or trunc
    for k in range(4):
        obs[i, k] = state[i, k]
    reward[i] = r
    terminated[i] = term
    truncated[i] = trunc
    done = term or trunc
    final_mask[i] = done
    final_return[i] = ep_return[i] if done else 0.0
    final_length[i] = ep_length[i] if done else 0
