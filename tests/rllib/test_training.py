"""RLlib training with real Ray: the stock path, the device path, DeviceEnv, checkpoints, bad configs."""

import os
import signal
import statistics
import time

import gymnasium as gym
import pytest
import ray
import torch
from ray import tune
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

import rllib_gpuenv  # noqa: F401 (registers GPUCartPole-v1)
from rllib_gpuenv.experiments import cartpole_config
from rllib_gpuenv.rllib import DeviceEnvRunner, DevicePPOConfig, DevicePPOTorchLearner, Rollout

pytestmark = pytest.mark.usefixtures("ray_local")  # tests/conftest.py


def return_mean(result) -> float:
    return result["env_runners"].get("episode_return_mean", float("nan"))


def test_stock_rllib_runner_trains_on_our_env():
    config = (
        PPOConfig()
        .environment("rllib_gpuenv:GPUCartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")
        .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=2)
    )
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] >= 512
        assert return_mean(results[-1]) > 0
        assert type(algo.env_runner.env.unwrapped).__name__ == "CartPoleVectorEnv"
    finally:
        algo.stop()


def test_device_path_learns_cartpole_on_cpu():
    """A short learning test: seeds 0-2 first pass a last-100 mean of 150 at iterations 12-15
    (475 after ~60-75: `bench training` measures that, README "Benchmarks")."""
    algo = cartpole_config(device="cpu", seed=0).build_algo()
    try:
        for iteration in range(1, 41):  # noqa: B007 (read after the loop)
            result = algo.train()
            if return_mean(result) >= 150:
                break
        assert return_mean(result) >= 150, f"mean return {return_mean(result):.1f} after {iteration} iterations"
        runner = algo.env_runner
        assert str(runner.env.device) == "cpu" and next(runner.module.parameters()).device.type == "cpu"
        # Ray is running here (this module's ray_local): RLlib's object store is used as RLlib uses it
        assert type(algo.env_runner_group._remote_config_obj_ref).__name__ == "ObjectRef"
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] == iteration * algo.config.device_batch_size
    finally:
        algo.stop()


def test_device_learner_steps_as_rllibs_adam_and_keeps_its_nan_handling():
    """DevicePPOTorchLearner's fused Adam and single finite check give the step RLlib's
    ``TorchLearner`` would: plain Adam on finite gradients, NaN/inf zeroed (``nan_to_num``)
    before the step otherwise."""
    algo = cartpole_config(device="cpu", seed=0).build_algo()
    try:
        learner = algo.learner_group._learner
        assert isinstance(learner, DevicePPOTorchLearner)
        params = learner._params
        reference = {pid: p.detach().clone().requires_grad_() for pid, p in params.items()}
        reference_adam = torch.optim.Adam(list(reference.values()), lr=algo.config.lr, foreach=False)
        generator = torch.Generator().manual_seed(0)
        for step in range(3):
            grads = {pid: torch.randn(p.shape, generator=generator) for pid, p in params.items()}
            if step == 2:
                first = next(iter(grads))
                grads[first].view(-1)[:2] = torch.tensor([float("nan"), float("inf")])
            for pid, grad in grads.items():
                reference[pid].grad = torch.nan_to_num(grad)
            reference_adam.step()
            learner.apply_gradients(grads)
            for pid, p in params.items():
                assert torch.isfinite(p).all()
                torch.testing.assert_close(p.detach(), reference[pid].detach(), rtol=1e-5, atol=1e-6)
    finally:
        algo.stop()


def test_device_env_wrapper_trains_another_gymnasium_env():
    config = (
        DevicePPOConfig()
        .environment("Acrobot-v1")
        .env_runners(num_envs_per_env_runner=8)
        .device_rollouts(device="cpu", rollout_length=16, check_devices=True)
        .training(minibatch_size=64, num_epochs=2)
    )
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] == 3 * 8 * 16
        assert results[-1]["learners"]["default_policy"]["num_module_steps_trained"] > 0
    finally:
        algo.stop()


