"""The device algorithms build and train without a Ray cluster when nothing of theirs is remote
(``rllib/in_process.py``); with Ray running they use it as RLlib does (tests/rllib/test_training.py).
Real RLlib and Ray, in a process of its own (no Ray started by another test)."""

import json

from tests.helpers import run_code

TRAIN_WITHOUT_RAY = """
import json, os, ray, torch
from ray.rllib.env import env_runner_group
import rllib_gpuenv
from rllib_gpuenv.experiments import cartpole_config
from rllib_gpuenv.rllib import DeviceDQNConfig

def actor_weights_match(algo):
    runner = algo.env_runner.module.state_dict()
    learner = algo.learner_group._learner.module["default_policy"].state_dict()
    copies = all(value.data_ptr() != learner[key].data_ptr() for key, value in runner.items())  # not aliases
    return copies and all(torch.equal(value, learner[key]) for key, value in runner.items())

out = {}
ppo = cartpole_config(device="cpu", seed=0).env_runners(num_envs_per_env_runner=16).device_rollouts(rollout_length=8)
ppo = ppo.training(minibatch_size=64).evaluation(evaluation_interval=2, evaluation_duration=4)  # a local evaluation runner
dqn = (
    DeviceDQNConfig()
    .environment("rllib_gpuenv:GPUCartPole-v1")
    .env_runners(num_env_runners=0, num_envs_per_env_runner=8)
    .device_rollouts(rollout_length=4)
    .training(num_steps_sampled_before_learning_starts=32, train_batch_size_per_learner=32)
)
for name, config in (("ppo", ppo), ("dqn", dqn)):
    algo = config.build_algo()
    out[name + "_built_ray"] = ray.is_initialized()
    out[name + "_module_ray_restored"] = env_runner_group.ray is ray
    for _ in range(3):
        result = algo.train()
        if "evaluation" in result:
            out[name + "_evaluated_episodes"] = result["evaluation"]["env_runners"]["num_episodes"]
    out[name + "_steps"] = result["env_runners"]["num_env_steps_sampled_lifetime"]
    out[name + "_synced"] = actor_weights_match(algo)
    algo.save("{folder}/" + name)
    out[name + "_logdir_made"] = os.path.isdir(algo.logdir)  # Tune's, in ~/ray_results: nothing of RLlib's goes there
    algo.stop()
    out[name + "_logdir_left"] = os.path.exists(algo.logdir)
    out[name + "_ray_after"] = ray.is_initialized()
print("RESULT " + json.dumps(out))
"""


def _result(job) -> dict:
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    (line,) = [line for line in job.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


def test_local_algorithms_train_save_and_stop_without_starting_ray(tmp_path):
    out = _result(run_code(TRAIN_WITHOUT_RAY.replace("{folder}", str(tmp_path))))
    for name in ("ppo", "dqn"):
        assert out[f"{name}_built_ray"] is False and out[f"{name}_ray_after"] is False, out
        assert out[f"{name}_module_ray_restored"] is True, out  # RLlib's module has Ray back after the build
        assert out[f"{name}_synced"] is True, out  # the runner acts with the learner's latest weights
        assert out[f"{name}_logdir_made"] is True and out[f"{name}_logdir_left"] is False, out  # no empty folder left
    assert out["ppo_evaluated_episodes"] >= 4  # evaluated at iteration 2, its weights synced without Ray
    assert out["ppo_steps"] == 3 * 16 * 8 and out["dqn_steps"] >= 3 * 8 * 4  # DQN: rounds until its per-iteration minimum
