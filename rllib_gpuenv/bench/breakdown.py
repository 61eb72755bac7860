"""Where the time of a training iteration goes (beyond the CS267 paper's figure 8).

Two setups of the same PPO iteration on GPUCartPole-v1 (``--env`` another env of the suite),
side by side: the device path (``DeviceEnvRunner``) and RLlib's stock env runner on the same
env. ``--algo DeviceDQN`` (``DeviceSAC``, on GPUPendulum-v1 by default) breaks down the device
path's DQN (SAC) iteration (sampling, its n-step transitions and replay buffer, the update, the
weight sync) on its own.

**The parts partition the iteration.** During the measured ``algo.train()`` calls, the phases
of each training step (sampling, the learner update, the weight sync, and on the stock runner
its learner connector inside the update) are timed where they run, on the same iterations
(a device synchronisation at each phase boundary charges GPU work to its phase). "other" is
the rest of the iteration: RLlib's result and metrics handling. Sampling is then split with
timings of its own pieces: on the device path env stepping, policy inference and GAE timed in
isolation on the runner's env and module with the iteration's shapes; on the stock runner
RLlib's per-step timers (env step, module inference, connector pipelines) times the steps of
an iteration. What the pieces do not cover is "rest of sampling" (the rollout loop, episode
objects, metrics). Should the pieces add up to more than the sampling phase (isolated timings
can), they are scaled down to fit it, and the table says by how much. So the parts always sum
to the iteration, and the bar shows exactly the table's numbers. (On a GPU the device runner
replays its rollout from a CUDA graph, ``rllib/rollout_graph.py``; its pieces, timed stepped
from Python, are then scaled down to the replayed rollout.)

"host<->device + connectors" is what the data path costs beyond computing: on the device path
zero when runner and learner share the device, a measured copy of the batch (part of the
update phase) otherwise; on the stock runner its connector pipelines, the learner
connector's share included (GAE apart). Where there is a GPU, its utilisation is sampled
during the training iterations: the answer to "my GPU is at 2%".
"""

from __future__ import annotations

import collections
import statistics
import sys
import threading
import time

import torch

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import pyplot, report, save_figure, start_local_ray, synchronize
from rllib_gpuenv.experiments.envs import unqualified_env_id
from rllib_gpuenv.experiments.tables import format_table

# How the table and the plot name a part where the key alone would mislead.
LABELS = {"advantages (GAE)": "training data: GAE (PPO), n-step + replay buffer (DQN, SAC)"}
PARTS = [
    "env stepping",
    "policy inference",
    "host<->device + connectors",
    "advantages (GAE)",
    "rest of sampling (rollout loop, episodes)",
    "learner update",
    "weight sync",
    "other (results, metrics)",
]


def _timed(fn, device, repeat: int = 3, make_input=None) -> float:
    """Seconds per call of ``fn()`` after a warm-up call; with ``make_input``, of ``fn(x)``, each
    call on a fresh ``x = make_input()`` made before the clock starts."""
    args = [() if make_input is None else (make_input(),) for _ in range(repeat + 1)]
    fn(*args[0])  # warm-up
    synchronize(device)
    start = time.perf_counter()
    for a in args[1:]:
        fn(*a)
    synchronize(device)
    return (time.perf_counter() - start) / repeat


class PhaseClock:
    """Wall time of named phases of the training iterations, timed where they run.

    ``wrap(owner, "method", "phase")`` replaces the method on that object by one that adds its
    wall time to the phase (a phase may nest inside another; the caller subtracts).
    """

    def __init__(self, device):
        self.device = device
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self._wrapped: list[tuple] = []

    def unwrap(self) -> None:
        """Put back what ``wrap`` replaced (a module's function, not only an object's method)."""
        for owner, name, original in reversed(self._wrapped):
            setattr(owner, name, original)
        self._wrapped.clear()

    def wrap(self, owner, name: str, phase: str) -> None:
        method = getattr(owner, name)
        self._wrapped.append((owner, name, method))

        def timed(*args, **kwargs):
            synchronize(self.device)
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                synchronize(self.device)
                self.seconds[phase] += time.perf_counter() - start

        setattr(owner, name, timed)


