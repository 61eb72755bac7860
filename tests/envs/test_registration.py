"""The suite's ids are usable from gymnasium and by RLlib's stock env runner, in fresh processes,
and importing the package stays light (no Ray, no numba, nothing written)."""

import json
import os

from rllib_gpuenv import ENV_IDS
from tests.helpers import ROOT, run_python


def test_make_vec_builds_every_env_in_a_fresh_process():
    code = """
import json, gymnasium as gym
out = {}
for env_id in ENV_IDS_HERE:
    env = gym.make_vec("rllib_gpuenv:" + env_id, num_envs=3, vectorization_mode="vector_entry_point",
                       backend="torch", dtype="float64")
    obs, _ = env.reset(seed=0)
    env.step(env.action_space.sample())
    out[env_id] = [type(env.unwrapped).__name__, env.num_envs, type(obs).__name__, env.unwrapped.max_episode_steps]
print(json.dumps(out))
""".replace("ENV_IDS_HERE", repr(list(ENV_IDS)))
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["GPUCartPole-v1"] == ["CartPoleVectorEnv", 3, "ndarray", 500]
    assert result["GPUPendulum-v1"] == ["PendulumVectorEnv", 3, "ndarray", 200]
    assert set(result) == set(ENV_IDS)


def test_sync_vectorisation_as_rllib_asks_still_gives_the_batched_env():
    """RLlib's stock runner calls make_vec with vectorization_mode="sync" unless told otherwise;
    the spec makes it the one batched env (numpy output), not N single envs."""
    code = """
import json, gymnasium as gym
import rllib_gpuenv
env = gym.make_vec("GPUCartPole-v1", num_envs=4, vectorization_mode="sync", backend="numba-cpu")
single = gym.make("GPUPendulum-v1", g=9.81)
vector, single = env.unwrapped, single.unwrapped
print(json.dumps([type(env).__name__, vector.backend, vector.output, type(single).__name__, single.g]))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["CartPoleVectorEnv", "numba-cpu", "numpy", "PendulumEnv", 9.81]


def test_importing_the_package_imports_no_ray_or_numba_and_writes_nothing():
    package = os.path.join(ROOT, "rllib_gpuenv")
    before = {
        os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, fs in os.walk(package)
        for f in fs
        if "__pycache__" in d
    }
    code = """
import json, sys
import rllib_gpuenv
env = rllib_gpuenv.make_vector_env("GPUMountainCar-v0", 2, backend="torch")
print(json.dumps(sorted(m for m in ("ray", "ray.tune", "numba") if m in sys.modules)))
"""
    proc = run_python(code, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    after = {
        os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, fs in os.walk(package)
        for f in fs
        if "__pycache__" in d
    }
    assert after == before
