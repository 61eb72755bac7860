"""Device wrappers for any gymnasium env (tensors on a device; observations one-hot or rescaled for a
network), and a device checker for envs and modules."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Dict, MultiBinary, MultiDiscrete, Tuple
from gymnasium.vector import AutoresetMode, VectorWrapper
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from rllib_gpuenv.core.devices import canonical_device, resolve_device

logger = logging.getLogger(__name__)


class DeviceEnv(VectorWrapper):
    """Makes an ordinary gymnasium vector env take and return torch tensors on ``device``.

    Observations, rewards and done flags arrive as tensors on ``device``; actions may be
    tensors there (they are copied to the host for the wrapped env). Episode returns and
    lengths of a NEXT_STEP env (gymnasium's default) are recorded with gymnasium's
    ``RecordEpisodeStatistics`` (unless the env has it already) and handed over as tensors
    too, so the device env runner can train any gymnasium env; for a SAME_STEP env, whose steps
    that wrapper miscounts, the runner keeps them. A SAME_STEP env's final observations
    (``infos["final_obs"]``, one array per env) become a tensor of all envs' rows; the env's
    other infos pass as they are (host memory). Each step costs one host→device copy of the
    results and one device→host copy of the actions. ``Tuple`` and ``Dict`` observations, which
    no single tensor holds, arrive flattened by gymnasium's ``spaces.flatten`` (``Discrete``
    parts one-hot, ``Box`` parts as they are, side by side).
    """

    def __init__(self, env: gym.vector.VectorEnv, device: str | torch.device = "auto"):
        if not isinstance(env, gym.vector.VectorEnv):
            raise TypeError(f"DeviceEnv wraps a gymnasium VectorEnv (e.g. gym.make_vec(...)), got {type(env).__name__}")
        same_step = env.metadata.get("autoreset_mode") == AutoresetMode.SAME_STEP
        super().__init__(env if same_step or _has_episode_statistics(env) else RecordEpisodeStatistics(env))
        self.episode_statistics = not same_step  # in ``infos["episode"]``, as this package's envs keep them
        self.device = resolve_device(device)
        space = env.single_observation_space
        self._structured = space if isinstance(space, (Tuple, Dict)) else None
        if self._structured is not None or (isinstance(space, Box) and space.dtype != np.float32):
            # the observations come as float32 tensors: the space says so (a float64 Box said float64)
            flat = gym.spaces.flatten_space(space) if self._structured is not None else space
            low, high = flat.low.astype(np.float32), flat.high.astype(np.float32)
            self.single_observation_space = gym.spaces.Box(low, high, flat.shape, np.float32)
            self.observation_space = batch_space(self.single_observation_space, env.num_envs)

    def _tensor(self, array, dtype=None) -> torch.Tensor:
        return torch.as_tensor(np.asarray(array), dtype=dtype).to(self.device, non_blocking=True)

    def _observations(self, obs) -> torch.Tensor:
        if self._structured is not None:
            each = iterate(self.env.observation_space, obs)
            obs = np.stack([gym.spaces.flatten(self._structured, one) for one in each])
        return self._tensor(obs, torch.float32)

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        if isinstance(obs, torch.Tensor):
            raise TypeError(
                f"DeviceEnv wraps envs of numpy arrays; {self.env.unwrapped} returns torch tensors (on {obs.device}) "
                "already: use it without DeviceEnv"
            )
        return self._observations(obs), info

    def step(self, actions):
        if isinstance(actions, torch.Tensor):
            actions = actions.detach().cpu().numpy()
        obs, reward, terminated, truncated, info = self.env.step(self._checked(actions))
        return (
            self._observations(obs),
            self._tensor(reward, torch.float32),
            self._tensor(terminated, torch.bool),
            self._tensor(truncated, torch.bool),
            self._infos(info, obs),
        )

    def _infos(self, info: dict, obs) -> dict:
        """The episode statistics and a SAME_STEP env's final observations as tensors on the
        device (the rows of envs whose episode did not end hold their current observation); the
        rest as the env made it."""
        out = {k: v for k, v in info.items() if k not in ("episode", "_episode", "final_obs", "_final_obs")}
        if "episode" in info:
            out["episode"] = {
                "r": self._tensor(info["episode"]["r"], torch.float32),
                "l": self._tensor(info["episode"]["l"], torch.int32),
            }
            out["_episode"] = self._tensor(info["_episode"], torch.bool)
        if "final_obs" in info:
            ended = np.asarray(info["_final_obs"], dtype=bool)
            now = iterate(self.env.observation_space, obs)
            rows = [final if end else current for final, end, current in zip(info["final_obs"], ended, now)]
            out["final_obs"] = self._observations(
                concatenate(
                    self.env.single_observation_space, rows, create_empty_array(self.env.single_observation_space, len(rows))
                )
            )
            out["_final_obs"] = self._tensor(ended, torch.bool)
        return out

    def _checked(self, actions):
        """Actions of the wrong shape, kind or range, named as the suite's envs name them: a
        wrapped env would fail deep inside (``CartPole``'s ``array([0, 1]) invalid``, or for too
        few actions ``zip() argument 2 is longer than argument 1``). Box actions out of their
        bounds pass: gymnasium's envs clip them."""
        space = self.action_space
        if not isinstance(space, (Box, MultiDiscrete, MultiBinary)):  # Tuple, Dict, ...: the env's own checks
            return actions
        array = np.asarray(actions)
        if array.shape != space.shape:
            raise ValueError(f"actions must have shape {space.shape}, {self._one_action()}, got {array.shape}")
        if isinstance(space, Box):
            if array.dtype.kind != "f":
                raise TypeError(
                    f"actions must be floats ({self._one_action()}), got dtype {array.dtype}: cast them with .float()"
                )
            if np.isnan(array).any():
                raise ValueError(f"actions contain NaN ({self._one_action()}): {array.flatten()[:8].tolist()}")
            return array
        if array.dtype.kind not in "biu":
            raise TypeError(
                f"actions must be integers ({self._one_action()}), got dtype {array.dtype}: cast them with .long() / "
                ".astype(np.int64)"
            )
        if not space.contains(array.astype(space.dtype, copy=False)):
            raise ValueError(
                f"actions must be valid {self.single_action_space} actions, one per env; got {array.flatten()[:8].tolist()}"
            )
        return array

    def _one_action(self) -> str:
        """For the messages only: a space's text takes ~10 µs, too much for every step."""
        return f"one {self.single_action_space} action per env"


