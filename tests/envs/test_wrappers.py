"""DeviceEnv makes any gymnasium env speak tensors; CheckDevice names misplaced tensors."""

import gymnasium as gym
import numpy as np
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


def test_device_env_hands_over_a_same_step_env_s_final_observations_and_the_env_s_own_infos():
    """gymnasium's SAME_STEP autoreset: each ended env's final observation (an array per env in
    ``infos["final_obs"]``) becomes a row of one tensor, as the device runner reads it; the other
    infos pass as the env made them; no RecordEpisodeStatistics, which miscounts SAME_STEP."""
    from gymnasium.vector import AutoresetMode

    def make():
        return gym.make_vec(
            "CartPole-v1", 3, vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}
        )

    env, reference = DeviceEnv(make(), "cpu"), make()
    obs, _ = env.reset(seed=0)
    reference.reset(seed=0)
    ended = 0
    for step in range(40):
        actions = torch.tensor([step % 2, 0, 1])
        obs, _, term, trunc, info = env.step(actions)
        ref_obs, _, _, _, ref_info = reference.step(actions.numpy())
        assert torch.equal(obs, torch.as_tensor(ref_obs))
        assert "episode" not in info
        if "final_obs" in ref_info:
            mask = ref_info["_final_obs"]
            assert torch.equal(info["_final_obs"], torch.as_tensor(mask)) and torch.equal(info["_final_obs"], term | trunc)
            for i in range(3):  # the ended envs' last observations; the others' current ones
                assert torch.equal(info["final_obs"][i], torch.as_tensor(ref_info["final_obs"][i] if mask[i] else ref_obs[i]))
            assert "final_info" in info  # the env's own, as it made them
            ended += int(mask.sum())
    assert ended >= 3


def test_device_env_takes_an_env_that_records_its_episodes_and_refuses_one_of_tensors():
    env = DeviceEnv(gym.wrappers.vector.RecordEpisodeStatistics(gym.make_vec("CartPole-v1", 2)), "cpu")
    env.reset(seed=0)
    lengths = []
    for _ in range(60):
        info = env.step(torch.zeros(2, dtype=torch.long))[4]
        if "episode" in info:
            lengths += info["episode"]["l"][info["_episode"]].tolist()
    assert lengths and all(8 <= n <= 12 for n in lengths)  # pushed left all the way: CartPole falls in about 10 steps
    with pytest.raises(TypeError, match=r"returns torch tensors \(on cpu\) already: use it without DeviceEnv"):
        DeviceEnv(CartPoleVectorEnv(2, device="cpu"), "cpu").reset(seed=0)


@pytest.mark.parametrize(
    "env_id, actions, error, message",
    [
        ("CartPole-v1", torch.tensor([0, 1]), ValueError, r"shape \(3,\), one Discrete\(2\) action per env, got \(2,\)"),
        ("CartPole-v1", torch.tensor([0.0, 1.0, 1.0]), TypeError, r"integers .* got dtype float32: cast them with \.long\(\)"),
        ("CartPole-v1", [0, 1, 2], ValueError, r"valid Discrete\(2\) actions, one per env; got \[0, 1, 2\]"),
        ("Pendulum-v1", torch.zeros(3), ValueError, r"shape \(3, 1\), one Box\(-2.0, 2.0, \(1,\), float32\) action"),
        (
            "Pendulum-v1",
            torch.zeros(3, 1, dtype=torch.long),
            TypeError,
            r"floats .* got dtype int64: cast them with \.float\(\)",
        ),
        ("Pendulum-v1", torch.full((3, 1), float("nan")), ValueError, r"actions contain NaN"),
    ],
)
def test_device_env_names_bad_actions_before_the_wrapped_env_sees_them(env_id, actions, error, message):
    """Where the wrapped env failed deep inside (CartPole: `array([0, 1]) invalid`), the wrapper
    says what was wrong as the suite's envs do; Box actions beyond their bounds pass (clipped)."""
    env = DeviceEnv(gym.make_vec(env_id, num_envs=3, vectorization_mode="sync"), "cpu")
    env.reset(seed=0)
    with pytest.raises(error, match=message):
        env.step(actions)
    if env_id == "Pendulum-v1":
        assert env.step(torch.full((3, 1), 9.0))[1].shape == (3,)


