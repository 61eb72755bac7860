"""`rllib evaluate` / `rllib-gpuenv evaluate`: deterministic episodes from a checkpoint, and a video.

Real Ray, RLlib, gymnasium and imageio. The checkpoints are made cheaply: a DevicePPO after one
tiny iteration, and RLlib's stock PPO on gymnasium's CartPole-v1 straight after it is built.
"""

import os
import shutil
import subprocess
import sys

import imageio.v2 as imageio
import pytest
import ray
import torch
from ray.rllib.algorithms.ppo import PPOConfig

from rllib_gpuenv.cli.evaluate import EvaluationError, evaluate
from rllib_gpuenv.rllib import DevicePPOConfig

BIN = os.path.dirname(sys.executable)
FRAME_SHAPE = (400, 600, 3)  # gymnasium's CartPole renderer


def tiny_device_ppo(env: str):
    """A DevicePPO of one tiny iteration's size (16 envs x 8 steps), built: checkpoints to play."""
    config = DevicePPOConfig().environment(env).env_runners(num_envs_per_env_runner=16).device_rollouts(rollout_length=8)
    return config.training(minibatch_size=64, num_epochs=1).build_algo()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    root = tmp_path_factory.mktemp("checkpoints")
    device = tiny_device_ppo("GPUCartPole-v1")
    stock = PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0).build_algo()
    try:
        device.train()
        paths = {
            "device": device.save(str(root / "device")).checkpoint.path,
            "stock": stock.save(str(root / "stock")).checkpoint.path,
        }
    finally:
        device.stop()
        stock.stop()
        ray.shutdown()
    return paths


def assert_cartpole_episodes(result, episodes):
    assert len(result.returns) == len(result.lengths) == episodes
    assert all(1 <= n <= 500 for n in result.lengths)
    assert result.returns == [float(n) for n in result.lengths]  # CartPole pays 1 per step


HEADLESS_UNSET = ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER")


