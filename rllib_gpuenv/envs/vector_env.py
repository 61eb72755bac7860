"""``GPUVectorEnv``: thousands to millions of copies of one env, stepped at once on a device.

A ``gymnasium.vector.VectorEnv`` with the semantics of gymnasium's own vector envs (its
``CartPoleVectorEnv`` is the model), for any env definition (``core/env_def.py``), whose step
runs on one of several backends (``backends/``) and whose inputs and outputs are torch tensors
on the env's device, or numpy arrays for code that wants them (RLlib's stock env runner).
Written once for every env: spaces, seeding, autoreset, time limits, episode statistics, action
checks, the state accessor, rendering, the memory check.

## Rendering (as gymnasium's ``CartPoleVectorEnv``)
``render()`` returns a list of ``num_envs`` RGB frames, one per env, as gymnasium's vector
contract says (its ``HumanRendering`` and ``RecordVideo`` vector wrappers check the length):
every env is drawn, as gymnasium's own ``CartPoleVectorEnv`` draws every env, by the gymnasium
env's own renderer from that env's state and parameters. Drawing costs about a millisecond per
env and brings every env's state to the host, so render only small vectors (evaluation,
videos): ``render_mode`` is for a few envs, not for the thousands one trains with.
``render_mode="rgb_array_list"`` is accepted and draws the same list of current frames, as
gymnasium's ``CartPoleVectorEnv`` does.

## Autoreset (NEXT_STEP, as gymnasium)
When an env's episode ends (``terminated`` or ``truncated``), the *next* call to ``step``
ignores that env's action and starts a new episode: it returns the new initial observation
with reward 0 and both flags False. ``terminated`` (no bootstrapping) and ``truncated`` (time
limit: bootstrap from the value of the returned observation) stay separate.

## Determinism
``reset(seed=s)`` makes the whole vector deterministic, and the initial states come from a
counter-based hash (``rng.py``) rather than a device RNG: the same seed and the same actions
give the same trajectories on every backend and device (float64: within 1e-9, identical flags;
float32: see the README).

## Layout
The state is kept structure-of-arrays, ``(S, num_envs)``, which vectorises on a CPU and
coalesces on a GPU. Observations are returned as ``(num_envs, O)`` transposed views (as
gymnasium's ``CartPoleVectorEnv`` returns them); ``env.state`` is a ``(num_envs, S)`` copy in
the order of the gymnasium env's ``state``.

## Episode statistics
Returns and lengths are accumulated on the device. With ``episode_statistics=True`` (the device
env runner's choice; off by default, as gymnasium's ``RecordEpisodeStatistics`` wrapper writes
the same keys), on the step an episode ends ``infos`` carries them in that wrapper's layout:
``infos["episode"]["r"/"l"]`` (0 where no episode ended) and the mask ``infos["_episode"]``. With tensor output these are
always present (asking "did anything end?" would synchronise a GPU); with numpy output only on
steps where some episode ended, as in gymnasium.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rllib_gpuenv.backends import backend_device, make_backend
from rllib_gpuenv.core.actions import ActionCheck
from rllib_gpuenv.core.buffers import EnvBuffers, StepConstants, StepOutputs, bytes_per_env
from rllib_gpuenv.core.devices import check_fits
from rllib_gpuenv.core.env_def import EnvDef
from rllib_gpuenv.core.ops import tensor_float
from rllib_gpuenv.core.rng import fold_seed
from rllib_gpuenv.core.step import BoundEnv

logger = logging.getLogger(__name__)

Output = Literal["torch", "numpy"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _resolve_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in (torch.float32, torch.float64):
        return dtype
    try:
        name = str(dtype).replace("torch.", "") if isinstance(dtype, (str, torch.dtype)) else str(np.dtype(dtype))
    except TypeError:
        name = None
    if name in _DTYPES:
        return _DTYPES[name]
    raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")


def _no_misspelt_option(definition: EnvDef, params: dict, init) -> None:
    """A keyword that is no parameter of the env but close to one of the constructor's options
    (``backnd``) is named as that option's misspelling, not as an unknown physics parameter."""
    unknown = set(params) - set(definition.params._fields)
    options = (
        [name for name in inspect.signature(init).parameters if name not in ("self", "num_envs", "params")] if unknown else []
    )
    for name in unknown:
        close = difflib.get_close_matches(name, options, n=1)
        if close:
            raise TypeError(f"{definition.id}: no option or parameter {name!r}: did you mean {close[0]}?")