def test_check_device_names_the_misplaced_tensor_of_an_env():
    env = CheckDevice(CartPoleVectorEnv(2, device="cpu"), "cpu")
    env.reset(seed=0)
    env.step(torch.zeros(2, dtype=torch.long))  # all on the CPU: fine
    wrong = CheckDevice(CartPoleVectorEnv(2, device="cpu"), "meta")
    with pytest.raises(DeviceMismatchError, match=r"env.reset\(\) output: observations is on cpu, expected meta"):
        wrong.reset(seed=0)
    # an env of numpy arrays (host memory) checked against another device: named, with the wrapper that moves them
    host = CheckDevice(gym.make_vec("CartPole-v1", 2), "meta")
    with pytest.raises(DeviceMismatchError, match=r"env.reset\(\) output: observations is a numpy array \(host memory\), "):
        host.reset(seed=0)
    CheckDevice(gym.make_vec("CartPole-v1", 2), "cpu").reset(seed=0)  # on the CPU, numpy is where it should be
    # the device as the package spells it elsewhere: cpu:0 is where torch says a CPU tensor is; auto the default
    for spelling in ("cpu:0", "auto", torch.device("cpu", 0)):
        checked = CheckDevice(CartPoleVectorEnv(2, device="cpu"), spelling)
        checked.reset(seed=0)
        checked.step(torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"unknown device 'gpu': use 'auto', 'cpu' or 'cuda\[:N\]'"):
        CheckDevice(CartPoleVectorEnv(2, device="cpu"), "gpu")
    if not torch.cuda.is_available():  # a GPU this machine lacks: named at once, not as a mismatch at the first step
        with pytest.raises(ValueError, match=r"device 'cuda' asked for, but this machine has no CUDA GPU that torch can use"):
            CheckDevice(CartPoleVectorEnv(2, device="cpu"), "cuda")


def test_check_device_names_the_misplaced_tensor_of_a_module():
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule

    module = DefaultPPOTorchRLModule(
        observation_space=gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2), model_config={"fcnet_hiddens": [8]}
    )
    CheckDevice(module, "cpu")
    module.forward_exploration({Columns.OBS: torch.zeros(3, 4)})
    with pytest.raises(DeviceMismatchError, match=r"module.forward_exploration\(\) input: obs is on meta, expected cpu"):
        module.forward_exploration({Columns.OBS: torch.zeros(3, 4, device="meta")})


def test_rescale_observations_maps_finite_bounds_to_unit_range():
    """Bounded components go to [-1, 1] (CartPole's position and angle, MountainCar's both);
    unbounded ones (CartPole's velocities) pass through; the spaces say so."""
    from rllib_gpuenv import make_vector_env
    from rllib_gpuenv.wrappers import RescaleObservations

    raw = make_vector_env("GPUCartPole-v1", 8, backend="torch", device="cpu")
    env = RescaleObservations(make_vector_env("GPUCartPole-v1", 8, backend="torch", device="cpu"))
    high = raw.single_observation_space.high
    for raw_obs, obs in (
        (raw.reset(seed=0)[0], env.reset(seed=0)[0]),
        *((raw.step(a)[0], env.step(a)[0]) for a in [torch.ones(8, dtype=torch.long)] * 5),
    ):
        assert torch.allclose(obs[:, [0, 2]], raw_obs[:, [0, 2]] / torch.tensor(high[[0, 2]]))  # symmetric bounds
        assert torch.equal(obs[:, [1, 3]], raw_obs[:, [1, 3]])
    assert env.single_observation_space.low.tolist()[::2] == [-1.0, -1.0] and env.single_observation_space.high.tolist()[
        ::2
    ] == [1.0, 1.0]
    assert env.single_observation_space.high[1] == float("inf") and env.observation_space.shape == (8, 4)

    car = RescaleObservations(make_vector_env("GPUMountainCarContinuous-v0", 64, backend="torch", device="cpu"))
    obs, _ = car.reset(seed=0)
    for _ in range(100):
        obs, *_ = car.step(torch.ones(64, 1))
        assert obs.abs().max() <= 1.0
    assert obs[:, 1].abs().max() > 0.1  # the velocity (a few hundredths raw) now spans the unit range
    with pytest.raises(TypeError, match="needs a Box observation space"):
        RescaleObservations(gym.make_vec("Blackjack-v1", num_envs=2, vectorization_mode="sync"))


class _Dice(gym.Env):
    """Observations from MultiDiscrete([3, 4], start=[1, 0]): two dice, the first numbered 1 to 3."""

    observation_space = gym.spaces.MultiDiscrete([3, 4], start=[1, 0])
    action_space = gym.spaces.Discrete(2)

    def _roll(self):
        return np.array([self.np_random.integers(1, 4), self.np_random.integers(0, 4)])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._roll(), {}

    def step(self, action):
        return self._roll(), 0.0, False, False, {}


