"""Train DevicePPO on JAX envs, gymnax's or Brax's, stepped on the runner's device without a copy.

What it shows: ``"gymnax:<id>"`` (gymnax's classic control, bsuite and MinAtar envs) and
``"brax:<name>"`` (Brax's ``inverted_pendulum``, ``ant``, ``hopper``, ...) train as any id does.
The env is the library's own, jit-compiled and vmapped over the envs on the JAX device that is
the runner's torch device, its arrays shared with torch through DLPack (no copy, no host round
trip). It resets SAME_STEP, keeping the final observation, and its time limit is a truncation
(bootstrapped), not a termination. ``env_config`` sets gymnax's env params, or Brax's
``episode_length`` and env arguments. MinAtar's 10×10×C images go through RLlib's CNN encoder
(``model_config``'s ``conv_filters``). Needs the ``jax`` extra for gymnax (``pip install
"rllib_gpuenv[jax]"``), the ``brax`` extra for Brax.

How to run it: ``.venv/bin/python examples/jax_env.py [--env gymnax:Breakout-MinAtar | brax:inverted_pendulum]
[--iterations 20] [--device cuda]`` (on a GPU with JAX's CUDA build: ``pip install -U "jax[cuda]"``)

What to expect: two iterations (the default) of CartPole take about 8 s on a 2-core CPU, most
of it importing JAX and compiling the env (no Ray starts: the runner and the learner live in
this process). Within 20 (about 9 s) CartPole's mean return climbs from about 13 to about 150
(2026-11-27). Breakout-MinAtar starts near 0.4 (a random policy's return, in
episodes of about 10 steps) at about 2 s an iteration on that CPU, and needs far more steps
than 20 iterations to learn. Brax's inverted pendulum builds in about 25 s, most of it
compiling Brax's physics, then its return (a step's reward is 1 while the pole stands) climbs
from about 5 to 35-50 in 10 iterations of about 0.2 s each
(``configs/brax_inverted_pendulum_ppo.yaml`` trains it to 950).
"""

from torch_vector_env import parse_args, train

from rllib_gpuenv.rllib import DevicePPOConfig

if __name__ == "__main__":
    args = parse_args(env="gymnax:CartPole-v1")
    image = "MinAtar" in args.env  # 10×10×C observations: a small CNN (RLlib's default filters are for 84×84)
    model_config = {"conv_filters": [[16, [3, 3], 1]]} if image else {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}
    config = (
        DevicePPOConfig()
        .environment(args.env)
        .env_runners(num_envs_per_env_runner=128)
        .device_rollouts(rollout_length=16)
        .devices(learner=args.device, env_runners=args.device)
        .training(lr=2e-3, gamma=0.98, lambda_=0.8, num_epochs=4, minibatch_size=512, vf_clip_param=float("inf"))
        .rl_module(model_config=model_config)
    )
    train(config, args.iterations)
