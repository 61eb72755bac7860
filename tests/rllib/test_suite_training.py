"""DevicePPO on the rest of the env suite through the same device env runner: continuous
control (Pendulum learns, and the env never receives an action outside its bounds) and the
discrete envs (Acrobot, MountainCar). (The Pendulum experiment file runs via `rllib train` in
cli/test_rllib_train.py, beside the old files.)
The algorithms built here train in this process without a Ray cluster (``rllib/in_process.py``)."""

import pytest
import torch
from ray.rllib.core.columns import Columns

from rllib_gpuenv.experiments import load_config
from rllib_gpuenv.experiments.shipped import config_file
from rllib_gpuenv.rllib import DevicePPOConfig

PENDULUM_FILE = config_file("gpu_pendulum_ppo.yaml")


class ActionRange:
    """The smallest and largest action value the env received, kept on the env's device (no
    host sync per step): wraps the ``step`` of the runner's env, which the runner calls."""

    def __init__(self, env):
        self.low = self.high = None
        step = env.step

        def recording_step(actions):
            lo, hi = torch.aminmax(actions.detach())
            self.low = lo if self.low is None else torch.minimum(self.low, lo)
            self.high = hi if self.high is None else torch.maximum(self.high, hi)
            return step(actions)

        env.step = recording_step


def return_mean(result) -> float:
    return result["env_runners"].get("episode_return_mean", float("nan"))


def test_continuous_ppo_learns_pendulum_and_keeps_actions_in_bounds():
    """The shipped Pendulum settings lift the last-100 mean from a random policy's ~-1200 to
    -400 within 80 iterations (seed 0 reaches -300 in 51); the module's Gaussian samples leave
    [-1, 1], yet the env receives only torques in [-2, 2]."""
    algo = load_config(PENDULUM_FILE, device="cpu", seed=0).config.build_algo()
    try:
        runner = algo.env_runner
        received = ActionRange(runner.env)
        first, sampled_beyond = None, False
        for iteration in range(1, 81):  # noqa: B007 (read after the loop)
            result = algo.train()
            mean = return_mean(result)
            if first is None and mean == mean:  # the first iteration in which episodes ended
                first = mean
            sampled_beyond |= bool(runner._buffers.actions.abs().max() > 1.0)  # the raw samples, before unsquashing
            if mean >= -400:
                break
        assert first is not None and first <= -900, f"a fresh policy should score near -1200, got {first}"
        assert mean >= -400, f"mean return {mean:.1f} after {iteration} iterations (first {first:.1f})"
        assert sampled_beyond, "the module never sampled outside [-1, 1]: the bounds were not put to the test"
        low, high = float(received.low), float(received.high)
        assert -2.0 <= low < 0.0 < high <= 2.0, (low, high)
    finally:
        algo.stop()


def test_mountaincar_continuous_file_rescales_observations_for_every_runner():
    """The shipped MountainCarContinuous settings (which reach an evaluation mean of 90 in 90-110
    iterations, ~1 min: too long here) at a small size: training and evaluation runners, the
    module and the learner's batch all see observations rescaled to [-1, 1], and the runner's
    checkpoint state still holds the env's state beneath the wrapper."""
    from rllib_gpuenv.rllib.env_runner import DEVICE_ROLLOUT_STATE

    config = load_config(config_file("gpu_mountaincar_continuous_ppo.yaml"), device="cpu", seed=0).config
    assert config.rescale_observations and config.model_config["free_log_std"]
    config.env_runners(num_envs_per_env_runner=16).device_rollouts(rollout_length=16).training(minibatch_size=128)
    config.evaluation(evaluation_interval=1, evaluation_duration=16)
    algo = config.build_algo()
    try:
        result = algo.train()
        unit = ([-1.0, -1.0], [1.0, 1.0])
        for runner in (algo.env_runner, algo.eval_env_runner):
            space = runner.env.single_observation_space
            assert (space.low.tolist(), space.high.tolist()) == unit
        assert algo.get_module().observation_space == algo.env_runner.env.single_observation_space
        obs = algo.env_runner._buffers.obs
        assert obs.abs().max() <= 1.0 and obs[..., 0].min() < -0.2  # reset positions -0.6..-0.4 become -0.33..-0.11
        assert "evaluation" in result and result["evaluation"]["env_runners"]["num_episodes"] >= 16
        assert DEVICE_ROLLOUT_STATE in algo.env_runner.get_state()
    finally:
        algo.stop()


