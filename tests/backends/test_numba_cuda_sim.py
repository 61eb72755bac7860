"""The numba CUDA kernel of every env, run by numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1).

The simulator must be switched on before numba is imported, so each check runs in a fresh
interpreter. The simulator runs the kernel as Python: tests/backends/test_cuda_compile.py checks that
it compiles for a GPU, and on a machine with one, tests/test_gpu.py runs it for real.
"""

import json

import pytest

from tests.helpers import EXAMPLE_ENV_FILE, EXAMPLE_ENV_ID, run_python

SIM = {"NUMBA_ENABLE_CUDASIM": "1"}


@pytest.mark.parametrize("dtype, steps, tolerance", [("float64", 20, 1e-9), ("float32", 4, 1e-5)])
def test_cuda_kernel_matches_torch_backend_under_simulator(dtype, steps, tolerance):
    code = f"""
import json, torch
import importlib.util
from rllib_gpuenv import ENV_DEFS, make_vector_env
example = importlib.util.spec_from_file_location("write_your_own_env", {EXAMPLE_ENV_FILE!r})
example.loader.exec_module(importlib.util.module_from_spec(example))  # registers Reach1D-v0
result = {{}}
for env_id in [*ENV_DEFS, {EXAMPLE_ENV_ID!r}]:  # the README's own env too
    out = {{}}
    for backend, options in (("numba-cuda", {{"threads_per_block": 16}}), ("torch", {{}})):
        options.update(device="cpu", dtype="{dtype}", max_episode_steps=6, episode_statistics=True)
        env = make_vector_env(env_id, 24, backend=backend, **options)
        env.reset(seed=5)
        env.action_space.seed(1)
        states, flags, ends = [], [], []
        for _ in range({steps}):
            _, rew, term, trunc, info = env.step(torch.as_tensor(env.action_space.sample()))
            states.append(env.state); flags.append(torch.stack([term, trunc])); ends.append(info["episode"]["l"])
        out[backend] = (torch.stack(states), torch.stack(flags), torch.stack(ends), env.backend)
    a, b = out["numba-cuda"], out["torch"]
    result[env_id] = {{"backend": a[3], "max_state_diff": (a[0] - b[0]).abs().max().item(),
                      "flags_equal": bool(torch.equal(a[1], b[1])), "ends_equal": bool(torch.equal(a[2], b[2])),
                      "truncated": int(a[1][:, 1].sum())}}
print(json.dumps(result))
"""
    proc = run_python(code, env=SIM)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 6
    for env_id, result in results.items():
        assert result["backend"] == "numba-cuda", env_id
        assert result["max_state_diff"] < tolerance, (env_id, result)
        assert result["flags_equal"] and result["ends_equal"], env_id
        assert dtype == "float32" or result["truncated"] > 0, env_id


def test_block_size_search_under_simulator():
    code = """
import json
from rllib_gpuenv.bench.block_size import search_threads_per_block
results = search_threads_per_block(num_envs=64, candidates=(16, 32), steps=2, device="cpu")
print(json.dumps([[r.threads_per_block, r.env_steps_per_second] for r in results]))
"""
    proc = run_python(code, env=SIM)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(r[0] for r in results) == [16, 32]
    assert results[0][1] >= results[1][1] > 0  # best first
