"""Reward vs wall time (the CS267 paper's figure 7): one task, several setups, side by side.

Tasks (``--task``):

* ``cartpole-ppo`` (default): PPO on CartPole, target 475. ``device``: our device path
  (``configs/gpu_cartpole_ppo.yaml``: DevicePPO, env + policy + GAE on one device);
  ``stock-runner``: our GPUCartPole-v1 on RLlib's stock env runner
  (``configs/gpu_cartpole_stock_runner.yaml``); ``stock-rllib``: stock RLlib PPO on gymnasium's
  CartPole-v1 (``configs/cartpole_stock_rllib.yaml``, RLlib's own tuned example), also with 8
  envs per runner; ``sb3``: Stable-Baselines3 PPO with the RL-Zoo CartPole-v1 hyperparameters;
  ``purejaxrl``: PureJaxRL's PPO, one XLA program, on gymnax's CartPole-v1 (``purejaxrl.py``).
* ``pendulum-ppo``: continuous PPO on Pendulum, target -300 (where RLlib's own Pendulum PPO
  example stops). ``device``: DevicePPO on GPUPendulum-v1 (``configs/gpu_pendulum_ppo.yaml``);
  ``stock-rllib``: stock RLlib PPO on gymnasium's Pendulum-v1 (``configs/pendulum_stock_rllib.yaml``,
  RLlib's example); ``sb3``: SB3 PPO with RL-Zoo's Pendulum-v1 hyperparameters.
* ``pendulum-sac``: SAC on Pendulum, target -300. ``device``: DeviceSAC on GPUPendulum-v1
  (``configs/gpu_pendulum_sac.yaml``: the replay buffer on the learner's device);
  ``device-ppo``: DevicePPO on the same envs (``configs/gpu_pendulum_ppo.yaml``), the on-policy
  way; ``stock-rllib``: stock RLlib SAC on gymnasium's Pendulum-v1
  (``configs/pendulum_sac_stock_rllib.yaml``, RLlib's example); ``sb3``: SB3 SAC with RL-Zoo's
  Pendulum-v1 hyperparameters.
* ``cartpole-dqn``: DQN on CartPole, target 475. ``device``: DeviceDQN on GPUCartPole-v1 with the
  settings of ``configs/gpu_cartpole_dqn.yaml``, read when the benchmark runs (``--device-config``
  names another file); ``stock-rllib``: stock RLlib DQN on gymnasium's CartPole-v1
  (``configs/cartpole_dqn_stock_rllib.yaml``, RLlib's example); ``sb3``: SB3 DQN with RL-Zoo's
  CartPole-v1 hyperparameters. RL-Zoo's 50k steps cannot hold a last-100 mean of 475, so SB3
  trains on past them (schedules where they ended) until the target or the budget;
  ``purejaxrl``: PureJaxRL's DQN, one XLA program, on gymnax's CartPole-v1 (``purejaxrl_dqn.py``).
* ``breakout-ppo``: PPO on MinAtar Breakout (gymnax's ``Breakout-MinAtar``, 10×10×4 images),
  target 30. ``device``: DevicePPO with RLlib's CNN encoder (``configs/gymnax_breakout_ppo.yaml``,
  gymnax's JAX env on the runner's device); ``random``: a random policy on the same envs, the
  baseline (at most ``RANDOM_BUDGET_S`` seconds: it learns nothing).
* ``inverted-pendulum-ppo``: continuous PPO on Brax's ``inverted_pendulum`` (Brax's JAX physics),
  target 950 (gymnasium's reward threshold for InvertedPendulum). ``device``: DevicePPO
  (``configs/brax_inverted_pendulum_ppo.yaml``); ``random``: a random policy on the same envs.
  Brax's own PPO trainer is no contender: Brax 0.14's ``ppo.train`` calls
  ``jax.device_put_replicated``, which the JAX that Brax installs with (0.10) no longer has.
* ``acrobot-ppo``: PPO on Acrobot, target -100; ``mountaincar-dqn``: DQN on MountainCar, target
  -110 (gymnasium's reward thresholds). ``device``: DevicePPO (``configs/gpu_acrobot_ppo.yaml``),
  DeviceDQN (``configs/gpu_mountaincar_dqn.yaml``); ``sb3``: SB3 with RL-Zoo's hyperparameters
  for the env; ``purejaxrl`` (Acrobot): PureJaxRL's PPO on gymnax's Acrobot-v1, with its
  CartPole settings (it ships no others). Both are judged on evaluation episodes, not on the
  training window (``Evaluation``).

Every run happens in a fresh process, one after the other on the same machine (seed by seed,
each contender in turn, so that the machine's slow spells fall on all of them), and records
(seconds, env steps, mean return, gradient steps) after each iteration. The return criterion is the same for
all: on the tasks not judged on evaluation episodes, the mean return of the last 100 episodes
(the device env runner's ``episode_return_mean``; for RLlib's stock runner, rebuilt from each
iteration's mean and count; SB3's ``ep_info_buffer``; PureJaxRL's, the episodes its updates
ended). Time to target counts training
only, evaluations off the clock; building the algorithm (for PureJaxRL, compiling its program)
is reported apart.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import json
import math
import os
import statistics
import sys
import time

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import pyplot, report, run_child, save_figure, start_local_ray, write_results
from rllib_gpuenv.experiments.metric_names import EVALUATION_RETURN_METRIC, lookup
from rllib_gpuenv.experiments.tables import format_table

CURVE_EVERY = 256  # env steps between the points of SB3's curve, whose rollouts may be a step each (SAC)
LAST_EPISODES = 100  # the return criterion: mean return of the last 100 episodes, for every contender
RANDOM_BUDGET_S = 30.0  # a random policy's curve is flat: this long is enough to draw it


@dataclasses.dataclass(frozen=True)
class SB3Setup:
    """Stable-Baselines3 with RL-Zoo's hyperparameters for one env (rl-baselines3-zoo, hyperparams/)."""

    algo: str  # "PPO", "DQN" or "SAC"
    env: str
    n_envs: int
    hyperparameters: dict
    # RL-Zoo's n_timesteps: its schedules (linear lr and clip, DQN's exploration fraction) run
    # over exactly these steps, as SB3 sees progress as a fraction of ``total_timesteps``; a
    # larger total would stretch them and make SB3 slower than RL-Zoo's tuning intends.
    total_timesteps: int
    linear: tuple = ()  # hyperparameters RL-Zoo schedules linearly to zero (its ``lin_<value>``)
    normalize: bool = False  # RL-Zoo's ``normalize: true``: VecNormalize of observations and rewards


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """A task judged on evaluation episodes instead of the training window.

    Where the good episodes are the short ones (Acrobot, MountainCar: -1 a step until the goal),
    the last 100 episodes to end over-represent them, the more so the more envs run at once: a
    window that favours whoever runs the most envs. Every contender is judged
    instead by the mean return of evaluation episodes of its current policy. The device
    contender's come from its experiment file (``evaluation_interval``, its episodes and
    ``explore``); SB3 and PureJaxRL play ``episodes`` every ``every`` env steps (about as often
    as the shipped device file evaluates), greedily or not as it does (``deterministic``; another
    file given with ``--device-config`` that evaluates otherwise is said to). Every contender's
    clock stops while it evaluates."""

    episodes: int
    every: int
    deterministic: bool