def _has_episode_statistics(env: gym.vector.VectorEnv) -> bool:
    """Whether ``RecordEpisodeStatistics`` wraps ``env`` already (a second would find its keys taken)."""
    while isinstance(env, VectorWrapper):
        if isinstance(env, RecordEpisodeStatistics):
            return True
        env = env.env
    return False


class ObservationTransform(VectorWrapper):
    """A change of a tensor env's observations (``observations``), applied to those of ``reset``
    and ``step`` and to the real final ones a SAME_STEP env hands over in ``info["final_obs"]``:
    gymnasium's ``VectorObservationWrapper`` takes NEXT_STEP and DISABLED envs only."""

    def observations(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _declare(self, single_space: gym.Space) -> None:
        """The observation space the transform hands on (one env's, and the batch's)."""
        self.single_observation_space = single_space
        self.observation_space = batch_space(single_space, self.env.num_envs)

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self.observations(obs), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if isinstance(info, dict) and isinstance(info.get("final_obs"), torch.Tensor):  # SAME_STEP: the real last obs
            info = {**info, "final_obs": self.observations(info["final_obs"])}
        return self.observations(obs), reward, terminated, truncated, info


class RescaleObservations(ObservationTransform):
    """Observations rescaled from their space's finite bounds to [-1, 1], on their device;
    components without finite bounds pass through unchanged.

    What RLlib's ``normalize_actions`` does for actions, for observations: a network learns
    poorly from inputs of very different scales (MountainCarContinuous's velocity spans ±0.07
    beside a position spanning 1.8, and PPO never learns to use it). The scaling is fixed by the
    space, not estimated, so every env runner (training or evaluation, local or remote) and
    every checkpoint sees the same observations without anything to synchronise.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        space = env.single_observation_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"rescale_observations needs a Box observation space, {env} has {space}: turn it off for this env")
        super().__init__(env)
        low, high = space.low.astype(np.float64), space.high.astype(np.float64)
        bounded = np.isfinite(low) & np.isfinite(high) & (high > low)
        if not bounded.any():
            logger.warning("rescale_observations: no component of %s has finite bounds; observations are unchanged", space)
        lo, hi = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)  # unbounded: the identity
        self._scale = torch.as_tensor(2.0 / (hi - lo), dtype=torch.float32)
        self._center = torch.as_tensor((hi + lo) / 2.0, dtype=torch.float32)
        self._declare(
            gym.spaces.Box(
                np.where(bounded, -1.0, low).astype(space.dtype),
                np.where(bounded, 1.0, high).astype(space.dtype),
                space.shape,
                space.dtype,
            )
        )

    def observations(self, obs: torch.Tensor) -> torch.Tensor:
        if self._scale.device != obs.device:
            self._scale, self._center = self._scale.to(obs.device), self._center.to(obs.device)
        return (obs - self._center) * self._scale


class Float32Observations(ObservationTransform):
    """``Box`` observations of another dtype (float64, integers) as float32, on their device: what
    RLlib's default networks take (their weights are float32), and what RLlib's own runner and
    ``DeviceEnv`` make of numpy observations. The device env runner applies it to a tensor env of
    yours whose observation space is not float32 (the package's envs give float32)."""

    def __init__(self, env: gym.vector.VectorEnv):
        space = env.single_observation_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"Float32Observations needs a Box observation space, {env} has {space}")
        super().__init__(env)
        self._declare(gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32))

    def observations(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.to(torch.float32)


class FlatObservations(ObservationTransform):
    """``Box`` observations of 2 dimensions, or of more than 3, as flat vectors, on their device:
    RLlib's default networks take vectors (an MLP) and images (height, width, channels: a CNN),
    and refuse the rest ("2D Box spaces are not supported"), which the user of an env they cannot
    change (gymnax's bsuite ``Catch``, 10 x 5) cannot fix. The device env runner applies it."""

    def __init__(self, env: gym.vector.VectorEnv):
        space = env.single_observation_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"FlatObservations needs a Box observation space, {env} has {space}")
        super().__init__(env)
        self._declare(gym.spaces.Box(space.low.reshape(-1), space.high.reshape(-1), None, space.dtype))

    def observations(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(obs.shape[0], -1)


class OneHotObservations(ObservationTransform):
    """``Discrete`` observations as one-hot float vectors (``MultiDiscrete``: one per component,
    side by side), on their device: what RLlib's ``FlattenObservations`` connector gives its
    default networks, which take ``Box`` observations only (RLlib fails to build one for
    ``Discrete(16)``: "No default encoder config"). The device env runner applies it to such envs.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        space = env.single_observation_space
        if isinstance(space, gym.spaces.Discrete):
            sizes, starts = [int(space.n)], [int(space.start)]
        elif isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
            sizes, starts = [int(n) for n in space.nvec], [int(s) for s in space.start]
        else:
            raise TypeError(f"OneHotObservations needs Discrete or (flat) MultiDiscrete observations, {env} has {space}")
        super().__init__(env)
        # Output column j is 1 where component ``_component[j]`` holds the value ``_value[j]``: one
        # gather and one comparison a step for all components, on tensors kept on the device
        # (``F.one_hot`` takes one call per component and a ``cat``).
        counts = torch.tensor(sizes)
        self._component = torch.repeat_interleave(torch.arange(len(sizes)), counts)
        self._value = torch.cat([torch.arange(n) for n in sizes]) + torch.tensor(starts).repeat_interleave(counts)
        self._declare(gym.spaces.Box(0.0, 1.0, (sum(sizes),), np.float32))

    def observations(self, obs: torch.Tensor) -> torch.Tensor:
        if self._value.device != obs.device:  # once: the columns' tensors live where the observations do
            self._component, self._value = self._component.to(obs.device), self._value.to(obs.device)
        return (obs.reshape(obs.shape[0], -1)[:, self._component] == self._value).to(torch.float32)


class DeviceMismatchError(RuntimeError):
    """A tensor is not on the device it should be on."""


def _check_tree(tree: Any, device: torch.device, where: str, path: str = "", arrays: bool = True) -> None:
    """Raise naming the first tensor in ``tree`` not on ``device``; where ``device`` is not the
    CPU, a numpy array is named too (host memory: each step would copy it), except under
    ``infos`` (``arrays=False``), which envs fill with host bookkeeping of their own."""
    if isinstance(tree, torch.Tensor):
        if tree.device != device:
            raise DeviceMismatchError(f"{where}: {path or 'tensor'} is on {tree.device}, expected {device}")
    elif isinstance(tree, np.ndarray):
        if arrays and device.type != "cpu":
            raise DeviceMismatchError(
                f"{where}: {path or 'array'} is a numpy array (host memory), expected a tensor on {device}: wrap the env "
                f"in rllib_gpuenv.wrappers.DeviceEnv(env, {str(device)!r}), or return torch tensors on that device"
            )
    elif isinstance(tree, dict):
        for key, value in tree.items():
            _check_tree(value, device, where, f"{path}[{key!r}]" if path else str(key), arrays and key != "infos")
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            _check_tree(value, device, where, f"{path}[{i}]" if path else f"[{i}]", arrays)


class CheckDeviceEnv(VectorWrapper):
    """Checks that every tensor going into and out of a vector env is on ``device``."""

    def __init__(self, env: gym.vector.VectorEnv, device: str | torch.device):
        super().__init__(env)
        self.device = canonical_device(device)

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        _check_tree({"observations": obs, "infos": info}, self.device, "env.reset() output")
        return obs, info

    def step(self, actions):
        _check_tree({"actions": actions}, self.device, "env.step() input")
        result = self.env.step(actions)
        names = ("observations", "rewards", "terminated", "truncated", "infos")
        _check_tree(dict(zip(names, result)), self.device, "env.step() output")
        return result


class CheckTensorEnvOutputs(VectorWrapper):
    """A tensor env of yours, its first reset's and first step's outputs checked against what the
    device env runner reads: torch tensors on the env's device, observations of the declared
    space's shape and dtype, one reward and one flag of each kind per env, and a SAME_STEP env's
    ``infos["final_obs"]`` and ``infos["_final_obs"]`` (the first step that has them) as tensors.
    A mistake is named with the output, what it is and what it should be, where it would otherwise
    fail later in the runner or the module ("'numpy.ndarray' object has no attribute 'bool'",
    "mat1 and mat2 shapes cannot be multiplied", "mat1 and mat2 must have the same dtype"). Once
    checked, the outputs pass through."""

    def __init__(self, env: gym.vector.VectorEnv, device: torch.device):
        super().__init__(env)
        self.device = canonical_device(device)
        self._name = type(env.unwrapped).__name__
        self._reset_checked = self._step_checked = False
        # only a SAME_STEP env hands over final observations: the others' steps pass through once checked
        mode = (env.metadata or {}).get("autoreset_mode")
        self._final_checked = getattr(mode, "value", mode) != AutoresetMode.SAME_STEP.value

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        if not self._reset_checked:
            self._check("reset", {"observations": obs})
            self._reset_checked = True
        return obs, info

    def step(self, actions):
        result = self.env.step(actions)
        if self._step_checked and self._final_checked:
            return result
        obs, rewards, terminated, truncated, info = result
        outputs = {}
        if not self._step_checked:
            outputs = {"observations": obs, "rewards": rewards, "terminated": terminated, "truncated": truncated}
        if not self._final_checked:
            final = {f"infos[{k!r}]": info[k] for k in ("final_obs", "_final_obs") if isinstance(info, dict) and k in info}
            outputs.update(final)
            self._final_checked = bool(final)
        if outputs:  # (a SAME_STEP env without final observations, Isaac Lab's style, has none to check)
            self._check("step", outputs)
        self._step_checked = True
        return result

    def _check(self, method: str, outputs: dict) -> None:
        n, space = self.env.num_envs, self.env.single_observation_space
        shapes = {"observations": (n, *space.shape), "infos['final_obs']": (n, *space.shape)}
        for name, value in outputs.items():
            where = f"{self._name}.{method}() returned {name}"
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"{where} as a {type(value).__module__}.{type(value).__name__}: the device env runner reads torch "
                    f"tensors on the env's device ({self.device}) from an env that returns tensors: return "
                    f"torch.as_tensor(..., device=...) for each, or return numpy for all and the runner wraps the env "
                    f"in DeviceEnv"
                )
            if canonical_device(value.device) != self.device:
                raise ValueError(f"{where} on {value.device}, but the env and its runner work on {self.device}")
            if name in shapes and tuple(value.shape) != shapes[name]:
                raise ValueError(
                    f"{where} of shape {tuple(value.shape)}, but num_envs={n} and the observation space {space} make it "
                    f"{shapes[name]} (a row of the space's shape per env): return that, or declare the space the env has"
                )
            if name not in shapes and tuple(value.shape) != (n,):
                raise ValueError(
                    f"{where} of shape {tuple(value.shape)}: one per env, shape ({n},), is what num_envs={n} makes it"
                )
            declared = torch.from_numpy(np.empty(0, space.dtype)).dtype if isinstance(space, Box) else None
            if name in shapes and declared is not None and value.dtype != declared:
                raise TypeError(
                    f"{where} as {value.dtype}, but the observation space {space} holds {declared} (the module's "
                    f"layers take what the space declares): return .to({declared}), or declare the space the env has"
                )


# RLlib's forward methods, and the hooks behind the two that act (the device env runner calls those)
MODULE_METHODS = (
    "forward_inference",
    "forward_exploration",
    "forward_train",
    "compute_values",
    "_forward_inference",
    "_forward_exploration",
)


def _checked(method: Callable, device: torch.device, name: str) -> Callable:
    def wrapper(batch, *args, **kwargs):
        _check_tree(batch, device, f"module.{name}() input")
        out = method(batch, *args, **kwargs)
        _check_tree(out, device, f"module.{name}() output")
        return out

    wrapper.__wrapped__ = method
    return wrapper


def CheckDevice(obj, device: str | torch.device):  # noqa: N802 (reads as a wrapper class)
    """Debugging aid: make an env or a module raise ``DeviceMismatchError`` naming any input or
    output tensor that is not on ``device`` (which tensor, where it is, where it should be).

    For a gymnasium vector env this returns a wrapper; for an RLlib ``RLModule`` (or any
    ``torch.nn.Module``) it instruments the module's forward methods in place and returns it.
    ``device`` is any the package takes (``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``), compared as
    torch reports a tensor's (``"cuda"`` is the current GPU). The check walks the tensors'
    ``.device`` attributes only: no copies, no synchronisation.
    """
    checked = canonical_device(device)
    if checked.type == "cuda":
        resolve_device(device)  # a GPU this machine lacks: named now, not as every tensor's mismatch later
    device = checked
    if isinstance(obj, gym.vector.VectorEnv):
        return CheckDeviceEnv(obj, device)
    if isinstance(obj, torch.nn.Module):
        for name in MODULE_METHODS + ("forward",):
            method = getattr(obj, name, None)
            if callable(method) and not hasattr(method, "__wrapped__"):
                setattr(obj, name, _checked(method, device, name))
        return obj
    raise TypeError(f"CheckDevice wraps a gymnasium VectorEnv or a torch/RLlib module, got {type(obj).__name__}")
