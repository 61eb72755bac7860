"""PureJaxRL's DQN on gymnax's CartPole-v1: the DQN a JAX user would pick.

PureJaxRL's ``purejaxrl/dqn.py`` (CleanRL's ``dqn_jax.py`` as one JAX program) steps its envs,
fills a replay buffer and takes its gradient steps inside one ``lax.scan`` that ``jax.jit``
compiles. This module is that algorithm with that file's CartPole-v1 settings (``SETTINGS``):

* 10 gymnax CartPole-v1 envs; each scan step acts epsilon-greedily in all of them (epsilon
  from 1 to 0.05 over 250k env steps), stores the 10 transitions and, once 10k env steps are in,
  takes one gradient step on 128 transitions drawn uniformly from the last 10k (the squared TD
  error of a 120x84 ReLU Q-network against its target network's max, Adam at 2.5e-4);
* the target network is copied every 500 env steps; a time limit ends an episode like a
  termination (no bootstrap), as PureJaxRL's one ``done`` flag does.

Its replay buffer is a ring of transitions written here in place of flashbax's flat buffer (the
same contents and the same uniform draw over them), and its random keys are split in another
order. As for PureJaxRL's PPO (``purejaxrl.py``), the scan is cut into calls of
``STEPS_PER_CALL`` steps (2,000 env steps) so that the returns can be read back between them, and
the program is compiled before the clock starts.
"""

from __future__ import annotations

from typing import NamedTuple

from rllib_gpuenv.bench.purejaxrl import Program, jit_program

SETTINGS = dict(
    num_envs=10,
    buffer_size=10_000,
    batch_size=128,
    total_timesteps=500_000,
    epsilon_start=1.0,
    epsilon_finish=0.05,
    epsilon_anneal_time=250_000,
    target_update_interval=500,
    lr=2.5e-4,
    learning_starts=10_000,
    training_interval=10,
    gamma=0.99,
)
STEPS_PER_CALL = 200  # 200 steps x 10 envs = 2,000 env steps between reads of the returns


class Replay(NamedTuple):
    """Transitions in a ring: ``(capacity, ...)`` arrays, ``position`` the next row to write."""

    obs: object
    action: object
    reward: object
    done: object
    next_obs: object
    position: object
    size: object


class State(NamedTuple):
    params: object
    target_params: object
    opt_state: object
    replay: Replay
    env_state: object
    obs: object
    episode_return: object
    timesteps: object  # env steps so far
    updates: object  # gradient steps so far
    key: object


