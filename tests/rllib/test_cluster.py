"""A real two-node Ray cluster on this machine (two ``ray start --block`` processes, token
authentication): DevicePPO and DeviceDQN with 2 colocated learners, one on each node, train;
DevicePPO then saves, restores (placing new learners on both nodes) and trains on. DeviceDQN's
restore does not repeat it here: it takes the same path, and its replay shards' restore is
checked on one node (test_learners.py), which saves this test two learner starts."""

import json

from tests.helpers import RayNodes

DRIVER = """
import json, ray
from ray.rllib.algorithms.algorithm import Algorithm
from rllib_gpuenv.rllib import DeviceDQNConfig, DevicePPOConfig

ray.init()
results = {{}}
for make, training, resume in ((DevicePPOConfig, {{"minibatch_size": 32, "num_epochs": 1}}, True),
                               (DeviceDQNConfig, {{"num_steps_sampled_before_learning_starts": 64}}, False)):
    config = (
        make().environment("GPUCartPole-v1").env_runners(num_envs_per_env_runner=8).device_rollouts(rollout_length=8)
        .learners(num_learners=2, custom_resources_per_learner={{"learner_slot": 1}}).debugging(seed=0)
        .training(**training).reporting(min_sample_timesteps_per_iteration=0)
    )
    algo = config.build_algo()
    nodes = algo.call_learners(lambda learner: ray.get_runtime_context().get_node_id())
    steps = [algo.train()["env_runners"]["num_env_steps_sampled_lifetime"] for _ in range(2)]
    results[type(algo).__name__] = {{"nodes": nodes, "steps": steps}}
    if resume:
        path = algo.save({path!r} + "/" + make.__name__).checkpoint.path
    algo.stop()
    if resume:
        restored = Algorithm.from_checkpoint(path)
        results[type(algo).__name__]["restored_nodes"] = restored.call_learners(
            lambda learner: ray.get_runtime_context().get_node_id()
        )
        steps.append(restored.train()["env_runners"]["num_env_steps_sampled_lifetime"])
        restored.stop()
print("RESULTS", json.dumps(results))
"""


def test_colocated_learners_train_on_two_nodes_and_resume(tmp_path):
    """A head and a worker node, 2 CPUs and one learner slot each: the 2 learners must go to 2 nodes."""
    with RayNodes(tmp_path, [{"num_cpus": 2, "resources": {"learner_slot": 1}}] * 2) as nodes:
        proc = nodes.run_driver(DRIVER.format(path=str(tmp_path / "checkpoints")))
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Ray prints to the driver's stdout as well (a worker's end at algo.stop(), say), after it too
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    results = json.loads(line.removeprefix("RESULTS "))
    assert sorted(results) == ["DeviceDQN", "DevicePPO"]
    for algo, result in results.items():
        assert len(set(result["nodes"])) == 2, (algo, result)  # one learner on each node
    # 2 learners x 8 envs x 8 steps an iteration; PPO resumed at 256, its new learners on both nodes again
    assert results["DeviceDQN"]["steps"] == [128, 256], results
    assert results["DevicePPO"]["steps"] == [128, 256, 384], results
    assert len(set(results["DevicePPO"]["restored_nodes"])) == 2, results
