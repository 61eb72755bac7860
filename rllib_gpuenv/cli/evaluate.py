"""Watch a trained policy: ``rllib evaluate <checkpoint>`` / ``rllib-gpuenv evaluate <checkpoint>``.

Loads the policy (the RLModule) of an RLlib algorithm checkpoint on any device, plays N
episodes with deterministic actions in N copies of the checkpoint's env at once (each copy
plays one episode), and prints their mean, min and max return. With ``--video out.mp4`` (or
``.gif``) it records env 0's episode through the env's ``rgb_array`` render and writes it with
imageio.

The envs are those the device env runner uses (``make_device_env``): a GPU env of this package
runs on the chosen device, any other gymnasium id runs vectorised by gymnasium with its inputs
and outputs moved to that device. The policy sees the env's observations as they are, as
RLlib's default connectors give them; a checkpoint whose config adds its own env-to-module
or module-to-env connectors, a stateful (recurrent) module or several agents is refused with
an error saying so.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import pickle
from pathlib import Path

import numpy as np
import torch

import rllib_gpuenv.options as options

logger = logging.getLogger(__name__)

VIDEO_SUFFIXES = (".mp4", ".gif")
MODULE_PATH = ("learner_group", "learner", "rl_module")


class EvaluationError(ValueError):
    """A checkpoint or option that evaluation cannot use, with what to do instead."""


@dataclasses.dataclass
class Evaluation:
    """The returns and lengths of the episodes played, and the video written (if any)."""

    returns: list[float]
    lengths: list[int]
    video: str | None = None
    frames: int = 0

    def summary(self) -> str:
        r = np.asarray(self.returns)
        return (
            f"{len(r)} episode{'s' if len(r) != 1 else ''}: mean return {r.mean():.2f}, min {r.min():.2f}, max {r.max():.2f} "
            f"(mean length {np.mean(self.lengths):.1f})"
        )


def _load_pickle(path: Path):
    from rllib_gpuenv.rllib.checkpointing import missing_module

    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        raise EvaluationError(f"{path}: missing from the checkpoint") from None
    except ModuleNotFoundError as err:
        raise EvaluationError(missing_module(path, err)) from None
    except Exception as err:  # a truncated or corrupt file: name it
        raise EvaluationError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None


def load_checkpoint(checkpoint: str | os.PathLike):
    """The algorithm config and the policy (RLModule) saved in an algorithm checkpoint."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.rl_module.rl_module import RLModule

    from rllib_gpuenv.rllib.checkpointing import MARKER, not_a_checkpoint, use_code_folders

    path = Path(checkpoint).expanduser().resolve()
    if not path.exists():
        raise EvaluationError(f"{checkpoint}: no such checkpoint folder")
    if not (path / MARKER).is_file():
        raise EvaluationError(not_a_checkpoint(path, f"no {MARKER}"))
    use_code_folders(path)  # the user's env module, imported from where the training imported it
    saved = _load_pickle(path / "class_and_ctor_args.pkl")
    try:
        algo_class = saved["class"]
        config = algo_class.get_default_config().from_state(saved["ctor_args_and_kwargs"][0][0])
    except (KeyError, IndexError, TypeError, AttributeError) as err:
        raise EvaluationError(f"{path / 'class_and_ctor_args.pkl'}: not an algorithm's saved config ({err!r})") from None
    if config.is_multi_agent:
        raise EvaluationError(f"{path}: a multi-agent checkpoint; evaluate plays single-agent policies")
    for setting in ("_env_to_module_connector", "_module_to_env_connector"):
        if getattr(config, setting, None) is not None:
            raise EvaluationError(
                f"{path}: its config adds {setting.strip('_')} pieces, which evaluate does not apply; "
                "restore the algorithm (Algorithm.from_checkpoint) and use algo.evaluate() instead"
            )
    module_dir = path.joinpath(*MODULE_PATH, DEFAULT_MODULE_ID)
    if not module_dir.is_dir():
        raise EvaluationError(f"{module_dir}: missing from the checkpoint (the policy's weights)")
    try:
        module = RLModule.from_checkpoint(module_dir)
    except Exception as err:
        raise EvaluationError(f"{module_dir}: cannot be loaded ({type(err).__name__}: {err})") from None
    if module.is_stateful():
        raise EvaluationError(f"{path}: a stateful (recurrent) policy; evaluate plays stateless ones")
    return config, module


def _deterministic_actions(module, obs: torch.Tensor) -> torch.Tensor:
    """RLlib's inference path: the module's actions, or its distribution's most likely one."""
    from ray.rllib.core.columns import Columns

    out = module.forward_inference({Columns.OBS: obs})
    if Columns.ACTIONS in out:
        actions = out[Columns.ACTIONS]
    else:
        dist = module.get_inference_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        actions = dist.to_deterministic().sample()
    return actions


