"""GPUCartPole-v1 is usable from gymnasium and Ray Tune in a fresh process."""

import json

from conftest import run_python


def test_make_vec_in_a_fresh_process():
    code = """
import json, gymnasium as gym
env = gym.make_vec("rllib_gpuenv:GPUCartPole-v1", num_envs=3, vectorization_mode="vector_entry_point",
                   backend="torch", dtype="float64")
obs, _ = env.reset(seed=0)
out = env.step(env.action_space.sample())
print(json.dumps({"type": type(env.unwrapped).__name__, "num_envs": env.num_envs, "obs": type(obs).__name__,
                  "shape": list(obs.shape), "backend": env.unwrapped.backend,
                  "max_steps": env.unwrapped.max_episode_steps}))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"type": "CartPoleVectorEnv", "num_envs": 3, "obs": "ndarray", "shape": [3, 4],
                      "backend": "torch", "max_steps": 500}


def test_tune_env_creator_receives_num_envs():
    code = """
import json
import rllib_gpuenv
from ray.tune.registry import ENV_CREATOR, _global_registry
creator = _global_registry.get(ENV_CREATOR, "GPUCartPole-v1")
env = creator({"num_envs": 5, "backend": "numba-cpu"})
print(json.dumps([type(env).__name__, env.num_envs, env.backend, env.output]))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["CartPoleVectorEnv", 5, "numba-cpu", "numpy"]
