"""``CartPoleVectorEnv``: thousands to millions of CartPole-v1 envs stepped at once, on a device.

A ``gymnasium.vector.VectorEnv`` with exactly the semantics of gymnasium's own
``CartPoleVectorEnv`` (dynamics, thresholds, 500-step truncation, NEXT_STEP autoreset), whose
step runs on one of several backends (see ``backends/``) and whose inputs and outputs are torch
tensors on the env's device, or numpy arrays for code that wants them (RLlib's stock runner).

## Autoreset (NEXT_STEP, as gymnasium)
When an env's episode ends (``terminated`` or ``truncated``), the *next* call to ``step``
ignores that env's action and starts a new episode: it returns the new initial observation
with reward 0 and both flags False. ``terminated`` (the pole fell, no bootstrapping) and
``truncated`` (time limit, bootstrap from the value of the returned observation) stay separate.

## Determinism
``reset(seed=s)`` makes the whole vector deterministic, and the initial states come from a
counter-based hash (``rng.py``) rather than a device RNG: the same seed and the same actions give
the same trajectories on every backend and device.

## Layout
The state is kept structure-of-arrays, ``(4, num_envs)``, which vectorises on a CPU and
coalesces on a GPU. Observations are returned as ``(num_envs, 4)`` transposed views of it
(column-major, as gymnasium's own ``CartPoleVectorEnv`` returns them); ``env.state`` is a
row-major ``(num_envs, 4)`` copy.

## Episode statistics
Returns and lengths are accumulated on the device. On the step an episode ends, ``infos``
carries them in gymnasium's ``RecordEpisodeStatistics`` layout:
``infos["episode"]["r"/"l"]`` (0 where no episode ended) and the mask ``infos["_episode"]``.
With tensor output these are always present (checking "did anything end?" would synchronise a
GPU); with numpy output only on steps where some episode ended, as in gymnasium.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
import torch
from gymnasium.envs.classic_control import utils as classic_utils
from gymnasium.spaces import Box, Discrete
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rllib_gpuenv import physics
from rllib_gpuenv.backends import EnvBuffers, StepOutputs, StepParams, make_backend
from rllib_gpuenv.devices import check_fits, resolve_device
from rllib_gpuenv.rng import fold_seed

logger = logging.getLogger(__name__)

Output = Literal["torch", "numpy"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _resolve_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in (torch.float32, torch.float64):
        return dtype
    name = str(np.dtype(dtype)) if not isinstance(dtype, (str, torch.dtype)) else str(dtype).replace("torch.", "")
    if name in _DTYPES:
        return _DTYPES[name]
    raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")


def _bytes_per_env(dtype: torch.dtype) -> int:
    """A generous estimate of device memory per env: buffers, outputs, their copies, and the
    temporaries of the torch backend's elementwise ops."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 12 * 4 * itemsize + 128


