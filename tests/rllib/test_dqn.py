"""DeviceDQN with real Ray: it solves CartPole with the shipped settings (which are its defaults),
its target network follows env steps as RLlib's does, it trains with a remote runner and restores
from checkpoints with or without its replay buffer. (Its experiment file's settings run under Tune
in test_rllib_train.py: `rllib train --algo DeviceDQN` starts from them.)"""

import copy

import gymnasium as gym
import pytest
import torch
from ray.rllib.algorithms.dqn.dqn_learner import DQNLearner

from rllib_gpuenv.experiments import load_config, load_experiments
from rllib_gpuenv.experiments.restore import check_restore, restoring
from rllib_gpuenv.experiments.shipped import config_file
from rllib_gpuenv.rllib import DeviceDQN, DeviceDQNConfig
from rllib_gpuenv.rllib.replay_buffer import WEIGHTS

DQN_FILE = config_file("gpu_cartpole_dqn.yaml")
# A short learning test: seed 0 first passes a last-100 mean of 50 at iteration 11 (475 after ~227:
# `bench training --task cartpole-dqn` measures that, README "DeviceDQN").
LEARNS_WITHIN_ITERATIONS = 60

pytestmark = pytest.mark.usefixtures("ray_local")  # tests/conftest.py


def return_mean(result) -> float:
    return result["env_runners"].get("episode_return_mean", float("nan"))


def steps_sampled(result) -> int:
    return int(result["env_runners"]["num_env_steps_sampled_lifetime"])


def small_config(**training) -> DeviceDQNConfig:
    """The shipped settings at test sizes: 16 envs on the local runner, 8 steps per rollout."""
    config = load_config(DQN_FILE, device="cpu", seed=1).config
    config.env_runners(num_env_runners=0, num_envs_per_env_runner=16, num_cpus_per_env_runner=0.5).device_rollouts(
        rollout_length=8
    )
    return config.training(num_steps_sampled_before_learning_starts=256, **training).reporting(
        min_sample_timesteps_per_iteration=0
    )


def test_the_shipped_file_holds_the_defaults():
    """`rllib train --algo DeviceDQN --env GPUCartPole-v1` trains as the file does (but for its seed)."""
    from_file = load_experiments(DQN_FILE)[0].config.to_dict()
    defaults = DeviceDQNConfig().environment("rllib_gpuenv:GPUCartPole-v1").to_dict()  # the id as the file's loader writes it
    differ = {k: (from_file[k], defaults.get(k)) for k in from_file if from_file[k] != defaults.get(k) and k != "seed"}
    assert not differ, differ


PRIORITIZED = {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 10_000, "alpha": 0.6, "beta": 0.4}


@pytest.mark.parametrize("replay", ["prioritized", "uniform"])
def test_device_dqn_learns_cartpole_on_cpu(replay):
    config = load_config(DQN_FILE, device="cpu", seed=0).config
    assert config.replay_buffer_config == PRIORITIZED  # the file's (and the defaults'): RLlib's DQN default
    if replay == "uniform":
        config.training(replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 10_000})
    algo = config.build_algo()
    try:
        for iteration in range(1, LEARNS_WITHIN_ITERATIONS + 1):  # noqa: B007 (read after the loop)
            result = algo.train()
            if return_mean(result) >= 50:
                break
        assert return_mean(result) >= 50, f"mean return {return_mean(result):.1f} after {iteration} iterations"
    finally:
        algo.stop()


def test_the_target_network_follows_env_steps_sampled():
    """As in RLlib's DQN learner: after every `target_network_update_freq` env steps sampled,
    counted at each learner update (here: one per sampling round of 16 x 8 = 128 steps, on the
    local runner: where the runners are does not matter to the learner)."""
    config = small_config(target_network_update_freq=256)
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        assert isinstance(learner, DQNLearner)
        updates = []
        for _ in range(6):
            result = algo.train()
            updates.append(int(result.get("learners", {}).get("default_policy", {}).get("num_target_updates", 0)))
        # learning starts at 256 steps (round 2); the target follows at 256, 512 and 768 steps
        assert updates == [0, 1, 1, 2, 2, 3]
    finally:
        algo.stop()