@dataclasses.dataclass(frozen=True)
class Task:
    """One race: its contenders (key: label), the experiment file of each RLlib contender, SB3's setup."""

    name: str
    target: float
    start_return: float  # about a random policy's return: instability is measured from halfway to the target
    contenders: dict
    config_files: dict
    sb3: SB3Setup | None
    overrides: dict = dataclasses.field(default_factory=dict)  # settings a contender changes in its file
    evaluation: Evaluation | None = None  # None: judged on the last 100 training episodes

    @property
    def criterion(self) -> str:
        """What the return is the mean of, as the plot's axis says it."""
        return f"last {LAST_EPISODES} episodes" if self.evaluation is None else "evaluation episodes"

    @property
    def criterion_in_full(self) -> str:
        """The same, as the table's title says it."""
        if self.evaluation is None:
            return self.criterion
        evaluation = self.evaluation
        return f"{self.criterion}: the device file's, the others' {evaluation.episodes} every {evaluation.every:,} env steps"

    @property
    def results_name(self) -> str:
        """``training`` for the CartPole PPO race (its recorded name), ``training_<task>`` otherwise."""
        return "training" if self.name == DEFAULT_TASK else f"training_{self.name}"

    def halfway(self, target: float) -> float:
        return (self.start_return + target) / 2


