"""Checkpoints resume exactly: save → restore → one iteration equals one more iteration of the
run that went on, bit for bit (envs, random generators, episode window); damaged files are named."""

import functools
import gc
import os
import pathlib
import shutil
import weakref

import pytest
import torch

from rllib_gpuenv.experiments import cartpole_config
from rllib_gpuenv.rllib import DevicePPO, DevicePPOConfig
from rllib_gpuenv.rllib.checkpointing import CheckpointError, saved_config
from tests.helpers import run_python

pytestmark = pytest.mark.usefixtures("ray_local")  # tests/conftest.py


def small_config(backend: str, rllib_defaults: bool = False, schedules: bool = False):
    """The main job's settings at a small size (256 env steps an iteration); ``rllib_defaults``:
    PPO's settings left at RLlib's defaults instead (its adaptive KL loss among them), only the
    shape set; ``schedules``: lr and entropy coefficient scheduled over the first 1,536 steps."""
    config = DevicePPOConfig().environment("GPUCartPole-v1").devices(learner="cpu", env_runners="cpu").debugging(seed=3)
    if not rllib_defaults:
        config = cartpole_config(device="cpu", seed=3)
    if schedules:
        config.training(lr=[[0, 1e-3], [1536, 1e-4]], entropy_coeff=[[0, 0.05], [1536, 0.0]])
    config.env_runners(num_envs_per_env_runner=16).environment(env_config={"backend": backend})
    return config.device_rollouts(rollout_length=16).training(minibatch_size=64)


def snapshot(algo) -> dict:
    learner = algo.learner_group._learner
    weights = learner.module["default_policy"].state_dict()
    return {
        "weights": {k: v.detach().clone() for k, v in weights.items()},
        "env": {k: v.clone() for k, v in algo.env_runner.env._buffers.tensors().items()},
        "temperature": {k: v.detach().clone() for k, v in getattr(learner, "curr_log_alpha", {}).items()},  # SAC's
    }


@pytest.mark.parametrize(
    "backend, rllib_defaults, schedules", [("numba-cpu", False, False), ("torch", False, True), ("numba-cpu", True, False)]
)
def test_save_restore_one_iteration_equals_the_run_that_went_on(tmp_path, backend, rllib_defaults, schedules):
    """With schedules the checkpoint falls mid-schedule (step 1,024): RLlib would restart the
    entropy coefficient's at step 0."""
    algo = small_config(backend, rllib_defaults, schedules).build_algo()
    try:
        for _ in range(4):
            trained_s = algo.train()["time_total_s"]
        algo.evaluation_time_total_s = 1.25  # as experiments.progress.EvaluationTime sums it
        path = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
        went_on = [algo.train() for _ in range(2)]
        expected = snapshot(algo)
    finally:
        algo.stop()
    restored = DevicePPO.from_checkpoint(path)
    try:
        assert restored.evaluation_time_total_s == 1.25
        resumed = [restored.train() for _ in range(2)]
        assert resumed[0]["time_total_s"] > trained_s  # the clock goes on from the checkpoint's (Tune's restore does too)
        got = snapshot(restored)
    finally:
        restored.stop()
    for a, b in zip(went_on, resumed):
        assert a["env_runners"]["episode_return_mean"] == b["env_runners"]["episode_return_mean"]
        assert a["env_runners"]["num_env_steps_sampled_lifetime"] == b["env_runners"]["num_env_steps_sampled_lifetime"]
    for name, tensor in expected["env"].items():
        assert torch.equal(tensor, got["env"][name]), name
    for name, tensor in expected["weights"].items():
        assert torch.equal(tensor, got["weights"][name]), name


def test_a_run_restored_under_a_new_lr_trains_with_it_from_its_first_update(tmp_path):
    """As Tune's PopulationBasedTraining restores a cloned trial under a perturbed lr, or a user
    fine-tunes from a checkpoint: an algorithm built with lr=0 and restored from a checkpoint
    trained at 1e-3 leaves the weights as they are (RLlib kept the checkpoint's lr for an iteration)."""
    algo = small_config("numba-cpu").build_algo()
    try:
        algo.train()
        path = algo.save_to_path(str(tmp_path / "checkpoint"))
    finally:
        algo.stop()
    frozen = small_config("numba-cpu").training(lr=0.0).build_algo()
    try:
        frozen.restore_from_path(path)
        before = snapshot(frozen)["weights"]
        result = frozen.train()
        assert result["learners"]["default_policy"]["default_optimizer_learning_rate"] == 0.0
        for name, tensor in snapshot(frozen)["weights"].items():
            assert torch.equal(tensor, before[name]), name
    finally:
        frozen.stop()


