"""PureJaxRL's PPO on gymnax's CartPole-v1 (and Acrobot-v1): the contender a JAX user would pick.

PureJaxRL (github.com/luchris429/purejaxrl, ``purejaxrl/ppo.py``) writes PPO as one pure JAX
program: env steps, GAE and the epochs of minibatch updates are ``lax.scan`` loops that
``jax.jit`` compiles into a single XLA computation, so nothing runs in Python between steps.
This module is that algorithm with that file's CartPole-v1 settings (``SETTINGS``), written
here so that ``bench training`` can race it side by side with the others:

* 4 gymnax CartPole-v1 envs x 128 steps per update, 4 epochs of 4 minibatches (16 gradient
  steps of 128), 500k env steps with the learning rate annealed linearly over them;
* separate 64x64 tanh actor and critic, orthogonal initialisation; Adam (eps 1e-5) after
  clipping the global gradient norm at 0.5; clipped surrogate, clipped value loss, entropy 0.01;
* gymnax resets an env within the step that ends its episode, and GAE treats the time limit
  as termination, as PureJaxRL does (gymnax 1.0 reports the two apart; PureJaxRL was written
  for the one ``done`` flag of the gymnax before it, which is either).

Its random keys are split in another order than PureJaxRL's (the same distributions, other
draws), and it is timed differently. PureJaxRL scans over every update in one call, which returns
only at the end; to see when the mean return of the last 100 episodes reaches the target, the
same update is scanned over ``UPDATES_PER_CALL`` updates per call (2,048 env steps, the device
path's iteration), and the episodes that ended are read back after each call. The program is
compiled before the clock starts; the compile is the run's ``build_s``.

For the races judged on evaluation episodes (``bench.training.Evaluation``), the program also
has ``evaluate``: the current policy's episodes from a fresh reset, all at once (``vmap``), each
counted until it ends, compiled with the rest.
"""

from __future__ import annotations

import collections
import math
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