DEFAULT_TASK = "cartpole-ppo"
PRIORITIZED_REPLAY = {"type": "PrioritizedEpisodeReplayBuffer", "alpha": 0.6, "beta": 0.4}  # RLlib's DQN and SAC defaults
TASKS = {
    task.name: task
    for task in (
        Task(
            name="cartpole-ppo",
            target=475.0,
            start_return=0.0,
            contenders={
                "device": "ours: device path (DevicePPO)",
                "stock-runner": "ours: env on RLlib's stock runner",
                "stock-rllib": "stock RLlib on gymnasium CartPole",
                "stock-rllib-8envs": "stock RLlib, 8 envs per runner",
                "sb3": "Stable-Baselines3 PPO (RL-Zoo)",
                "purejaxrl": "PureJaxRL PPO (JAX, gymnax)",
            },
            config_files={
                "device": "gpu_cartpole_ppo.yaml",
                "stock-runner": "gpu_cartpole_stock_runner.yaml",
                "stock-rllib": "cartpole_stock_rllib.yaml",
                "stock-rllib-8envs": "cartpole_stock_rllib.yaml",
            },
            overrides={"stock-rllib-8envs": {"num_envs_per_env_runner": 8}},  # RLlib's tuned example with 8 envs per runner
            sb3=SB3Setup(
                "PPO",
                "CartPole-v1",
                n_envs=8,
                total_timesteps=100_000,
                linear=("learning_rate", "clip_range"),
                hyperparameters=dict(
                    n_steps=32,
                    batch_size=256,
                    gae_lambda=0.8,
                    gamma=0.98,
                    n_epochs=20,
                    ent_coef=0.0,
                    learning_rate=1e-3,
                    clip_range=0.2,
                ),
            ),
        ),
        Task(
            name="pendulum-ppo",
            target=-300.0,
            start_return=-1200.0,
            contenders={
                "device": "ours: device path (DevicePPO)",
                "stock-rllib": "stock RLlib PPO on gymnasium Pendulum",
                "sb3": "Stable-Baselines3 PPO (RL-Zoo)",
            },
            config_files={"device": "gpu_pendulum_ppo.yaml", "stock-rllib": "pendulum_stock_rllib.yaml"},
            sb3=SB3Setup(
                "PPO",
                "Pendulum-v1",
                n_envs=4,
                total_timesteps=100_000,
                hyperparameters=dict(
                    n_steps=1024,
                    gae_lambda=0.95,
                    gamma=0.9,
                    n_epochs=10,
                    ent_coef=0.0,
                    learning_rate=1e-3,
                    clip_range=0.2,
                    use_sde=True,
                    sde_sample_freq=4,
                ),
            ),
        ),
        Task(
            name="pendulum-sac",
            target=-300.0,
            start_return=-1200.0,
            contenders={
                "device": "ours: device path (DeviceSAC)",
                "device-prioritized": "ours: DeviceSAC, prioritized replay",
                "device-ppo": "ours: device path (DevicePPO)",
                "stock-rllib": "stock RLlib SAC on gymnasium Pendulum",
                "sb3": "Stable-Baselines3 SAC (RL-Zoo)",
            },
            config_files={
                "device": "gpu_pendulum_sac.yaml",
                "device-prioritized": "gpu_pendulum_sac.yaml",
                "device-ppo": "gpu_pendulum_ppo.yaml",
                "stock-rllib": "pendulum_sac_stock_rllib.yaml",
            },
            # the device file's settings with RLlib's SAC default buffer: prioritized, alpha 0.6, beta 0.4
            overrides={"device-prioritized": {"replay_buffer_config": PRIORITIZED_REPLAY | {"capacity": 100_000}}},
            # RL-Zoo's Pendulum-v1 SAC: SB3's defaults (one env, a gradient step of 256 per env step,
            # 256x256 networks, learning from step 100) and lr 1e-3, for 20k steps
            sb3=SB3Setup("SAC", "Pendulum-v1", n_envs=1, total_timesteps=20_000, hyperparameters=dict(learning_rate=1e-3)),
        ),
        Task(
            name="cartpole-dqn",
            target=475.0,
            start_return=0.0,
            contenders={
                "device": "ours: device path (DeviceDQN)",
                "device-uniform": "ours: DeviceDQN, uniform replay",
                "device-minibatch-128": "ours: DeviceDQN, 16 minibatches of 128",
                "stock-rllib": "stock RLlib DQN on gymnasium CartPole",
                "sb3": "Stable-Baselines3 DQN (RL-Zoo)",
                "purejaxrl": "PureJaxRL DQN (JAX, gymnax)",
            },
            config_files={
                "device": "gpu_cartpole_dqn.yaml",
                "device-uniform": "gpu_cartpole_dqn.yaml",
                "device-minibatch-128": "gpu_cartpole_dqn.yaml",
                "stock-rllib": "cartpole_dqn_stock_rllib.yaml",
            },
            overrides={
                # the device file's settings with a uniform buffer, with which they were tuned (the file's is prioritized)
                "device-uniform": {"replay_buffer_config": {"type": "EpisodeReplayBuffer", "capacity": 10_000}},
                # the file's minibatches until 2026-11-28: twice as many gradient steps, of half the rows
                "device-minibatch-128": {"train_batch_size_per_learner": 128},
            },
            sb3=SB3Setup(
                "DQN",
                "CartPole-v1",
                n_envs=1,
                total_timesteps=50_000,
                hyperparameters=dict(
                    learning_rate=2.3e-3,
                    batch_size=64,
                    buffer_size=100_000,
                    learning_starts=1000,
                    gamma=0.99,
                    target_update_interval=10,
                    train_freq=256,
                    gradient_steps=128,
                    exploration_fraction=0.16,
                    exploration_final_eps=0.04,
                    policy_kwargs=dict(net_arch=[256, 256]),
                ),
            ),
        ),
        Task(
            name="acrobot-ppo",
            target=-100.0,  # gymnasium's reward_threshold for Acrobot-v1
            start_return=-500.0,
            contenders={
                "device": "ours: device path (DevicePPO)",
                "sb3": "Stable-Baselines3 PPO (RL-Zoo)",
                "purejaxrl": "PureJaxRL PPO (JAX, gymnax)",
            },
            config_files={"device": "gpu_acrobot_ppo.yaml"},
            sb3=SB3Setup(
                "PPO",
                "Acrobot-v1",
                n_envs=16,
                total_timesteps=1_000_000,
                normalize=True,
                hyperparameters=dict(n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0),
            ),
            # the device file evaluates 512 episodes every 5 iterations of 2,048 env steps, sampling its actions
            evaluation=Evaluation(episodes=100, every=10_240, deterministic=False),
        ),
        Task(
            name="mountaincar-dqn",
            target=-110.0,  # gymnasium's reward_threshold for MountainCar-v0
            start_return=-200.0,
            contenders={"device": "ours: device path (DeviceDQN)", "sb3": "Stable-Baselines3 DQN (RL-Zoo)"},
            config_files={"device": "gpu_mountaincar_dqn.yaml"},
            sb3=SB3Setup(
                "DQN",
                "MountainCar-v0",
                n_envs=1,
                total_timesteps=120_000,
                hyperparameters=dict(
                    learning_rate=4e-3,
                    batch_size=128,
                    buffer_size=10_000,
                    learning_starts=1000,
                    gamma=0.98,
                    target_update_interval=600,
                    train_freq=16,
                    gradient_steps=8,
                    exploration_fraction=0.2,
                    exploration_final_eps=0.07,
                    policy_kwargs=dict(net_arch=[256, 256]),
                ),
            ),
            # the device file evaluates 512 greedy episodes every 5 iterations of 1,024 env steps
            evaluation=Evaluation(episodes=100, every=5_120, deterministic=True),
        ),
        Task(
            name="breakout-ppo",
            target=30.0,
            start_return=0.4,
            contenders={"device": "ours: device path (DevicePPO, CNN)", "random": "random policy"},
            config_files={"device": "gymnax_breakout_ppo.yaml", "random": "gymnax_breakout_ppo.yaml"},
            sb3=None,
        ),
        Task(
            name="inverted-pendulum-ppo",
            target=950.0,
            start_return=5.0,  # a random policy's pole falls within about 5 steps
            contenders={"device": "ours: device path (DevicePPO, Brax's env)", "random": "random policy"},
            config_files={"device": "brax_inverted_pendulum_ppo.yaml", "random": "brax_inverted_pendulum_ppo.yaml"},
            sb3=None,
        ),
    )
}
ALL_CONTENDERS = {key: label for task in TASKS.values() for key, label in task.contenders.items()}