def _to_env_actions(actions: torch.Tensor, config, action_space, device: torch.device) -> torch.Tensor:
    """What RLlib's NormalizeAndClipActions connector does to continuous actions."""
    import gymnasium as gym
    from ray.rllib.utils.spaces.space_utils import clip_action, unsquash_action

    if not isinstance(action_space, gym.spaces.Box):
        return actions
    numpy_actions = actions.cpu().numpy()
    if config.normalize_actions:
        numpy_actions = unsquash_action(numpy_actions, action_space)
    elif config.clip_actions:
        numpy_actions = clip_action(numpy_actions, action_space)
    return torch.as_tensor(numpy_actions, device=device)


def _frame(env) -> np.ndarray:
    frame = env.render()
    if isinstance(frame, (tuple, list)):  # a vector env renders every env (gymnasium's contract)
        frame = frame[0]
    return np.asarray(frame)


def write_video(frames: list[np.ndarray], path: str, fps: float) -> str:
    """An mp4 (imageio's ffmpeg) or a GIF (imageio's pillow) of the frames."""
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise EvaluationError('recording a video needs imageio: pip install "rllib_gpuenv[video]"') from None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.endswith(".gif"):
        imageio.mimsave(path, frames, duration=1000.0 / fps, loop=0)
    else:
        try:
            imageio.mimsave(path, frames, fps=fps, macro_block_size=2)
        except (ImportError, RuntimeError) as err:
            raise EvaluationError(f'writing {path} needs ffmpeg: pip install "rllib_gpuenv[video]" ({err})') from None
    return path