class _TimedCall:
    """A callable object (RLlib's learner connector pipeline) whose calls a PhaseClock times."""

    def __init__(self, target, clock: PhaseClock, phase: str):
        self._target = target
        clock.wrap(self, "_call", phase)

    def _call(self, *args, **kwargs):
        return self._target(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._target, name)


class GPUUtilisation:
    """Samples the GPU's utilisation (via NVML, as nvidia-smi reports it) in a thread."""

    def __init__(self, period_s: float = 0.05):
        self.period_s, self.samples, self._stop = period_s, [], threading.Event()

    def __enter__(self):
        try:
            torch.cuda.utilization()
        except Exception:  # noqa: BLE001 (no GPU, or no pynvml: nothing to sample)
            return self
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(torch.cuda.utilization())
            time.sleep(self.period_s)

    def __exit__(self, *exc):
        self._stop.set()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def _train(algo, iterations: int, clock: PhaseClock) -> tuple[float, dict[str, float], list[dict], float | None]:
    """Seconds per iteration, the clock's phases per iteration (these iterations only), the
    results, and the mean GPU utilisation."""
    clock.seconds.clear()
    with GPUUtilisation() as gpu:
        synchronize(clock.device)
        start = time.perf_counter()
        results = [algo.train() for _ in range(iterations)]
        synchronize(clock.device)
        seconds = (time.perf_counter() - start) / iterations
    return seconds, {k: v / iterations for k, v in clock.seconds.items()}, results, gpu.mean


def _split(whole: float, pieces: dict[str, float]) -> tuple[dict[str, float], float, float]:
    """The pieces of a measured phase, scaled down to fit it if they add up to more; returns
    the (scaled) pieces, what they leave of the phase, and the scale factor (1: not scaled)."""
    total = sum(pieces.values())
    scale = min(1.0, whole / total) if total > 0 else 1.0
    scaled = {k: v * scale for k, v in pieces.items()}
    return scaled, max(0.0, whole - sum(scaled.values())), scale


# The device path's settings per algorithm (a ``configs/`` file), with the env the run asks for;
# an algorithm and env with a file of their own use it (Pendulum's PPO).
DEVICE_CONFIG_FILES = {
    ("DevicePPO", "GPUPendulum-v1"): "gpu_pendulum_ppo.yaml",
    "DevicePPO": "gpu_cartpole_ppo.yaml",
    "DeviceDQN": "gpu_cartpole_dqn.yaml",
    "DeviceSAC": "gpu_pendulum_sac.yaml",
}
DEFAULT_ENV = "GPUCartPole-v1"
# What the PPO update of the stock runner's row takes from the device path's config (Pendulum's
# file trains 10 epochs of 256, CartPole's 4 of 512: the update would differ 3x otherwise).
PPO_UPDATE_SETTINGS = (
    "num_epochs",
    "minibatch_size",
    "lr",
    "gamma",
    "lambda_",
    "clip_param",
    "grad_clip",
    "entropy_coeff",
    "vf_loss_coeff",
    "vf_clip_param",
    "use_kl_loss",
)