def _experiment_file(task: Task, contender: str, device_config: str | None) -> str:
    """The contender's experiment file: the task's shipped one, or ``device_config`` for ``device``
    and for the contenders that run the device's file with settings changed (``Task.overrides``)."""
    from rllib_gpuenv.experiments.shipped import config_file

    runs_the_devices_file = contender == "device" or (
        contender in task.overrides and task.config_files.get(contender) == task.config_files.get("device")
    )
    if device_config and runs_the_devices_file:
        if not os.path.isfile(device_config):
            raise FileNotFoundError(f"--device-config {device_config}: no such file")
        _check_same_env(task, device_config, str(config_file(task.config_files[contender])))
        return device_config
    return str(config_file(task.config_files[contender]))


def _check_same_env(task: Task, path: str, shipped: str) -> None:
    """A file given for a race trains on the race's env (a Pendulum file in the CartPole race
    would be timed against CartPole's target)."""
    from rllib_gpuenv.experiments import load_experiments

    (mine,), (theirs,) = load_experiments(path), load_experiments(shipped)
    if mine.config.env != theirs.config.env:
        raise ValueError(
            f"--device-config {path}: its experiment trains on {mine.config.env}, but task {task.name} races on "
            f"{theirs.config.env} (--task names the race; --device-config a file of its env)"
        )


def _check_evaluates(task: Task, path: str) -> None:
    """A task judged on evaluation episodes needs an experiment file that evaluates; one that
    evaluates otherwise than the others will (greedy or sampling) is said to."""
    from rllib_gpuenv.experiments import load_experiments

    for experiment in load_experiments(path):
        config = experiment.config
        if not config.evaluation_interval:
            raise ValueError(
                f"task {task.name} is judged on evaluation episodes, and {path} never evaluates: "
                "set evaluation_interval (and evaluation_duration) in its config"
            )
        explore = config.get_evaluation_config_object().explore
        if explore == task.evaluation.deterministic:
            how = "greedily" if task.evaluation.deterministic else "sampling their actions"
            print(
                f"note: {path} evaluates with explore={explore}, "
                f"while the other contenders of {task.name} evaluate {how}, as its shipped file does",
                file=sys.stderr,
            )


def _rllib_curve(
    task: Task, contender: str, seed: int, target: float, budget_s: float, overrides: dict, device_config: str | None
) -> dict:
    import ray

    from rllib_gpuenv.experiments import apply_config, load_experiments
    from rllib_gpuenv.experiments.progress import EvaluationTime
    from rllib_gpuenv.rllib import DeviceEnvRunner

    path = _experiment_file(task, contender, device_config)
    (experiment,) = load_experiments(path)
    config = experiment.config.debugging(seed=seed)
    apply_config(config, {**task.overrides.get(contender, {}), **overrides}, "overrides")
    from rllib_gpuenv.rllib.in_process import InProcess, builds_without_ray
    from rllib_gpuenv.rllib.logdir import stop_algorithm

    # Its own Ray, unless (as in the main job) the algorithm needs none: a device algorithm
    # whose runner and learner are both in this process.
    if not (issubclass(config.algo_class, InProcess) and builds_without_ray(config)):
        start_local_ray(num_cpus=os.cpu_count())
    start = time.perf_counter()
    algo = config.build_algo()
    build_s = time.perf_counter() - start
    # The device env runner reports the mean of its last 100 episodes itself; RLlib's stock
    # runner reports the mean of the iteration's episodes, from which the window is rebuilt.
    windowed = isinstance(algo.env_runner, DeviceEnvRunner) and config.metrics_num_episodes_for_smoothing == LAST_EPISODES
    evaluating = EvaluationTime(algo)  # time to target counts training only, as for every contender
    curve, recent, gradient_steps, start = [], collections.deque(), 0, time.perf_counter()
    evaluated = math.nan  # the last evaluation's mean return (tasks judged on evaluation)
    try:
        while True:
            result = algo.train()
            elapsed = time.perf_counter() - start - evaluating.seconds
            runners = result["env_runners"]
            if runners.get("num_episodes", 0):
                recent.appendleft((float(runners["episode_return_mean"]), int(runners["num_episodes"])))
            if task.evaluation:
                if result["training_iteration"] % config.evaluation_interval == 0:
                    evaluated = float(lookup(result, EVALUATION_RETURN_METRIC, math.nan))
                mean = evaluated
            else:
                mean = float(runners.get("episode_return_mean", math.nan)) if windowed else _last_episodes_mean(recent)
            gradient_steps += _gradient_steps(result)
            curve.append((elapsed, int(runners["num_env_steps_sampled_lifetime"]), mean, gradient_steps))
            if curve[-1][2] >= target or elapsed >= budget_s:
                break
        sampling = _rllib_sampling_rate(algo)
    finally:
        stop_algorithm(algo)  # and Tune's empty log folder, a stock RLlib algorithm's too
        ray.shutdown()
    return {
        "curve": curve,
        "build_s": build_s,
        "evaluation_s": evaluating.seconds,
        "sampling_env_steps_per_s": sampling,
        "config_file": path,
    }


def _gradient_steps(result: dict) -> int:
    """The iteration's gradient steps, from what every RLlib learner logs per module: the rows it
    trained on and their mean per minibatch (0 where it did not learn)."""
    steps = 0
    for module, metrics in result.get("learners", {}).items():
        rows, size = metrics.get("num_module_steps_trained"), metrics.get("module_train_batch_size_mean")
        if module != "__all_modules__" and rows and size:
            steps += round(rows / size)
    return steps


