"""One environment's step, shared by the numba CPU and numba CUDA backends.

Two pieces, around the shared physics (``physics.py``) and initial-state hash (``rng.py``):

* ``begin_episode`` starts env ``i``'s next episode (NEXT_STEP autoreset: the step after a done);
* ``advance`` is the rest of the step as a pure function of one env's numbers, like a
  Brax/gymnax step: no arrays, no branches that LLVM cannot turn into selects.

``advance_env`` runs ``advance`` for env ``i`` on the arrays. The CUDA kernel runs
``begin_episode`` (where needed) and ``advance_env`` in one thread per environment. The CPU
kernel runs ``begin_episode`` only where an episode ended, then ``advance_env`` over all envs in
a loop that LLVM vectorises; that is why ``advance`` is branch-free and why its flags are 0/1
integers (numba's alias analysis counts bool values as possible aliases, and then does not mark
the loop's arrays as non-overlapping, which LLVM needs to vectorise a loop over 12 arrays).

Float32 envs run ``single_precision`` copies of these functions (float32 constants), and get
their time step as a float32 (``kernel_constants``), so that their arithmetic stays float32.

Arrays are structure-of-arrays: ``state`` and ``obs`` are ``(4, N)``, one row per component, so
that consecutive envs are consecutive in memory (vector lanes on a CPU, coalesced loads on a GPU).
"""

from __future__ import annotations

import numpy as np

from rllib_gpuenv._jit import jitable
from rllib_gpuenv.backends.base import StepParams
from rllib_gpuenv.physics import euler_step, is_terminated, push_force, sin_cos, step_reward
from rllib_gpuenv.rng import bits_to_uniform, reset_bits


@jitable
def begin_episode(i, state, episode, seed32, low, high):
    """Count env ``i``'s next episode and draw its initial state from the counter-based hash."""
    e = episode[i] + 1
    episode[i] = e
    for k in range(4):
        state[k, i] = bits_to_uniform(reset_bits(seed32, i, e, k), low, high)


@jitable
def advance(resetting, action, x, x_dot, theta, theta_dot, steps, ep_return,
            max_steps, substeps, sutton_barto, dt, exact_math):  # fmt: skip
    """One env's step after ``begin_episode``; returns its new numbers.

    ``(x, x_dot, theta, theta_dot, reward, terminated, truncated, steps, ep_return)``. A
    ``resetting`` env (its episode ended last step, and ``begin_episode`` has drawn its new
    state) keeps that state and returns reward 0 and no flags, as gymnasium's NEXT_STEP
    autoreset does; the physics is computed for it anyway and discarded, which is cheaper for
    a vector loop than a branch.
    """
    force = push_force(action)
    nx, nx_dot, ntheta, ntheta_dot = x, x_dot, theta, theta_dot
    for _ in range(substeps):
        sintheta, costheta = sin_cos(ntheta, exact_math)
        nx, nx_dot, ntheta, ntheta_dot = euler_step(nx, nx_dot, ntheta, ntheta_dot, force, costheta, sintheta, dt)
    if not resetting:
        x, x_dot, theta, theta_dot = nx, nx_dot, ntheta, ntheta_dot
    terminated = 0 if resetting else int(is_terminated(x, theta))
    steps = 0 if resetting else steps + 1
    truncated = int(steps >= max_steps)
    # Float flags: numba computes float32 with an integer in float64, and the reward would follow.
    reward = 0.0 if resetting else step_reward(1.0 if terminated else 0.0, 1.0 if sutton_barto else 0.0)
    ep_return = 0.0 if resetting else ep_return + reward
    return x, x_dot, theta, theta_dot, reward, terminated, truncated, steps, ep_return


@jitable
def advance_env(i, actions, state, steps, prev_done, ep_return, obs, reward, terminated, truncated,
                final_return, final_length, final_mask, max_steps, substeps, sutton_barto, dt, exact_math):  # fmt: skip
    """Run ``advance`` for env ``i``: read its numbers from the arrays, write the results back."""
    x, x_dot, theta, theta_dot, r, term, trunc, n, ret = advance(
        prev_done[i], actions[i], state[0, i], state[1, i], state[2, i], state[3, i], steps[i],
        ep_return[i], max_steps, substeps, sutton_barto, dt, exact_math)  # fmt: skip
    done = term | trunc
    state[0, i] = obs[0, i] = x
    state[1, i] = obs[1, i] = x_dot
    state[2, i] = obs[2, i] = theta
    state[3, i] = obs[3, i] = theta_dot
    steps[i] = n
    ep_return[i] = ret
    prev_done[i] = done
    reward[i] = r
    terminated[i] = term
    truncated[i] = trunc
    final_mask[i] = done
    final_return[i] = ret if done else 0.0
    final_length[i] = n if done else 0


def kernel_constants(params: StepParams) -> tuple:
    """The step's constants, after the arrays, as both numba kernels take them: ``seed32, low,
    high, max_steps, substeps, sutton_barto, dt``, with ``dt`` a float32 for float32 envs
    (see the module doc)."""
    dt = params.dt if params.exact_math else np.float32(params.dt)
    return params.seed32, params.low, params.high, params.max_steps, params.substeps, params.sutton_barto, dt