def make_program(seed: int, settings: dict = SETTINGS) -> Program:
    """The initial state; ``run``, ``STEPS_PER_CALL`` scan steps of PureJaxRL's DQN compiled as
    one XLA program; ``sample``, the same steps acting greedily-or-random without storing or
    learning."""
    import flax.linen as nn
    import gymnax
    import jax
    import jax.numpy as jnp
    import optax

    s = settings
    n = s["num_envs"]
    env, env_params = gymnax.make("CartPole-v1")
    num_actions = env.action_space(env_params).n
    obs_shape = env.observation_space(env_params).shape

    class QNetwork(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(120)(x))
            x = nn.relu(nn.Dense(84)(x))
            return nn.Dense(num_actions)(x)

    network = QNetwork()
    optimizer = optax.adam(s["lr"])

    def act(state: State, key):
        """Epsilon-greedy actions of all envs, epsilon annealed linearly by env steps."""
        random_key, explore_key = jax.random.split(key)
        q = network.apply(state.params, state.obs)
        slope = (s["epsilon_finish"] - s["epsilon_start"]) / s["epsilon_anneal_time"]
        epsilon = jnp.clip(slope * state.timesteps + s["epsilon_start"], s["epsilon_finish"])
        random_actions = jax.random.randint(random_key, (n,), 0, num_actions)
        return jnp.where(jax.random.uniform(explore_key, (n,)) < epsilon, random_actions, q.argmax(-1))

    def env_step(state: State, action, key):
        next_obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(key, n), state.env_state, action, env_params
        )
        done = terminated | truncated  # PureJaxRL's one flag: a time limit does not bootstrap either
        episode_return = state.episode_return + reward
        finished = jnp.where(done, episode_return, 0.0)
        return next_obs, env_state, reward, done, jnp.where(done, 0.0, episode_return), finished

    def store(replay: Replay, obs, action, reward, done, next_obs) -> Replay:
        rows = (replay.position + jnp.arange(n)) % s["buffer_size"]
        return Replay(
            replay.obs.at[rows].set(obs),
            replay.action.at[rows].set(action),
            replay.reward.at[rows].set(reward),
            replay.done.at[rows].set(done),
            replay.next_obs.at[rows].set(next_obs),
            (replay.position + n) % s["buffer_size"],
            jnp.minimum(replay.size + n, s["buffer_size"]),
        )

    def loss(params, target_params, batch):
        obs, action, reward, done, next_obs = batch
        target = reward + (1.0 - done) * s["gamma"] * network.apply(target_params, next_obs).max(-1)
        q = jnp.take_along_axis(network.apply(params, obs), action[:, None], axis=-1)[:, 0]
        return jnp.mean((q - jax.lax.stop_gradient(target)) ** 2)

    def learn(state: State, key) -> State:
        replay = state.replay
        rows = jax.random.randint(key, (s["batch_size"],), 0, replay.size)
        batch = (replay.obs[rows], replay.action[rows], replay.reward[rows], replay.done[rows], replay.next_obs[rows])
        grads = jax.grad(loss)(state.params, state.target_params, batch)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        return state._replace(
            params=optax.apply_updates(state.params, updates), opt_state=opt_state, updates=state.updates + 1
        )

    def step(state: State, _):
        key, act_key, env_key, learn_key = jax.random.split(state.key, 4)
        action = act(state, act_key)
        next_obs, env_state, reward, done, episode_return, finished = env_step(state, action, env_key)
        timesteps = state.timesteps + n
        replay = store(state.replay, state.obs, action, reward, done.astype(jnp.float32), next_obs)
        state = state._replace(
            replay=replay, env_state=env_state, obs=next_obs, episode_return=episode_return, timesteps=timesteps, key=key
        )
        learning = (replay.size >= s["batch_size"]) & (timesteps > s["learning_starts"])
        learning &= timesteps % s["training_interval"] == 0
        state = jax.lax.cond(learning, learn, lambda state, _: state, state, learn_key)
        copy = timesteps % s["target_update_interval"] == 0  # tau 1: a hard copy
        state = state._replace(
            target_params=jax.tree_util.tree_map(
                lambda online, target: jnp.where(copy, online, target), state.params, state.target_params
            )
        )
        return state, (done, finished)

    def run(state: State):
        return jax.lax.scan(step, state, None, STEPS_PER_CALL)

    def sample(state: State) -> State:  # acting and stepping only
        def act_only(state: State, _):
            key, act_key, env_key = jax.random.split(state.key, 3)
            next_obs, env_state, _, _, episode_return, _ = env_step(state, act(state, act_key), env_key)
            return state._replace(env_state=env_state, obs=next_obs, episode_return=episode_return, key=key), None

        return jax.lax.scan(act_only, state, None, STEPS_PER_CALL)[0]

    def initial_state(key) -> State:
        key, init_key, reset_key = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, n), env_params)
        params = network.init(init_key, jnp.zeros(obs_shape))
        capacity = s["buffer_size"]
        replay = Replay(
            jnp.zeros((capacity, *obs_shape)),
            jnp.zeros(capacity, jnp.int32),
            jnp.zeros(capacity),
            jnp.zeros(capacity),
            jnp.zeros((capacity, *obs_shape)),
            jnp.int32(0),
            jnp.int32(0),
        )
        zero = jnp.int32(0)
        return State(params, params, optimizer.init(params), replay, env_state, obs, jnp.zeros(n), zero, zero, key)

    env_steps_per_call = STEPS_PER_CALL * n
    return jit_program(
        seed,
        initial_state,
        run,
        sample,
        env_steps_per_call,
        s["total_timesteps"],
        sample_env_steps=env_steps_per_call,
        gradient_steps=lambda state, call: state.updates,
    )
