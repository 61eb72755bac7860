"""Your own torch vector env on the device env runner, in every autoreset convention, checked
exactly against scripted envs (``scripted_envs.py``): the rollout rows, the episodes reported,
what PPO bootstraps from, what DQN stores, and where every action the env gets lives; and the
prefix rule of ``"module:Env-v0"`` ids. The runners are built directly (no Algorithm); training
on such an env end to end is ``examples/torch_vector_env.py``'s test (tests/test_examples.py)."""

from __future__ import annotations

import re
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector.utils import batch_space
from ray import tune

from rllib_gpuenv.rllib import DevicePPOConfig, Rollout
from rllib_gpuenv.rllib.device_replay import n_step_transitions
from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner, check_prefixed_id
from rllib_gpuenv.rllib.learner import rollout_batch
from tests.rllib import scripted_envs
from tests.rllib.scripted_envs import MODES, expected_rows

N, T, GAMMA = 6, 12, 0.9
# One way in per mode: a gymnasium id with only a vector entry point, a tune.register_env name, a VectorEnv class.
ENV_SPECS = {
    "next_step": "tests.rllib.scripted_envs:ScriptedNextStep-v0",
    "same_step": "scripted-same-step",
    "same_step_no_final_obs": scripted_envs.ScriptedSameStepNoFinalObs,
}


def config_for(env):
    return (
        DevicePPOConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=N)
        .device_rollouts(rollout_length=T)
        .devices(learner="cpu", env_runners="cpu")
        .training(gamma=GAMMA, lambda_=0.0, minibatch_size=N * T, num_epochs=1)  # lambda 0: a target is r + gamma V(next)
        .debugging(seed=0)
    )


def copy(rollout: Rollout) -> Rollout:
    return Rollout(**{k: None if v is None else v.clone() for k, v in vars(rollout).items()})


@pytest.fixture(scope="module")
def runs():
    """Per mode: the runner after two rollouts, and both rollouts (copies: the runner reuses its buffers)."""
    # here, not at import: a Ray session that another test module ends takes earlier registrations with it
    tune.register_env(
        "scripted-same-step", lambda config: scripted_envs.ScriptedSameStep(config["num_envs"], config["device"])
    )
    out = {}
    for mode, spec in ENV_SPECS.items():
        runner = DeviceEnvRunner(config=config_for(spec))
        rollouts = [copy(runner.sample()) for _ in range(2)]
        out[mode] = runner, rollouts
    return out


@pytest.fixture(scope="module")
def learner(runs):
    env = runs["next_step"][0].env
    spaces = {"default_policy": (env.single_observation_space, env.single_action_space)}
    return config_for(ENV_SPECS["next_step"]).build_learner(spaces=spaces)


@pytest.mark.parametrize("mode", MODES)
def test_rollout_rows_episodes_and_action_devices(runs, mode):
    runner, rollouts = runs[mode]
    env = runner.env.unwrapped
    assert type(env) is MODES[mode]  # the env as it is: no DeviceEnv, no host copies
    assert env.action_devices == {(torch.Tensor, runner._device)}  # every action: a tensor on the runner's device
    ended = []
    for i in range(N):
        rows, episodes = expected_rows(mode, i, 2 * T, T)
        ended += episodes
        for part, rollout in enumerate(rollouts):
            next_obs = rollout.next_obs()
            for t in range(T):
                row, where = rows[part * T + t], (mode, i, part, t)
                assert tuple(rollout.obs[t, i].tolist()) == row["obs"], where
                assert float(rollout.rewards[t, i]) == row["reward"], where
                assert bool(rollout.terminated[t, i]) == row["terminated"], where
                assert bool(rollout.truncated[t, i]) == row["truncated"], where
                assert bool(rollout.valid[t, i]) == row["valid"], where
                assert tuple(next_obs[t, i].tolist()) == row["next_obs"], where
    # the episodes reported are the env's real ones (the runner keeps the statistics: the env has none)
    assert sorted(runner._recent_episodes) == sorted(ended)
    assert (mode == "next_step") == (rollouts[0].next_observations is None)
    if mode == "same_step_no_final_obs":
        assert not rollouts[0].valid.all()  # truncations without their final observation are left out