@pytest.mark.parametrize("algo_name, env", [("DeviceDQN", "GPUCartPole-v1"), ("DeviceSAC", "GPUPendulum-v1")])
def test_replay_algorithms_with_their_buffer_resume_exactly(tmp_path, algo_name, env):
    """DeviceDQN and DeviceSAC at their defaults (the shipped files'), checkpointing their replay
    buffer: save, then one more iteration equals one iteration of the restored run (SAC's
    temperature included: RLlib's learner state leaves it out)."""
    from rllib_gpuenv.experiments.settings import algorithm_config

    config = algorithm_config(algo_name).environment(env).devices(learner="cpu", env_runners="cpu").debugging(seed=3)
    config.device_replay(checkpoint_replay_buffer=True).training(num_steps_sampled_before_learning_starts=256)
    algo = config.build_algo()
    try:
        for _ in range(2):  # 1,024 env steps an iteration: learning has started
            algo.train()
        path = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
        algo.train()
        expected = snapshot(algo)
    finally:
        algo.stop()
    restored = type(algo).from_checkpoint(path)
    try:
        restored.train()
        got = snapshot(restored)
    finally:
        restored.stop()
    for part in ("env", "weights", "temperature"):
        for name, tensor in expected[part].items():
            assert torch.equal(tensor, got[part][name]), (part, name)