def device_config(
    algo: str,
    env: str | None,
    device: str | None,
    num_envs: int | None = None,
    rollout_length: int | None = None,
    config_file: str | None = None,
):
    """The device path's config: ``config_file`` (default: the algorithm's shipped file) on
    ``env`` (default: the file's own) and ``device``, with its own rollout shape unless
    ``num_envs`` or ``rollout_length`` replace it."""
    from rllib_gpuenv.envs import SHIPPED_DEFS, env_definition
    from rllib_gpuenv.experiments import load_config
    from rllib_gpuenv.experiments.shipped import config_file as shipped

    if env is not None and env_definition(env) is None:  # both setups step this package's env (the stock runner by its id)
        raise ValueError(f"--env {env}: the breakdown times an env of this package: {', '.join(SHIPPED_DEFS)}")
    if config_file is None:
        name = DEVICE_CONFIG_FILES.get((algo, env)) or DEVICE_CONFIG_FILES.get(algo)
        if name is None:
            raise ValueError(
                f"--algo {algo}: the breakdown knows {', '.join(k for k in DEVICE_CONFIG_FILES if isinstance(k, str))}"
            )
        config_file = shipped(name)
    experiment = load_config(config_file, device=device, seed=0)
    if experiment.config.algo_class.__name__ != algo:
        raise ValueError(f"{config_file}: runs {experiment.config.algo_class.__name__}, not {algo}")
    config = experiment.config.environment(env or unqualified_env_id(experiment.config.env))
    if env_definition(config.env) is None:
        raise ValueError(f"{config_file}: trains {config.env}; the breakdown times an env of this package: --env ...")
    if num_envs is not None:
        config.env_runners(num_envs_per_env_runner=num_envs)
    if rollout_length is not None:
        config.device_rollouts(rollout_length=rollout_length)
    if algo == "DevicePPO":
        config.training(minibatch_size=min(config.minibatch_size, config.num_envs_per_env_runner * config.rollout_length))
    return config


def device_path(config, iterations: int, profile_build: int = 0) -> dict:
    """One row: the device path's iteration in parts. PPO's training data is its advantages
    (values + GAE on the learner, part of its update); DQN's is its n-step transitions and
    the replay buffer's adds and draws (between sampling and the update). ``build_s``: how long
    ``build_algo()`` took (not part of the iteration); with ``profile_build`` its slowest
    ``profile_build`` functions (cumulative time) are printed."""
    from rllib_gpuenv.rllib.logdir import stop_algorithm
    from rllib_gpuenv.rllib.ppo import DevicePPO

    algo, build_s = _build(config, profile_build)
    try:
        runner, learner = algo.env_runner, algo.learner_group._learner
        is_ppo = isinstance(algo, DevicePPO)
        seconds, phases, results, gpu = _time_device_phases(algo, iterations, is_ppo)
        # An iteration (one train()) samples one rollout for PPO, several for DQN (RLlib's
        # min_sample_timesteps_per_iteration): the pieces count as many rollouts.
        steps = statistics.fmean(r["env_runners"]["num_env_steps_sampled"] for r in results)
        rollouts = steps / (config.num_envs_per_env_runner * config.rollout_length)
        sampling, sampling_rest, sampling_scale = _split(
            phases["sampling"], _device_sampling_pieces(runner, config.rollout_length, rollouts)
        )
        if is_ppo:
            update, update_rest, update_scale = _split(
                phases["update"], _ppo_update_pieces(runner, learner, config.rollout_length)
            )
            training_data, copies = update["advantages (values + GAE)"], update.get("host<->device + connectors", 0.0)
        else:
            update_rest, update_scale, copies = phases.get("update", 0.0), 1.0, 0.0
            training_data = phases.get("training data", 0.0)
        parts = {
            **sampling,
            "rest of sampling (rollout loop, episodes)": sampling_rest,
            "host<->device + connectors": copies,
            "advantages (GAE)": training_data,
            "learner update": update_rest,
            "weight sync": phases["sync"],
        }
        scales = {"sampling": sampling_scale, "update": update_scale}
        name, env = type(algo).__name__, unqualified_env_id(config.env)
        setup = "ours: device path" + ("" if (name, env) == ("DevicePPO", DEFAULT_ENV) else f" ({name}, {env})")
        row = _row(setup, str(runner._device), str(learner._device), round(steps), seconds, parts, scales, gpu)
        # the first timed iteration: the third, after the warm-ups (a GPU's recording among them)
        first_timed = results[0]["training_iteration"]
        return {**row, "update": _update(config), "build_s": build_s, "first_timed_iteration": first_timed}
    finally:
        stop_algorithm(algo)