@pytest.mark.parametrize("lean", [True, False])
def test_prioritized_replay_gives_the_drawn_transitions_their_td_errors(lean):
    """Each round's draws get their absolute TD errors as priorities. From the lean update, as in
    RLlib's DQN: each minibatch's from its own gradient step's loss, under the networks that step
    started from (checked by replaying the round a minibatch at a time, from the learner's state,
    the priorities and the generator state before it). From RLlib's update (``lean_update:
    false``): under the networks the update left."""
    config = small_config(replay_buffer_config={**PRIORITIZED, "alpha": 0.5}, target_network_update_freq=10**9)
    config.lean_update = lean
    algo = config.build_algo()
    try:
        for _ in range(3):
            algo.train()
        learner = algo.learner_group._learner
        buffer = learner._replay
        timesteps = {"num_env_steps_sampled_lifetime": 384}
        start, priorities, generator = (
            copy.deepcopy(learner.get_state()),
            buffer.priorities.clone(),
            buffer._generator.get_state(),
        )
        results = learner._update_from_replay(timesteps)
        assert results["default_policy"]["num_module_steps_trained"] == 8 * 128  # 128 env steps x 8, in 4 minibatches of 256
        after, trained = buffer.priorities.clone(), learner.module["default_policy"].state_dict()

        learner.set_state({**start, "weights_seq_no": 0})  # 0: restore the weights (RLlib restores only newer ones)
        buffer.priorities.copy_(priorities)
        buffer._generator.set_state(generator)
        batch = buffer.sample(8 * 128)
        assert 0 < batch[WEIGHTS].min() < batch[WEIGHTS].max() <= 1  # over the largest weight any held transition gets
        if lean:
            td_errors = []
            for rows in torch.arange(8 * 128).split(config.train_batch_size_per_learner):
                minibatch = {key: column[rows] for key, column in batch.items()}
                td_errors.append(learner.replay_td_errors(minibatch))  # before the step
                learner.update_on_draws(minibatch, timesteps)
            td_errors = torch.cat(td_errors)
            for name, weight in learner.module["default_policy"].state_dict().items():  # the round, replayed
                torch.testing.assert_close(weight, trained[name], msg=name)
            assert not torch.allclose(td_errors, learner.replay_td_errors(batch))  # not those after the round
        else:
            learner.update_on_draws(batch, timesteps)
            td_errors = learner.replay_td_errors(batch)
        expected = priorities.index_copy(0, buffer._drawn, td_errors.clamp_min(1e-12) ** 0.5)  # the last draw of a row wins
        torch.testing.assert_close(after, expected)
        assert not torch.equal(after, priorities)
    finally:
        algo.stop()


