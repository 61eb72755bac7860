"""Several learners (real Ray, real torch.distributed over gloo): colocated with their envs, each
stepping its own on its own device, and the separate layout with 2 learners fed by env runners."""

import os
import signal

import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_gpuenv.experiments.restore import restoring
from rllib_gpuenv.rllib import DeviceDQNConfig, DevicePPO, DevicePPOConfig, DeviceSACConfig
from rllib_gpuenv.rllib.dqn import DeviceDQN

# Logical CPUs: 2 learners, (separate layout) an env runner and one to spare; the driver runs in this process.
RAY_CPUS = 4
pytestmark = pytest.mark.usefixtures("ray_local")  # tests/conftest.py


def ppo(num_learners: int = 2, **env_runners):
    return (
        DevicePPOConfig()
        .environment("GPUCartPole-v1")
        .env_runners(num_envs_per_env_runner=16, **env_runners)
        .device_rollouts(rollout_length=16, device="cpu")
        .training(lr=1e-3, num_epochs=2, minibatch_size=128)
        .learners(num_learners=num_learners)
        .debugging(seed=0)
    )


def dqn(num_learners: int = 2, **env_runners):
    return (
        DeviceDQNConfig()
        .environment("GPUCartPole-v1")
        .env_runners(num_envs_per_env_runner=8, **env_runners)
        .device_rollouts(rollout_length=8, device="cpu")
        .training(
            num_steps_sampled_before_learning_starts=128,
            target_network_update_freq=256,
            replay_buffer_config={"capacity": 1000},
        )
        .reporting(min_sample_timesteps_per_iteration=0)
        .learners(num_learners=num_learners)
        .debugging(seed=0)
    )


def sac(num_learners: int = 2):
    return (
        DeviceSACConfig()
        .environment("GPUPendulum-v1")
        .env_runners(num_envs_per_env_runner=8)
        .device_rollouts(rollout_length=8, device="cpu")
        .training(
            num_steps_sampled_before_learning_starts=128,
            replay_buffer_config={"capacity": 1000},
            train_batch_size_per_learner=64,
            training_intensity=2,
        )
        .reporting(min_sample_timesteps_per_iteration=0)
        .learners(num_learners=num_learners)
        .debugging(seed=0)
    )


def _weights(learner) -> dict:
    return {k: v.detach().cpu().clone() for k, v in learner.module[DEFAULT_MODULE_ID].unwrapped().state_dict().items()}


def _env_state(learner) -> torch.Tensor:
    return learner.colocated_envs().env.unwrapped.state


def _window(learner) -> list:
    return list(learner.colocated_envs()._recent_episodes)


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_colocated_ppo_learners_train_evaluate_resume_exactly_and_name_a_dead_one(tmp_path, caplog):
    """One build for what colocated PPO learners do: sample and train in the training step, keep
    DDP's weights identical, report every learner's episodes, give RLlib's evaluation (its own
    runner and envs) the trained actor; a checkpoint resumes them exactly (weights, envs and
    RLlib's default adaptive KL coefficient, learner state); a learner that dies is named; a run
    with more learners goes on from the checkpoint (`rllib train --restore`), its envs anew."""
    config = ppo().evaluation(evaluation_interval=1, evaluation_duration=8, evaluation_duration_unit="episodes")
    assert config.use_kl_loss  # RLlib's default: the adaptive KL coefficient is learner state
    algo = config.build_algo()
    try:
        # the learners' envs are built with them, as a runner's are (a JAX env compiles then, not in the first iteration)
        assert algo.call_learners(lambda learner: learner._envs is not None) == [True, True]
        untrained, _ = algo.call_learners(_weights)
        results = [algo.train() for _ in range(2)]
        path = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
        results.append(algo.train())
        went_on = algo.call_learners(_weights), algo.call_learners(_env_state), algo.call_learners(_kl_coeff)
        # each learner samples 16 envs x 16 steps per iteration; the driver's runner none
        assert [r["env_runners"]["num_env_steps_sampled"] for r in results] == [512] * 3
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] == 1536
        assert algo.env_runner.num_envs == 1  # only for the spaces
        first, second = algo.call_learners(_weights)
        assert same_weights(first, second)  # DDP keeps them identical
        assert not same_weights(first, untrained)  # and they were trained
        states = algo.call_learners(_env_state)
        assert not torch.equal(states[0], states[1])  # seeded apart: their own episodes
        episodes = [e for window in algo.call_learners(_window) for e in window]
        runners = results[-1]["env_runners"]
        assert runners["episode_return_max"] == max(r for r, _ in episodes)  # metrics cover every learner's envs
        assert runners["episode_return_min"] == min(r for r, _ in episodes)

        # RLlib's evaluation syncs the learners' weights to its runner, which has envs of its own
        evaluation = results[-1]["evaluation"]["env_runners"]
        assert evaluation["num_episodes"] == 8 and evaluation["episode_return_mean"] > 0
        module = algo.eval_env_runner.module.state_dict()
        assert all(torch.equal(module[k].cpu(), first[k]) for k in module)  # the actor, as the learners have it
    finally:
        algo.stop()

    restored = DevicePPO.from_checkpoint(path)
    try:
        restored.train()
        resumed = restored.call_learners(_weights), restored.call_learners(_env_state), restored.call_learners(_kl_coeff)
        for a, b in zip(went_on[0], resumed[0]):
            assert same_weights(a, b)
        for a, b in zip(went_on[1], resumed[1]):
            assert torch.equal(a, b)
        assert went_on[2] == resumed[2] and went_on[2][0] != config.kl_coeff

        _, pid = restored.call_learners(lambda learner: os.getpid())
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(Exception, match=r"learner 1 of 2 died during the training step"):
            restored.train()
    finally:
        restored.stop()

    more = restoring(ppo(num_learners=3), path).build_algo()
    try:
        assert "The checkpoint holds the envs of 2 colocated learner(s), this run has 3" in caplog.text
        result = more.train()
        assert result["training_iteration"] == 3
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] == 1024 + 3 * 256  # the checkpoint's, then 3 learners'
    finally:
        more.stop()

    local = restoring(ppo(num_learners=0), path).build_algo()  # one local learner: the envs on the env runner
    try:
        assert "envs of 2 colocated learner(s), this run steps its envs on its env runners: they start new" in caplog.text
        assert local.train()["training_iteration"] == 3
    finally:
        local.stop()