def evaluate(
    checkpoint: str | os.PathLike,
    episodes: int = 10,
    device: str = "auto",
    video: str | None = None,
    seed: int = 0,
    max_steps: int = 100_000,
) -> Evaluation:
    """Play ``episodes`` deterministic episodes of the checkpoint's policy at once; record env 0 if asked."""
    from rllib_gpuenv.core.devices import resolve_device
    from rllib_gpuenv.envs import env_definition
    from rllib_gpuenv.jax_envs import is_jax_id
    from rllib_gpuenv.rllib.env_runner import as_the_module_sees_it, check_prefixed_id, make_device_env

    if episodes < 1:
        raise EvaluationError(f"--episodes must be at least 1, got {episodes}")
    if video is not None and not video.endswith(VIDEO_SUFFIXES):
        raise EvaluationError(f"--video {video}: the file must end in {' or '.join(VIDEO_SUFFIXES)}")
    torch_device = resolve_device(device)
    config, module = load_checkpoint(checkpoint)
    if video is not None and is_jax_id(config.env):
        raise EvaluationError(
            f"--video: {config.env} is a JAX env (gymnax's or Brax's), which has no rgb_array renderer to record: "
            "evaluate it without --video"
        )
    definition = None
    if video is not None and isinstance(config.env, str):
        if ":" in config.env:  # "my_env:MyEnv-v0": importing the module registers the definition
            check_prefixed_id(config.env)
        definition = env_definition(config.env)
    if video is not None and definition is not None and definition.gymnasium_env is None:
        raise EvaluationError(
            f"--video: {definition.id} has no renderer to record (its definition names no gymnasium env to draw it, "
            "gymnasium_env=None): evaluate it without --video"
        )
    module = module.to(torch_device).eval()
    env_config = dict(config.env_config or {})
    if video is not None:
        env_config["render_mode"] = "rgb_array"
        # gymnasium's pygame renderer draws off screen here: it needs no sound card and no display
        # (without these SDL prints errors about both on a headless machine)
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        env = as_the_module_sees_it(make_device_env(config.env, episodes, torch_device, env_config), config)
    except ValueError as err:
        if "It is no gymnasium id" not in str(err):
            raise
        raise EvaluationError(  # an env of yours that the training's process registered (a module it imported)
            f"{config.env} is not registered in this process: name the module that registers it, "
            f"--env your_module:{config.env} (importing it registers the env, as the training's process did)"
        ) from None
    try:
        logger.info("evaluating %s on %s: %d episodes of %s", checkpoint, torch_device, episodes, config.env)
        obs, _ = env.reset(seed=seed)
        returns = torch.zeros(episodes, dtype=torch.float64, device=torch_device)
        lengths = torch.zeros(episodes, dtype=torch.int64, device=torch_device)
        playing = torch.ones(episodes, dtype=torch.bool, device=torch_device)
        frames = [_frame(env)] if video else []
        with torch.no_grad():
            for _ in range(max_steps):
                actions = _deterministic_actions(module, obs.float() if obs.is_floating_point() else obs)
                obs, reward, terminated, truncated, _ = env.step(
                    _to_env_actions(actions, config, env.single_action_space, torch_device)
                )
                returns += torch.where(playing, reward.double(), 0.0)
                lengths += playing.long()
                recording = bool(video) and bool(playing[0])
                playing &= ~(terminated | truncated)  # NEXT_STEP autoreset: later steps are other episodes
                if recording:
                    frames.append(_frame(env))
                if not playing.any():
                    break
            else:
                raise EvaluationError(
                    f"{int(playing.sum())} of {episodes} episodes had not ended after {max_steps} steps: raise --max-steps"
                )
    finally:
        env.close()
    result = Evaluation(returns.cpu().tolist(), lengths.cpu().tolist())
    if video:
        result.video = write_video(frames, video, float(env.metadata.get("render_fps") or 30))
        result.frames = len(frames)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``evaluate CHECKPOINT [--episodes N] [--device D] [--video out.mp4|.gif]`` (for both commands)."""
    parser.add_argument("checkpoint", help="an RLlib algorithm checkpoint folder (e.g. the main job's .../checkpoint)")
    parser.add_argument(
        "--episodes",
        type=options.count(1),
        default=10,
        help="deterministic episodes to play, all at once (default: %(default)s)",
    )
    parser.add_argument(
        "--device", default="auto", help="where the policy and the envs run: auto, cpu, cuda, cuda:N (default: %(default)s)"
    )
    parser.add_argument(
        "--video",
        type=options.output_file,
        help="record env 0's episode to this .mp4 or .gif (through the env's rgb_array render)",
    )
    parser.add_argument("--seed", type=options.seed, default=0, help="seed of the envs' first reset (default: %(default)s)")
    parser.add_argument(
        "--max-steps", type=options.count(1), default=100_000, help="give up when episodes last longer (default: %(default)s)"
    )
    old = parser.add_argument_group("old command lines (`rllib evaluate CHECKPOINT --algo PPO --env CartPole-v1 ...`)")
    old.add_argument("--algo", "--run", dest="algo", help="checked: the checkpoint names its algorithm")
    old.add_argument(
        "--env",
        help="checked: the checkpoint names its env; your_module:Env-v0 imports your_module first, which registers "
        "the env (a checkpoint of your env trained under its bare id)",
    )
    old.add_argument("--steps", type=int, help="refused with the replacement: evaluate plays whole episodes (--episodes)")
    old.add_argument("--render", action="store_true", help="refused with the replacement: --video PATH")
    parser.set_defaults(func=_command)


def _check_old_options(args) -> None:
    """Old ``rllib evaluate`` options: ``--algo``/``--env`` must be what the checkpoint holds (it
    names both now); ``--steps`` and ``--render`` name what replaces them."""
    if args.steps is not None:
        raise EvaluationError(
            f"--steps {args.steps}: evaluate plays whole episodes, all at once: give --episodes N instead "
            "(--max-steps caps an episode's length)"
        )
    if args.render:
        raise EvaluationError("--render: evaluate records env 0's episode instead: --video out.mp4 (or .gif)")
    if args.algo is None and args.env is None:
        return
    from rllib_gpuenv.experiments.envs import unqualified_env_id
    from rllib_gpuenv.rllib.checkpointing import CheckpointError, saved_config

    try:
        config = saved_config(args.checkpoint)
    except CheckpointError as err:
        raise EvaluationError(str(err)) from None
    algo = config.algo_class.__name__
    if args.algo is not None and args.algo != algo:
        raise EvaluationError(f"--algo {args.algo}: {args.checkpoint} is a checkpoint of {algo}: drop --algo")
    bare = unqualified_env_id(config.env)
    if args.env is not None and args.env.split(":", 1)[-1] != (bare.split(":", 1)[-1] if isinstance(bare, str) else bare):
        raise EvaluationError(f"--env {args.env}: {args.checkpoint} was trained on {config.env}, which it plays: drop --env")
    if args.env is not None and ":" in args.env and isinstance(bare, str) and ":" not in bare:
        # trained under its bare id (a module the training imported registered it): importing that module registers it here
        from rllib_gpuenv.rllib.env_runner import check_prefixed_id

        check_prefixed_id(args.env)


def _command(args) -> int:
    """A mistake (EvaluationError, a ValueError) ends as one line through the command's ``run_command``."""
    _check_old_options(args)
    result = evaluate(args.checkpoint, args.episodes, args.device, args.video, args.seed, args.max_steps)
    print(result.summary())
    if result.video:
        print(f"video of env 0's episode ({result.frames} frames) written to {result.video}")
    return 0