@pytest.mark.parametrize(
    "with_buffer, remote_runners, restore",
    [(True, 1, "from_checkpoint"), (False, 0, "from_checkpoint"), (False, 0, "on_algorithm_init")],
)
def test_runners_train_and_checkpoints_restore(tmp_path, with_buffer, remote_runners, restore):
    """With the buffer, through a remote runner; without it, through the local runner (what a
    checkpoint restores does not depend on where the runners are). Several remote runners'
    rollouts go through the same ``sample_rollouts`` as DevicePPO's (test_training.py). Restored
    by ``DeviceDQN.from_checkpoint``, or as ``rllib train --restore`` restores a trial: the
    algorithm built from the config, the checkpoint loaded by ``on_algorithm_init``."""
    config = small_config(target_network_update_freq=256)
    config.device_replay(checkpoint_replay_buffer=with_buffer)
    config.env_runners(num_env_runners=remote_runners)
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        assert [steps_sampled(r) for r in results] == [128, 256, 384]  # 16 envs x 8 steps a round
        trained = results[-1]["learners"]["default_policy"]["num_module_steps_trained_lifetime"]
        assert trained > 0
        buffer = algo.learner_group._learner._replay
        saved = {name: column[: buffer.size].clone() for name, column in buffer.columns.items()}
        saved_size, saved_added = buffer.size, buffer.added
        target_updated_at = dict(algo.learner_group._learner.last_update_ts_by_mid)
        assert target_updated_at["default_policy"] == 256
        path = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
    finally:
        algo.stop()
    if restore == "on_algorithm_init":  # `rllib train --restore`'s check: epsilon is in DQN's model_config, no network's
        check_restore(path, small_config().training(epsilon=[[0, 0.5], [100, 0.01]]), "x")
    restored = DeviceDQN.from_checkpoint(path) if restore == "from_checkpoint" else restoring(config, path).build_algo()
    try:
        assert restored.learner_group._learner.last_update_ts_by_mid == target_updated_at  # RLlib's learner forgets it
        result = restored.train()
        buffer = restored.learner_group._learner._replay
        new = buffer.added - saved_added
        assert steps_sampled(result) == 512 and 0 < new <= 128
        trained_after = result.get("learners", {}).get("default_policy", {}).get("num_module_steps_trained_lifetime", trained)
        if with_buffer:  # the transitions came back: it goes on learning at once
            assert buffer.size == saved_size + new
            for name, column in saved.items():
                assert torch.equal(buffer.columns[name][:saved_size], column), name
            assert trained_after > trained
        else:  # only the counters came back: it refills the buffer before it learns again
            assert buffer.size == new
            assert trained_after == trained
    finally:
        restored.stop()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"train_batch_size_per_learner": 0}, r"train_batch_size_per_learner is DeviceDQN's minibatch .*got 0"),
        ({"replay_buffer_config": {"capacity": 0}}, r"replay_buffer_config\['capacity'\] must be a positive integer, got 0"),
        ({"n_step": 0}, r"n_step must be a positive integer for DeviceDQN, got 0"),
        (  # each minibatch would repeat the buffer's transitions (was accepted)
            {"replay_buffer_config": {"capacity": 100}},
            r"replay_buffer_config\['capacity'\] is 100 transitions; fewer than one minibatch of "
            r"train_batch_size_per_learner=256: give the buffer at least 256 \(DeviceDQN's default is 10,000, ",
        ),
        (
            {"replay_buffer_config": {"capacity": 100, "typ": "EpisodeReplayBuffer"}},  # was dropped: still prioritized
            r"replay_buffer_config\['typ'\] is no setting of DeviceDQN's buffer: did you mean 'type'\?",
        ),
        # not RLlib's advice to set rollout_fragment_length, which the device path then refuses
        ({"n_step": 32}, r"n_step=32 is longer than rollout_length=16: .* set device_rollouts\(rollout_length=32\)"),
        ({"training_intensity": -1}, r"training_intensity is env steps trained per env step sampled: a number > 0 .*got -1"),
        ({"training_intensity": 0}, r"training_intensity is .*got 0"),
        ({"env": "GPUPendulum-v1"}, r"the env GPUPendulum-v1 has Box\(.*\) actions, but DeviceDQN needs Discrete ones"),
        ({"train_batch_size": 64}, r"train_batch_size=64 is RLlib's old total batch.*train_batch_size_per_learner; leave"),
        # RLlib's default, which an old DQN file gives as its minibatch: not read either (was ignored silently)
        ({"train_batch_size": 32}, r"train_batch_size=32 is RLlib's old total batch.*train_batch_size_per_learner; leave"),
        (
            {"replay_buffer_config": {"type": "EpisodeReplayBuffer"}},  # a new type: RLlib drops the rest of the dict
            r"replay_buffer_config has no 'capacity' \(RLlib's .* replaces the whole dict when its 'type' changes\): give "
            r"it, e.g. \{'type': 'EpisodeReplayBuffer', 'capacity': 10000\}",
        ),
        (
            {"replay_buffer_config": {**PRIORITIZED, "beta": -1}},
            r"replay_buffer_config\['beta'\] must be a number >= 0, got -1",
        ),
        (
            {"replay_buffer_config": PRIORITIZED, "num_atoms": 51},
            r"distributional DQN \(num_atoms=51\) has none: set num_atoms=1, or replay_buffer_config",
        ),
    ],
)
def test_a_setting_deviceDQN_cannot_train_with_fails_when_validated(change, message):
    """Before anything is built: a minibatch of 0 would divide by zero in its first round, and RLlib
    fails on continuous actions inside its module's construction, with an unrelated message."""
    config = DeviceDQNConfig().environment(change.pop("env", "GPUCartPole-v1")).training(**change)
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_a_replay_shard_smaller_than_a_minibatch_is_named():
    """Several learners split the buffer: each shard must hold a minibatch."""
    config = DeviceDQNConfig().environment("GPUCartPole-v1").training(replay_buffer_config={"capacity": 300})
    config.validate()
    with pytest.raises(ValueError, match=r"is 300 transitions; each of 2 learners keeps 150 of them, fewer than one "):
        config.learners(num_learners=2).validate()


def test_a_training_intensity_a_round_cannot_run_says_what_it_runs(caplog):
    """A round trains whole minibatches: 0.01 of a 256-step round with minibatches of 256 is 1 step,
    100x the intensity asked, said once; 2.5 minibatches is 3 (Python's round() made it 2)."""

    def updates(intensity: float) -> int:
        config = (
            DeviceDQNConfig()
            .environment("GPUCartPole-v1")
            .env_runners(num_envs_per_env_runner=16)
            .device_rollouts(rollout_length=16)
            .training(train_batch_size_per_learner=256, training_intensity=intensity)
        )
        config.validate()
        return config.updates_per_round

    assert updates(8.0) == 8 and "training_intensity" not in caplog.text  # the shipped file's: as asked
    assert updates(2.5) == 3
    assert updates(0.01) == 1
    assert "training_intensity=0.01 asks for 0.01 gradient steps per sampling round of 256 env steps" in caplog.text
    assert "so it runs 1 (an intensity of 1)" in caplog.text