class TwoTowers(TorchRLModule, ValueFunctionAPI):
    """An RLModule of a user's own, as RLlib's docs write one: separate policy and value MLPs."""

    def setup(self):
        width, obs = self.model_config.get("width", 32), self.observation_space.shape[0]
        self.pi = torch.nn.Sequential(
            torch.nn.Linear(obs, width), torch.nn.Tanh(), torch.nn.Linear(width, self.action_space.n)
        )
        if not self.inference_only:
            self.vf = torch.nn.Sequential(torch.nn.Linear(obs, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}

    def compute_values(self, batch, embeddings=None):
        return self.vf(batch[Columns.OBS]).squeeze(-1)


class RecurrentTowers(TwoTowers):
    def get_initial_state(self):
        return {"h": torch.zeros(8)}


def test_your_own_rl_module_trains_on_the_device_path_and_a_stateful_one_is_refused():
    """``rl_module(rl_module_spec=...)`` works as with RLlib's PPO: the runner acts with the user's
    module (inference-only: no value tower), the learner trains both towers and syncs the policy
    back. A stateful module fails when built, naming why, where it would act without its state."""
    spec = RLModuleSpec(module_class=TwoTowers, model_config={"width": 16})
    algo = cartpole_config(device="cpu", seed=0).rl_module(rl_module_spec=spec).build_algo()
    try:
        runner, learner = algo.env_runner.module, algo.learner_group._learner.module[DEFAULT_MODULE_ID]
        assert type(runner) is TwoTowers and runner.inference_only and not hasattr(runner, "vf")
        value_weights = learner.vf[0].weight.detach().clone()
        for _ in range(3):
            result = algo.train()
        assert result["learners"][DEFAULT_MODULE_ID]["vf_loss"] > 0
        assert not torch.equal(learner.vf[0].weight, value_weights)  # the value tower trained
        assert torch.equal(runner.pi[0].weight, learner.pi[0].weight)  # the runner acts with what was trained
    finally:
        algo.stop()
    with pytest.raises(ValueError, match=r"RecurrentTowers is stateful.*device env runner carries no state between steps"):
        cartpole_config(device="cpu").rl_module(rl_module_spec=RLModuleSpec(module_class=RecurrentTowers)).build_algo()


class SlowPole(gym.Env):
    """A single numpy env as RLlib's docs write one (``MyEnv(config)``): CartPole, counted."""

    made = 0

    def __init__(self, config):
        SlowPole.made += 1
        self.inner = gym.make("CartPole-v1", max_episode_steps=config.get("steps", 500))
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space

    def reset(self, *, seed=None, options=None):
        return self.inner.reset(seed=seed)

    def step(self, action):
        return self.inner.step(action)


@pytest.mark.parametrize("env", [SlowPole, "slow-pole"])
def test_a_single_env_class_or_creator_trains_as_on_rllibs_own_runner(env):
    """``config.environment(MyEnv)``, or a ``tune.register_env`` creator of one env: the device
    runner makes num_envs of them and steps them through gymnasium's SyncVectorEnv."""
    tune.register_env("slow-pole", lambda config: SlowPole(config))
    SlowPole.made = 0
    config = (
        DevicePPOConfig()
        .environment(env, env_config={"steps": 20})
        .env_runners(num_envs_per_env_runner=8)
        .device_rollouts(device="cpu", rollout_length=32)
        .training(minibatch_size=64, num_epochs=1)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        assert isinstance(algo.env_runner.env.unwrapped, gym.vector.SyncVectorEnv) and algo.env_runner.num_envs == 8
        assert SlowPole.made == 8  # in this process: the local runner's envs (no evaluation runner)
        assert result["env_runners"]["episode_len_max"] == 20  # env_config reached every copy
    finally:
        algo.stop()


def test_checkpoint_restore_and_continue(tmp_path):
    config = cartpole_config(device="cpu", seed=1)
    algo = config.build_algo()
    for _ in range(3):
        algo.train()
    path = algo.save(str(tmp_path / "ckpt")).checkpoint.path
    weights = algo.get_module().state_dict()
    algo.stop()

    from rllib_gpuenv.rllib import DevicePPO

    restored = DevicePPO.from_checkpoint(path)
    try:
        assert restored.iteration == 3
        for name, tensor in restored.get_module().state_dict().items():
            assert (tensor == weights[name]).all(), name
        runner = restored.env_runner
        assert type(runner).__name__ == "DeviceEnvRunner"
        runner_weights = runner.module.state_dict()
        assert all((runner_weights[n] == w).all() for n, w in weights.items() if n in runner_weights)
        result = restored.train()
        assert result["training_iteration"] == 4
    finally:
        restored.stop()


def test_checkpoints_hold_no_device_tensors(tmp_path):
    """What lets a GPU checkpoint restore on a CPU machine: the saved weights of the learner and
    of the env runner are numpy arrays, not tensors tied to the device they trained on."""
    import pickle

    import numpy as np
    import torch

    algo = cartpole_config(device="cpu", seed=2).build_algo()
    algo.train()
    path = algo.save(str(tmp_path / "ckpt")).checkpoint.path
    algo.stop()
    states = sorted((tmp_path / "ckpt").rglob("module_state.pkl"))
    assert states, "no module state saved"
    leaves = []

    def collect(value):
        if isinstance(value, dict):
            for v in value.values():
                collect(v)
        else:
            leaves.append(value)

    for state_file in states:
        with open(state_file, "rb") as f:
            collect(pickle.load(f))
    weights = [v for v in leaves if isinstance(v, (np.ndarray, torch.Tensor))]
    assert weights and all(isinstance(v, np.ndarray) for v in weights), {type(v) for v in weights}
    assert path


def test_checkpoint_of_a_gpu_learner_restores_on_the_cpu(tmp_path):
    """The other device-specific part of a checkpoint is its config. Where ``devices: auto``
    finds a GPU, the saved config holds ``num_gpus_per_learner=1``; restored here, ``auto``
    resolves again, to the CPU, instead of asking Ray for a GPU that is not there."""
    import pickle

    from rllib_gpuenv.rllib import DevicePPO

    algo = cartpole_config(seed=3).build_algo()  # devices: auto (the CPU here)
    algo.train()
    path = algo.save(str(tmp_path / "ckpt")).checkpoint.path
    algo.stop()
    ctor_file = tmp_path / "ckpt" / "class_and_ctor_args.pkl"
    saved = pickle.loads(ctor_file.read_bytes())
    saved_config = saved["ctor_args_and_kwargs"][0][0]
    assert saved_config["learner_device"] == "auto"
    saved_config["num_gpus_per_learner"] = 1  # as written on a machine with a GPU
    ctor_file.write_bytes(pickle.dumps(saved))

    restored = DevicePPO.from_checkpoint(path)
    try:
        assert restored.config.num_gpus_per_learner == 0
        assert torch.device(restored.learner_group._learner._device).type == "cpu"
        assert restored.env_runner.env.device.type == "cpu"
        assert restored.train()["training_iteration"] == 2
    finally:
        restored.stop()


class EpisodeStepCounter(RLlibCallback):
    def on_episode_step(self, **kwargs):
        pass


class SampleCounter:  # callbacks need not subclass RLlibCallback: what they lack is none of theirs
    def on_sample_end(self, **kwargs):
        pass


def test_callbacks_without_per_episode_hooks_are_accepted():
    for callbacks in (RLlibCallback, SampleCounter, [SampleCounter, RLlibCallback]):
        assert DevicePPOConfig().environment("GPUCartPole-v1").callbacks(callbacks).validate() is None


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.device_rollouts(device="tpu"), r"unknown device 'tpu'|not supported"),
        (
            lambda c: c.training(minibatch_size=1000),
            r"minibatch_size=1000 does not divide the per-learner batch of 2048.*1024",
        ),
        (lambda c: c.training(train_batch_size_per_learner=4000), r"train_batch_size_per_learner=4000.*= 2048 env steps"),
        (lambda c: c.device_rollouts(rollout_length=0), r"rollout_length must be a positive integer"),
        (lambda c: c.update_from_dict({"cuda_graphs": "no"}), r"cuda_graphs must be true or false, got 'no'"),
        (lambda c: c.device_rollouts(cuda_graph="no"), r"device_rollouts\(cuda_graph=...\) must be true or false, got 'no'"),
        (
            lambda c: c.env_runners(gym_env_vectorize_mode="async"),
            r"gym_env_vectorize_mode='async'.*device env runner steps its envs in its own process.*RLlib's PPO on its own",
        ),
        (
            lambda c: c.env_runners(gym_env_vectorize_mode=gym.VectorizeMode.ASYNC),
            r"gym_env_vectorize_mode='async'",
        ),
        # what the device path would otherwise drop in silence (or crash on, deep in a training step)
        (
            lambda c: c.environment(env_config={"num_envs": 4}),
            r"env_config sets num_envs=4, but each env runner makes num_envs_per_env_runner=64 envs: set "
            r"env_runners\(num_envs_per_env_runner=4\)",
        ),
        (  # each remote env runner failed on it, once Ray had started
            lambda c: c.environment(env_config={"graivty": 9.8}),
            r"GPUCartPole-v1 has no parameter\(s\) \['graivty'\] \(did you mean gravity\?\)",
        ),
        (lambda c: c.environment(env_config={"backnd": "torch"}), r"no option or parameter 'backnd': did you mean backend\?"),
        (lambda c: c.environment(env_config={"substeps": 0}), r"substeps must be a positive integer, got 0"),
        (
            lambda c: c.env_runners(env_runner_cls=SingleAgentEnvRunner),
            r"DevicePPO trains on DeviceEnvRunner's rollouts, but env_runner_cls=SingleAgentEnvRunner returns episodes",
        ),
        (
            lambda c: c.env_runners(env_to_module_connector=lambda env, spaces, device: MeanStdFilter()),
            r"env_to_module_connector=...\) is given, but the device path runs no connectors.*rescale_observations",
        ),
        (lambda c: c.env_runners(module_to_env_connector=lambda env, spaces: []), r"module_to_env_connector"),
        (lambda c: c.training(learner_connector=lambda obs, act: []), r"learner_connector=...\) is given"),
        (
            lambda c: c.rl_module(model_config=DefaultModelConfig(use_lstm=True)),
            r"use_lstm=True asks for a recurrent module.*RLlib's PPO on its own env runners",
        ),
        (lambda c: c.rl_module(model_config={"use_lstm": True}), r"use_lstm=True"),
        # RLlib's sampling settings, which the rollout shape replaces
        (
            lambda c: c.env_runners(rollout_fragment_length=128),
            r"rollout_fragment_length=128, .*rollout_length=32 steps.*set device_rollouts\(rollout_length=128\) instead",
        ),
        (lambda c: c.training(train_batch_size=4096), r"train_batch_size=4096 is RLlib's old total batch, which DevicePPO"),
        (lambda c: c.env_runners(batch_mode="complete_episodes"), r"batch_mode='complete_episodes', but .* rollouts"),
        (
            lambda c: c.multi_agent(policies={"a", "b"}, policy_mapping_fn=lambda agent, episode, **kw: "a"),
            r"multi_agent\(policies=\['a', 'b'\]\) asks for several policies, but DevicePPO trains one",
        ),
        (
            lambda c: c.callbacks(on_episode_end=lambda **kwargs: None),
            r"callbacks\(on_episode_end=...\): per-episode callbacks.*compute per-episode values in on_sample_end",
        ),
        (lambda c: c.callbacks(EpisodeStepCounter), r"EpisodeStepCounter.on_episode_step: per-episode callbacks"),
        # a prefix names the library the id must come from: never a silent fall-back to gymnasium's own id
        (
            lambda c: c.environment("json:CartPole-v1"),
            r"json registers no gymnasium env 'CartPole-v1', and gymnasium would use its own",
        ),
        (
            lambda c: c.environment("gymnax:NoSuchEnv-v0"),
            r"'gymnax:NoSuchEnv-v0': gymnax has no env 'NoSuchEnv-v0'",
        ),
    ],
)
def test_bad_configs_fail_clearly(change, message):
    config = (
        DevicePPOConfig()
        .environment("GPUCartPole-v1")
        .env_runners(num_envs_per_env_runner=64)
        .device_rollouts(rollout_length=32)
    )
    with pytest.raises(ValueError, match=message):
        change(config).validate()