def _last_episodes_mean(recent, n: int = LAST_EPISODES) -> float:
    """The mean return of the last ``n`` episodes, from (mean, count) per iteration, newest first.

    RLlib's stock runner reports as ``episode_return_mean`` the mean of the episodes that ended
    in *this* iteration (its metrics clear on every reduce), not of the last 100: an iteration
    where two lucky episodes end would pass 475. This is the window SB3's ``ep_info_buffer``
    keeps.
    """
    total, count = 0.0, 0
    for mean, k in recent:
        take = min(k, n - count)
        total, count = total + mean * take, count + take
        if count == n:
            break
    return total / count if count else float("nan")


def _rllib_sampling_rate(algo, repeats: int = 5) -> float:
    """Env steps per second of sampling alone (env + policy inference), after training."""
    from rllib_gpuenv.rllib import DeviceEnvRunner

    def sample(runner) -> int:
        if isinstance(runner, DeviceEnvRunner):
            return runner.sample().num_env_steps
        return sum(e.env_steps() for e in runner.sample(num_timesteps=1000))

    group = algo.env_runner_group
    start, steps = time.perf_counter(), 0
    for _ in range(repeats):
        steps += (
            sum(group.foreach_env_runner(sample, local_env_runner=False))
            if group.num_remote_env_runners()
            else sample(algo.env_runner)
        )
    return steps / (time.perf_counter() - start)


def _sb3_curve(setup: SB3Setup, seed: int, target: float, budget_s: float, evaluation: Evaluation | None = None) -> dict:
    import stable_baselines3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecNormalize, sync_envs_normalization

    def linear(start: float):
        return lambda progress: progress * start

    class Curve(BaseCallback):
        def __init__(self):
            super().__init__()
            self.curve, self.start, self.done = [], None, False
            self.evaluated, self.next_evaluation = math.nan, evaluation.every if evaluation else 0
            self.evaluation_s = 0.0  # the seconds its clock stood still for evaluations

        def _on_training_start(self):
            if self.start is None:  # learn() again to go on: the clock goes on too
                self.start = time.perf_counter()

        def _on_step(self) -> bool:
            return not self.done  # False stops SB3's learn() at the next step

        def _on_rollout_end(self) -> None:
            if evaluation is None:
                buffer = self.model.ep_info_buffer  # the last 100 episodes (SB3's stats_window_size)
                mean = statistics.fmean(float(e["r"]) for e in buffer) if buffer else float("nan")
            else:
                mean = self._evaluated()
            elapsed = time.perf_counter() - self.start
            self.done = mean >= target or elapsed >= budget_s
            # SAC's rollout is one env step: a point per CURVE_EVERY steps (and the last) keeps the file small
            if self.done or not self.curve or self.num_timesteps - self.curve[-1][1] >= CURVE_EVERY:
                self.curve.append((elapsed, self.num_timesteps, mean, self._gradient_steps()))

        def _evaluated(self) -> float:
            """The last evaluation's mean return; a new one every ``evaluation.every`` env steps,
            its time taken off the clock (``start`` moves on by it)."""
            if self.num_timesteps >= self.next_evaluation:
                paused = time.perf_counter()
                sync_envs_normalization(self.model.get_env(), eval_env)  # the observation statistics it trains with
                returns, _ = evaluate_policy(
                    self.model,
                    eval_env,
                    n_eval_episodes=evaluation.episodes,
                    deterministic=evaluation.deterministic,
                    return_episode_rewards=True,  # the returns Monitor counts, unnormalised
                )
                self.evaluated = statistics.fmean(returns)
                self.next_evaluation += evaluation.every
                self.evaluation_s += time.perf_counter() - paused
                self.start += time.perf_counter() - paused
            return self.evaluated

        def _gradient_steps(self) -> int:
            # SB3's PPO counts epochs in ``_n_updates``, each of ceil(rollout / batch_size) minibatches; DQN counts steps
            model = self.model
            if setup.algo != "PPO":
                return model._n_updates
            return model._n_updates * math.ceil(model.n_steps * model.n_envs / model.batch_size)

    start = time.perf_counter()
    env = make_vec_env(setup.env, n_envs=setup.n_envs, seed=seed)
    eval_env = make_vec_env(setup.env, n_envs=16, seed=seed + 10_000) if evaluation else None
    if setup.normalize:  # as RL-Zoo does, with the discount of its hyperparameters
        env = VecNormalize(env, gamma=setup.hyperparameters.get("gamma", 0.99))
        eval_env = eval_env and VecNormalize(eval_env, training=False, norm_reward=False)
    hyperparameters = {k: linear(v) if k in setup.linear else v for k, v in setup.hyperparameters.items()}
    model = getattr(stable_baselines3, setup.algo)("MlpPolicy", env, seed=seed, device="cpu", **hyperparameters)
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default makes a /tmp/SB3-<date> folder per run
    build_s = time.perf_counter() - start
    callback = Curve()
    model.learn(total_timesteps=setup.total_timesteps, callback=callback)
    while not callback.done and not setup.linear:
        # RL-Zoo's budget ran out before the target (DQN's 50k CartPole steps hold at most 100
        # episodes, so its last-100 mean cannot reach 475 in them): go on, with the schedules
        # where they ended (exploration at its final rate), until the target or the time budget.
        model.learn(total_timesteps=setup.total_timesteps, callback=callback, reset_num_timesteps=False)
    obs, steps, start = env.reset(), 0, time.perf_counter()
    while steps < 5000:  # sampling alone: policy inference + env steps, as collect_rollouts does
        obs, *_ = env.step(model.predict(obs)[0])
        steps += setup.n_envs
    return {
        "curve": callback.curve,
        "build_s": build_s,
        "evaluation_s": callback.evaluation_s,
        "sampling_env_steps_per_s": steps / (time.perf_counter() - start),
    }