def test_the_acrobot_file_solves_acrobot_judged_by_its_evaluation():
    """configs/gpu_acrobot_ppo.yaml reaches gymnasium's -100 on its 512 evaluation episodes (seed
    0: at the second evaluation, iteration 10; seeds 0-7 within 70 iterations), evaluated in
    this process on the runners' device, all 512 episodes in one round."""
    experiment = load_config(config_file("gpu_acrobot_ppo.yaml"), device="cpu", seed=0)
    assert experiment.stop["evaluation/env_runners/episode_return_mean"] == -100
    algo = experiment.config.build_algo()
    try:
        evaluations = []
        for iteration in range(1, 71):
            result = algo.train()
            if iteration % 5 == 0:  # RLlib's results carry the last evaluation's keys in between (NaN)
                runners = result["evaluation"]["env_runners"]
                evaluations.append(runners["episode_return_mean"])
                assert runners["num_episodes"] == 512
            if evaluations and evaluations[-1] >= -100:
                break
        assert evaluations[0] < -100, f"the first evaluation already passed ({evaluations[0]:.1f}): nothing was learned here"
        assert evaluations[-1] >= -100, f"evaluation returns {evaluations} in {len(evaluations) * 5} iterations"
        assert algo.eval_env_runner.num_envs == 512
    finally:
        algo.stop()


def test_the_mountaincar_dqn_file_rescales_what_it_replays_and_evaluates_greedily():
    """configs/gpu_mountaincar_dqn.yaml (which reaches -110 on seeds 0-15, 14-103 s on a 2-core
    CPU: too long here) at a small size: DeviceDQN's replay buffer holds observations rescaled to
    [-1, 1], it updates from them, and it evaluates greedily, in this process."""
    config = load_config(config_file("gpu_mountaincar_dqn.yaml"), device="cpu", seed=0).config
    assert config.rescale_observations and config.get_evaluation_config_object().explore is False
    config.training(num_steps_sampled_before_learning_starts=256)
    config.evaluation(evaluation_interval=1, evaluation_duration=16, evaluation_config={"num_envs_per_env_runner": 16})
    algo = config.build_algo()
    try:
        result = algo.train()
        replay = algo.learner_group._learner._replay
        obs = replay.columns[Columns.OBS][: replay.size]
        assert obs.abs().max() <= 1.0 and obs[:, 1].abs().max() > 0.07  # the velocity: beyond its raw bound, 0.07
        assert result["learners"]["default_policy"]["num_module_steps_trained"] > 0
        assert result["evaluation"]["env_runners"]["num_episodes"] == 16
        assert algo.eval_env_runner.config.explore is False
    finally:
        algo.stop()


@pytest.mark.parametrize("env_id", ["GPUAcrobot-v1", "GPUMountainCar-v0", "GPUMountainCarContinuous-v0"])
def test_suite_envs_train_through_the_device_runner(env_id):
    config = (
        DevicePPOConfig()
        .environment(env_id)
        .env_runners(num_envs_per_env_runner=16)
        .device_rollouts(device="cpu", rollout_length=16, check_devices=True)
        .training(minibatch_size=128, num_epochs=2)
    )
    algo = config.build_algo()
    try:
        received = ActionRange(algo.env_runner.env)
        results = [algo.train() for _ in range(2)]
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] == 2 * 16 * 16
        assert results[-1]["learners"]["default_policy"]["num_module_steps_trained"] > 0
        space = algo.env_runner.env.single_action_space
        if hasattr(space, "n"):
            assert 0 <= int(received.low) and int(received.high) < space.n
        else:
            assert float(space.low[0]) <= float(received.low) and float(received.high) <= float(space.high[0])
    finally:
        algo.stop()


def test_an_env_with_an_array_trains_from_its_shipped_file():
    """GPUBreakout-MinAtar (10x10x4 screens from its array) through the device runner, with the
    shipped file's CNN at test sizes: real episodes end and are counted."""
    config = load_config(config_file("gpu_breakout_minatar_ppo.yaml"), device="cpu", seed=0).config
    config = config.env_runners(num_envs_per_env_runner=16).device_rollouts(rollout_length=32).training(minibatch_size=256)
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
        runners = results[-1]["env_runners"]
        assert runners["num_env_steps_sampled_lifetime"] == 2 * 16 * 32
        assert runners["episode_len_mean"] > 0 and runners["episode_return_mean"] >= 0
        assert algo.env_runner.env.unwrapped.observation_space.shape == (16, 10, 10, 4)
        assert "CNN" in type(algo.env_runner.module.encoder.actor_encoder).__name__
    finally:
        algo.stop()