@pytest.mark.parametrize("num_env_runners", [0, 1])
def test_rllibs_own_algorithms_refuse_the_device_runner(num_env_runners):
    """RLlib's PPO would hand the runner's rollout to its episode-based learner connector. With a
    remote runner too the driver's runner names it: the remote one's error was logged and dropped by
    RLlib's fault tolerance, and the build failed on an IndexError. No runner is left behind."""
    import gc

    config = PPOConfig().environment("GPUCartPole-v1")
    config.env_runners(env_runner_cls=DeviceEnvRunner, num_env_runners=num_env_runners, num_cpus_per_env_runner=0.5)
    cpus = ray.available_resources().get("CPU")
    with pytest.raises(ValueError, match=r"not RLlib's PPO: use DevicePPOConfig.*instead of PPOConfig"):
        config.build_algo()
    gc.collect()  # the failed build's runner group: its actors end with their last handle
    deadline = time.monotonic() + 600  # a hang guard only: the wait is for the runner's CPU to come back
    while ray.available_resources().get("CPU") != cpus:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.2)


class RolloutRewards(RLlibCallback):
    """Logs, from each rollout, what a per-episode callback would have to add up episode by episode."""

    def on_environment_created(self, *, env_runner, metrics_logger, env, env_context, **kwargs):
        metrics_logger.log_value("envs_created", env.num_envs, reduce="sum")

    def on_sample_end(self, *, env_runner, metrics_logger, samples, **kwargs):
        if isinstance(samples, Rollout):  # training; evaluation hands RLlib episodes
            metrics_logger.log_value("rollout_reward_sum", float(samples.rewards.sum()), window=1)
            metrics_logger.log_value("rollout_real_steps", int(samples.valid.sum()), window=1)  # not reset rows
            metrics_logger.log_value("episodes_ended", int((samples.terminated | samples.truncated).sum()), window=1)


