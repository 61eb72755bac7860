"""No host sync per step, checked on the CPU.

On a GPU a step of a rollout is queued work: the host can queue the next one while the GPU
runs this one, unless something reads a value back (``item``, a mask's count, a copy to the
host, or torch's samplers, which check their inputs on the host). ``HostReads`` counts those
calls on CPU tensors, so CI sees what ``torch.cuda.set_sync_debug_mode`` would report on a GPU
(``test_gpu.py`` checks that there). A rollout may read back a fixed amount (its episodes'
returns, for the metrics), never an amount that grows with its length.
"""

import pytest
import torch
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchCategorical,
    TorchDiagGaussian,
    TorchSquashedGaussian,
)

from rllib_gpuenv import make_vector_env
from rllib_gpuenv.core import ops
from rllib_gpuenv.envs import SHIPPED_DEFS
from rllib_gpuenv.experiments import load_config
from rllib_gpuenv.experiments.shipped import config_file
from rllib_gpuenv.rllib import DeviceEnvRunner, action_sampling
from rllib_gpuenv.rllib.dqn import DeviceDQNTorchRLModule
from tests.helpers import HostReads


@pytest.fixture
def gpu_code_paths():
    """Code that asks a tensor's value where that is free (the CPU) takes the GPU's way here."""
    with ops.gpu_code_paths():
        yield


def test_a_rollout_goes_to_the_host_only_to_leave_its_process():
    """A remote runner hands its rollout to Ray (on the host); a colocated learner's envs hand
    theirs to the learner beside them as it is (on a GPU a copy would cost a read-back per
    column, and the update would copy it back)."""
    from rllib_gpuenv.rllib.colocated import LearnerEnvRunner

    config = load_config(config_file("gpu_cartpole_ppo.yaml"), device="cpu", seed=0).config.copy(copy_frozen=False)
    config.env_runners(num_envs_per_env_runner=8).device_rollouts(rollout_length=4)
    module = DeviceEnvRunner(config=config).module
    remote = DeviceEnvRunner(config=config, worker_index=1)
    colocated = LearnerEnvRunner(config=config, worker_index=1, module=module, device=torch.device("cpu"), num_threads=1)
    assert remote.sample() is not remote._buffers
    assert colocated.sample() is colocated._buffers


def test_the_counter_sees_torchs_samplers_read_back():
    """RLlib's own samplers wait for the GPU: what the device runner must not call per step."""
    logits = torch.zeros(8, 2)
    with HostReads() as categorical:
        TorchCategorical(logits=logits).sample()
    with HostReads() as gaussian:
        TorchDiagGaussian(loc=logits, scale=torch.ones(8, 2)).sample()
    with HostReads() as item:
        float(logits.sum())
    assert categorical.counts["aten.multinomial.default"] == 1
    assert gaussian.counts["aten.normal.Tensor_Tensor"] == 1
    assert item.total == 1


@pytest.mark.parametrize("env_id", list(SHIPPED_DEFS))
def test_an_env_step_reads_nothing_back(env_id, gpu_code_paths):
    """As the device runner drives an env (torch backend: the ops it runs on a GPU)."""
    env = make_vector_env(env_id, 16, backend="torch", device="cpu", reuse_outputs=True, validate_actions=False)
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = torch.as_tensor(env.action_space.sample())
    env.step(actions)
    with HostReads() as reads:
        for _ in range(40):  # episodes end and restart in between (MountainCar's take longer)
            env.step(actions)
    assert reads.total == 0, reads.counts


def reads_per_sample(file: str, rollout_length: int) -> HostReads:
    config = load_config(config_file(file), device="cpu", seed=0).config.copy(copy_frozen=False)
    config.env_runners(num_envs_per_env_runner=8).device_rollouts(rollout_length=rollout_length)
    config.environment(env_config={**config.env_config, "backend": "torch"})
    runner = DeviceEnvRunner(config=config)
    runner.sample()  # buffers allocated, episodes under way
    with HostReads() as reads:
        runner.sample()
    return reads


@pytest.mark.parametrize(
    "file", ["gpu_cartpole_ppo.yaml", "gpu_pendulum_ppo.yaml", "gpu_cartpole_dqn.yaml", "gpu_pendulum_sac.yaml"]
)
def test_a_rollout_reads_back_per_rollout_not_per_step(file, gpu_code_paths):
    """Discrete PPO (a categorical sample), continuous PPO (a Gaussian one), DQN (epsilon-greedy),
    SAC (a tanh-squashed Gaussian)."""
    short, long = reads_per_sample(file, 2), reads_per_sample(file, 8)
    assert long.counts == short.counts, f"per-step host reads: {long.counts - short.counts}"
    # The returns and lengths of the episodes that ended, for the metrics: under one mask, then one copy.
    assert short.total <= 2, short.counts


def test_categorical_draws_are_rllibs_own_from_the_same_random_numbers():
    """torch.multinomial's one-sample path is argmax(p / E), E ~ Exp(1): the Gumbel-max on the
    same exponentials picks the same actions, so training runs as it did with RLlib's draw."""
    logits = torch.randn(50_000, 3) * 3
    logits[:, 2] = -torch.inf  # a masked action
    torch.manual_seed(1)
    rllib = TorchCategorical(logits=logits).sample()
    torch.manual_seed(1)
    ours = action_sampling.sample(TorchCategorical(logits=logits))
    assert torch.equal(ours, rllib) and not (ours == 2).any()