@pytest.mark.parametrize("mode", MODES)
def test_ppo_bootstraps_truncations_from_the_real_final_observation(runs, learner, mode):
    """With lambda 0 a value target is ``r + gamma V(next)``, ``r`` where the episode terminated:
    ``next`` must be the real observation the step led to, the final one at a truncation (never
    the next episode's first), or, without one, the step before it, bootstrapped from ``obs[t]``."""
    _, rollouts = runs[mode]
    module = learner.module["default_policy"]
    for part, rollout in enumerate(rollouts):
        batch = learner._with_advantages(rollout_batch(rollout), T)
        targets = batch["value_targets"].reshape(N, T)
        for i in range(N):
            rows = expected_rows(mode, i, 2 * T, T)[0][part * T : (part + 1) * T]
            with torch.no_grad():
                values = module.compute_values({"obs": torch.tensor([row["next_obs"] for row in rows])})
            for t, row in enumerate(rows):
                if row["valid"]:
                    expected = row["reward"] + (0.0 if row["terminated"] else GAMMA * float(values[t]))
                    assert float(targets[i, t]) == pytest.approx(expected, rel=1e-5, abs=1e-5), (mode, i, part, t)
    rollout = rollouts[0]
    assert (rollout.truncated & rollout.valid).any() and (rollout.terminated & rollout.valid).any()


@pytest.mark.parametrize("mode", MODES)
def test_dqn_stores_the_real_transitions(runs, mode):
    """One-step transitions: every trained step's next observation is the one it really led to
    (an episode's final one, not the next episode's first)."""
    _, rollouts = runs[mode]
    rollout = rollouts[0]
    out = n_step_transitions(rollout, 1, GAMMA)
    expected = []
    for t in range(T):  # the rows kept are the valid ones, time-major
        for i in range(N):
            row = expected_rows(mode, i, T, T)[0][t]
            if row["valid"]:
                expected.append((row["obs"], row["next_obs"], row["reward"], row["terminated"]))
    got = list(
        zip(
            map(tuple, out["obs"].tolist()),
            map(tuple, out["new_obs"].tolist()),
            out["rewards"].tolist(),
            out["terminateds"].tolist(),
        )
    )
    assert got == expected
    assert (rollout.truncated & rollout.valid & ~rollout.terminated).any()  # truncations bootstrap: covered above


@pytest.mark.parametrize("mode", MODES)
def test_evaluation_episodes_end_on_their_real_final_observation(runs, mode):
    runner, _ = runs[mode]
    episodes = runner.sample(num_episodes=N, explore=False)
    assert len(episodes) == N
    for i, episode in enumerate(episodes):
        (ret, length, terminated) = scripted_envs.episodes(i, 1)[0]
        assert (float(episode.get_return()), len(episode), episode.is_terminated) == (ret, length, terminated)
        if mode != "same_step_no_final_obs":
            assert tuple(episode.get_observations(-1).tolist()) == (0.0, float(length))


