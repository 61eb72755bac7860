"""DeviceEnv makes any gymnasium env speak tensors; CheckDevice names misplaced tensors."""

import gymnasium as gym
import pytest
import torch
from ray.rllib.core.columns import Columns

from rllib_gpuenv import CartPoleVectorEnv
from rllib_gpuenv.wrappers import CheckDevice, DeviceEnv, DeviceMismatchError


def test_device_env_wraps_a_gymnasium_env():
    env = DeviceEnv(gym.make_vec("Acrobot-v1", num_envs=3, vectorization_mode="sync", max_episode_steps=5), "cpu")
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.shape == (3, 6) and obs.dtype == torch.float32
    for _ in range(5):
        obs, rew, term, trunc, info = env.step(torch.zeros(3, dtype=torch.long))
    assert trunc.all() and info["_episode"].all() and torch.equal(info["episode"]["l"], torch.full((3,), 5, dtype=torch.int32))
    with pytest.raises(TypeError, match="wraps a gymnasium VectorEnv"):
        DeviceEnv(gym.make("Acrobot-v1"))


def test_check_device_names_the_misplaced_tensor_of_an_env():
    env = CheckDevice(CartPoleVectorEnv(2, device="cpu"), "cpu")
    env.reset(seed=0)
    env.step(torch.zeros(2, dtype=torch.long))  # all on the CPU: fine
    wrong = CheckDevice(CartPoleVectorEnv(2, device="cpu"), "meta")
    with pytest.raises(DeviceMismatchError, match=r"env.reset\(\) output: observations is on cpu, expected meta"):
        wrong.reset(seed=0)


def test_check_device_names_the_misplaced_tensor_of_a_module():
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule

    module = DefaultPPOTorchRLModule(
        observation_space=gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2), model_config={"fcnet_hiddens": [8]}
    )
    CheckDevice(module, "cpu")
    module.forward_exploration({Columns.OBS: torch.zeros(3, 4)})
    with pytest.raises(DeviceMismatchError, match=r"module.forward_exploration\(\) input: obs is on meta, expected cpu"):
        module.forward_exploration({Columns.OBS: torch.zeros(3, 4, device="meta")})