def test_rllib_evaluate_plays_deterministic_episodes_and_records_an_mp4(checkpoints, tmp_path):
    video = tmp_path / "policy.mp4"
    out = subprocess.run(
        [
            os.path.join(BIN, "rllib"),
            "evaluate",
            checkpoints["device"],
            "--episodes",
            "4",
            "--device",
            "cpu",
            "--video",
            str(video),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in HEADLESS_UNSET},  # as on a server: no display, no sound
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "XDG_RUNTIME_DIR" not in out.stderr and "ALSA" not in out.stderr, out.stderr[-3000:]  # SDL kept quiet
    assert "4 episodes: mean return" in out.stdout and ", min " in out.stdout and ", max " in out.stdout
    assert f"written to {video}" in out.stdout
    assert out.stderr.startswith(f"evaluating {checkpoints['device']} on cpu: 4 episodes of "), out.stderr[
        -3000:
    ]  # as rllib-gpuenv's
    frames = imageio.mimread(video, memtest=False)
    assert len(frames) >= 2 and frames[0].shape == FRAME_SHAPE

    first = evaluate(checkpoints["device"], episodes=4, device="cpu")
    again = evaluate(checkpoints["device"], episodes=4, device="cpu")
    assert_cartpole_episodes(first, 4)
    assert first.returns == again.returns  # deterministic actions, the same seed
    assert len(frames) == first.lengths[0] + 1  # the reset frame, then one per step of env 0's episode


def test_any_gymnasium_env_records_a_gif_the_same_way(checkpoints, tmp_path):
    """RLlib's stock PPO on gymnasium's CartPole-v1: gymnasium vectorises it, its renderer draws env 0."""
    result = evaluate(checkpoints["stock"], episodes=3, device="cpu", video=str(tmp_path / "stock.gif"))
    assert_cartpole_episodes(result, 3)
    assert result.frames == result.lengths[0] + 1
    frames = imageio.mimread(result.video)
    assert 1 < len(frames) <= result.frames  # Pillow merges frames that are pixel-identical into one
    assert frames[0].shape[:2] == FRAME_SHAPE[:2]


def test_rllib_gpuenv_evaluate_names_what_is_wrong(checkpoints, tmp_path):
    def run(*args):
        return subprocess.run(
            [os.path.join(BIN, "rllib-gpuenv"), "evaluate", *args], capture_output=True, text=True, cwd=tmp_path
        )

    out = run(str(tmp_path))
    assert out.returncode == 2 and "not an RLlib algorithm checkpoint (no rllib_checkpoint.json)" in out.stderr, out.stderr[
        -2000:
    ]
    out = run(checkpoints["device"], "--video", "out.avi")
    assert out.returncode == 2 and "--video out.avi: the file must end in .mp4 or .gif" in out.stderr, out.stderr[-2000:]


def test_an_old_command_line_plays_or_names_what_replaced_its_options(checkpoints, tmp_path):
    """`rllib rollout CHECKPOINT --run ALGO --env ENV` (RLlib's old spelling): --run and --env are
    checked against the checkpoint, which names both; --steps and --render name their replacements."""

    def rllib(*args):
        return subprocess.run([os.path.join(BIN, "rllib"), *args], capture_output=True, text=True, cwd=tmp_path)

    device = checkpoints["device"]
    out = rllib("rollout", device, "--run", "DevicePPO", "--env", "GPUCartPole-v1", "--episodes", "2", "--device", "cpu")
    assert out.returncode == 0 and "2 episodes: mean return" in out.stdout, out.stderr[-3000:]
    for args, line in [
        (["--algo", "PPO"], f"rllib: error: --algo PPO: {device} is a checkpoint of DevicePPO: drop --algo"),
        (["--env", "CartPole-v1"], f"rllib: error: --env CartPole-v1: {device} was trained on GPUCartPole-v1, which"),
        (["--steps", "1000"], "rllib: error: --steps 1000: evaluate plays whole episodes, all at once: give --episodes N"),
        (["--render"], "rllib: error: --render: evaluate records env 0's episode instead: --video out.mp4 (or .gif)"),
    ]:
        out = rllib("evaluate", device, *args)
        assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(line), out.stderr[-2000:]


def test_a_truncated_checkpoint_file_is_named(checkpoints, tmp_path):
    broken = shutil.copytree(checkpoints["device"], tmp_path / "broken")
    config_file = broken / "class_and_ctor_args.pkl"
    config_file.write_bytes(config_file.read_bytes()[:100])
    with pytest.raises(EvaluationError, match=f"{config_file}: cannot be read"):
        evaluate(broken, episodes=1, device="cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_evaluate_on_the_gpu(checkpoints, tmp_path):
    result = evaluate(checkpoints["device"], episodes=8, device="cuda", video=str(tmp_path / "gpu.mp4"))
    assert_cartpole_episodes(result, 8)
    assert result.frames == result.lengths[0] + 1


def test_a_policy_is_played_on_the_observations_it_was_trained_on(tmp_path, monkeypatch):
    """The runner hands the module MountainCar's observations rescaled (the shipped DQN file's
    ``rescale_observations``) and FrozenLake's ``Discrete(16)`` ones one-hot (RLlib's default
    networks take Box observations only); evaluate plays the checkpoint's policy on the same.
    (It fed MountainCar's raw observations to a policy trained on rescaled ones: a checkpoint that
    reached -102 played -200.)"""
    from rllib_gpuenv.cli import evaluate as evaluate_module
    from rllib_gpuenv.rllib import DeviceDQNConfig

    seen = []
    play = evaluate_module._deterministic_actions
    monkeypatch.setattr(evaluate_module, "_deterministic_actions", lambda module, obs: seen.append(obs) or play(module, obs))
    configs = {
        "mountaincar": DeviceDQNConfig().environment("GPUMountainCar-v0").device_rollouts(rescale_observations=True),
        "frozenlake": DevicePPOConfig().environment("FrozenLake-v1").training(minibatch_size=64, num_epochs=1),
    }
    checkpoints = {}
    for name, config in configs.items():
        algo = config.devices(learner="cpu", env_runners="cpu").env_runners(num_envs_per_env_runner=8).build_algo()
        try:
            assert algo.env_runner.env.single_observation_space.shape == {"mountaincar": (2,), "frozenlake": (16,)}[name]
            checkpoints[name] = algo.save(str(tmp_path / name)).checkpoint.path
        finally:
            algo.stop()

    evaluate(checkpoints["mountaincar"], episodes=16, device="cpu")
    first = seen[0]  # the reset's: positions drawn in [-0.6, -0.4], rescaled from [-1.2, 0.6] to [-1, 1]
    assert first.shape == (16, 2) and bool(((first[:, 0] > -0.34) & (first[:, 0] < -0.1)).all()), first
    seen.clear()
    result = evaluate(checkpoints["frozenlake"], episodes=4, device="cpu")
    assert seen[0].shape == (4, 16) and torch.equal(seen[0].sum(-1), torch.ones(4)) and len(result.returns) == 4


def test_a_jax_env_s_video_is_refused_in_one_line(tmp_path):
    """gymnax's and Brax's envs have no rgb_array renderer: --video says so, not that render_mode
    is no field of gymnax's params."""
    pytest.importorskip("gymnax")
    config = DevicePPOConfig().environment("gymnax:CartPole-v1").devices(learner="cpu", env_runners="cpu")
    algo = config.env_runners(num_envs_per_env_runner=4).training(minibatch_size=64).build_algo()
    try:
        path = algo.save(str(tmp_path / "gymnax")).checkpoint.path
    finally:
        algo.stop()
    with pytest.raises(EvaluationError, match=r"^--video: gymnax:CartPole-v1 is a JAX env .* evaluate it without --video$"):
        evaluate(path, episodes=2, device="cpu", video=str(tmp_path / "x.gif"))
    assert len(evaluate(path, episodes=2, device="cpu").returns) == 2


def test_the_summary_counts_one_episode_as_one():
    from rllib_gpuenv.cli.evaluate import Evaluation

    assert Evaluation([9.0], [9]).summary().startswith("1 episode: mean return 9.00")
    assert Evaluation([1.0, 3.0], [1, 3]).summary().startswith("2 episodes: mean return 2.00")


def test_a_checkpoint_folder_that_is_not_there_is_named_so(tmp_path):
    from rllib_gpuenv.cli.evaluate import load_checkpoint

    with pytest.raises(EvaluationError, match=r"/none: no such checkpoint folder$"):  # was "not an RLlib ... checkpoint"
        load_checkpoint(str(tmp_path / "none"))


def test_a_checkpoint_of_your_env_trained_under_its_bare_id_plays_with_its_module_named(tmp_path, monkeypatch):
    """The README's flow in Python: `import reach_module` registers Reach1D, the config names its bare
    id. Another process has no such id: evaluate says to name the module, and `--env module:id` plays."""
    import re

    from tests.helpers import ROOT, run_code

    readme = open(os.path.join(ROOT, "README.md")).read()
    source = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if 'id="Reach1D-v0"' in b)
    (tmp_path / "reach_bare_module.py").write_text(source.replace("Reach1D-v0", "Reach1DBare-v0"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import reach_bare_module  # noqa: F401 (registers Reach1DBare-v0)

    algo = tiny_device_ppo("Reach1DBare-v0")
    try:
        algo.train()
        checkpoint = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
    finally:
        algo.stop()

    def command(*args):
        return run_code(
            f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nfrom rllib_gpuenv.cli.main import main\n"
            f"sys.exit(main(['evaluate', {checkpoint!r}, '--episodes', '2', *{list(args)!r}]))"
        )

    unnamed = command()
    assert unnamed.returncode == 2 and (
        "Reach1DBare-v0 is not registered in this process: name the module that registers it, --env "
        "your_module:Reach1DBare-v0" in unnamed.stderr
    ), unnamed.stderr[-3000:]
    named = command("--env", "reach_bare_module:Reach1DBare-v0")
    assert named.returncode == 0 and "2 episodes: mean return" in named.stdout, named.stderr[-3000:]
    other = command("--env", "reach_bare_module:Reach1DOther-v0")
    assert other.returncode == 2 and "was trained on Reach1DBare-v0, which it plays: drop --env" in other.stderr
