"""Sampling throughput: env steps per second of an env runner's ``sample()``, policy included.

``bench scaling`` times ``env.step`` alone. A rollout also runs the policy every step (a
forward pass of the module and a draw from its action distribution) and writes the rollout
buffers. Here the contenders, timed side by side in rotated rounds as ``bench scaling`` times
them:

- "env step alone": the env the device runner makes, stepped with actions from a pool; the
  bound that sampling cannot beat;
- "device runner": ``DeviceEnvRunner.sample()``, the PPO module of the shipped CartPole file;
- "device runner, stepped from Python" (on a GPU): the same without its rollout recorded as a
  CUDA graph and replayed (``device_rollouts(cuda_graph=False)``, ``rllib/rollout_graph.py``);
- "device runner, RLlib's action draw": stepped from Python, drawing actions with the
  distribution's own ``sample()`` (``torch.multinomial``, which on a GPU reads back from it twice
  a step: see ``rllib/action_sampling.py``);
- "stock RLlib runner (gymnasium CartPole-v1)": RLlib's ``SingleAgentEnvRunner`` on gymnasium's
  env, vectorised by gymnasium, as RLlib runs it by default (up to 4,096 envs: it is slow).

With ``--env gymnax:<id>`` or ``--env brax:<name>`` (JAX envs, ``jax_envs/``; MinAtar's
``Breakout-MinAtar`` with the CNN of ``configs/gymnax_breakout_ppo.yaml``) the contenders are the
env step alone (the torch ``VectorEnv`` over the JAX env), the device runner, and the library's
own rollout: ``rollout_length`` steps of the vmapped env in one jit-compiled ``lax.scan``, random
actions drawn in JAX, as PureJaxRL steps gymnax's envs and Brax's trainers step Brax's (in
``brax.envs.training.wrap``); no torch, no policy. Its ratio to the device runner is what stepping
a JAX env through the runner costs, the policy included. Where this package writes the same env
(``TWINS``: gymnax's ``Breakout-MinAtar`` and ``GPUBreakout-MinAtar``, step for step the same),
its env alone and the device runner on it join them: the same env, the same network, stepped by
this package's kernel instead of through JAX.

A call is one ``sample()`` of ``rollout_length`` steps of every env (one ``step`` for the env
alone, counted as such).
"""

from __future__ import annotations

import contextlib
import statistics
import sys

import torch

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import default_sizes, parse_sizes, pyplot, report, save_figure, write_results
from rllib_gpuenv.bench.scaling import POOL, Contender, _action_pool, _ours, interleaved_turns
from rllib_gpuenv.experiments.tables import format_table
from rllib_gpuenv.jax_envs import is_jax_id, make_jax_env

ENV_ALONE, DEVICE, DEVICE_STEPPED, DEVICE_RLLIB_DRAW, STOCK, GYMNAX, BRAX = (
    "env step alone",
    "device runner",
    "device runner, stepped from Python",
    "device runner, RLlib's action draw",
    "stock RLlib runner (gymnasium CartPole-v1)",
    "gymnax's own rollout (jit + vmap + scan)",
    "Brax's own rollout (jit + vmap + scan)",
)
OWN_ROLLOUTS = {GYMNAX: "gymnax's", BRAX: "Brax's"}  # a JAX env library's own rollout: whose it is
CARTPOLE = "GPUCartPole-v1"
TWINS = {"gymnax:Breakout-MinAtar": "GPUBreakout-MinAtar"}  # gymnax's env: this package's, step for step the same
TWIN_FILES = {"GPUBreakout-MinAtar": "gpu_breakout_minatar_ppo.yaml"}


def _config(env: str, device: str):
    """The device runner's settings: the shipped CartPole file's, with the Breakout file's CNN for
    a JAX env of image observations (MinAtar's)."""
    from rllib_gpuenv.experiments import cartpole_config, load_config
    from rllib_gpuenv.experiments.shipped import config_file

    if env == CARTPOLE:
        return cartpole_config(device=device, seed=0)
    if env in TWIN_FILES:
        return load_config(config_file(TWIN_FILES[env]), device=device, seed=0).config
    image = len(make_jax_env(env, 1, torch.device("cpu"), {}).single_observation_space.shape) == 3
    name = "gymnax_breakout_ppo.yaml" if image else "gpu_cartpole_ppo.yaml"
    return load_config(config_file(name), device=device, seed=0).config.environment(env)


