"""Where the time of a training iteration goes (beyond the CS267 paper's figure 8).

Two setups of the same PPO iteration on GPUCartPole-v1, side by side:

* the device path (``DeviceEnvRunner``): env stepping, policy inference and GAE are timed in
  isolation on the runner's own env and module, with the iteration's shapes; the learner update
  and the weight sync come from RLlib's timers;
* RLlib's stock env runner on the same env: its own timers (env step, module inference, the
  connector pipelines that convert numpy <-> tensors and move data to the device, GAE in the
  learner connector, the update), scaled by the steps of one iteration.

"host<->device + connectors" is what the data path costs beyond computing: on the device path
zero when runner and learner share the device, a measured copy of the batch otherwise. Where
there is a GPU, its utilisation is sampled during the training iterations: the answer to "my
GPU is at 2%".
"""

from __future__ import annotations

import sys
import threading
import time

import torch

from rllib_gpuenv.bench.common import format_table, pyplot, report, save_figure, synchronize

PARTS = ["env stepping", "policy inference", "host<->device + connectors", "advantages (GAE)", "learner update", "weight sync", "other"]


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


def _train(algo, iterations: int) -> tuple[float, list[dict], float | None]:
    with GPUUtilisation() as gpu:
        start = time.perf_counter()
        results = [algo.train() for _ in range(iterations)]
        seconds = (time.perf_counter() - start) / iterations
    return seconds, results, gpu.mean


def device_path(device: str | None, num_envs: int, rollout_length: int, iterations: int) -> dict:
    from ray.rllib.core.columns import Columns

    from rllib_gpuenv.rllib.gae import compute_gae
    from rllib_gpuenv.train import cartpole_config

    config = cartpole_config(device=device, seed=0).env_runners(num_envs_per_env_runner=num_envs)
    config.device_rollouts(rollout_length=rollout_length)
    config.training(minibatch_size=min(config.minibatch_size, num_envs * rollout_length))
    algo = config.build_algo()
    try:
        algo.train()  # warm-up (compilation, allocations)
        seconds, results, gpu = _train(algo, iterations)
        runner, T = algo.env_runner, config.rollout_length
        dev = runner._device
        obs, _ = runner.env.reset(seed=0)
        actions = torch.randint(0, 2, (T, num_envs), device=dev)

        def stepping():
            for t in range(T):
                runner.env.step(actions[t])

        @torch.no_grad()
        def inference():
            for _ in range(T):
                out = runner.module.forward_train({Columns.OBS: obs})
                runner.module.compute_values({Columns.OBS: obs}, embeddings=out.get(Columns.EMBEDDINGS))
                runner._distribution(out[Columns.ACTION_DIST_INPUTS], True).sample()

        rewards, values = torch.rand(T, num_envs, device=dev), torch.rand(T + 1, num_envs, device=dev)
        done = torch.rand(T, num_envs, device=dev) < 0.02
        learner_device = algo.learner_group._learner._device
        batch = runner.sample()
        copy = 0.0
        if torch.device(learner_device) != dev:  # the batch crosses to the learner's device each iteration
            copy = _timed(lambda: {k: v.to(learner_device) for k, v in batch.items()}, dev)
        parts = {
            "env stepping": _timed(stepping, dev),
            "policy inference": _timed(inference, dev),
            "host<->device + connectors": copy,
            "advantages (GAE)": _timed(lambda: compute_gae(rewards, values, done, ~done, 0.99, 0.95), dev),
            "learner update": _timed(lambda: algo.update_learners(batch), learner_device, repeat=2),
            "weight sync": _timed(algo._sync_whole_module, dev),
        }
        return _row("ours: device path", str(dev), str(learner_device), num_envs * T, seconds, parts, gpu)
    finally:
        algo.stop()