def test_a_damaged_checkpoint_file_is_named(tmp_path):
    algo = small_config("numba-cpu").build_algo()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
    finally:
        algo.stop()
    state_file = next(p for p in sorted((tmp_path / "checkpoint").rglob("state.pkl")) if "env_runner" in str(p))
    data = state_file.read_bytes()
    state_file.write_bytes(data[: len(data) // 2])  # a copy cut short
    with pytest.raises(CheckpointError, match=rf"{state_file}: cannot be read .*the checkpoint is damaged"):
        DevicePPO.from_checkpoint(path)
    (pathlib.Path(path) / "class_and_ctor_args.pkl").unlink()  # what a resume reads first: the config
    with pytest.raises(CheckpointError, match=r"has no class_and_ctor_args.pkl: not a checkpoint of an RLlib algorithm"):
        saved_config(path)


def test_checkpoints_written_before_the_layout_change_restore_and_train(tmp_path):
    """tests/rllib/data/checkpoints_82623be: a DevicePPO checkpoint and a stock PPO one with an
    old-style MeanStdFilter (its config pickles ``rllib_gpuenv.legacy.mean_std_filter_connector``),
    both written by the package before its modules moved. A fresh process restores each and
    trains on (nothing imported beforehand, as in a user's new session)."""
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "checkpoints_82623be")
    copies = [str(shutil.copytree(os.path.join(data, name), tmp_path / name)) for name in ("device", "stock")]
    code = f"""
import ray
from ray.rllib.algorithms.algorithm import Algorithm
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
for path in {copies!r}:  # copies: restoring may write beside them
    algo = Algorithm.from_checkpoint(path)
    print(type(algo).__name__, algo.iteration, algo.train()["training_iteration"])
    algo.stop()
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-2:] == ["DevicePPO 1 2", "PPO 1 2"], proc.stdout


def _tiny(algorithm: str):
    from rllib_gpuenv.rllib import DeviceDQNConfig, DeviceSACConfig

    if algorithm == "DevicePPO":
        return small_config("torch").training(lr=1e-3)
    replay = {"num_steps_sampled_before_learning_starts": 64, "replay_buffer_config": {"capacity": 512}, "lr": 1e-3}
    config = DeviceDQNConfig().environment("GPUCartPole-v1") if algorithm == "DeviceDQN" else DeviceSACConfig()
    if algorithm == "DeviceSAC":
        config.environment("GPUPendulum-v1")
        replay = {**replay, "lr": None, "actor_lr": 1e-3, "critic_lr": 1e-3, "alpha_lr": 1e-3}
    return (
        config.env_runners(num_envs_per_env_runner=8)
        .device_rollouts(rollout_length=8, device="cpu")
        .training(**replay)
        .reporting(min_sample_timesteps_per_iteration=0)
        .debugging(seed=0)
    )


def _learning_rates(algo) -> list[float]:
    learner = algo.learner_group._learner
    return sorted({group["lr"] for optimizer in learner._named_optimizers.values() for group in optimizer.param_groups})


@pytest.mark.parametrize("algorithm", ["DevicePPO", "DeviceDQN", "DeviceSAC"])
def test_reset_config_builds_the_algorithm_again_from_the_new_config(algorithm):
    """What Tune's reuse_actors calls (PBT's exploit, the next trial on a finished trial's actor):
    the same object trains on under the new config (another lr, another number of envs), from
    scratch, as a new actor would, until Tune restores a checkpoint into it. What the old build
    held (its envs' state, its module's weights: on a GPU, device memory) is freed, not kept beside
    the new one by a reference left behind."""
    config = _tiny(algorithm)
    algo = config.build_algo()
    try:
        algo.train()
        assert _learning_rates(algo) == [1e-3]
        old_env_state = weakref.ref(next(iter(algo.env_runner.env._buffers.tensors().values())))
        old_weights = weakref.ref(next(algo.learner_group._learner.module["default_policy"].parameters()))
        new = config.copy(copy_frozen=False).env_runners(num_envs_per_env_runner=4)
        new = new.training(
            **({"actor_lr": 2e-4, "critic_lr": 2e-4, "alpha_lr": 2e-4} if algorithm == "DeviceSAC" else {"lr": 2e-4})
        )
        assert algo.reset_config(new.to_dict()) is True
        gc.collect()
        assert old_env_state() is None and old_weights() is None
        assert _learning_rates(algo) == [2e-4] and algo.env_runner.num_envs == 4 and algo.config.num_envs_per_env_runner == 4
        assert algo.iteration == 0
        result = algo.train()
        assert result["training_iteration"] == 1
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] == 4 * new.rollout_length  # counted anew
    finally:
        algo.stop()


def _record_init(path: str, **_) -> None:
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")


def _record_iteration(path: str, *, algorithm, result, **_) -> None:
    """What an iteration trained with, written by the trial's process (Tune's result files of an
    exploited trial may lose rows: README, "PBT")."""
    learned = result["learners"]["default_policy"]["default_optimizer_learning_rate"]
    line = f"{algorithm.trial_id} {result['training_iteration']} {algorithm.config.lr} {learned}"
    with open(path, "a") as f:
        f.write(line + "\n")


def test_pbt_exploits_in_the_trials_actors(tmp_path):
    """Tune's PBT with reuse_actors (as `rllib train` sets it for the device algorithms): an
    exploit builds the algorithm again in a running actor (a process builds it twice; without
    reset_config, Tune would fail the trial), and each iteration trains with the lr of the config
    Tune gave it. The algorithm knows its trial (RLlib's algorithms do not in a new actor:
    rllib/tune_trial.py)."""
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    inits, iterations = tmp_path / "inits", tmp_path / "iterations"
    config = small_config("torch").training(lr=tune.grid_search([1e-4, 3e-3]))
    config.callbacks(
        on_algorithm_init=functools.partial(_record_init, str(inits)),
        on_train_result=functools.partial(_record_iteration, str(iterations)),
    )
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="env_runners/episode_return_mean",
        mode="max",
        perturbation_interval=2,
        quantile_fraction=0.5,
        # a shift in the list from the better trial's lr: never the worse one's
        resample_probability=0,
        hyperparam_mutations={"lr": [1e-5, 1e-4, 1e-3, 3e-3, 1e-2]},
        synch=True,  # both trials at iteration 2, then the worse one exploits the better
    )
    results = tune.Tuner(
        DevicePPO,  # the class: a name would make Tune import every RLlib algorithm
        param_space=config,
        tune_config=tune.TuneConfig(scheduler=pbt, reuse_actors=True),
        run_config=tune.RunConfig(
            stop={"training_iteration": 3},  # an exploit at 2, then an iteration under the new lr
            storage_path=str(tmp_path),
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2),
        ),
    ).fit()
    assert results.num_errors == 0, [r.error for r in results]
    pids = inits.read_text().split()
    assert len(set(pids)) < len(pids), pids  # an algorithm built again in a process that had one
    lines = iterations.read_text().splitlines()
    trial_ids = {r.metrics["trial_id"] for r in results}
    assert {line.split()[0] for line in lines} == trial_ids, lines  # not RLlib's "default"
    rows = [[float(x) for x in line.split()[1:]] for line in lines]
    assert all(learned == pytest.approx(configured) for _, configured, learned in rows), rows
    first, last = ({lr for i, lr, _ in rows if i == iteration} for iteration in (1, 3))
    assert first == {1e-4, 3e-3} and len(last - first) == 1, rows  # one trial exploited the other, with a new lr
    assert {r.config["lr"] for r in results} == last, rows  # Tune reports the lr each trial ended with
    learned = [r.metrics["learners"]["default_policy"]["default_optimizer_learning_rate"] for r in results]
    assert learned == pytest.approx([r.config["lr"] for r in results]), rows