def _time_device_phases(algo, iterations: int, is_ppo: bool):
    """``_train`` with the device path's training-step phases timed where they run."""
    from rllib_gpuenv.rllib import device_replay

    runner = algo.env_runner
    clock = PhaseClock(runner._device)
    clock.wrap(runner, "sample", "sampling")
    clock.wrap(runner, "get_metrics", "sampling")
    clock.wrap(algo, "sync_runner_weights", "sync")
    if is_ppo:
        clock.wrap(algo, "update_learners", "update")
    else:  # the learner's round: n-step transitions and its replay buffer (training data), then its update
        clock.wrap(algo.learner_group._learner, "update_on_draws", "update")  # the lean update or RLlib's
        clock.wrap(device_replay, "n_step_transitions", "training data")
    try:
        # Warm-up: compilation, allocations, DQN's replay buffer; on a GPU the second rollout is
        # recorded as a CUDA graph (rollout_graph.py), so the timed iterations replay it. With
        # one warm-up the recording fell in the first timed iteration: likely why the H200's
        # breakdown gave the main job's sampling 29 ms an iteration where its training run's
        # replayed rollouts took ~4 ms (benchmarks/RESULTS.md; the next lease checks).
        for _ in range(2):
            algo.train()
        if not is_ppo:
            replay = algo.learner_group._learner._replay
            for method in ("add", "sample", "update_priorities"):  # the last: prioritized replay's
                if hasattr(replay, method):
                    clock.wrap(replay, method, "training data")
        return _train(algo, iterations, clock)
    finally:
        clock.unwrap()  # device_replay.n_step_transitions is the module's own function again


def _build(config, profile_build: int):
    """``config.build_algo()`` and its seconds; profiled where ``profile_build`` asks (on the H100
    leases the main job's build took 15-18 s, on the 2-core CPU 0.9 s)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile() if profile_build else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    algo = config.build_algo()
    build_s = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
        print(f"build_algo() took {build_s:.2f} s; its slowest calls (cumulative):")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(profile_build)
    return algo, build_s


def _device_sampling_pieces(runner, T: int, rollouts: float) -> dict[str, float]:
    """The sampling phase's pieces, each timed in isolation with the iteration's shapes."""
    obs, _ = runner.env.reset(seed=0)
    with torch.no_grad():
        actions = runner._actions_for_env(runner._act(obs, True, 0)[0])  # what the env gets: any action space

    def stepping():
        for _ in range(T):
            runner.env.step(actions)

    @torch.no_grad()
    def inference():
        for _ in range(T):
            runner._act(obs, True, 0)

    return {
        "env stepping": _timed(stepping, runner._device) * rollouts,
        "policy inference": _timed(inference, runner._device) * rollouts,
    }


def _ppo_update_pieces(runner, learner, T: int) -> dict[str, float]:
    """The PPO update phase's pieces: the critic's values and GAE the learner computes before
    RLlib's update, and the rollout crossing to the learner's device (where it is another one)."""
    from rllib_gpuenv.rllib.learner import rollout_batch

    rollout = runner.sample()
    pieces = {
        "advantages (values + GAE)": _timed(lambda: learner._with_advantages(rollout_batch(rollout), T), learner._device)
    }
    if torch.device(learner._device) != runner._device:
        pieces["host<->device + connectors"] = _timed(lambda: rollout.to(learner._device), runner._device)
    return pieces


def stock_config(num_envs: int, rollout_length: int, env: str = DEFAULT_ENV, learning=None):
    """RLlib's stock runner on ``env`` with the PPO update of ``learning`` (the device path's
    config; default the main job's), so that only the runner differs."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    from rllib_gpuenv.experiments import cartpole_config, load_experiments
    from rllib_gpuenv.experiments.shipped import config_file

    (experiment,) = load_experiments(config_file("gpu_cartpole_stock_runner.yaml"))
    steps = num_envs * rollout_length
    learning = learning or cartpole_config()
    update = {name: getattr(learning, name) for name in PPO_UPDATE_SETTINGS}
    update["minibatch_size"] = min(steps, learning.minibatch_size)
    config = (
        experiment.config.environment(f"rllib_gpuenv:{env}")
        .env_runners(num_envs_per_env_runner=num_envs)
        .training(train_batch_size_per_learner=steps, **update)
        .rl_module(model_config=learning.model_config)
    )
    # RLlib's runner as it ships: without the config file's episode-copy callback (which only
    # corrects its episode-length metrics and costs ~70 µs per episode chunk).
    return config.callbacks(RLlibCallback)