def _device_runner(device: str, rollout_length: int, rllib_draw: bool = False, env: str = CARTPOLE, cuda_graph: bool = True):
    """The device runner's ``sample()``; ``cuda_graph=False`` (and with RLlib's draw, which reads
    back from the GPU): every rollout stepped from Python."""

    def make(n: int):
        from rllib_gpuenv.rllib import DeviceEnvRunner, action_sampling

        config = _config(env, device).env_runners(num_envs_per_env_runner=n)
        config.device_rollouts(rollout_length=rollout_length, cuda_graph=cuda_graph and not rllib_draw)
        runner = DeviceEnvRunner(config=config)

        def sample(_i):
            with _rllib_draw(action_sampling) if rllib_draw else contextlib.nullcontext():
                return runner.sample()

        sample.close = runner.stop
        return sample

    return make


@contextlib.contextmanager
def _rllib_draw(action_sampling):
    """The device runner drawing actions as RLlib's own runner does, for the A/B."""
    ours = action_sampling.sample
    action_sampling.sample = lambda dist: dist.sample()
    try:
        yield
    finally:
        action_sampling.sample = ours


def _stock_runner(rollout_length: int):
    def make(n: int):
        from ray.rllib.algorithms.ppo import PPOConfig
        from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

        config = (
            PPOConfig()
            .environment("CartPole-v1")
            .env_runners(num_envs_per_env_runner=n, rollout_fragment_length=rollout_length)
            .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
        )
        runner = SingleAgentEnvRunner(config=config)
        sample = lambda _i: runner.sample()  # noqa: E731
        sample.close = runner.stop
        return sample

    return make


def _jax_env_alone(env: str, device: str):
    def make(n: int):
        vector_env = make_jax_env(env, n, torch.device(device), {})
        vector_env.validate_actions = False  # as the runner steps it (ours alone: validate_actions=False)
        vector_env.reset(seed=0)
        pool = _action_pool(vector_env.action_space, vector_env.device)
        return lambda i: vector_env.step(pool[i % POOL])

    return make


def _gymnax_rollout(env: str, device: str, rollout_length: int):
    """gymnax's own loop (see the module doc)."""

    def make(n: int):
        import jax

        vector_env = make_jax_env(env, n, torch.device(device), {})
        vector_env.reset(seed=0)
        single, params = vector_env.gymnax_env, vector_env._params
        actions = single.action_space(vector_env.params)
        step = jax.vmap(single.step, in_axes=(0, 0, 0, None))

        def one_step(carry, _):
            key, state = carry
            key, action_key, step_key = jax.random.split(key, 3)
            action = jax.vmap(actions.sample)(jax.random.split(action_key, n))
            state = step(jax.random.split(step_key, n), state, action, params)[1]  # gymnax resets ended envs itself
            return (key, state), None

        return _scanned(one_step, (vector_env._key, vector_env._state), rollout_length)

    return make


def _brax_rollout(env: str, device: str, rollout_length: int):
    """Brax's own loop (see the module doc): its trainers' wrappers (vmap, the time limit, an
    autoreset to each env's first state), actions uniform in [-1, 1]."""

    def make(n: int):
        import jax
        from brax.envs.wrappers import training

        vector_env = make_jax_env(env, n, torch.device(device), {})
        wrapped = training.wrap(vector_env.brax_env, episode_length=vector_env.max_episode_steps)
        keys = jax.device_put(jax.random.split(jax.random.PRNGKey(0), n + 1), vector_env.jax_device)
        size = (n, vector_env.brax_env.action_size)

        def one_step(carry, _):
            key, state = carry
            key, action_key = jax.random.split(key)
            return (key, wrapped.step(state, jax.random.uniform(action_key, size, minval=-1.0, maxval=1.0))), None

        return _scanned(one_step, (keys[0], jax.jit(wrapped.reset)(keys[1:])), rollout_length)

    return make


def _scanned(one_step, carry, rollout_length: int):
    """A call that runs ``rollout_length`` of ``one_step`` in one jit-compiled ``lax.scan`` from
    the last call's carry, and waits for its result."""
    import jax

    rollout = jax.jit(lambda carry: jax.lax.scan(one_step, carry, None, length=rollout_length)[0])
    # the first call, here: a carry the library made (its reset) may differ in form from the one a
    # rollout returns (weak types), which JAX compiles for again; no timed call pays for that
    last = [jax.block_until_ready(rollout(carry))]

    def call(_i):
        last[0] = jax.block_until_ready(rollout(last[0]))

    return call