SETTINGS = dict(
    lr=2.5e-4,
    num_envs=4,
    num_steps=128,
    total_timesteps=500_000,
    update_epochs=4,
    num_minibatches=4,
    gamma=0.99,
    gae_lambda=0.95,
    clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
UPDATES_PER_CALL = 4  # 4 updates x 4 envs x 128 steps = 2,048 env steps between reads of the returns


def check_installed() -> None:
    """A one-line error naming the extra, before any run, where a package it needs is missing."""
    import importlib.util

    for name in ("jax", "gymnax", "flax", "optax"):
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(
                f"PureJaxRL's PPO and DQN need jax, gymnax, flax and optax, and {name} is not installed: "
                'pip install "rllib_gpuenv[bench]"',
                name=name,
            )


class Program(NamedTuple):
    """A compiled training program as ``curve`` runs it: ``run(state) -> (state, (done,
    finished_return))`` trains for ``env_steps_per_call`` env steps (the flags and returns in
    the order the episodes ended, envs last), ``sample(state) -> state`` steps the policy and
    the envs for ``sample_env_steps`` without learning, ``gradient_steps(state, call)`` counts
    the gradient steps taken after ``call`` calls."""

    state: object
    run: Callable
    sample: Callable
    env_steps_per_call: int
    calls: int  # the run's length: its settings' total env steps
    sample_env_steps: int
    gradient_steps: Callable
    # ``evaluate(state, key) -> returns``: episodes of the current policy from a fresh reset,
    # each to its end (the races judged on evaluation episodes); None where the program has none
    evaluate: Callable | None = None


def jit_program(seed: int, initial_state, run, sample, env_steps_per_call: int, total_timesteps: int, **counts) -> Program:
    """``Program`` from a program's pure functions, each jitted (the initialisation too: op by op,
    JAX would compile each of its ops on its own); ``counts``: ``sample_env_steps`` and
    ``gradient_steps``."""
    import jax

    evaluate = counts.pop("evaluate", None)
    return Program(
        state=jax.jit(initial_state)(jax.random.PRNGKey(seed)),
        run=jax.jit(run),
        sample=jax.jit(sample),
        env_steps_per_call=env_steps_per_call,
        calls=total_timesteps // env_steps_per_call,
        evaluate=evaluate and jax.jit(evaluate),
        **counts,
    )


class Rollout(NamedTuple):
    obs: object
    action: object
    log_prob: object
    value: object
    reward: object
    done: object
    finished_return: object  # an ended episode's return where ``done``, else 0


def make_program(seed: int, settings: dict = SETTINGS, env_id: str = "CartPole-v1", evaluation=None) -> Program:
    """The initial training state; ``run``, ``UPDATES_PER_CALL`` PPO updates compiled as one
    XLA program; ``sample``, one rollout of the policy without an update; with ``evaluation``
    (``bench.training.Evaluation``), ``evaluate``: its episodes of the current policy. On
    gymnax's ``env_id``, with PureJaxRL's CartPole settings whatever the env (it ships no
    others)."""
    import flax.linen as nn
    import gymnax
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    s = settings
    env, env_params = gymnax.make(env_id)
    num_actions = env.action_space(env_params).n
    num_updates = s["total_timesteps"] // s["num_steps"] // s["num_envs"]
    batch_size = s["num_envs"] * s["num_steps"]
    gradient_steps_per_update = s["update_epochs"] * s["num_minibatches"]

    class ActorCritic(nn.Module):
        @nn.compact
        def __call__(self, obs):
            def mlp(x, out: int, out_scale: float):
                for _ in range(2):
                    x = nn.tanh(nn.Dense(64, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
                return nn.Dense(out, kernel_init=nn.initializers.orthogonal(out_scale))(x)

            return mlp(obs, num_actions, 0.01), mlp(obs, 1, 1.0)[..., 0]

    network = ActorCritic()

    def learning_rate(count):  # linear to zero over the run's updates
        return s["lr"] * (1.0 - (count // gradient_steps_per_update) / num_updates)

    optimizer = optax.chain(optax.clip_by_global_norm(s["max_grad_norm"]), optax.adam(learning_rate, eps=1e-5))

    def env_step(carry, _):
        params, env_state, obs, episode_return, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        logits, value = network.apply(params, obs)
        action = jax.random.categorical(act_key, logits)
        log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1)[:, 0]
        step_keys = jax.random.split(step_key, s["num_envs"])
        next_obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            step_keys, env_state, action, env_params
        )
        done = terminated | truncated  # the one flag of the gymnax PureJaxRL was written for
        episode_return = episode_return + reward
        finished = jnp.where(done, episode_return, 0.0)
        episode_return = jnp.where(done, 0.0, episode_return)
        step = Rollout(obs, action, log_prob, value, reward, done, finished)
        return (params, env_state, next_obs, episode_return, key), step

    def advantages_of(rollout: Rollout, last_value):
        def backwards(carry, step):
            gae, next_value = carry
            not_done = 1.0 - step.done
            delta = step.reward + s["gamma"] * next_value * not_done - step.value
            gae = delta + s["gamma"] * s["gae_lambda"] * not_done * gae
            return (gae, step.value), gae

        _, advantages = jax.lax.scan(backwards, (jnp.zeros_like(last_value), last_value), rollout, reverse=True)
        return advantages, advantages + rollout.value

    def loss(params, batch: Rollout, advantages, targets):
        logits, value = network.apply(params, batch.obs)
        log_probs = jax.nn.log_softmax(logits)
        log_prob = jnp.take_along_axis(log_probs, batch.action[:, None], axis=-1)[:, 0]
        clipped_value = batch.value + jnp.clip(value - batch.value, -s["clip_eps"], s["clip_eps"])
        value_loss = 0.5 * jnp.maximum(jnp.square(value - targets), jnp.square(clipped_value - targets)).mean()
        ratio = jnp.exp(log_prob - batch.log_prob)
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        clipped_ratio = jnp.clip(ratio, 1.0 - s["clip_eps"], 1.0 + s["clip_eps"])
        policy_loss = -jnp.minimum(ratio * advantages, clipped_ratio * advantages).mean()
        entropy = -(jnp.exp(log_probs) * log_probs).sum(-1).mean()
        return policy_loss + s["vf_coef"] * value_loss - s["ent_coef"] * entropy

    def gradient_step(train, minibatch):
        params, opt_state = train
        grads = jax.grad(loss)(params, *minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def epoch(carry, _):
        train, data, key = carry
        key, shuffle_key = jax.random.split(key)
        order = jax.random.permutation(shuffle_key, batch_size)
        minibatches = jax.tree_util.tree_map(
            lambda x: x.reshape((batch_size,) + x.shape[2:])[order].reshape((s["num_minibatches"], -1) + x.shape[2:]), data
        )
        train, _ = jax.lax.scan(gradient_step, train, minibatches)
        return (train, data, key), None

    def update(state, _):
        params, opt_state, env_state, obs, episode_return, key = state
        (params, env_state, obs, episode_return, key), rollout = jax.lax.scan(
            env_step, (params, env_state, obs, episode_return, key), None, s["num_steps"]
        )
        _, last_value = network.apply(params, obs)
        advantages, targets = advantages_of(rollout, last_value)
        ((params, opt_state), _, key), _ = jax.lax.scan(
            epoch, ((params, opt_state), (rollout, advantages, targets), key), None, s["update_epochs"]
        )
        return (params, opt_state, env_state, obs, episode_return, key), (rollout.done, rollout.finished_return)

    def run(state):
        return jax.lax.scan(update, state, None, UPDATES_PER_CALL)

    def sample(state):  # one rollout: the policy and the envs, no update
        params, opt_state, env_state, obs, episode_return, key = state
        (params, env_state, obs, episode_return, key), _ = jax.lax.scan(
            env_step, (params, env_state, obs, episode_return, key), None, s["num_steps"]
        )
        return params, opt_state, env_state, obs, episode_return, key

    def initial_state(key):
        key, init_key, reset_key = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, s["num_envs"]), env_params)
        params = network.init(init_key, jnp.zeros(env.observation_space(env_params).shape))
        return params, optimizer.init(params), env_state, obs, jnp.zeros(s["num_envs"]), key

    def evaluate(state, key):
        """``evaluation.episodes`` episodes from a fresh reset, each counted until it ends."""
        params, episodes = state[0], evaluation.episodes
        key, reset_key = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, episodes), env_params)

        def step(carry, _):
            env_state, obs, total, running, key = carry
            key, act_key, step_key = jax.random.split(key, 3)
            logits, _ = network.apply(params, obs)
            action = jnp.argmax(logits, -1) if evaluation.deterministic else jax.random.categorical(act_key, logits)
            obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(step_key, episodes), env_state, action, env_params
            )
            total = total + jnp.where(running, reward, 0.0)
            return (env_state, obs, total, running & ~(terminated | truncated), key), None

        start = (env_state, obs, jnp.zeros(episodes), jnp.ones(episodes, dtype=bool), key)
        (_, _, total, _, _), _ = jax.lax.scan(step, start, None, env_params.max_steps_in_episode)
        return total

    gradient_steps_per_call = UPDATES_PER_CALL * gradient_steps_per_update
    return jit_program(
        seed,
        initial_state,
        run,
        sample,
        UPDATES_PER_CALL * batch_size,
        s["total_timesteps"],
        sample_env_steps=batch_size,
        gradient_steps=lambda state, call: call * gradient_steps_per_call,
        evaluate=evaluate if evaluation else None,
    )