def test_runner_callbacks_see_the_env_and_each_rollout():
    algo = cartpole_config(device="cpu", seed=0).callbacks(RolloutRewards).build_algo()
    try:
        runners = algo.train()["env_runners"]
        assert runners["envs_created"] == 32  # the main job's envs, built once
        # CartPole's reward: 1 for each of the 64 × 32 steps but the reset rows after episodes' ends
        assert runners["rollout_reward_sum"] == runners["rollout_real_steps"] > 2048 - runners["episodes_ended"] - 1
        assert runners["episodes_ended"] == runners["num_episodes"] > 0
    finally:
        algo.stop()


def test_gpu_runner_device_where_there_is_none():
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message")
    with pytest.raises(ValueError, match=r"no CUDA GPU"):
        DevicePPOConfig().environment("GPUCartPole-v1").device_rollouts(device="cuda").validate()
    assert gym.spec("GPUCartPole-v1").max_episode_steps == 500


class StateRequestsKept(DeviceEnvRunner):
    """A device env runner that keeps the components of every state asked of it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.state_requests = []

    def get_state(self, components=None, **kwargs):
        self.state_requests.append(components)
        return super().get_state(components, **kwargs)


def test_remote_device_runners_send_batches_through_ray():
    """Rollouts go through Ray; after each iteration the runner is not asked for its connector
    states (it runs none: RLlib's merge of them, a blocking call, is off), yet gets the env-step
    count RLlib broadcasts (exploration schedules read it)."""
    config = (
        DevicePPOConfig()
        .environment("GPUCartPole-v1")
        .env_runners(
            num_env_runners=1, num_envs_per_env_runner=16, num_cpus_per_env_runner=0.5, env_runner_cls=StateRequestsKept
        )
        .device_rollouts(device="cpu", rollout_length=8)
        .training(minibatch_size=64, num_epochs=1)
    )
    assert config.validate() is None and config.train_batch_size_per_learner == 128
    assert config.merge_env_runner_states is False
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] == 2 * 128
        assert results[-1]["learners"]["default_policy"]["num_module_steps_trained"] > 0
        ((requests, steps),) = algo.env_runner_group.foreach_env_runner(
            lambda runner: (runner.state_requests, runner.num_env_steps_sampled_lifetime), local_env_runner=False
        )
        assert steps == 2 * 128
        assert not [r for r in requests if r and "env_to_module_connector" in r], requests
    finally:
        algo.stop()


@pytest.mark.parametrize("eval_runners, unit, duration", [(0, "episodes", 8), (1, "timesteps", 2000)])
def test_each_role_on_its_device_and_evaluation_on_the_device_runner(eval_runners, unit, duration):
    config = (
        cartpole_config(seed=0)
        .devices(learner="cpu", env_runners="cpu", evaluation="cpu")
        .evaluation(
            evaluation_interval=1,
            evaluation_num_env_runners=eval_runners,
            evaluation_duration_unit=unit,
            evaluation_duration=duration,
            evaluation_config={"num_envs_per_env_runner": 16},
        )
    )
    if eval_runners:
        config.evaluation(evaluation_config={"num_envs_per_env_runner": 16, "num_cpus_per_env_runner": 0.5})
    algo = config.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        evaluation = result["evaluation"]["env_runners"]
        assert evaluation["episode_return_mean"] > 0 and evaluation["num_env_steps_sampled"] >= (
            duration if unit == "timesteps" else 16
        )
        if unit == "episodes":
            assert evaluation["num_episodes"] >= duration
        devices = algo.eval_env_runner_group.foreach_env_runner(
            lambda r: (type(r).__name__, str(r._device), r.num_envs, r.config.in_evaluation), local_env_runner=not eval_runners
        )
        assert devices == [("DeviceEnvRunner", "cpu", 16, True)]
        assert str(algo.learner_group._learner._device) == "cpu" and str(algo.env_runner._device) == "cpu"
    finally:
        algo.stop()


def test_evaluation_beside_training_for_as_long_as_it_takes_reports_every_iteration():
    """RLlib drops evaluation answers that come back after their iteration, and a device training
    step can be shorter than one round trip: none was ever reported (rllib/parallel_evaluation.py).
    A training step of a few milliseconds makes that so on any machine."""
    config = (
        cartpole_config(device="cpu", seed=0)
        .env_runners(num_envs_per_env_runner=8)
        .device_rollouts(rollout_length=4)
        .training(minibatch_size=32, num_epochs=1)
        .evaluation(
            evaluation_interval=1,
            evaluation_parallel_to_training=True,
            evaluation_num_env_runners=1,
            evaluation_duration="auto",
        )
    )
    algo = config.build_algo()
    try:
        for _ in range(3):
            evaluation = algo.train()["evaluation"].get("env_runners", {})
            assert evaluation.get("num_env_steps_sampled", 0) >= 100  # RLlib's least per answer
    finally:
        algo.stop()


def test_a_role_on_a_gpu_that_is_not_there_fails_clearly():
    import torch

    if torch.cuda.device_count() >= 3:
        pytest.skip("this machine has the GPUs")
    for role in ("learner", "env_runners", "evaluation"):
        with pytest.raises(ValueError, match=r"cuda:2.*(no CUDA GPU|GPU\(s\) are visible)"):
            cartpole_config().devices(**{role: "cuda:2"}).validate()


def test_training_survives_a_killed_and_a_hung_remote_runner():
    """RLlib restarts a killed runner; until then the other one samples alone, and once it is back
    both sample again, with the weights the learner has (RLlib syncs the restored runner). A runner
    that stops answering (SIGSTOP) costs sample_timeout_s per iteration, and no more (RLlib's
    wait for the runners' connector states after the step is off for device runners); the other
    goes on training, as RLlib's own algorithms do. The timeout is short for a test: only a warm
    runner must answer within it, and a first sample that does not is sampled again. (DeviceDQN samples
    through the same ``sample_rollouts``; its remote runners train in test_dqn.py and
    test_learners.py.)"""
    config = (
        cartpole_config(device="cpu", seed=0)
        .env_runners(num_env_runners=2, num_envs_per_env_runner=32, num_cpus_per_env_runner=0.5, sample_timeout_s=5.0)
        .fault_tolerance(restart_failed_env_runners=True)
    )
    algo = config.build_algo()
    full_round = 2 * 32 * config.rollout_length
    stopped = None
    deadline = time.monotonic() + 600  # only stops a hang: what the test waits for is waited for, however slow

    def train_and_count() -> int:
        """Env steps the iteration sampled; an iteration in which no runner answered has none
        (its results then have no ``env_runners`` entry)."""
        return algo.train().get("env_runners", {}).get("num_env_steps_sampled", 0)

    def first_answered() -> int:
        """The env steps of the next iteration in which a runner answered within sample_timeout_s:
        on a loaded machine an answering runner may miss it too (0 or NaN steps then)."""
        while not (steps := train_and_count()) > 0:
            assert time.monotonic() < deadline, "no runner answered within sample_timeout_s after a long wait"
        return steps

    try:
        # both runners answer within sample_timeout_s (a first sample on a loaded machine may not:
        # on a loaded CI machine neither did once)
        while train_and_count() != full_round:
            assert time.monotonic() < deadline, "the runners never both answered within sample_timeout_s"
        victim = next(iter(algo.env_runner_group._worker_manager.actors().values()))
        ray.kill(victim, no_restart=False)
        sampled = [first_answered()]
        assert sampled[0] == full_round // 2, sampled  # the iteration it died in: the other runner's rollout
        while not (algo._counters["total_num_restored_workers"] >= 1 and sampled[-1] == full_round):
            assert time.monotonic() < deadline, f"the killed runner was not back after a long wait: {sampled}"
            sampled.append(train_and_count())
        assert algo.env_runner_group.num_healthy_remote_workers() == 2
        # the training step ends by sending the learner's new weights to every runner, the restored one too
        learner = algo.learner_group._learner.module[DEFAULT_MODULE_ID].state_dict()
        for weights in algo.env_runner_group.foreach_env_runner(lambda r: r.module.state_dict(), local_env_runner=False):
            assert all(torch.equal(torch.as_tensor(weights[k]), learner[k].cpu()) for k in weights)

        stopped = algo.env_runner_group.foreach_env_runner(lambda runner: os.getpid(), local_env_runner=False)[0]
        os.kill(stopped, signal.SIGSTOP)
        assert first_answered() == full_round // 2  # only the answering runner's
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        algo.stop()


def test_a_logical_gpu_without_cuda_falls_back_to_the_cpu_and_says_so():
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine where torch has no GPU")
    from tests.helpers import run_code

    out = run_code(
        "import ray\n"
        "from rllib_gpuenv.rllib import DevicePPOConfig\n"
        "ray.init(num_cpus=2, num_gpus=1, include_dashboard=False)\n"
        "config = (DevicePPOConfig().environment('GPUCartPole-v1')\n"
        "    .env_runners(num_env_runners=1, num_envs_per_env_runner=16, num_gpus_per_env_runner=1, "
        "num_cpus_per_env_runner=0.5)\n"
        "    .device_rollouts(rollout_length=8).training(minibatch_size=64, num_epochs=1))\n"
        "algo = config.build_algo()\n"
        "print('devices', algo.env_runner_group.foreach_env_runner(lambda r: str(r._device), local_env_runner=False))\n"
        "print('steps', algo.train()['env_runners']['num_env_steps_sampled_lifetime'])\n"
        "algo.stop()\n",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "devices ['cpu']" in out.stdout and "steps 128" in out.stdout
    assert "Ray assigned a GPU to env runner 1, but torch sees no CUDA device: using the CPU" in out.stderr


class EpisodeRecorder(gym.vector.VectorWrapper):
    """Keeps the return of every episode the wrapped vector env ends, in the order they end."""

    def __init__(self, env):
        super().__init__(env)
        self.returns = []

    def step(self, actions):
        out = self.env.step(actions)
        info = out[4]
        if "episode" in info:
            self.returns += info["episode"]["r"][info["_episode"]].tolist()
        return out


def test_device_runner_reports_the_mean_of_its_last_episodes():
    """``episode_return_mean`` is over the last ``metrics_num_episodes_for_smoothing`` episodes,
    also in iterations where none ended (RLlib 2.60's own runner clears its window every
    iteration, so one lucky iteration passes a stop criterion)."""
    window = 5
    config = (
        cartpole_config(device="cpu", seed=0)
        .env_runners(num_envs_per_env_runner=8)
        .device_rollouts(rollout_length=2)
        .reporting(metrics_num_episodes_for_smoothing=window)
    )
    runner = DeviceEnvRunner(config=config)
    runner.env = recorder = EpisodeRecorder(runner.env)
    quiet_iterations = 0
    for _ in range(40):
        before = len(recorder.returns)
        runner.sample()
        metrics = runner.get_metrics()
        if not recorder.returns:
            continue
        quiet_iterations += len(recorder.returns) == before
        last = recorder.returns[-window:]
        assert metrics["episode_return_mean"].peek() == pytest.approx(statistics.fmean(last))
        assert metrics["episode_len_mean"].peek() == pytest.approx(statistics.fmean(last))  # CartPole: 1 per step
        assert (metrics["episode_return_min"].peek(), metrics["episode_return_max"].peek()) == (min(last), max(last))
        assert metrics["num_episodes"].peek() == len(recorder.returns) - before
    assert len(recorder.returns) > 3 * window and quiet_iterations > 0