def contenders(device: str, rollout_length: int, env: str = CARTPOLE) -> list[tuple[Contender, int]]:
    """Each contender with the env steps per env of one call."""
    if env != CARTPOLE and not is_jax_id(env):
        raise ValueError(
            f"bench sampling --env {env!r}: it times {CARTPOLE} or a JAX env, gymnax's ('gymnax:<id>') "
            "or Brax's ('brax:<name>')"
        )
    if env != CARTPOLE:
        own = (
            Contender(GYMNAX, _gymnax_rollout(env, device, rollout_length), device)
            if env.startswith("gymnax:")
            else Contender(BRAX, _brax_rollout(env, device, rollout_length), device)
        )
        twin = TWINS.get(env)
        alone = _ours(twin, "auto", device, reuse_outputs=True, validate_actions=False)  # as the runner steps it
        mine = [
            (Contender(twin_name(ENV_ALONE, twin), alone, device), 1),
            (Contender(twin_name(DEVICE, twin), _device_runner(device, rollout_length, env=twin), device), rollout_length),
        ]
        return [
            (Contender(ENV_ALONE, _jax_env_alone(env, device), device), 1),
            (Contender(DEVICE, _device_runner(device, rollout_length, env=env), device), rollout_length),
            (own, rollout_length),
            *(mine if twin else []),
        ]
    stepped = [(Contender(DEVICE_STEPPED, _device_runner(device, rollout_length, cuda_graph=False), device), rollout_length)]
    return [
        (Contender(ENV_ALONE, _ours("GPUCartPole-v1", "auto", device, reuse_outputs=True, validate_actions=False), device), 1),
        (Contender(DEVICE, _device_runner(device, rollout_length), device), rollout_length),
        *(stepped if torch.device(device).type == "cuda" else []),
        (Contender(DEVICE_RLLIB_DRAW, _device_runner(device, rollout_length, rllib_draw=True), device), rollout_length),
        (Contender(STOCK, _stock_runner(rollout_length), "cpu", max_envs=4096), rollout_length),
    ]


