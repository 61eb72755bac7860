"""The numba CUDA kernel, run by numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) on the CPU.

The simulator must be switched on before numba is imported, so each check runs in a fresh
interpreter. The simulator runs the kernel as Python: tests/test_cuda_compile.py checks that
it compiles for a GPU, and on a machine with one, tests/test_gpu.py runs it for real.
"""

import json

import pytest
from conftest import run_python

SIM = {"NUMBA_ENABLE_CUDASIM": "1"}


@pytest.mark.parametrize("dtype, tolerance", [("float64", 1e-9), ("float32", 1e-5)])
def test_cuda_kernel_matches_torch_backend_under_simulator(dtype, tolerance):
    code = f"""
import json, torch
from rllib_gpuenv import CartPoleVectorEnv
out = {{}}
for backend in ["numba-cuda", "torch"]:
    env = CartPoleVectorEnv(40, backend=backend, device="cpu", dtype="{dtype}", max_episode_steps=12,
                            threads_per_block=16)
    env.reset(seed=5)
    gen = torch.Generator().manual_seed(1)
    states, flags, ends = [], [], []
    for _ in range(30):
        _, rew, term, trunc, info = env.step(torch.randint(0, 2, (40,), generator=gen))
        states.append(env.state); flags.append(torch.stack([term, trunc])); ends.append(info["episode"]["l"])
    out[backend] = (torch.stack(states), torch.stack(flags), torch.stack(ends), env.backend)
a, b = out["numba-cuda"], out["torch"]
print(json.dumps({{"backend": a[3], "max_state_diff": (a[0] - b[0]).abs().max().item(),
                  "flags_equal": bool(torch.equal(a[1], b[1])), "ends_equal": bool(torch.equal(a[2], b[2])),
                  "terminated": int(a[1][:, 0].sum()), "truncated": int(a[1][:, 1].sum())}}))
"""
    proc = run_python(code, env=SIM)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["backend"] == "numba-cuda"
    assert result["max_state_diff"] < tolerance
    assert result["flags_equal"] and result["ends_equal"]
    assert result["terminated"] > 0 and result["truncated"] > 0


def test_block_size_search_under_simulator():
    code = """
import json
from rllib_gpuenv.backends.numba_cuda import search_threads_per_block
results = search_threads_per_block(num_envs=64, candidates=(16, 32), steps=2, device="cpu")
print(json.dumps([[r.threads_per_block, r.env_steps_per_second] for r in results]))
"""
    proc = run_python(code, env=SIM)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(r[0] for r in results) == [16, 32]
    assert results[0][1] >= results[1][1] > 0  # best first