def _random_curve(task: Task, seed: int, target: float, budget_s: float) -> dict:
    """A random policy on the device contender's envs (its file's env, number of envs, rollout
    length and env runner device): the same curve points, one per rollout, for
    ``min(budget_s, RANDOM_BUDGET_S)``."""
    import torch

    from rllib_gpuenv.experiments import load_experiments
    from rllib_gpuenv.rllib.env_runner import make_device_env, runner_device

    (experiment,) = load_experiments(_experiment_file(task, "random", None))
    config = experiment.config
    n, rollout_length = config.num_envs_per_env_runner, config.rollout_length
    start = time.perf_counter()
    env = make_device_env(config.env, n, runner_device(config.env_runner_device, 0, 0), config.env_config)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    env.step(torch.as_tensor(env.action_space.sample(), device=env.device))  # compiled before the clock starts
    build_s = time.perf_counter() - start
    returns = torch.zeros(n, device=env.device)
    recent: collections.deque = collections.deque(maxlen=LAST_EPISODES)
    curve, steps, start = [], 0, time.perf_counter()
    while not curve or (curve[-1][0] < min(budget_s, RANDOM_BUDGET_S) and curve[-1][2] < target):
        for _ in range(rollout_length):
            _, rewards, terminated, truncated, _ = env.step(torch.as_tensor(env.action_space.sample(), device=env.device))
            returns += rewards
            done = terminated | truncated
            recent.extend(returns[done].tolist())
            returns[done] = 0.0
        steps += n * rollout_length
        curve.append((time.perf_counter() - start, steps, statistics.fmean(recent) if recent else math.nan, 0))
    return {"curve": curve, "build_s": build_s, "sampling_env_steps_per_s": steps / curve[-1][0]}


def run_one(
    task: Task,
    contender: str,
    seed: int,
    target: float,
    budget_s: float,
    overrides: dict | None = None,
    device_config: str | None = None,
) -> dict:
    """One training run in this process; returns its curve."""
    if contender == "sb3":
        return _sb3_curve(task.sb3, seed, target, budget_s, task.evaluation)
    if contender == "random":
        return _random_curve(task, seed, target, budget_s)
    if contender == "purejaxrl":
        from rllib_gpuenv.bench import purejaxrl, purejaxrl_dqn

        if task.name == "cartpole-dqn":
            program = purejaxrl_dqn.make_program
        else:  # its PPO on gymnax's version of the task's env, with its CartPole settings
            env_id = task.sb3.env if task.sb3 else "CartPole-v1"
            program = functools.partial(purejaxrl.make_program, env_id=env_id, evaluation=task.evaluation)
        return purejaxrl.curve(seed, target, budget_s, LAST_EPISODES, program=program, evaluation=task.evaluation)
    return _rllib_curve(task, contender, seed, target, budget_s, overrides or {}, device_config)


def _run_in_subprocess(
    task: Task, contender: str, seed: int, target: float, budget_s: float, overrides: dict, device_config: str | None
) -> dict:
    args = ["--task", task.name, "--one", contender, "--seed", str(seed), "--target", str(target), "--budget", str(budget_s)]
    args += ["--overrides", json.dumps(overrides)] + (["--device-config", device_config] if device_config else [])
    return run_child("rllib_gpuenv.bench.training", args, f"{contender} seed {seed}", timeout_s=budget_s * 3 + 300)