def run(
    num_envs: list[int],
    rollout_length: int = 32,
    device: str | None = None,
    rounds: int = 3,
    min_seconds: float = 1.0,
    out_dir: str = "bench_results",
    plot: bool = False,
    env: str = CARTPOLE,
) -> list[dict]:
    """Time every contender at every size; print a table; write JSON/CSV (and a PNG)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    chosen = contenders(device, rollout_length, env)
    name = results_name(env)
    meta = {
        "env": env,
        "num_envs": num_envs,
        "rollout_length": rollout_length,
        "device": device,
        "rounds": rounds,
        "min_seconds": min_seconds,
    }
    rows = []
    for n in num_envs:
        here = [(c, k) for c, k in chosen if n <= c.max_envs]
        print(
            f"  num_envs={n:>9,}: {len(here)} contenders on {device}, {rounds} round{'s' * (rounds != 1)}",
            file=sys.stderr,
            flush=True,
        )
        calls = {c.name: c.make(n) for c, _ in here}
        turns = interleaved_turns([c for c, _ in here], calls, rounds, min_seconds, min_calls=rounds)
        for c, k in here:
            seconds = statistics.median(turns[c.name])
            rows.append(
                {
                    "contender": c.name,
                    "device": c.device,
                    "num_envs": n,
                    "steps_per_call": k,
                    "seconds_per_call": seconds,
                    "env_steps_per_s": n * k / seconds,
                    "seconds_per_call_by_round": turns[c.name],
                }
            )
            print(f"    {c.name:<44} {n * k / seconds:,.0f} env-steps/s", file=sys.stderr)
            getattr(calls[c.name], "close", lambda: None)()
        write_results(rows, out_dir, f"{name}.partial", meta)  # the sizes so far, should a cap cut the run
    print(summary(rows))
    report(rows, out_dir, name, meta, plot=(lambda: plot_sampling(rows, out_dir, name)) if plot else None)
    return rows


def twin_name(contender: str, twin: str | None) -> str:
    """A contender's name for this package's twin of a gymnax env."""
    return f"{contender}: {twin}"


def results_name(env: str) -> str:
    """``sampling`` for CartPole (its recorded name), ``sampling_<env>`` for a JAX env (``gymnax-Breakout-MinAtar``)."""
    return "sampling" if env == CARTPOLE else f"sampling_{env.replace(':', '-')}"


def summary(rows: list[dict]) -> str:
    """Env-steps/s per contender and size, and the device runner's ratios at each size."""
    names = list(dict.fromkeys(r["contender"] for r in rows))
    sizes = sorted({r["num_envs"] for r in rows})
    rate = {(r["contender"], r["num_envs"]): r["env_steps_per_s"] for r in rows}
    text = "env-steps/s (higher is better)\n" + format_table(
        ["contender"] + [f"n={n:,}" for n in sizes], [[c] + [rate.get((c, n)) for n in sizes] for c in names]
    )
    twin = next((c for c in names if c.startswith(f"{DEVICE}: ")), None)  # on this package's twin of a gymnax env
    own = next((c for c in names if c in OWN_ROLLOUTS), GYMNAX)  # a JAX env library's own rollout
    ratios = []
    for n in sizes:
        ours = rate.get((DEVICE, n))
        if ours is None:
            continue
        ratios.append(
            [
                n,
                ours / rate[(ENV_ALONE, n)] if (ENV_ALONE, n) in rate else None,
                ours / rate[(DEVICE_STEPPED, n)] if (DEVICE_STEPPED, n) in rate else None,
                rate.get((DEVICE_STEPPED, n), ours) / rate[(DEVICE_RLLIB_DRAW, n)] if (DEVICE_RLLIB_DRAW, n) in rate else None,
                ours / rate[(STOCK, n)] if (STOCK, n) in rate else None,
                ours / rate[(own, n)] if (own, n) in rate else None,
                rate[(twin, n)] / ours if (twin, n) in rate else None,
            ]
        )
    headers = ["num_envs", "device runner / env alone", "recorded / stepped from Python", "our draw / RLlib's draw"]
    headers += ["device runner / stock runner"]
    headers += [f"device runner / {OWN_ROLLOUTS[own]} rollout", "device runner on the twin / on gymnax's env"]
    present = [i for i in range(len(headers)) if i == 0 or any(row[i] is not None for row in ratios)]
    headers, ratios = [headers[i] for i in present], [[row[i] for i in present] for row in ratios]
    return text + "\n\nratios of the device runner's env-steps/s\n" + format_table(headers, ratios)


def plot_sampling(rows: list[dict], out_dir: str, name: str = "sampling") -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for contender in dict.fromkeys(r["contender"] for r in rows):
        mine = sorted((r for r in rows if r["contender"] == contender), key=lambda r: r["num_envs"])
        ax.plot([r["num_envs"] for r in mine], [r["env_steps_per_s"] for r in mine], marker="o", label=contender)
    ax.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="env-steps/s", title="sample() throughput, policy included")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return save_figure(fig, out_dir, name)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--num-envs", type=options.sizes(), help="sizes (default 16,256,4096 on CPU; 256,4096,65536,1048576 on GPU)"
    )
    parser.add_argument(
        "--rollout-length", type=options.count(), default=32, help="steps per sample() call (default: %(default)s)"
    )
    parser.add_argument("--device", type=options.device, help="the device runner's device (default: the GPU if there is one)")
    parser.add_argument(
        "--env",
        default=CARTPOLE,
        help="GPUCartPole-v1 (default), or a JAX env: one of gymnax's, e.g. gymnax:Breakout-MinAtar (against gymnax's "
        "own rollout, and this package's GPUBreakout-MinAtar), or Brax's, e.g. brax:ant (against Brax's own rollout)",
    )
    parser.add_argument(
        "--rounds", type=options.count(), default=3, help="interleaved timing rounds per size; each point is the median"
    )
    parser.add_argument(
        "--min-seconds", type=options.seconds, default=1.0, help="time each point at least this long (over all rounds)"
    )


def run_from_args(args) -> None:
    run(
        args.num_envs or parse_sizes(default_sizes(cpu="16,256,4096", gpu="256,4096,65536,1048576")),
        rollout_length=args.rollout_length,
        device=args.device,
        rounds=args.rounds,
        min_seconds=args.min_seconds,
        out_dir=args.out,
        plot=args.plot,
        env=args.env,
    )