def stock_runner(num_envs: int, rollout_length: int, iterations: int, env: str = DEFAULT_ENV, learning=None) -> dict:
    """One row: RLlib's stock runner on ``env`` (``stock_config``)."""
    from rllib_gpuenv.rllib.logdir import stop_algorithm

    config = stock_config(num_envs, rollout_length, env, learning)
    steps = num_envs * rollout_length
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        clock = PhaseClock("cpu")
        clock.wrap(algo.env_runner, "sample", "sampling")  # PPO.training_step's phases
        clock.wrap(algo.env_runner, "get_metrics", "sampling")
        clock.wrap(algo.learner_group, "update", "update")
        learner._learner_connector = _TimedCall(learner._learner_connector, clock, "learner connector")  # inside the update
        clock.wrap(algo.env_runner_group, "sync_weights", "sync")
        algo.train()
        seconds, phases, results, gpu = _train(algo, iterations, clock)
        sampling, sampling_rest, sampling_scale = _split(phases["sampling"], _stock_sampling_pieces(results, steps / num_envs))
        connector, gae_share = phases["learner connector"], _gae_share(algo, steps)
        parts = {
            **sampling,
            "rest of sampling (rollout loop, episodes)": sampling_rest,
            "host<->device + connectors": sampling["host<->device + connectors"] + connector * (1 - gae_share),
            "advantages (GAE)": connector * gae_share,
            "learner update": phases["update"] - connector,
            "weight sync": phases["sync"],
        }
        device = "cuda" if torch.cuda.is_available() and config.num_gpus_per_learner else "cpu"
        setup = "RLlib stock runner, our env" + ("" if env == DEFAULT_ENV else f" ({env})")
        return {
            **_row(setup, "cpu (numpy)", device, steps, seconds, parts, {"sampling": sampling_scale}, gpu),
            "update": _update(config),
        }
    finally:
        stop_algorithm(algo)


def _stock_sampling_pieces(results: list[dict], calls: float) -> dict[str, float]:
    """The stock runner's sampling pieces, from RLlib's per-step timers over ``calls`` env steps."""
    runners = _mean(results, "env_runners")
    connectors = (
        runners["env_to_module_connector/connector_pipeline_timer"]
        + runners["module_to_env_connector/connector_pipeline_timer"]
    )
    return {
        "env stepping": runners["env_step_timer"] * calls,
        "policy inference": runners["rlmodule_inference_timer"] * calls,
        "host<->device + connectors": connectors * calls,
    }


def _gae_share(algo, steps: int) -> float:
    """GAE's share of the learner connector, from calls on freshly sampled episodes (the
    connector extends them in place), each with its own metrics."""
    from ray.rllib.utils.metrics import ALL_MODULES, CONNECTOR_TIMERS, LEARNER_CONNECTOR, TIMERS
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    learner = algo.learner_group._learner
    gae_seconds = []

    def learner_connector(episodes):
        metrics = MetricsLogger()
        learner._learner_connector._target(
            rl_module=learner.module, batch={}, episodes=episodes, shared_data={}, metrics=metrics
        )
        gae_seconds.append(
            metrics.peek((ALL_MODULES, LEARNER_CONNECTOR, TIMERS, CONNECTOR_TIMERS, "general_advantage_estimation"))
        )

    connector_alone = _timed(learner_connector, "cpu", make_input=lambda: algo.env_runner.sample(num_timesteps=steps))
    return min(1.0, (sum(gae_seconds[1:]) / len(gae_seconds[1:])) / connector_alone)  # without the warm-up call


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float)):
            out[f"{prefix}{k}"] = float(v)
    return out