def _median(values) -> float | None:
    """The median of the values that were measured (None where none was)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _median_with_misses(runs: list[dict], key: str) -> float | None:
    median = statistics.median(math.inf if r[key] is None else r[key] for r in runs)
    return None if math.isinf(median) else median


def lowest_after_half(curve: list, halfway: float) -> float | None:
    """Instability: the lowest return after the run first reached ``halfway`` (None if it never did).

    ``halfway`` lies between a random policy's return and the target (``Task.halfway``: half the
    target on CartPole). A run that holds what it learned stays near or above it; a collapse (a
    policy that reached 250 and fell back to 70) shows as a low value.
    """
    first = next((i for i, point in enumerate(curve) if point[2] >= halfway), None)
    return None if first is None else min(point[2] for point in curve[first:] if point[2] == point[2])  # NaN: no episode yet


def summarise(runs: list[dict], target: float, task: Task = TASKS[DEFAULT_TASK]) -> list[dict]:
    """Per contender: median time and env steps to target over seeds, instability, throughput, build time."""
    rows = []
    for key in dict.fromkeys(r["contender"] for r in runs):
        mine = [r for r in runs if r["contender"] == key]
        reached = [r for r in mine if r["time_to_target_s"] is not None]
        lowest = [v for v in (lowest_after_half(r["curve"], task.halfway(target)) for r in mine) if v is not None]
        rows.append(
            {
                "contender": task.contenders[key],
                "key": key,
                "reached": f"{len(reached)}/{len(mine)}",
                # A seed that missed the target counts as infinitely slow; the median is None when
                # most seeds missed.
                "median_time_to_target_s": _median_with_misses(mine, "time_to_target_s"),
                "median_steps_to_target": _median_with_misses(mine, "steps_to_target"),
                "median_gradient_steps_to_target": _median_with_misses(
                    [{"g": r.get("gradient_steps_to_target")} for r in mine], "g"
                ),
                # Instability: the lowest return after first reaching halfway to the target, per seed.
                "median_lowest_after_half": _median(lowest),
                "worst_lowest_after_half": min(lowest, default=None),
                "best_return": max(r["final_return"] for r in mine),  # the best seed's last mean
                "peak_return": max((p[2] for r in mine for p in r["curve"] if not math.isnan(p[2])), default=None),
                "env_steps_per_s": _median(r["env_steps_per_s"] for r in mine),
                "sampling_env_steps_per_s": _median(r["sampling_env_steps_per_s"] for r in mine),
                "build_s": _median(r["build_s"] for r in mine),
                "budget_s": max(r["budget_s"] for r in mine),
                "time_to_target_by_seed": {r["seed"]: r["time_to_target_s"] for r in mine},  # None: missed
            }
        )
    return rows


def seeds_won(ours: dict, other: dict) -> str:
    """On how many of the seeds both ran the device path reached the target sooner (a miss is
    slower than any time), e.g. ``"11/12"``: a median over few seeds can hide which way most go."""
    mine, theirs = ours["time_to_target_by_seed"], other["time_to_target_by_seed"]
    common = [seed for seed in mine if seed in theirs]
    won = sum(mine[s] is not None and (theirs[s] is None or mine[s] < theirs[s]) for s in common)
    return f"{won}/{len(common)}"


def _run_row(contender: str, seed: int, budget_s: float, target: float, halfway: float, result: dict) -> dict:
    curve = result["curve"]
    hit = next((p for p in curve if p[2] >= target), None)
    seconds, steps = (curve[-1][0], curve[-1][1]) if curve else (float("nan"), 0)
    return {
        "contender": contender,
        "seed": seed,
        "budget_s": budget_s,
        "build_s": result["build_s"],
        "time_to_target_s": hit[0] if hit else None,
        "steps_to_target": hit[1] if hit else None,
        "gradient_steps_to_target": hit[3] if hit and len(hit) > 3 else None,  # runs recorded before it: none
        "lowest_after_half": lowest_after_half(curve, halfway),
        "final_return": curve[-1][2] if curve else float("nan"),
        "env_steps_per_s": steps / seconds if seconds else 0.0,
        "sampling_env_steps_per_s": result.get("sampling_env_steps_per_s"),
        "evaluation_s": result.get("evaluation_s", 0.0),  # off the clock
        "config_file": result.get("config_file"),
        **({"jax_device": result["jax_device"]} if "jax_device" in result else {}),  # where PureJaxRL's program ran
        "curve": curve,
    }


def run(
    contenders: list[str] | None,
    seeds: list[int],
    target: float | None = None,
    budget_s: float = 120.0,
    overrides: dict | None = None,
    out_dir: str = "bench_results",
    plot: bool = False,
    task: str = DEFAULT_TASK,
    device_config: str | None = None,
) -> list[dict]:
    """Every contender × seed of ``task`` in a fresh process; print the table and ratios; write
    JSON/CSV (and PNG) as ``training`` (CartPole PPO) or ``training_<task>``."""
    the_task = _task(task)
    contenders = list(the_task.contenders) if not contenders else contenders
    unknown = [c for c in contenders if c not in the_task.contenders]
    if unknown:
        raise ValueError(
            f"task {task!r} has no contender {', '.join(map(repr, unknown))}: its contenders are "
            f"{', '.join(the_task.contenders)}"
        )
    for contender in contenders:  # every experiment file there, and PureJaxRL's packages, before the first run
        if contender in the_task.config_files:
            path = _experiment_file(the_task, contender, device_config)
            if the_task.evaluation:
                _check_evaluates(the_task, path)
        elif contender == "purejaxrl":
            from rllib_gpuenv.bench import purejaxrl

            purejaxrl.check_installed()
    target = the_task.target if target is None else target
    runs = []
    # Seed by seed, every contender in turn: a spell of a busy or slow machine falls on all of them.
    for seed in seeds:
        for contender in contenders:
            print(f"  {the_task.contenders[contender]:<40} seed {seed} ...", end="", file=sys.stderr, flush=True)
            result = _run_in_subprocess(
                the_task, contender, seed, target, budget_s, (overrides or {}).get(contender, {}), device_config
            )
            runs.append(_run_row(contender, seed, budget_s, target, the_task.halfway(target), result))
            write_results(
                [{k: v for k, v in r.items() if k != "curve"} for r in runs],
                out_dir,
                f"{the_task.results_name}.partial",
                {"curves": runs},
            )
            r = runs[-1]
            reached = f"{r['time_to_target_s']:.1f} s" if r["time_to_target_s"] is not None else f"not in {budget_s:g} s"
            print(f" return {r['final_return']:.0f}, target {reached}", file=sys.stderr)
    rows = summarise(runs, target, the_task)
    print(summary_text(rows, target, the_task))
    flat = [{k: v for k, v in r.items() if k != "curve"} for r in runs]
    meta = {"task": the_task.name, "target": target, "budget_s": budget_s, "seeds": seeds, "summary": rows, "curves": runs}
    plotter = (lambda: plot_curves(runs, target, out_dir, the_task)) if plot else None
    report(flat, out_dir, the_task.results_name, meta, plot=plotter)
    return rows


def _task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: the tasks are {', '.join(TASKS)}")
    return TASKS[name]


def summary_text(rows: list[dict], target: float, task: Task = TASKS[DEFAULT_TASK]) -> str:
    """The table (time and env steps to the target side by side, instability) and the device path's ratios."""
    half = f"{task.halfway(target):g}"
    headers = [
        "contender",
        "reached",
        f"median s to {target:g}",
        f"median env steps to {target:g}",
        f"median gradient steps to {target:g}",
        f"lowest return after {half}: median (worst seed)",
        "final return (best seed)",
        "peak return",
        "training env-steps/s",
        "sampling env-steps/s",
        "build s",
    ]
    table = [
        [
            r["contender"],
            r["reached"],
            r["median_time_to_target_s"],
            r["median_steps_to_target"],
            r.get("median_gradient_steps_to_target"),
            _instability(r),
            r["best_return"],
            r.get("peak_return"),
            r["env_steps_per_s"],
            r["sampling_env_steps_per_s"],
            r["build_s"],
        ]
        for r in rows
    ]
    text = (
        f"{task.name}: time and env steps to a mean return of {target:g} ({task.criterion_in_full}), median over seeds; "
        f"instability: the lowest return after first reaching {half}\n" + format_table(headers, table)
    )
    ours = next((r for r in rows if r["key"] == "device" and r["median_time_to_target_s"]), None)
    if ours:
        ratios = []
        for other in rows:
            if other is ours:
                continue
            if other["median_time_to_target_s"]:
                ratio = other["median_time_to_target_s"] / ours["median_time_to_target_s"]
                time_ratio = f"{ratio:.1f}x" if ratio >= 1 else f"{ratio:.2f}x"  # a faster contender: 0.46x, not 0.5x
                steps_ratio = f"{other['median_steps_to_target'] / ours['median_steps_to_target']:.2f}x"
            else:
                time_ratio = (
                    f">= {other['budget_s'] / ours['median_time_to_target_s']:.1f}x (not reached in {other['budget_s']:g} s)"
                )
                steps_ratio = "-"
            ratios.append([other["contender"], time_ratio, steps_ratio, seeds_won(ours, other)])
        if ratios:  # only the device path ran: nothing to compare
            text += (
                "\n\nthe others against the device path (their median / its median; above 1x: the device path needs less)\n"
                + format_table(["vs", "time to target", "env steps to target", "seeds the device path wins"], ratios)
            )
    return text