def _reference_chunks(runner, played: dict, i: int) -> list:
    """Env ``i``'s episode pieces as RLlib builds episodes, step by step from lists, then ``to_numpy()``."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    def episode(start: int, end: int) -> SingleAgentEpisode:
        return SingleAgentEpisode(
            observations=[played["obs"][start, i], *played["next_obs"][start:end, i]],
            actions=list(played["actions"][start:end, i]),
            rewards=list(played["rewards"][start:end, i]),
            terminated=bool(played["terminated"][end - 1, i]),
            truncated=bool(played["truncated"][end - 1, i]),
            len_lookback_buffer=0,
            observation_space=runner.env.single_observation_space,
            action_space=runner.env.single_action_space,
        ).to_numpy()

    chunks, start = [], None
    for t in range(played["steps"]):
        if not played["valid"][t, i]:
            start = None
            continue
        start = t if start is None else start
        if played["terminated"][t, i] or played["truncated"][t, i]:
            chunks.append(episode(start, t + 1))
            start = None
    return chunks + ([episode(start, played["steps"])] if start is not None else [])


@pytest.mark.parametrize("mode", MODES)
def test_played_steps_become_the_episodes_rllib_would_build(runs, mode):
    """Evaluation by timesteps returns what it played as RLlib episodes: whole ones and the pieces
    cut at either end, made straight from numpy (episodes mode takes each env's first), as RLlib
    makes them from lists."""
    runner, _ = runs[mode]
    played = runner._play(False, 2 * T, N, stop=lambda done: False, reset=True)
    for i in range(N):
        ours, reference = runner._chunks(played, i), _reference_chunks(runner, played, i)
        assert len(ours) == len(reference) >= 2  # each scripted env ends an episode within 2T steps
        assert runner._chunks(played, i, first_only=True)[0].get_return() == reference[0].get_return()
        for got, want in zip(ours, reference):
            assert got.is_numpy and (got.is_terminated, got.is_truncated, len(got)) == (
                want.is_terminated,
                want.is_truncated,
                len(want),
            )
            for column in ("observations", "actions", "rewards"):
                mine, theirs = getattr(got, f"get_{column}")(), getattr(want, f"get_{column}")()
                assert mine.dtype == theirs.dtype and (mine == theirs).all(), column


def test_a_gymnasium_env_in_same_step_mode_trains_on_its_real_final_observations():
    """gymnasium's own vectorisation in SAME_STEP mode, wrapped in DeviceEnv: every step is a row,
    each ended episode bootstraps from its real final observation, and the runner counts the
    episodes (CartPole: a return of 1 a step, so return and length agree)."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from rllib_gpuenv.wrappers import DeviceEnv

    def same_step_cartpole(config):
        env = gym.make_vec(
            "CartPole-v1",
            config["num_envs"],
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        )
        return DeviceEnv(env, config["device"])

    tune.register_env("gym-same-step-cartpole", same_step_cartpole)
    runner = DeviceEnvRunner(config=config_for("gym-same-step-cartpole"))
    rollouts = [copy(runner.sample()) for _ in range(5)]  # 60 steps: every env's first episode ends
    for rollout in rollouts:
        assert rollout.valid.all() and rollout.next_observations is not None
    ended = torch.cat([r.terminated | r.truncated for r in rollouts])
    assert ended.any(0).all()
    # where an episode ended, the next observation is the final one (beyond CartPole's bounds), not the reset one
    final = torch.cat([r.next_observations for r in rollouts])[ended]
    assert ((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 0.2095)).all()
    assert runner._recent_episodes and all(r == length for r, length in runner._recent_episodes)


def test_an_env_without_an_autoreset_mode_fails_naming_the_choices():
    with pytest.raises(
        ValueError, match=r"ScriptedNoMode declares no metadata\['autoreset_mode'\]: .*NEXT_STEP or .*SAME_STEP"
    ):
        DeviceEnvRunner(config=config_for(scripted_envs.ScriptedNoMode))


@pytest.mark.parametrize(
    "env_id, message",
    [
        (
            "brax.envs:ant",
            r"^'brax.envs:ant': brax registers no gymnasium env 'ant' \(its envs are JAX functions\): write 'brax:ant' ",
        ),
        ("gymnax:NoSuchEnv-v0", r"^'gymnax:NoSuchEnv-v0': gymnax has no env 'NoSuchEnv-v0': gymnax's envs: CartPole-v1, "),
        (
            "json:GPUCartPole-v1",
            r"json registers no gymnasium env 'GPUCartPole-v1', and gymnasium would use the one from rllib",
        ),
    ],
)
def test_a_prefix_names_the_library_the_id_must_come_from(env_id, message):
    with pytest.raises(ValueError, match=message):
        check_prefixed_id(env_id)


def test_an_unknown_env_name_says_where_names_live():
    """A ``tune.register_env`` name lives in the process that registered it: `rllib-gpuenv evaluate`
    of such a checkpoint, in a process of its own, gets one line that says so and how to name
    the env instead (gymnasium's own message, with its suggestion, first)."""
    import torch

    from rllib_gpuenv.rllib.env_runner import make_device_env

    with pytest.raises(ValueError, match=r"^env 'my_pendulum': Environment `my_pendulum` doesn't exist\. .* 'your_module:"):
        make_device_env("my_pendulum", 2, torch.device("cpu"), {})


def test_a_module_in_the_folder_a_command_runs_from_is_named_with_the_fix(tmp_path, monkeypatch):
    """A console script (`rllib-gpuenv evaluate`) does not search the folder it runs from, where
    the user's env module often is: the error says so and how to run it."""
    (tmp_path / "knobs_env.py").write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with pytest.raises(
        ValueError, match=r"no module 'knobs_env' to import: knobs_env.py is in this folder, .* PYTHONPATH=\.$"
    ):
        check_prefixed_id("knobs_env:Knobs-v0")
    with pytest.raises(ValueError, match=r"no module 'elsewhere_env' to import: install it, put its folder on PYTHONPATH"):
        check_prefixed_id("elsewhere_env:Knobs-v0")


def test_a_newly_imported_module_must_register_the_id_itself(tmp_path, monkeypatch):
    """Importing ``fresh_module`` registers nothing, so ``ScriptedNextStep-v0`` would be the one
    ``scripted_envs`` registered: an error naming the module, not a silent fall-back."""
    (tmp_path / "fresh_module.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"'fresh_module:ScriptedNextStep-v0': fresh_module registers no gymnasium env"):
        check_prefixed_id("fresh_module:ScriptedNextStep-v0")
    check_prefixed_id("tests.rllib.scripted_envs:ScriptedNextStep-v0")  # the module that registers it


def test_rescaled_observations_rescale_the_final_observation_too(runs):
    """``rescale_observations`` maps the scripted envs' Box(0, 1000) to [-1, 1]: the final
    observations a SAME_STEP env reports in its infos alike."""
    runner = DeviceEnvRunner(config=config_for(ENV_SPECS["same_step"]).device_rollouts(rescale_observations=True))
    rollout = runner.sample()
    for i in range(N):
        rows = expected_rows("same_step", i, T, T)[0]
        expected = torch.tensor([row["next_obs"] for row in rows]) / 500.0 - 1.0
        torch.testing.assert_close(rollout.next_obs()[:, i], expected)


class ScriptedSameStepFloat64(scripted_envs.ScriptedSameStep):
    """The SAME_STEP scripted env with float64 observations (a legal gymnasium Box)."""

    def __init__(self, num_envs: int = 4, device="cpu"):
        super().__init__(num_envs, device)
        self.single_observation_space = gym.spaces.Box(0.0, 1000.0, (2,), np.float64)
        self.observation_space = batch_space(self.single_observation_space, num_envs)

    def _obs(self) -> torch.Tensor:
        return super()._obs().double()


def test_float64_observations_reach_the_module_as_float32_final_ones_too():
    """RLlib's default networks have float32 weights (a float64 batch failed in the first matmul):
    the runner gives the module float32 observations, as RLlib's own runner does for numpy ones."""
    runner = DeviceEnvRunner(config=config_for(ScriptedSameStepFloat64))
    rollout = runner.sample()
    assert runner.env.single_observation_space.dtype == np.float32 and rollout.obs.dtype == torch.float32
    for i in range(N):
        rows = expected_rows("same_step", i, T, T)[0]
        assert rollout.next_obs()[:, i].tolist() == [list(row["next_obs"]) for row in rows]


class NumpyRewards(scripted_envs.ScriptedNextStep):
    def step(self, actions):
        obs, rewards, terminated, truncated, info = super().step(actions)
        return obs, rewards.numpy(), terminated, truncated, info


class RewardColumn(scripted_envs.ScriptedNextStep):
    def step(self, actions):
        obs, rewards, terminated, truncated, info = super().step(actions)
        return obs, rewards[:, None], terminated, truncated, info


class WideObservations(scripted_envs.ScriptedNextStep):
    def _obs(self) -> torch.Tensor:
        return torch.cat([super()._obs(), super()._obs()[:, :1]], dim=1)


class IntegerObservations(scripted_envs.ScriptedNextStep):
    def _obs(self) -> torch.Tensor:
        return super()._obs().long()  # in its float32 Box


class NumpyFinalObsMask(scripted_envs.ScriptedSameStep):
    def step(self, actions):
        obs, rewards, terminated, truncated, info = super().step(actions)
        return obs, rewards, terminated, truncated, {k: v.numpy() if k == "_final_obs" else v for k, v in info.items()}


@pytest.mark.parametrize(
    "env, error, message",
    [
        (
            NumpyRewards,
            TypeError,
            "NumpyRewards.step() returned rewards as a numpy.ndarray: the device env runner reads torch",
        ),
        (RewardColumn, ValueError, f"RewardColumn.step() returned rewards of shape ({N}, 1): one per env, shape ({N},)"),
        (WideObservations, ValueError, f"WideObservations.reset() returned observations of shape ({N}, 3), but num_envs={N}"),
        (NumpyFinalObsMask, TypeError, "NumpyFinalObsMask.step() returned infos['_final_obs'] as a numpy.ndarray"),
        (  # it was "mat1 and mat2 must have the same dtype" in the module's first layer
            IntegerObservations,
            TypeError,
            "IntegerObservations.reset() returned observations as torch.int64, but the observation space Box(0.0, 1000.0, "
            "(2,), float32) holds torch.float32",
        ),
    ],
)
def test_a_tensor_envs_wrong_outputs_are_named_with_what_they_should_be(env, error, message):
    """Not a raw error from inside the runner or the module ("'numpy.ndarray' object has no attribute 'bool'")."""
    with pytest.raises(error, match=re.escape(message)):
        runner = DeviceEnvRunner(config=config_for(env))
        runner.sample()
        runner.sample()  # the scripted SAME_STEP env's first episodes end in the second rollout at the latest


def test_a_checkpoint_of_an_env_without_state_keeps_the_episode_window_and_says_what_it_lacks(caplog):
    """Where the envs are cannot be saved without the env's get_state/set_state: the restored runner
    goes on with the episode window (the mean return reported does not jump), its envs start new
    episodes, and the first save says how to resume exactly."""
    from rllib_gpuenv.rllib.env_runner import DEVICE_ROLLOUT_STATE

    runner = DeviceEnvRunner(config=config_for(ENV_SPECS["next_step"]))
    for _ in range(2):
        runner.sample()
    window = list(runner._recent_episodes)
    state, again = runner.get_state(), runner.get_state()
    assert window and state[DEVICE_ROLLOUT_STATE] == {"recent_episodes": window} == again[DEVICE_ROLLOUT_STATE]
    said = [r.getMessage() for r in caplog.records if "has no get_state()/set_state()" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("ScriptedNextStep has no get_state()/set_state(): checkpoints keep")

    restored = DeviceEnvRunner(config=config_for(ENV_SPECS["next_step"]))
    restored.set_state(state)
    assert list(restored._recent_episodes) == window
    restored.sample()  # new episodes, from a reset of its own


class CountedOtherwise(scripted_envs.ScriptedNextStep):
    def __init__(self, n_envs: int = 4, device="cpu"):  # not num_envs, which the runner passes
        super().__init__(n_envs, device)


@pytest.mark.parametrize(
    "env, env_config, message",
    [
        (CountedOtherwise, {}, "CountedOtherwise: got an unexpected keyword argument 'num_envs'. The device env runner"),
        (ENV_SPECS["next_step"], {"modee": 1}, "vector_entry_point: got an unexpected keyword argument 'modee'"),
    ],
)
def test_an_env_that_takes_other_arguments_is_told_the_convention(env, env_config, message):
    with pytest.raises(TypeError, match=re.escape(message) + r".*keyword arguments: num_envs, device \(where it takes one\)"):
        DeviceEnvRunner(config=config_for(env).environment(env, env_config=env_config))
