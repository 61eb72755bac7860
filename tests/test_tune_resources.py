"""Tune chooses the resources: the search space from the cluster, fail-fast, a real Tune run."""

import logging
import math

import pytest
import ray

from rllib_gpuenv.experiments import ExperimentError, inline_experiment, load_experiments
from rllib_gpuenv.tune_resources import ResourceSpace, candidates, search_resources


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def test_without_gpus_the_gpu_options_drop_out(caplog):
    space = ResourceSpace(num_envs_per_env_runner=[64, 256], num_env_runners=[0, 1], num_gpus_per_env_runner=[0, 0.5], num_gpus_per_learner=[0, 1])
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv.tune_resources"):
        combos = candidates(space, {"CPU": 2.0})
    assert "the cluster has no GPU: dropping the GPU options" in caplog.text
    assert len(combos) == 4 and all(c["num_gpus_per_env_runner"] == 0 == c["num_gpus_per_learner"] for c in combos)


def test_with_a_gpu_fractions_are_tried_but_not_on_the_local_runner():
    space = ResourceSpace(num_envs_per_env_runner=[1024], num_env_runners=[0, 2], num_gpus_per_env_runner=[0, 0.5], num_gpus_per_learner=[0, 1])
    combos = candidates(space, {"CPU": 16.0, "GPU": 1.0})
    assert {(c["num_env_runners"], c["num_gpus_per_env_runner"]) for c in combos} == {(0, 0), (2, 0), (2, 0.5)}
    assert len(combos) == 6


def test_a_candidate_that_cannot_fit_fails_before_any_trial(ray_local):
    exp = inline_experiment("DevicePPO", "GPUCartPole-v1", stop={"env_runners/episode_return_mean": 100})
    with pytest.raises(ExperimentError, match=r"needs 4 CPU \(the cluster has 2\)"):
        search_resources(exp, ResourceSpace(num_envs_per_env_runner=[64], num_env_runners=[3]))


def test_real_tune_search_picks_and_writes_the_best(ray_local, tmp_path):
    exp = inline_experiment(
        "DevicePPO", "GPUCartPole-v1",
        {"seed": 0, "device_rollouts": {"rollout_length": 16}, "minibatch_size": 256, "num_epochs": 4, "lr": 0.001},
        stop={"env_runners/episode_return_mean": 40, "training_iteration": 40}, name="search",
    )  # fmt: skip
    space = ResourceSpace(num_envs_per_env_runner=[32, 64], num_env_runners=[0], time_budget_s=60)
    best_file = str(tmp_path / "best.yaml")
    rows = search_resources(exp, space, storage_path=str(tmp_path / "results"), best_file=best_file, verbose=0)
    assert [r["error"] for r in rows] == [None, None]
    assert sorted(r["num_envs_per_env_runner"] for r in rows) == [32, 64]
    assert not math.isinf(rows[0]["time_to_target_s"]) and rows[0]["return"] >= 40
    assert rows[0]["time_to_target_s"] <= rows[1]["time_to_target_s"]
    (best,) = load_experiments(best_file)  # `rllib train file best.yaml` runs this
    assert best.config.num_envs_per_env_runner == rows[0]["num_envs_per_env_runner"] and best.config.rollout_length == 16