def stock_runner(num_envs: int, rollout_length: int, iterations: int) -> dict:
    from ray.rllib.utils.metrics import ALL_MODULES, CONNECTOR_TIMERS, LEARNER_CONNECTOR, NUM_ENV_STEPS_SAMPLED_LIFETIME, TIMERS
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from rllib_gpuenv.config_files import config_file
    from rllib_gpuenv.experiments import load_experiments
    from rllib_gpuenv.train import cartpole_config

    (experiment,) = load_experiments(config_file("gpu_cartpole_stock_runner.yaml"))
    steps = num_envs * rollout_length
    learning = cartpole_config()  # the same PPO update as the device path
    config = experiment.config.env_runners(num_envs_per_env_runner=num_envs).training(
        train_batch_size_per_learner=steps, minibatch_size=min(steps, learning.minibatch_size), num_epochs=learning.num_epochs
    )
    algo = config.build_algo()
    try:
        algo.train()
        seconds, results, gpu = _train(algo, iterations)
        runners = _mean(results, "env_runners")
        # Sampling is timed whole; RLlib's per-step timers (averaged over thousands of calls)
        # split it. The update and the learner connector (its GAE included) are timed directly,
        # each call on freshly sampled episodes as PPO's training step has them: RLlib's own
        # timers of those run once per iteration and still weigh the first, slow call.
        calls = steps / num_envs  # env.step() calls per iteration
        learner = algo.learner_group._learner
        sample = lambda: algo.env_runner.sample(num_timesteps=steps)  # noqa: E731
        update = _timed(lambda episodes: algo.learner_group.update(
            episodes=episodes, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: 0}, num_epochs=config.num_epochs,
            minibatch_size=config.minibatch_size, shuffle_batch_per_epoch=config.shuffle_batch_per_epoch), "cpu", make_input=sample)  # fmt: skip
        gae_seconds = []

        def learner_connector(episodes):
            metrics = MetricsLogger()
            learner._learner_connector(rl_module=learner.module, batch={}, episodes=episodes, shared_data={}, metrics=metrics)
            gae_seconds.append(metrics.peek((ALL_MODULES, LEARNER_CONNECTOR, TIMERS, CONNECTOR_TIMERS, "general_advantage_estimation")))

        connector_seconds = _timed(learner_connector, "cpu", make_input=sample)
        gae = sum(gae_seconds[1:]) / len(gae_seconds[1:])  # without the warm-up call
        env_runner_connectors = runners["env_to_module_connector/connector_pipeline_timer"] + runners["module_to_env_connector/connector_pipeline_timer"]
        sync = _timed(lambda: algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group), "cpu")
        parts = {
            "env stepping": runners["env_step_timer"] * calls,
            "policy inference": runners["rlmodule_inference_timer"] * calls,
            "host<->device + connectors": env_runner_connectors * calls + connector_seconds - gae,
            "advantages (GAE)": gae,
            "learner update": max(0.0, update - connector_seconds),
            "weight sync": sync,
        }
        device = "cuda" if torch.cuda.is_available() and config.num_gpus_per_learner else "cpu"
        return _row("RLlib stock runner, our env", "cpu (numpy)", device, steps, seconds, parts, gpu)
    finally:
        algo.stop()


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


def _row(setup, runner_device, learner_device, steps, seconds, parts, gpu) -> dict:
    parts["other"] = max(0.0, seconds - sum(parts.values()))
    return {"setup": setup, "runner_device": runner_device, "learner_device": learner_device, "env_steps_per_iteration": steps,
            "seconds_per_iteration": seconds, "env_steps_per_s": steps / seconds, "gpu_utilisation_pct": gpu,
            **{f"s_{p}": parts[p] for p in PARTS}}  # fmt: skip


def run(num_envs: int = 128, rollout_length: int = 32, iterations: int = 5, device: str | None = None,
        out_dir: str = "bench_results", plot: bool = False) -> list[dict]:  # fmt: skip
    import ray

    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    print("  device path ...", file=sys.stderr, flush=True)
    rows = [device_path(device, num_envs, rollout_length, iterations)]
    print("  stock runner ...", file=sys.stderr, flush=True)
    rows.append(stock_runner(num_envs, rollout_length, iterations))
    headers = ["part"] + [r["setup"] for r in rows]
    table = [[p] + [f"{r[f's_{p}'] * 1e3:.1f} ms ({100 * r[f's_{p}'] / r['seconds_per_iteration']:.0f}%)" for r in rows] for p in PARTS]
    table += [["iteration", *(f"{r['seconds_per_iteration'] * 1e3:.1f} ms" for r in rows)],
              ["env-steps/s", *(f"{r['env_steps_per_s']:,.0f}" for r in rows)],
              ["devices (runner / learner)", *(f"{r['runner_device']} / {r['learner_device']}" for r in rows)],
              ["GPU utilisation", *("n/a" if r["gpu_utilisation_pct"] is None else f"{r['gpu_utilisation_pct']:.0f}%" for r in rows)]]  # fmt: skip
    print(f"one PPO iteration of {rows[0]['env_steps_per_iteration']:,} env steps ({num_envs} envs x {rollout_length} steps)\n"
          + format_table(headers, table))  # fmt: skip
    meta = {"num_envs": num_envs, "rollout_length": rollout_length, "iterations": iterations}
    report(rows, out_dir, "breakdown", meta, plot=(lambda: plot_breakdown(rows, out_dir)) if plot else None)
    return rows


def plot_breakdown(rows: list[dict], out_dir: str) -> str:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(9, 3.5))
    left = [0.0] * len(rows)
    for p in PARTS:
        widths = [r[f"s_{p}"] * 1e3 for r in rows]
        ax.barh([r["setup"] for r in rows], widths, left=left, label=p)
        left = [a + b for a, b in zip(left, widths)]
    ax.set(xlabel="ms per training iteration", title="Where the time of a PPO iteration goes")
    ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, out_dir, "breakdown")