def test_rllibs_rollout_fragment_length_is_named_and_the_one_derived_follows_the_rollout():
    """DeviceDQN sets rollout_fragment_length to the rollout length (RLlib's n-step check reads it):
    a config validated, then given another rollout length, validates again."""
    config = DeviceDQNConfig().environment("GPUCartPole-v1")
    config.validate()
    config.device_rollouts(rollout_length=8).validate()
    assert config.rollout_fragment_length == 8
    with pytest.raises(ValueError, match=r"rollout_fragment_length=4, .*set device_rollouts\(rollout_length=4\) instead"):
        config.env_runners(rollout_fragment_length=4).validate()


@pytest.mark.parametrize("epsilon", [[[0, 1.0], [5_000, 0.01]], [[0, 1.0], [300, 0.5], [7_777, 0.02]], 0.1])
def test_epsilon_on_the_device_is_rllibs_value(epsilon):
    """A recorded rollout reads DQN's epsilon from a device step count: the same float64 value
    RLlib's schedule computes in Python, at every step, the endpoints and past the last included."""
    from ray.rllib.utils.schedules.scheduler import Scheduler

    from rllib_gpuenv.rllib.dqn import schedule_value

    scheduler = Scheduler(fixed_value_or_schedule=epsilon, framework="torch")
    steps = [*range(0, 8_000, 37), 299, 300, 301, 4_999, 5_000, 7_776, 7_777, 10**9]
    ours = [schedule_value(scheduler, torch.tensor(t)).item() for t in steps]
    assert ours == [float(scheduler.update(t)) for t in steps]


def test_a_rollout_from_a_device_step_count_is_the_rollout_from_a_python_one():
    """What a recorded DQN rollout runs (the step count a device tensor), stepped here on the CPU:
    the same actions and rows as the rollout from the Python step count, epsilon mid-schedule."""
    config = DeviceDQNConfig().environment("GPUCartPole-v1").devices(learner="cpu", env_runners="cpu").debugging(seed=0)
    config.env_runners(num_envs_per_env_runner=64)
    rows = []
    for step in (2_000, torch.tensor(2_000), torch.tensor(10**6)):
        algo = config.build_algo()
        try:
            runner = algo.env_runner
            runner._reset()
            runner._rollout_steps(1, 0, explore=True)  # allocates the buffers
            torch.manual_seed(1)
            with torch.no_grad():
                runner._rollout_steps(config.rollout_length, step, explore=True)
            rows.append({k: v.clone() for k, v in vars(runner._buffers).items() if isinstance(v, torch.Tensor)})
        finally:
            algo.stop()
    assert rows[0].keys() == rows[1].keys() and all(torch.equal(rows[0][k], rows[1][k]) for k in rows[0])
    assert not torch.equal(rows[1]["actions"], rows[2]["actions"])  # the step count reaches the draw: epsilon 0.6 vs 0.01


def test_an_env_of_continuous_actions_that_the_config_cannot_see_is_named_when_the_module_is_built():
    """A gymnasium id (or an env of your own): its action space is known once an env is made, where
    RLlib's DQN module failed naming an unrelated deprecation."""
    from ray.rllib.algorithms.dqn.dqn_catalog import DQNCatalog

    from rllib_gpuenv.rllib.dqn import DeviceDQNTorchRLModule

    pendulum = gym.make("Pendulum-v1")
    with pytest.raises(
        ValueError, match=r"the env has Box\(-2.0, 2.0, \(1,\), float32\) actions, but DeviceDQN needs Discrete"
    ):
        DeviceDQNTorchRLModule(
            observation_space=pendulum.observation_space,
            action_space=pendulum.action_space,
            model_config=DeviceDQNConfig().model_config,
            catalog_class=DQNCatalog,
        )


def test_a_checkpoint_whose_buffer_has_other_shards_is_refused_before_anything_starts(tmp_path):
    """`rllib train --restore` with another number of learners than the checkpoint's replay shards:
    named when the experiment is loaded (the trial failed on it after Ray's start)."""
    from rllib_gpuenv.experiments.errors import ExperimentError
    from rllib_gpuenv.experiments.restore import check_restore

    config = small_config().device_replay(checkpoint_replay_buffer=True)
    algo = config.build_algo()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
    finally:
        algo.stop()
    assert check_restore(path, config.copy(copy_frozen=False), where="x.yaml") == path
    with pytest.raises(ExperimentError, match=r"holds 1 replay buffer shard\(s\), one per learner, but the experiment has "):
        check_restore(path, config.copy(copy_frozen=False).learners(num_learners=2), where="x.yaml")