def _mean(results: list[dict], key: str) -> dict:
    flat = [_flatten(r.get(key, {})) for r in results]
    return {k: sum(f.get(k, 0.0) for f in flat) / len(flat) for k in flat[-1]}


def _update(config) -> dict:
    """What an iteration's update trains: PPO's epochs and minibatch, DQN's (SAC's) minibatch and intensity."""
    from ray.rllib.algorithms.ppo import PPOConfig

    # Every AlgorithmConfig has num_epochs (DQN's is an unused 1): ask which algorithm it is.
    names = (
        PPO_UPDATE_SETTINGS[:2] if isinstance(config, PPOConfig) else ("train_batch_size_per_learner", "training_intensity")
    )
    return {name: getattr(config, name) for name in names}


def _row(setup, runner_device, learner_device, steps, seconds, parts, scales, gpu) -> dict:
    """One setup's row; "other" is what the timed phases leave of the iteration, so the parts sum to it."""
    parts = {p: parts.get(p, 0.0) for p in PARTS[:-1]}
    parts[PARTS[-1]] = max(0.0, seconds - sum(parts.values()))
    return {
        "setup": setup,
        "runner_device": runner_device,
        "learner_device": learner_device,
        "env_steps_per_iteration": steps,
        "seconds_per_iteration": seconds,
        "env_steps_per_s": steps / seconds,
        "gpu_utilisation_pct": gpu,
        **{f"scale_{k}": v for k, v in scales.items()},
        **{f"s_{p}": parts[p] for p in PARTS},
    }


def run(
    num_envs: int | None = None,
    rollout_length: int | None = None,
    iterations: int = 5,
    device: str | None = None,
    out_dir: str = "bench_results",
    plot: bool = False,
    algo: str = "DevicePPO",
    env: str | None = None,
    config_file: str | None = None,
    profile_build: int = 0,
) -> list[dict]:
    """The device path's iteration in parts, and for PPO RLlib's stock runner's beside it (its
    DQN has another training step, with RLlib's episode replay buffer: not compared here). The
    rollouts have the experiment file's shape (the main job's iteration, by default) unless
    ``num_envs`` or ``rollout_length`` replace it.

    The device path runs as the main job does: without Ray, unless its settings put a runner or
    a learner in an actor of their own; RLlib's stock algorithm always starts Ray."""
    import ray

    from rllib_gpuenv.rllib.in_process import builds_without_ray

    config = device_config(algo, env, device, num_envs, rollout_length, config_file)  # a bad name fails before Ray starts
    env = config.env
    num_envs, rollout_length = config.num_envs_per_env_runner, config.rollout_length
    print("  device path ...", file=sys.stderr, flush=True)
    if not builds_without_ray(config):
        start_local_ray()
    rows = [{**device_path(config, iterations, profile_build), "ray": ray.is_initialized()}]
    if algo == "DevicePPO":
        print("  stock runner ...", file=sys.stderr, flush=True)
        start_local_ray()
        rows.append({**stock_runner(num_envs, rollout_length, iterations, env, learning=config), "ray": True})
    per_rollout = num_envs * rollout_length
    rounds = rows[0]["env_steps_per_iteration"] // per_rollout
    print(
        f"one {algo} iteration on {env} of {rows[0]['env_steps_per_iteration']:,} env steps "
        f"({f'{rounds} rounds of ' if rounds > 1 else ''}rollouts of {num_envs} envs x {rollout_length} steps)\n" + table(rows)
    )
    meta = {"algo": algo, "env": env, "num_envs": num_envs, "rollout_length": rollout_length, "iterations": iterations}
    name = "breakdown" if (algo, env) == ("DevicePPO", DEFAULT_ENV) else f"breakdown_{algo}_{env}"
    report(rows, out_dir, name, meta, plot=(lambda: plot_breakdown(rows, out_dir, name)) if plot else None)
    return rows