def curve(
    seed: int,
    target: float,
    budget_s: float,
    last_episodes: int = 100,
    program: Callable = make_program,
    evaluation=None,
) -> dict:
    """One run of ``program(seed)`` (PPO's by default): ``(seconds, env steps, mean return of the
    last episodes, gradient steps)`` after each call, until the target, the budget or the
    settings' total env steps (PureJaxRL's 500k); the compile apart. With ``evaluation``
    (``bench.training.Evaluation``; ``program`` made with it), the return is the last
    evaluation's instead, one every ``evaluation.every`` env steps with the clock paused, as for
    SB3. Sampling alone (the policy and the envs, no learning) is timed after training."""
    import jax
    import numpy as np

    start = time.perf_counter()
    made = program(seed)
    state, run, sample = made.state, made.run.lower(made.state).compile(), made.sample  # compiled before the clock starts
    evaluation_key = jax.random.PRNGKey(seed + 10_000)
    evaluate = made.evaluate.lower(state, evaluation_key).compile() if evaluation else None
    build_s = time.perf_counter() - start
    recent: collections.deque = collections.deque(maxlen=last_episodes)
    points, start, evaluated, next_evaluation = [], time.perf_counter(), math.nan, evaluation.every if evaluation else 0
    evaluation_s = 0.0  # the seconds the clock stood still for evaluations
    for call in range(1, made.calls + 1):
        state, (done, finished) = run(state)
        done, finished = jax.device_get((done, finished))  # (..., steps, envs): in the order they ended
        recent.extend(np.asarray(finished)[np.asarray(done)].tolist())
        mean = statistics.fmean(recent) if recent else math.nan
        if evaluate is not None:
            if call * made.env_steps_per_call >= next_evaluation:
                paused = time.perf_counter()
                returns = evaluate(state, jax.random.fold_in(evaluation_key, call))
                evaluated, next_evaluation = float(np.mean(jax.device_get(returns))), next_evaluation + evaluation.every
                evaluation_s += time.perf_counter() - paused
                start += time.perf_counter() - paused
            mean = evaluated
        steps = int(made.gradient_steps(state, call))
        points.append((time.perf_counter() - start, call * made.env_steps_per_call, mean, steps))
        if mean >= target or points[-1][0] >= budget_s:
            break
    state = jax.block_until_ready(sample(state))  # compiled
    start, rollouts = time.perf_counter(), 100
    for _ in range(rollouts):
        state = sample(state)
    jax.block_until_ready(state)
    sampling = rollouts * made.sample_env_steps / (time.perf_counter() - start)
    device = jax.devices()[0]
    return {
        "curve": points,
        "build_s": build_s,
        "sampling_env_steps_per_s": sampling,
        "jax_device": f"{device.platform}: {device.device_kind}",
        "evaluation_s": evaluation_s,
    }
