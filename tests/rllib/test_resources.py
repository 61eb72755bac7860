"""Asking for what the cluster lacks fails at once, naming the setting and the fix (real Ray, real Tune).

Without the check each of these waits forever (build_algo never returns, the Tune trial stays
PENDING) or ends in RLlib's bare ``AssertionError: local_gpu_idx 0 is not a valid GPU ID``.
"""

import pytest
import ray
import torch
from ray import tune

from rllib_gpuenv.rllib import DevicePPO, DevicePPOConfig
from rllib_gpuenv.rllib.resources import ResourceError, check_cluster_fits


@pytest.fixture(scope="module", autouse=True)
def two_cpu_cluster():
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    assert ray.cluster_resources()["CPU"] == 2 and not ray.cluster_resources().get("GPU")
    yield
    ray.shutdown()


def config(**env_runners) -> DevicePPOConfig:
    return (
        DevicePPOConfig()
        .environment("GPUCartPole-v1")
        .env_runners(num_envs_per_env_runner=16, **env_runners)
        .device_rollouts(rollout_length=8)
        .training(minibatch_size=64, num_epochs=1)
    )


NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch has no GPU")

BUILD_CASES = [
    pytest.param(
        config(num_env_runners=8),
        r"asks Ray for 8 CPU\(s\) but the cluster has 2: 8 for the env runners \(num_env_runners=8 × "
        r"num_cpus_per_env_runner=1\)\. "
        r"Fix: set num_env_runners=2 or set num_cpus_per_env_runner=0.25; or give Ray more CPUs \(a local instance: "
        r"ray.init\(num_cpus=8\), or rllib train's --ray-num-cpus 8; a cluster: more nodes",
        id="more-env-runners-than-cpus",
    ),
    pytest.param(
        config(num_env_runners=1, num_gpus_per_env_runner=1),
        r"asks Ray for 1 GPU\(s\) but the cluster has 0: 1 for the env runners \(num_env_runners=1 × "
        r"num_gpus_per_env_runner=1\)\. "
        r"Fix: set num_gpus_per_env_runner=0 \(the env runners then work on the CPU\)",
        id="gpu-per-env-runner-without-a-gpu",
    ),
    pytest.param(
        config().learners(num_gpus_per_learner=1),
        r"num_gpus_per_learner=1 puts the local learner \(num_learners=0\) on a GPU, but torch sees no CUDA GPU in this "
        r"process\. "
        r"Fix: set num_gpus_per_learner=0",
        id="gpu-learner-without-a-gpu",
        marks=NO_GPU,
    ),
]


@pytest.mark.parametrize("algo_config, message", BUILD_CASES)
def test_build_algo_fails_at_once_naming_the_setting_and_the_fix(algo_config, message, tmp_path, monkeypatch):
    """... and leaves no empty log folder of the failed build in ~/ray_results (here: tmp_path)."""
    import ray.train.constants
    from ray.tune.trainable import trainable

    monkeypatch.setattr(trainable, "DEFAULT_STORAGE_PATH", str(tmp_path))  # where Tune makes an algorithm's folder
    monkeypatch.setattr(ray.train.constants, "DEFAULT_STORAGE_PATH", str(tmp_path))
    with pytest.raises(ResourceError, match=message):
        algo_config.build_algo()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "algo_config, message",
    [
        pytest.param(
            config(num_env_runners=2),
            r"asks Ray for 3 CPU\(s\) but the cluster has 2: 1 for the algorithm's main process "
            r"\(num_cpus_for_main_process=1\) "
            r"\+ 2 for the env runners \(num_env_runners=2 × num_cpus_per_env_runner=1\)\. Fix: set num_env_runners=1 or "
            r"set num_cpus_per_env_runner=0.5",
            id="trial-needs-more-cpus",
        ),
        pytest.param(
            config().learners(num_gpus_per_learner=1),
            r"asks Ray for 1 GPU\(s\) but the cluster has 0: 1 for the algorithm's main process \(num_gpus_per_learner=1\)\. "
            r"Fix: set num_gpus_per_learner=0",
            id="trial-needs-a-gpu",
        ),
        pytest.param(  # build_algo() runs them; a trial crashed in Ray with "Bundles cannot be an empty dictionary"
            config().learners(num_learners=2, num_cpus_per_learner=0),
            r"the learners ask for no CPU and no GPU \(num_learners=2, num_cpus_per_learner=0\), and Ray refuses the empty "
            r"placement-group bundle Tune reserves for each\. Fix: set num_cpus_per_learner to a small fraction, e\.g\. 0\.01",
            id="learners-asking-for-nothing",
        ),
    ],
)
def test_a_tune_trial_that_cannot_be_scheduled_fails_before_it_is_pending(algo_config, message, tmp_path):
    tuner = tune.Tuner(
        DevicePPO,
        param_space=algo_config,
        run_config=tune.RunConfig(stop={"training_iteration": 1}, storage_path=str(tmp_path), verbose=0),
    )
    with pytest.raises(ResourceError, match=message):
        tuner.fit()


