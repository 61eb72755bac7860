"""A real two-node Ray cluster on this machine (two ``ray start --block`` processes, token
authentication): DevicePPO with 2 colocated learners, one on each node, trains, saves, restores
(placing new learners on both nodes) and trains on; a trial that fits the cluster's CPUs but not
its nodes is refused. Placing learners is the learner group's, the
same for DeviceDQN, whose colocated learners (their replay shards, their restore) are tested on
one node (test_learners.py)."""

import json

from tests.helpers import RayNodes

DRIVER = """
import json, ray
from ray.rllib.algorithms.algorithm import Algorithm
from rllib_gpuenv.rllib import DevicePPOConfig

ray.init()
from rllib_gpuenv.rllib.resources import ResourceError, check_cluster_fits
try:  # 4 CPUs in all for 1 + 2 x 1.5, but no node holds 1.5 + 1
    check_cluster_fits(DevicePPOConfig().environment("GPUCartPole-v1").learners(num_learners=2, num_cpus_per_learner=1.5))
    refused = ""
except ResourceError as err:
    refused = str(err)
config = (
    DevicePPOConfig().environment("GPUCartPole-v1").env_runners(num_envs_per_env_runner=8).device_rollouts(rollout_length=8)
    .learners(num_learners=2, custom_resources_per_learner={{"learner_slot": 1}}).debugging(seed=0)
    .training(minibatch_size=32, num_epochs=1)
)
algo = config.build_algo()
nodes = algo.call_learners(lambda learner: ray.get_runtime_context().get_node_id())
steps = [algo.train()["env_runners"]["num_env_steps_sampled_lifetime"] for _ in range(2)]
path = algo.save({path!r}).checkpoint.path
algo.stop()
restored = Algorithm.from_checkpoint(path)
restored_nodes = restored.call_learners(lambda learner: ray.get_runtime_context().get_node_id())
steps.append(restored.train()["env_runners"]["num_env_steps_sampled_lifetime"])
restored.stop()
print("RESULTS", json.dumps({{"nodes": nodes, "steps": steps, "restored_nodes": restored_nodes, "refused": refused}}))
"""


def test_colocated_learners_train_on_two_nodes_and_resume(tmp_path):
    """A head and a worker node, 2 CPUs and one learner slot each: the 2 learners must go to 2 nodes."""
    with RayNodes(tmp_path, [{"num_cpus": 2, "resources": {"learner_slot": 1}}] * 2) as nodes:
        proc = nodes.run_driver(DRIVER.format(path=str(tmp_path / "checkpoints")))
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Ray prints to the driver's stdout as well (a worker's end at algo.stop(), say), after it too
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    results = json.loads(line.removeprefix("RESULTS "))
    assert len(set(results["nodes"])) == 2, results  # one learner on each node
    # 2 learners x 8 envs x 8 steps an iteration; resumed at 256, its new learners on both nodes again
    assert results["steps"] == [128, 256, 384], results
    assert len(set(results["restored_nodes"])) == 2, results
    # the trial's check reads the nodes of the running cluster: two of 2 CPUs, no learner of 1.5 beside the 1
    assert "Ray cannot place them on its 2 nodes" in results["refused"], results["refused"]
    assert "the nodes have (2 CPU), (2 CPU)" in results["refused"], results["refused"]