def _kl_coeff(learner) -> float:
    return float(learner.curr_kl_coeffs_per_module[DEFAULT_MODULE_ID])


def _shard(learner) -> tuple:
    replay = learner._replay
    return replay.capacity, replay.size, {k: v[: replay.size].clone() for k, v in replay.columns.items()}


def test_colocated_dqn_learners_fill_their_own_replay_shards_and_restore_them(tmp_path):
    config = dqn().device_replay(checkpoint_replay_buffer=True)
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(4)]  # 128 env steps a round: learning starts in the first
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] == 512
        shards = algo.call_learners(_shard)
        assert [capacity for capacity, _, _ in shards] == [500, 500]  # capacity 1000 over 2 learners
        assert results[-1]["replay_buffer"]["size"] == sum(size for _, size, _ in shards) > 0
        assert not torch.equal(shards[0][2]["obs"][:10], shards[1][2]["obs"][:10])  # each from its own envs
        weights = algo.call_learners(_weights)
        assert same_weights(*weights)
        assert results[-1]["learners"]["default_policy"]["num_module_steps_trained_lifetime"] > 0
        path = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
    finally:
        algo.stop()
    restored = DeviceDQN.from_checkpoint(path)
    try:
        restored.train()  # a shard is made (and takes its restored transitions) on its first add
        for (_, size, columns), (_, size_back, columns_back) in zip(shards, restored.call_learners(_shard)):
            assert size < size_back <= size + 64  # one round of 8 envs x 8 steps, reset rows left out
            assert all(torch.equal(columns[k], columns_back[k][:size]) for k in columns)
    finally:
        restored.stop()


def _max_priority(learner) -> float:
    return float(learner._replay.max_priority)


def _log_alpha(learner) -> float:
    return float(learner.curr_log_alpha[DEFAULT_MODULE_ID])


def test_colocated_sac_learners_keep_one_temperature():
    """SAC's temperature is learnt outside the module that DDP keeps in step: its gradient is
    averaged over the learners too, so they keep one alpha (each learns from its own envs and shard).
    The shards are prioritized (RLlib's SAC default): each learner's TD errors, through DDP's module."""
    algo = sac().training(replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 1000}).build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        assert results[-1]["learners"]["default_policy"]["num_module_steps_trained_lifetime"] > 0
        assert same_weights(*algo.call_learners(_weights))
        for max_priority in algo.call_learners(_max_priority):
            assert max_priority != 1.0  # the first TD errors, larger or smaller, set it
        first, second = algo.call_learners(_log_alpha)
        assert first == second != 0.0  # log(1.0) at the start
    finally:
        algo.stop()


@pytest.mark.parametrize("make", [ppo, dqn], ids=["DevicePPO", "DeviceDQN"])
def test_separate_layout_feeds_two_learners_from_a_remote_env_runner(make):
    """Each learner gets its share of the remote runner's rollout. (Several runners' rollouts joined
    are test_training.py's: DevicePPO with 2 remote runners.)"""
    algo = make(num_learners=2, num_env_runners=1).build_algo()
    try:
        assert not algo.config.colocated_learners
        results = [algo.train() for _ in range(3)]
        assert results[-1]["learners"]["default_policy"]["num_module_steps_trained_lifetime"] > 0
        assert same_weights(*algo.call_learners(_weights))
    finally:
        algo.stop()


@pytest.mark.parametrize(
    "config, message",
    [
        (ppo(num_env_runners=1).device_rollouts(layout="colocated"), "layout='colocated' puts the envs in the learners"),
        (ppo().device_rollouts(layout="sideways"), "layout must be one of 'auto', 'colocated', 'separate'"),
        (ppo().devices(learner="cuda:1"), r"Ray chooses each remote learner's GPU: .* num_gpus_per_learner=1"),
        (ppo(num_env_runners=1).env_runners(num_envs_per_env_runner=15), "15 envs do not split over 2 learners"),
        (dqn(num_env_runners=1).env_runners(num_envs_per_env_runner=7), "7 envs do not split over 2 learners"),
    ],
)
def test_layout_mistakes_are_named_before_anything_starts(config, message):
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_on_a_machine_without_a_gpu_learner_settings_give_no_gpu_advice():
    """DeviceDQN's default learner device is "auto": with remote learners that is what Ray gives them."""
    for config in (dqn(), dqn().devices(learner="cpu"), dqn().devices(learner="cpu:0"), ppo().devices(learner="auto")):
        config.validate()
        assert config.num_gpus_per_learner == 0


def test_the_learners_benchmark_times_a_rollout_s_trip_to_a_learner_actor():
    """``bench learners``' second table (the separate layout's cost per rollout), on this module's Ray."""
    from rllib_gpuenv.bench.learners import TRIP_SHAPES, rollout_trips

    trips = rollout_trips("cpu", repeats=1)
    assert [(t["envs"], t["steps"]) for t in trips] == list(TRIP_SHAPES)
    assert all(t["megabytes"] > 0 and t["ms_per_trip"] > 0 for t in trips)
