"""Step thousands of copies of one env at once with every backend, and check they agree.

What it shows: any env of the suite (``--env``, default ``GPUCartPole-v1``) with the backends
this machine has (torch, numba-cpu, and numba-cuda on a GPU), gymnasium's VectorEnv API
(``reset(seed=...)``, NEXT_STEP autoreset, ``infos["episode"]``), and that the same seed and
actions give the same trajectories on every backend.

How to run it: ``.venv/bin/python examples/vector_env_backends.py [--env GPUPendulum-v1] [--num-envs 65536]``

What to expect: for each backend, env-steps per second and the number of episodes finished in
200 steps; then "all backends agree" (identical done flags, float64 states within 1e-9).
"""

import argparse
import time

import torch

from rllib_gpuenv import ENV_IDS, make_vector_env, options
from rllib_gpuenv.backends import available_backends

parser = argparse.ArgumentParser()
parser.add_argument("--env", default="GPUCartPole-v1", choices=ENV_IDS)
parser.add_argument("--num-envs", type=options.count(1), default=65536)
parser.add_argument("--steps", type=options.count(1), default=200)
args = parser.parse_args()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
space = make_vector_env(args.env, args.num_envs, backend="torch").action_space
space.seed(0)
actions = torch.stack([torch.as_tensor(space.sample()) for _ in range(args.steps)])
finals = {}
for backend in available_backends(device):
    env = make_vector_env(args.env, args.num_envs, backend=backend, device=device, dtype="float64", episode_statistics=True)
    env.reset(seed=42)
    moved = actions.to(env.device)
    episodes, dones = 0, []
    start = time.perf_counter()
    for t in range(args.steps):
        obs, reward, terminated, truncated, info = env.step(moved[t])
        episodes += int(info["_episode"].sum())
        dones.append(terminated | truncated)
    seconds = time.perf_counter() - start
    finals[backend] = (env.state.cpu(), torch.stack(dones).cpu())
    print(f"{backend:>10}: {args.num_envs * args.steps / seconds:>14,.0f} env-steps/s, {episodes:,} episodes finished")

states, flags = zip(*finals.values())
agree = all(torch.equal(flags[0], f) for f in flags) and all(torch.allclose(states[0], s, atol=1e-9, rtol=0) for s in states)
print("all backends agree" if agree else "backends DISAGREE")