@pytest.mark.parametrize("cls", [TorchCategorical, TorchDiagGaussian])
def test_draw_gives_rllibs_actions_and_log_probabilities(cls):
    """The runner's draw: a categorical's straight from the logits, any other through RLlib's class."""
    inputs = torch.randn(20_000, 4) * 3
    torch.manual_seed(2)
    dist = cls.from_logits(inputs)
    rllib_actions = action_sampling.sample(dist)
    torch.manual_seed(2)
    actions, logp = action_sampling.draw(cls, inputs, explore=True)
    assert torch.equal(actions, rllib_actions)
    torch.testing.assert_close(logp, dist.logp(actions), rtol=1e-5, atol=1e-5)
    greedy, none = action_sampling.draw(cls, inputs, explore=False)
    assert none is None and torch.equal(greedy, dist.to_deterministic().sample())


def test_gaussian_draws_are_rllibs_own_from_the_same_random_numbers():
    loc, scale = torch.randn(10_000, 2), torch.rand(10_000, 2) + 0.1
    torch.manual_seed(1)
    rllib = TorchDiagGaussian(loc=loc, scale=scale).sample()
    torch.manual_seed(1)
    assert torch.equal(action_sampling.sample(TorchDiagGaussian(loc=loc, scale=scale)), rllib)


def test_uniform_among_allowed_actions():
    torch.manual_seed(0)
    allowed = torch.tensor([[True, False, True, True], [False, False, True, False]])
    draws = action_sampling.uniform_among(allowed.repeat(50_000, 1)).view(50_000, 2)
    first = torch.bincount(draws[:, 0], minlength=4) / 50_000
    torch.testing.assert_close(first, torch.tensor([1 / 3, 0, 1 / 3, 1 / 3]), rtol=0, atol=1e-2)
    assert (draws[:, 1] == 2).all()


@pytest.mark.parametrize("t", [0, 3_000, 10**7])  # epsilon 1.0, ~0.4, 0.01
def test_dqn_explores_as_rllibs_module_does(t):
    """The same actions as RLlib's epsilon-greedy (uniform among the actions whose Q-value is
    not 0, else greedy), from the same random numbers."""
    config = load_config(config_file("gpu_cartpole_dqn.yaml"), device="cpu", seed=0).config
    module = DeviceEnvRunner(config=config).module
    assert isinstance(module, DeviceDQNTorchRLModule)
    batch = {Columns.OBS: torch.randn(20_000, 4)}
    torch.manual_seed(1)
    rllib = DefaultDQNTorchRLModule._forward_exploration(module, batch, t=t)[Columns.ACTIONS]
    torch.manual_seed(1)
    ours = module.forward_exploration(batch, t=t)[Columns.ACTIONS]
    assert torch.equal(ours, rllib)
    not_greedy = (ours != module.forward_inference(batch)[Columns.ACTIONS]).float().mean()
    assert not_greedy > 0.4 if t == 0 else not_greedy < 0.3  # a random pick is the greedy one half the time


def test_sacs_training_draws_are_rllibs_own_without_a_read_back():
    """The next state's actions of SAC's gradient step (``sample_and_logp``): RLlib's numbers from
    the same random numbers, and no host read, so that the step can be captured as a CUDA graph."""
    inputs = torch.randn(20_000, 4) * 3
    torch.manual_seed(3)
    with HostReads() as rllib_reads:
        rllib = TorchSquashedGaussian.from_logits(inputs).sample_and_logp()
    torch.manual_seed(3)
    with HostReads() as reads:
        ours = action_sampling.SquashedGaussian.from_logits(inputs).sample_and_logp()
    assert all(torch.equal(a, b) for a, b in zip(ours, rllib))
    assert reads.total == 0 and rllib_reads.total == 1, (reads.counts, rllib_reads.counts)


def test_a_sac_forward_pass_for_training_reads_nothing_back():
    """DeviceSAC's module: the forward pass of a gradient step (both of its Gaussian draws)."""
    from rllib_gpuenv.rllib import DeviceSACConfig

    algo = DeviceSACConfig().environment("GPUPendulum-v1").devices(learner="cpu", env_runners="cpu").build_algo()
    try:
        module = algo.learner_group._learner.module["default_policy"]
        batch = {Columns.OBS: torch.randn(8, 3), Columns.NEXT_OBS: torch.randn(8, 3), Columns.ACTIONS: torch.rand(8, 1)}
        with HostReads() as reads:
            module.forward_train(batch)
    finally:
        algo.stop()
    assert reads.total == 0, reads.counts


def test_squashed_gaussian_draws_are_rllibs_own_and_its_greedy_action_lies_within_the_bounds():
    """SAC's actor: the runner's sample and log-probability are those of RLlib's
    ``rsample_and_logp`` from the same random numbers; its deterministic action is the squashed
    mean (RLlib's ``to_deterministic`` gives the raw mean, outside [-1, 1] here)."""
    inputs = torch.randn(20_000, 4) * 3
    torch.manual_seed(2)
    rllib_actions, rllib_logp = TorchSquashedGaussian.from_logits(inputs).rsample_and_logp()
    torch.manual_seed(2)
    actions, logp = action_sampling.draw(TorchSquashedGaussian, inputs, explore=True)
    assert torch.equal(actions, rllib_actions) and torch.equal(logp, rllib_logp)
    greedy, none = action_sampling.draw(TorchSquashedGaussian, inputs, explore=False)
    assert none is None and greedy.abs().max() <= 1.0
    torch.testing.assert_close(greedy, torch.tanh(inputs[:, :2]))
    assert TorchSquashedGaussian.from_logits(inputs).to_deterministic().sample().abs().max() > 1.0