def table(rows: list[dict]) -> str:
    """The parts in ms and % of the iteration (they sum to it), the iteration, and how sampling was split."""
    headers = ["part"] + [r["setup"] for r in rows]
    lines = [
        [LABELS.get(p, p)]
        + [f"{r[f's_{p}'] * 1e3:.1f} ms ({100 * r[f's_{p}'] / r['seconds_per_iteration']:.0f}%)" for r in rows]
        for p in PARTS
    ]
    lines += [
        ["iteration (sum of the parts)", *(f"{r['seconds_per_iteration'] * 1e3:.1f} ms" for r in rows)],
        ["env-steps/s", *(f"{r['env_steps_per_s']:,.0f}" for r in rows)],
        ["devices (runner / learner)", *(f"{r['runner_device']} / {r['learner_device']}" for r in rows)],
        ["build_algo() (before the iterations)", *(f"{r['build_s']:.2f} s" if "build_s" in r else "-" for r in rows)],
        [
            "GPU utilisation",
            *("n/a" if r["gpu_utilisation_pct"] is None else f"{r['gpu_utilisation_pct']:.0f}%" for r in rows),
        ],
        ["sampling pieces scaled by", *(f"{r.get('scale_sampling', 1.0):.2f}" for r in rows)],
    ]
    return format_table(headers, lines)


def plot_breakdown(rows: list[dict], out_dir: str, name: str = "breakdown") -> str:
    """Stacked bars of the table's parts (they sum to the iteration), legend beside the bars."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(10, 3.2))
    setups = [r["setup"] for r in rows][::-1]  # first row on top
    left = [0.0] * len(rows)
    for p in PARTS:
        widths = [r[f"s_{p}"] * 1e3 for r in rows][::-1]
        ax.barh(setups, widths, left=left, label=LABELS.get(p, p))
        left = [a + b for a, b in zip(left, widths)]
    for y, r in enumerate(rows[::-1]):
        ax.text(r["seconds_per_iteration"] * 1e3, y, f"  {r['seconds_per_iteration'] * 1e3:.0f} ms", va="center", fontsize=9)
    ax.set_xlim(0, max(r["seconds_per_iteration"] for r in rows) * 1e3 * 1.15)
    ax.set(
        xlabel="ms per training iteration (the parts sum to the iteration)",
        title="Where the time of a training iteration goes",
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save_figure(fig, out_dir, name)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--algo",
        choices=["DevicePPO", "DeviceDQN", "DeviceSAC"],
        default="DevicePPO",
        help="the device path's algorithm (default: %(default)s)",
    )
    parser.add_argument(
        "--env",
        help="an env of the suite, e.g. GPUPendulum-v1 (default: the experiment file's: GPUCartPole-v1 for DevicePPO "
        "and DeviceDQN, GPUPendulum-v1 for DeviceSAC)",
    )
    parser.add_argument(
        "--device-config",
        metavar="PATH",
        help="the device path's experiment file (default: the algorithm's shipped one, gpu_pendulum_ppo.yaml for Pendulum "
        "PPO)",
    )
    parser.add_argument("--num-envs", type=options.count(), help="envs per env runner (default: the experiment file's)")
    parser.add_argument(
        "--rollout-length", type=options.count(), help="steps per env per rollout (default: the experiment file's)"
    )
    parser.add_argument("--iterations", type=options.count(), default=5, help="timed iterations (default: %(default)s)")
    parser.add_argument("--device", type=options.device, help="device of the device path (default auto)")
    parser.add_argument(
        "--profile-build",
        type=options.count(0),
        default=0,
        metavar="N",
        help="profile the device path's build_algo() and print its N slowest calls (cumulative time)",
    )


def run_from_args(args) -> None:
    run(
        args.num_envs,
        args.rollout_length,
        args.iterations,
        device=args.device,
        out_dir=args.out,
        plot=args.plot,
        algo=args.algo,
        env=args.env,
        config_file=args.device_config,
        profile_build=args.profile_build,
    )