def test_two_env_runners_fit_beside_the_caller_but_not_in_a_trial():
    """build_algo() runs the main process in the caller; a Tune trial needs a CPU for it too."""
    two_runners = config(num_env_runners=2)
    check_cluster_fits(two_runners, main_process_here=True)
    with pytest.raises(ResourceError, match=r"asks Ray for 3 CPU"):
        check_cluster_fits(two_runners)
    check_cluster_fits(config(num_env_runners=2, num_cpus_per_env_runner=0.5))


@NO_GPU
def test_a_logical_gpu_does_not_hide_that_torch_has_none():
    """``ray.init(num_gpus=1)`` on a CPU machine: Ray would schedule the learner, torch cannot use it."""
    learner_on_gpu = config().learners(num_gpus_per_learner=1)
    check_cluster_fits(learner_on_gpu, cluster={"CPU": 2, "GPU": 1})  # a trial can be scheduled
    with pytest.raises(ResourceError, match=r"torch sees no CUDA GPU in this process"):
        check_cluster_fits(learner_on_gpu, cluster={"CPU": 2, "GPU": 1}, main_process_here=True)


def test_actors_that_fit_the_totals_but_not_the_nodes_are_refused_with_fixes_that_place():
    """A walkthrough's hang: 3 learners of 0.66 CPU beside the trial's 1 on nodes of 2 and 1 CPUs
    (3 in all) passed the totals and stayed PENDING: Ray places a trial's bundles largest first,
    a node at a time (1 + 0.66 on the first, 0.66 on the second, and no room for the last), though
    the sum fits and another placement exists. Each fix named places, as build_algo()'s actors do."""
    import re

    nodes, totals = [{"CPU": 2.0, "GPU": 0.0}, {"CPU": 1.0, "GPU": 0.0}], {"CPU": 3.0, "GPU": 0.0}
    learners = config().learners(num_learners=3, num_cpus_per_learner=0.66)
    with pytest.raises(ResourceError) as refused:
        check_cluster_fits(learners, totals, nodes=nodes)
    message = str(refused.value)
    assert "Ray cannot place them on its 2 nodes" in message and "the nodes have (2 CPU), (1 CPU)" in message
    assert "the learners: 3 × (0.66 CPU)" in message
    fixes = dict(re.findall(r"set (\w+)=([\d.]+)", message))
    assert fixes == {"num_cpus_for_main_process": "0.68", "num_learners": "2", "num_cpus_per_learner": "0.5"}, message
    for setting, value in fixes.items():
        fixed = learners.copy(copy_frozen=False)
        setattr(fixed, setting, float(value) if "." in value else int(value))
        check_cluster_fits(fixed, totals, nodes=nodes)
    check_cluster_fits(learners, totals, nodes=nodes, main_process_here=True)  # one by one, they find room
    # a node too small for any learner is no fix: learners of 1.5 CPUs on nodes of 2 and 2
    with pytest.raises(ResourceError, match=r"set num_learners=1 or set num_cpus_per_learner=1\b"):
        check_cluster_fits(
            config().learners(num_learners=2, num_cpus_per_learner=1.5), {"CPU": 4.0, "GPU": 0.0}, nodes=[nodes[0]] * 2
        )