def check_options(definition: EnvDef, options: dict) -> None:
    """Check the names and parameter values that a ``GPUVectorEnv`` of ``definition`` would be made
    with, without making one: an RLlib ``env_config``, before Ray starts its env runners."""
    named = set(inspect.signature(GPUVectorEnv.__init__).parameters) - {"self", "params"}
    params = {k: v for k, v in options.items() if k not in named}
    _no_misspelt_option(definition, params, GPUVectorEnv.__init__)
    definition.make_params(**params)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class GPUVectorEnv(VectorEnv):
    """``num_envs`` copies of one env (``definition``) stepped in parallel on one device.

    Subclasses name the env (``CartPoleVectorEnv``: ``definition = CARTPOLE``); ``make_vector_env``
    builds one by id. Keyword arguments beyond those below are the env's physical parameters
    (gymnasium's attribute names, e.g. ``CartPoleVectorEnv(8, masspole=0.2)``).

    Args:
        num_envs: number of environments (at least 1).
        backend: ``"auto"`` (numba-cuda on a GPU, numba-cpu on the CPU), ``"torch"``,
            ``"numba-cpu"`` or ``"numba-cuda"``.
        device: ``"auto"`` (the GPU if there is one; the CPU for numba-cpu), ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
        dtype: ``float32`` (fast) or ``float64`` (gymnasium's own precision) for the physics;
            observations and rewards are float32 either way, as gymnasium's spaces say.
        output: ``"torch"`` (tensors on ``device``) or ``"numpy"`` (host arrays).
        max_episode_steps: time limit; reaching it sets ``truncated`` (default: gymnasium's).
        render_mode: ``"rgb_array"`` (or ``"rgb_array_list"``): ``render()`` draws every env, a
            list of ``num_envs`` frames (costly for many envs: see "Rendering" above).
        threads_per_block: CUDA block size for ``numba-cuda`` (``bench block-size`` finds one).
        num_threads: CPU threads for ``numba-cpu`` (default: the CPUs this process may use).
        reuse_outputs: return the backend's output buffers themselves, overwritten by the next
            step, instead of fresh copies (for callers that copy them anyway, like a rollout).
        validate_actions: check action values (range, NaN). On a GPU this reads them back to
            the host each step; turn off for actions that come from a policy.
        episode_statistics: put the return and length of every episode that ends into
            ``infos`` (gymnasium's ``RecordEpisodeStatistics`` layout, accumulated on the device).
            Off by default, as in gymnasium's vector envs: that wrapper, which CleanRL-style
            code adds, writes the same keys and refuses an env that already does. The device
            env runner turns it on.
    """

    definition: ClassVar[EnvDef]
    metadata = {"render_modes": ["rgb_array", "rgb_array_list"], "render_fps": 50, "autoreset_mode": AutoresetMode.NEXT_STEP}
    _renderer = None  # the gymnasium env that draws, made on the first render()

    def __init__(
        self,
        num_envs: int = 1,
        *,
        backend: str = "auto",
        device: str | torch.device | None = "auto",
        dtype: Any = torch.float32,
        output: Output = "torch",
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        threads_per_block: int | None = None,
        num_threads: int | None = None,
        reuse_outputs: bool = False,
        validate_actions: bool = True,
        episode_statistics: bool = False,
        **params: Any,
    ):
        d = self.definition
        self.num_envs = _positive_int(num_envs, "num_envs")
        if output not in ("torch", "numpy"):
            raise ValueError(f"output must be 'torch' or 'numpy', got {output!r}")
        self.max_episode_steps = _positive_int(
            d.max_episode_steps if max_episode_steps is None else max_episode_steps, "max_episode_steps"
        )
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be None, 'rgb_array' or 'rgb_array_list', got {render_mode!r}")
        _no_misspelt_option(d, params, type(self).__init__)
        self.params = d.make_params(**params)
        self.device = backend_device(backend, device)
        self.dtype = _resolve_dtype(dtype)
        self.output = output
        self.render_mode = render_mode
        self.reuse_outputs = bool(reuse_outputs)
        self.episode_statistics = bool(episode_statistics)
        self.validate_actions = bool(validate_actions)
        gymnasium_class = d.gymnasium_class()
        if render_mode is not None and gymnasium_class is None:
            raise ValueError(
                f"{d.id} has no gymnasium env to draw it (its definition's gymnasium_env is None): leave render_mode unset"
            )
        if gymnasium_class is None:  # nothing to draw it with: no render modes (gymnasium's way to say so)
            self.metadata = {**type(self).metadata, "render_modes": []}
        else:
            self.metadata = {**type(self).metadata, "render_fps": gymnasium_class.metadata.get("render_fps", 30)}

        self.single_observation_space, self.single_action_space = d.spaces(self.params)
        self._actions = ActionCheck(self.single_action_space, self.num_envs, self.device)
        action_size = int(np.prod(self.single_action_space.shape or (1,)))
        numbers = d.state_size + int(np.prod(d.array_shape or (0,)))
        check_fits(
            self.num_envs, bytes_per_env(numbers, int(np.prod(d.obs_shape)), action_size, self.dtype), self.device, "num_envs"
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._bound = BoundEnv(d, self.params)
        self._backend = make_backend(
            backend, self._bound, self.num_envs, self.device, self.dtype, threads_per_block, num_threads
        )
        self.backend = self._backend.name
        self._buffers = EnvBuffers.allocate(
            d.state_size, self.num_envs, self.dtype, self.device, d.array_shape, self._backend.envs_first_memory
        )
        self._seed32: int | None = None
        self._constants: StepConstants | None = None
        self._last_action: torch.Tensor | None = None
        self._backend.load(
            self._buffers,
            self._step_constants(0, *d.reset_bounds(None, self.params)),
            torch.zeros(self._actions.shape, dtype=self._actions.dtype, device=self.device),
        )
        logger.debug("%r", self)

    def _step_constants(self, seed32: int, lows, highs) -> StepConstants:
        """What a step reads besides the buffers; ``reset`` sets them (the constructor's are placeholders for ``load``)."""
        return StepConstants(seed32, tuple(map(float, lows)), tuple(map(float, highs)), self.max_episode_steps)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new episode in every env; ``seed`` makes the whole vector deterministic.

        ``options`` are the gymnasium env's (CartPole's ``{"low": l, "high": h}``, ...), and
        gymnasium's vector ``"reset_mask"``: a bool array (or tensor) of one entry per env, to reset
        only those envs; the others go on as they were, and their rows of the observations
        returned are their current ones. A seed is the whole vector's from then on.
        """
        self._check_open()
        if seed is not None:
            if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
                each = isinstance(seed, (list, tuple))
                why = " (one seed for the whole vector: each env draws its episodes from it and its index)" if each else ""
                raise TypeError(f"seed must be a non-negative integer or None, got {seed!r}{why}")
            seed = int(seed)  # gymnasium's seeding takes Python ints only
        options = dict(options or {})
        mask = self._reset_mask(options.pop("reset_mask", None))
        lows, highs = self.definition.reset_bounds(options, self.params)
        super().reset(seed=seed)
        b = self._buffers
        before = None if mask is None or self._constants is None else {k: t.clone() for k, t in b.tensors().items()}
        if seed is not None:
            self._seed32 = fold_seed(seed)
            b.episode.zero_()
        elif self._seed32 is None:
            self._seed32 = fold_seed(int(np.random.SeedSequence().entropy) & ((1 << 64) - 1))
        else:  # unseeded reset of a seeded env: every env moves on to its next episode
            b.episode += 1
        self._constants = self._step_constants(self._seed32, lows, highs)
        self._backend.reset(b, self._constants)
        b.steps.zero_()
        b.prev_done.zero_()
        b.ep_return.zero_()
        if before is not None:  # the envs outside the mask as they were (buffers are envs-last: the mask broadcasts)
            for name, tensor in b.tensors().items():
                tensor.copy_(torch.where(mask, tensor, before[name]))
        self._last_action = None
        with tensor_float(self.dtype):
            obs = self._bound.observation(self.definition.observe(self._bound.state_items(b.state, b.array), self.params))
        return self._to_output(obs.movedim(-1, 0)), {}

    def _reset_mask(self, mask) -> torch.Tensor | None:
        """gymnasium's ``options["reset_mask"]`` as a bool tensor on the device (None: every env)."""
        if mask is None:
            return None
        kind = getattr(mask, "dtype", None)
        if not isinstance(mask, (np.ndarray, torch.Tensor)) or kind not in (np.bool_, torch.bool):
            raise TypeError(
                f"options['reset_mask'] must be a bool numpy array or tensor, one entry per env, got "
                f"{type(mask).__name__}{'' if kind is None else f' of dtype {kind}'}"
            )
        if tuple(mask.shape) != (self.num_envs,):
            raise ValueError(
                f"options['reset_mask'] must have shape ({self.num_envs},), one entry per env, got {tuple(mask.shape)}"
            )
        return torch.as_tensor(mask).to(self.device)

    def step(self, actions):
        """Step every env with one action each (an action space element per env)."""
        self._check_open()
        if self._constants is None:
            raise RuntimeError("call reset() before step()")
        actions = self._action_tensor(actions)
        out = self._backend.step(self._buffers, actions, self._constants, fresh=not self.reuse_outputs)
        if self.render_mode is not None:
            self._last_action = actions.clone()
        return self._format(out)

    def render(self) -> list[np.ndarray] | None:
        """A list of ``num_envs`` RGB frames (H, W, 3), one per env, each drawn by the gymnasium
        env's own renderer from that env's state and parameters (gymnasium's vector contract, and
        what its ``CartPoleVectorEnv`` does: every env is drawn, so render few envs)."""
        self._check_open()
        if self.render_mode is None:
            logger.warning("render() called without render_mode='rgb_array'; nothing is drawn")
            return None
        if self._constants is None:
            raise RuntimeError("call reset() before render()")
        if self._renderer is None:
            self._renderer = self.definition.gymnasium_class()(render_mode="rgb_array")
            for name, value in self.params._asdict().items():
                if hasattr(self._renderer, name):
                    setattr(self._renderer, name, value)
        states = self._buffers.state.T.double().cpu().numpy()
        steps = self._buffers.steps.cpu().numpy()
        actions = None if self._last_action is None else self._last_action.cpu().numpy()
        frames = []
        for i in range(self.num_envs):
            self._renderer.state = states[i].copy()
            if self.definition.prepare_render is not None:
                fresh = actions is None or steps[i] == 0
                self.definition.prepare_render(self._renderer, self.params, None if fresh else actions[i])
            frames.append(self._renderer.render())
        return frames

    def close_extras(self, **kwargs):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} is closed: make a new one")

    # ------------------------------------------------------------------ state access
    @property
    def state(self) -> torch.Tensor:
        """The physical state, shape ``(num_envs, S)`` in the gymnasium env's ``state`` order
        (``definition.state_names``), as a copy."""
        return self._buffers.state.T.contiguous()

    @state.setter
    def state(self, value) -> None:
        """Set the physical state of every env, as assigning ``env.unwrapped.state`` does in
        gymnasium: step counters and a pending autoreset stay as they are."""
        names = ", ".join(self.definition.state_names)
        shape = (self.num_envs, self.definition.state_size)
        try:
            tensor = (
                value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value, dtype=np.float64))
            )
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"state must be numbers of shape {shape} ({names} per env), got {type(value).__name__}: {err}"
            ) from None
        if (
            tensor.dtype == torch.bool
            or tensor.is_complex()
            or not (tensor.is_floating_point() or tensor.dtype in (torch.int32, torch.int64))
        ):
            raise TypeError(f"state must be real numbers of shape {shape} ({names} per env), got dtype {tensor.dtype}")
        if tuple(tensor.shape) != shape:
            raise ValueError(f"state must have shape {shape} ({names} per env), got {tuple(tensor.shape)}")
        self._buffers.state.copy_(tensor.to(self.device, self.dtype).T)

    @property
    def state_array(self) -> torch.Tensor | None:
        """The env's own array (``definition.array_shape``), shape ``(num_envs, *array_shape)``, as
        a copy; None for an env without one."""
        array = self._buffers.array
        return None if array is None else array.movedim(-1, 0).contiguous()

    @state_array.setter
    def state_array(self, value) -> None:
        """Set every env's array (as the ``state`` setter sets the numbers)."""
        if self._buffers.array is None:
            raise ValueError(f"{self.definition.id} has no array in its state (its definition's array_shape is ())")
        shape = (self.num_envs, *self.definition.array_shape)
        tensor = value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value, dtype=np.float64))
        if tuple(tensor.shape) != shape:
            raise ValueError(f"state_array must have shape {shape} (num_envs, *array_shape), got {tuple(tensor.shape)}")
        if not (tensor.is_floating_point() or tensor.dtype in (torch.bool, torch.int32, torch.int64)):
            raise TypeError(f"state_array must be real numbers, got dtype {tensor.dtype}")
        self._buffers.array.copy_(tensor.to(self.device, self.dtype).movedim(0, -1))

    def get_state(self) -> dict:
        """Everything the envs' next steps depend on (for exact resume): the per-env buffers
        (physics, step counts, pending resets, episode counters, returns so far), the seed and
        the reset bounds; host copies."""
        return {
            "env": self.definition.id,
            "buffers": {name: t.cpu().clone() for name, t in self._buffers.tensors().items()},
            "seed32": self._seed32,
            "constants": None if self._constants is None else tuple(self._constants),
        }

    def set_state(self, state: dict) -> None:
        """Restore ``get_state()``'s result (same env and ``num_envs``; any device)."""
        if state.get("env") != self.definition.id:
            raise ValueError(f"this state is of {state.get('env')!r}, not of {self.definition.id!r}")
        for name, tensor in self._buffers.tensors().items():
            saved = state["buffers"][name]
            if tuple(saved.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"this state is of {saved.shape[-1]} envs, not {self.num_envs}: make the env with "
                    f"num_envs={saved.shape[-1]}"
                )
            tensor.copy_(saved.to(tensor.device, tensor.dtype))
        self._seed32 = state["seed32"]
        self._constants = None if state["constants"] is None else StepConstants(*state["constants"])

    # ------------------------------------------------------------------ helpers
    def _action_tensor(self, actions) -> torch.Tensor:
        """The actions checked (``core/actions.py``) as the backend takes them: on the env's
        device, int64 from 0 for ``Discrete``, float32 ``(N, k)`` for ``Box``. Nothing is
        changed when they are rejected."""
        tensor = self._actions(actions, self.validate_actions)
        start = int(getattr(self.single_action_space, "start", 0))
        return tensor - start if start else tensor

    def _format(self, out: StepOutputs):
        if self.output == "numpy":
            out = StepOutputs(*(self._to_output(t) for t in out))
        infos = {}
        if self.episode_statistics and (self.output == "torch" or out.final_mask.any()):
            ended = out.final_mask
            infos = {"episode": {"r": out.final_return, "l": out.final_length, "_r": ended, "_l": ended}, "_episode": ended}
        obs = np.moveaxis(out.obs, -1, 0) if self.output == "numpy" else out.obs.movedim(-1, 0)  # envs first
        return obs, out.reward, out.terminated, out.truncated, infos

    def _to_output(self, tensor: torch.Tensor):
        return tensor.cpu().numpy() if self.output == "numpy" else tensor

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.definition.id}, num_envs={self.num_envs}, backend={self.backend!r}, "
            f"device={str(self.device)!r}, dtype={str(self.dtype).replace('torch.', '')})"
        )