class CartPoleVectorEnv(VectorEnv):
    """``num_envs`` CartPole-v1 environments stepped in parallel on one device.

    Args:
        num_envs: number of environments (at least 1).
        backend: ``"auto"`` (numba-cuda on a GPU, numba-cpu on the CPU), ``"torch"``,
            ``"numba-cpu"`` or ``"numba-cuda"``.
        device: ``"auto"`` (the GPU if there is one), ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
        dtype: ``float32`` (fast) or ``float64`` (gymnasium's own precision) for the physics;
            observations are float32 either way, as in gymnasium.
        output: ``"torch"`` (tensors on ``device``) or ``"numpy"`` (host arrays).
        max_episode_steps: time limit; reaching it sets ``truncated``.
        substeps: integrate each step in ``substeps`` Euler sub-steps of ``tau/substeps``
            (1 is CartPole-v1; more is finer physics and proportionally more work).
        sutton_barto_reward: gymnasium's option: 0 per step, -1 on failure.
        render_mode: ``"rgb_array"`` renders env ``render_env_index``.
        threads_per_block: CUDA block size for ``numba-cuda`` (see ``search_threads_per_block``).
        reuse_outputs: return the backend's output buffers themselves, overwritten by the next
            step, instead of fresh copies (for callers that copy them anyway, like a rollout
            buffer).
        validate_actions: check action values (0/1). On a GPU this reads the actions' min and
            max back to the host each step; turn off for actions that come from a policy.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50, "autoreset_mode": AutoresetMode.NEXT_STEP}
    _renderer = None  # gymnasium's single-env renderer, made on the first render()

    def __init__(
        self,
        num_envs: int = 1,
        *,
        backend: str = "auto",
        device: str | torch.device | None = "auto",
        dtype: Any = torch.float32,
        output: Output = "torch",
        max_episode_steps: int = physics.MAX_EPISODE_STEPS,
        substeps: int = 1,
        sutton_barto_reward: bool = False,
        render_mode: str | None = None,
        render_env_index: int = 0,
        threads_per_block: int | None = None,
        reuse_outputs: bool = False,
        validate_actions: bool = True,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if output not in ("torch", "numpy"):
            raise ValueError(f"output must be 'torch' or 'numpy', got {output!r}")
        if int(max_episode_steps) < 1:
            raise ValueError(f"max_episode_steps must be at least 1, got {max_episode_steps!r}")
        if int(substeps) < 1:
            raise ValueError(f"substeps must be at least 1, got {substeps!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if not 0 <= render_env_index < num_envs:
            raise ValueError(f"render_env_index must be in [0, {num_envs}), got {render_env_index}")

        self.num_envs = int(num_envs)
        self.device = resolve_device(device)
        self.dtype = _resolve_dtype(dtype)
        self.output = output
        self.max_episode_steps = int(max_episode_steps)
        self.substeps = int(substeps)
        self.sutton_barto_reward = bool(sutton_barto_reward)
        self.render_mode = render_mode
        self.render_env_index = int(render_env_index)
        self.reuse_outputs = bool(reuse_outputs)
        self.validate_actions = bool(validate_actions)

        check_fits(self.num_envs, _bytes_per_env(self.dtype), self.device, "num_envs")
        self._backend = make_backend(backend, self.num_envs, self.device, self.dtype, threads_per_block)
        self.backend = self._backend.name
        self._buffers = EnvBuffers.allocate(self.num_envs, self.dtype, self.device)
        self._seed32: int | None = None
        self._low, self._high = physics.RESET_LOW, physics.RESET_HIGH
        self._params: StepParams | None = None
        logger.debug("CartPoleVectorEnv(num_envs=%d) on %s with backend %s", self.num_envs, self.device, self.backend)

        high = np.array(physics.OBSERVATION_HIGH, dtype=np.float32)
        self.single_observation_space = Box(-high, high, dtype=np.float32)
        self.single_action_space = Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new episode in every env; ``seed`` makes the whole vector deterministic.

        ``options={"low": l, "high": h}`` changes the initial-state range, as in gymnasium.
        """
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        super().reset(seed=seed)
        self._low, self._high = classic_utils.maybe_parse_reset_bounds(options, physics.RESET_LOW, physics.RESET_HIGH)
        b = self._buffers
        if seed is not None:
            self._seed32 = fold_seed(seed)
            b.episode.zero_()
        elif self._seed32 is None:
            self._seed32 = fold_seed(int(np.random.SeedSequence().entropy) & ((1 << 64) - 1))
        else:  # unseeded reset of a seeded env: every env moves on to its next episode
            b.episode += 1
        self._params = StepParams(
            seed32=self._seed32, low=float(self._low), high=float(self._high),
            max_steps=self.max_episode_steps, substeps=self.substeps,
            sutton_barto=int(self.sutton_barto_reward), dt=physics.TAU / self.substeps,
            exact_math=int(self.dtype == torch.float64),
        )  # fmt: skip
        self._backend.reset(b, self._params)
        b.steps.zero_()
        b.prev_done.zero_()
        b.ep_return.zero_()
        return self._to_output(b.state.to(torch.float32, copy=True).T), {}

    def step(self, actions):
        """Step every env with one action each (0 = push left, 1 = push right)."""
        if self._params is None:
            raise RuntimeError("call reset() before step()")
        out = self._backend.step(self._buffers, self._action_tensor(actions), self._params, fresh=not self.reuse_outputs)
        return self._format(out)

    def render(self):
        """An RGB frame (H, W, 3) of env ``render_env_index``, drawn by gymnasium's renderer."""
        if self.render_mode is None:
            logger.warning("render() called without render_mode='rgb_array'; nothing is drawn")
            return None
        if self._renderer is None:
            from gymnasium.envs.classic_control.cartpole import CartPoleEnv

            self._renderer = CartPoleEnv(render_mode="rgb_array")
        # Only this env's 4 numbers travel to the host.
        self._renderer.state = self._buffers.state[:, self.render_env_index].double().cpu().numpy()
        return self._renderer.render()

    def close_extras(self, **kwargs):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ state access
    @property
    def state(self) -> torch.Tensor:
        """The physical state, shape ``(num_envs, 4)``: x, x_dot, theta, theta_dot (a copy)."""
        return self._buffers.state.T.contiguous()

    @state.setter
    def state(self, value) -> None:
        value = torch.as_tensor(value, dtype=self.dtype).to(self.device)
        if value.shape != (self.num_envs, 4):
            raise ValueError(f"state must have shape ({self.num_envs}, 4), got {tuple(value.shape)}")
        self._buffers.state.copy_(value.T)
        self._buffers.prev_done.zero_()

    # ------------------------------------------------------------------ helpers
    def _action_tensor(self, actions) -> torch.Tensor:
        """Validate actions and return them as an int64 tensor on the env's device."""
        n = self.num_envs
        if isinstance(actions, torch.Tensor):
            if actions.device != self.device:
                raise ValueError(
                    f"actions are on {actions.device}, but this env runs on {self.device}: "
                    f"move them with actions.to(env.device)"
                )
            tensor = actions
        else:
            try:
                array = np.asarray(actions)
            except (TypeError, ValueError) as err:
                raise TypeError(f"actions must be a torch tensor, numpy array or list of ints; got {type(actions).__name__}") from err
            if array.dtype.kind not in "biuf":  # object, str, ... : nothing that is an action
                raise TypeError(f"actions must be a torch tensor, numpy array or list of ints; got {type(actions).__name__}")
            tensor = torch.from_numpy(np.ascontiguousarray(array)).to(self.device, non_blocking=True)
        if tuple(tensor.shape) != (n,):
            raise ValueError(f"actions must have shape ({n},), one per env, got {tuple(tensor.shape)}")
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            has_nan = bool(torch.isnan(tensor).any()) if tensor.dtype.is_floating_point else False
            raise TypeError(
                f"actions must be integers 0 or 1 (Discrete(2)), got dtype {tensor.dtype}"
                + (" containing NaN" if has_nan else "")
                + ": cast them with .long() / .astype(np.int64)"
            )
        if self.validate_actions and tensor.dtype != torch.bool:
            low, high = torch.aminmax(tensor)
            if int(low) < 0 or int(high) > 1:
                bad = tensor[(tensor < 0) | (tensor > 1)][:5].tolist()
                raise ValueError(f"actions must be 0 or 1 (Discrete(2)); got values such as {bad}")
        return tensor.to(torch.int64).contiguous()

    def _format(self, out: StepOutputs):
        if self.output == "numpy":
            out = StepOutputs(*(self._to_output(t) for t in out))
        infos = {}
        if self.output == "torch" or out.final_mask.any():
            ended = out.final_mask
            infos = {"episode": {"r": out.final_return, "l": out.final_length, "_r": ended, "_l": ended}, "_episode": ended}
        return out.obs.T, out.reward, out.terminated, out.truncated, infos

    def _to_output(self, tensor: torch.Tensor):
        return tensor.cpu().numpy() if self.output == "numpy" else tensor

    def __repr__(self) -> str:
        return (
            f"CartPoleVectorEnv(num_envs={self.num_envs}, backend={self.backend!r}, "
            f"device={str(self.device)!r}, dtype={str(self.dtype).replace('torch.', '')})"
        )