def test_one_hot_observations_encode_discrete_and_multi_discrete_ones():
    from rllib_gpuenv.wrappers import OneHotObservations

    base = DeviceEnv(gym.make_vec("FrozenLake-v1", num_envs=3, vectorization_mode="sync"), "cpu")
    env = OneHotObservations(base)
    obs, _ = env.reset(seed=0)
    assert env.single_observation_space == gym.spaces.Box(0.0, 1.0, (16,), "float32") and obs.shape == (3, 16)
    assert torch.equal(obs.argmax(-1), torch.zeros(3, dtype=torch.long)) and torch.equal(obs.sum(-1), torch.ones(3))
    obs, *_ = env.step(torch.full((3,), 2))  # right: from cell 0 to cell 1 unless the ice slips
    assert torch.equal(obs.sum(-1), torch.ones(3)) and obs.dtype == torch.float32

    dice = DeviceEnv(gym.vector.SyncVectorEnv([_Dice] * 5), "cpu")
    raw, _ = dice.reset(seed=1)
    dice.reset(seed=1)
    encoded, _ = OneHotObservations(dice).reset(seed=1)
    assert encoded.shape == (5, 7)
    assert torch.equal(encoded[:, :3].argmax(-1), raw[:, 0].long() - 1) and torch.equal(
        encoded[:, 3:].argmax(-1), raw[:, 1].long()
    )
    with pytest.raises(TypeError, match="needs Discrete or"):
        OneHotObservations(CartPoleVectorEnv(2, device="cpu"))  # Box observations


class _Goal(gym.Env):
    """Dict observations, as goal-conditioned envs have them: a Box position and a Discrete goal."""

    observation_space = gym.spaces.Dict({"position": gym.spaces.Box(-1.0, 1.0, (2,)), "goal": gym.spaces.Discrete(3)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"position": self.np_random.uniform(-1, 1, 2).astype(np.float32), "goal": 2}, {}

    def step(self, action):
        return self.reset()[0], 0.0, False, False, {}


def test_device_env_flattens_tuple_and_dict_observations():
    """Blackjack's Tuple(Discrete(32), Discrete(11), Discrete(2)) and a Dict of a Box and a
    Discrete: one float tensor per step, flattened as gymnasium's ``spaces.flatten`` does."""
    blackjack = DeviceEnv(gym.make_vec("Blackjack-v1", num_envs=4, vectorization_mode="sync"), "cpu")
    plain = gym.make_vec("Blackjack-v1", num_envs=4, vectorization_mode="sync")
    obs, _ = blackjack.reset(seed=3)
    (player, dealer, ace), _ = plain.reset(seed=3)
    assert blackjack.single_observation_space == gym.spaces.Box(0.0, 1.0, (45,), np.float32) and obs.shape == (4, 45)
    for i in range(4):
        assert obs[i].nonzero().flatten().tolist() == [player[i], 32 + dealer[i], 43 + ace[i]]
    obs, *_ = blackjack.step(torch.zeros(4, dtype=torch.int64))  # stick: the episodes end
    assert obs.shape == (4, 45) and obs.dtype == torch.float32

    goal = DeviceEnv(gym.vector.SyncVectorEnv([_Goal] * 2), "cpu")
    obs, _ = goal.reset(seed=0)
    assert goal.single_observation_space.shape == (5,) and obs.shape == (2, 5)
    assert torch.equal(obs[:, :3], torch.tensor([[0.0, 0.0, 1.0]] * 2))  # Dict keys sorted: "goal" (one-hot) first
    assert bool((obs[:, 3:].abs() <= 1).all())


class _Walk(gym.Env):
    """A float64 Box observation, as numpy gives by default (a walkthrough's env)."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2), {}

    def step(self, action):
        return self.reset()[0], 0.0, False, False, {}


def test_device_env_declares_the_float32_observations_it_gives():
    """Its observations are float32 tensors; a float64 Box space said float64 (the bounds stay)."""
    env = DeviceEnv(gym.vector.SyncVectorEnv([_Walk] * 3), "cpu")
    obs, _ = env.reset(seed=0)
    assert obs.dtype == torch.float32 and env.single_observation_space == gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    assert env.observation_space.shape == (3, 2) and env.observation_space.dtype == np.float32
    assert env.single_observation_space.contains(obs[0].numpy())