def _instability(row: dict) -> str:
    if row["median_lowest_after_half"] is None:
        return "-"
    return f"{row['median_lowest_after_half']:.0f} ({row['worst_lowest_after_half']:.0f})"


def plot_curves(runs: list[dict], target: float, out_dir: str, task: Task = TASKS[DEFAULT_TASK]) -> str:
    """Return against wall time and against env steps, one line per run; the target and the
    halfway line are labelled; the legend sits below the plots."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = dict(zip(task.contenders, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    labelled = set()
    for r in runs:
        xs_t, xs_s, ys = zip(*(point[:3] for point in r["curve"])) if r["curve"] else ((), (), ())
        label = None if r["contender"] in labelled else task.contenders[r["contender"]]
        labelled.add(r["contender"])
        axes[0].plot(xs_t, ys, color=colors[r["contender"]], label=label, alpha=0.8)
        axes[1].plot(xs_s, ys, color=colors[r["contender"]], alpha=0.8)
    halfway = task.halfway(target)
    for i, (ax, xlabel) in enumerate(zip(axes, ["wall-clock seconds (training)", "env steps"])):
        ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target: {target:g}" if i == 0 else None)
        ax.axhline(
            halfway,
            color="grey",
            linestyle=":",
            linewidth=1,
            label=f"halfway to the target ({halfway:g}): instability is the lowest return after it" if i == 0 else None,
        )
        # a run too short to end an episode has no return to draw: no log axis without a positive x beside a return
        positive = any(point[i] > 0 and math.isfinite(point[2]) for r in runs for point in r["curve"])
        ax.set(xlabel=xlabel, ylabel=f"mean return ({task.criterion})", xscale="log" if positive else "linear")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title(f"{task.name}: return vs wall time (one line per seed)")
    axes[1].set_title("Return vs env steps")
    fig.legend(
        *axes[0].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=8, frameon=False
    )
    return save_figure(fig, out_dir, task.results_name)


def main(argv: list[str] | None = None) -> None:
    """The child process: one run, written as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", choices=list(TASKS), default=DEFAULT_TASK)
    parser.add_argument("--one", choices=list(ALL_CONTENDERS), required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--overrides", type=json.loads, default={})
    parser.add_argument("--device-config")
    parser.add_argument("--write", required=True)
    args = parser.parse_args(argv)
    result = run_one(TASKS[args.task], args.one, args.seed, args.target, args.budget, args.overrides, args.device_config)
    with open(args.write, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()


def add_arguments(parser) -> None:
    parser.add_argument(
        "--task",
        choices=list(TASKS),
        default=DEFAULT_TASK,
        help="the race (default: %(default)s); pendulum-ppo: continuous PPO to -300; pendulum-sac: SAC to -300, "
        "beside DevicePPO; cartpole-dqn: DQN to 475; "
        "breakout-ppo: PPO on gymnax's MinAtar Breakout to 30, against a random policy; inverted-pendulum-ppo: "
        "PPO on Brax's inverted_pendulum to 950, against a random policy; acrobot-ppo: PPO to -100, mountaincar-dqn: "
        "DQN to -110, both judged on evaluation episodes",
    )
    parser.add_argument(
        "--contenders",
        nargs="*",
        help="a subset of the task's contenders (default: all of them); "
        + "; ".join(f"{name}: {' '.join(task.contenders)}" for name, task in TASKS.items()),
    )
    parser.add_argument("--seeds", type=options.sizes(0), default="0,1,2", help="seeds (default: %(default)s)")
    parser.add_argument(
        "--target",
        type=options.number,
        help="mean return to reach, of the last 100 episodes or (acrobot-ppo, mountaincar-dqn) of evaluation episodes "
        "(default: the task's; " + ", ".join(f"{name}: {task.target:g}" for name, task in TASKS.items()) + ")",
    )
    parser.add_argument("--budget", type=options.seconds, default=90.0, help="seconds of training per run before giving up")
    parser.add_argument(
        "--device-config",
        metavar="PATH",
        help="the device contender's experiment file (default: the task's shipped one, e.g. configs/gpu_cartpole_dqn.yaml)",
    )


def run_from_args(args) -> None:
    run(
        args.contenders,
        args.seeds,
        target=args.target,
        budget_s=args.budget,
        out_dir=args.out,
        plot=args.plot,
        task=args.task,
        device_config=args.device_config,
    )
