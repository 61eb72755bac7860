"""``DeviceEnvRunner``: RLlib rollouts that never leave the device, for any algorithm.

RLlib's stock runner asks the env for host numpy, splits every step into per-env episode
objects in Python, and converts actions back to numpy. This runner keeps the vector env and
RLlib's inference-only ``RLModule`` on one device and fills a ``Rollout`` of preallocated
``(T, N)`` tensors: per step one module forward pass and one ``env.step``, no per-env Python, no
host round trip. It works for any action space: actions come from the module (its own
epsilon-greedy, or a sample of its RLlib action distribution), ``Box`` actions are unsquashed or
clipped to the space before ``env.step`` as RLlib's ``NormalizeAndClipActions`` does, and the
log-probability is that of the unclipped sample. What the rollout becomes (advantages,
replay transitions) is the algorithm's business (``ppo.py``, ``dqn.py``).

``DevicePPOConfig``, ``DeviceDQNConfig`` and ``DeviceSACConfig`` plug it in: their algorithms train
on its rollouts. RLlib's own algorithms take episodes and cannot; it refuses their configs.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import logging
import math
import sys

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import load_env_creator
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from ray.rllib.utils.framework import get_device
from ray.rllib.utils.metrics import (
    EPISODE_DURATION_SEC_MEAN,
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
)

from rllib_gpuenv.backends import runs_only_on_the_cpu
from rllib_gpuenv.core.devices import resolve_device
from rllib_gpuenv.envs import GPUVectorEnv, env_definition, make_vector_env
from rllib_gpuenv.jax_envs import check_jax_id, is_jax_id, make_jax_env
from rllib_gpuenv.jax_envs.vector_env import JaxVectorEnv
from rllib_gpuenv.registration import unimportable_prefix
from rllib_gpuenv.rllib import action_sampling
from rllib_gpuenv.rllib.autoreset import StepReader
from rllib_gpuenv.rllib.rollout import Rollout
from rllib_gpuenv.rllib.rollout_graph import RolloutGraph
from rllib_gpuenv.wrappers import (
    CheckDevice,
    CheckTensorEnvOutputs,
    DeviceEnv,
    FlatObservations,
    Float32Observations,
    OneHotObservations,
    RescaleObservations,
)

logger = logging.getLogger(__name__)

DEVICE_ROLLOUT_STATE = "device_rollout"
CHECK_EVERY = 32  # evaluation asks the device whether every env is done once per this many steps


def runner_device(requested, worker_index: int, num_gpus_per_env_runner: float, config=None) -> torch.device:
    """The device an env runner works on.

    ``"auto"``: the GPU Ray assigned to a remote runner (``num_gpus_per_env_runner > 0``); the
    local runner (``num_env_runners=0``) takes the GPU too when there is one, unlike RLlib's
    stock runner; otherwise the CPU, and always the CPU for envs on a backend that
    ``runs_only_on_the_cpu`` (numba-cpu). Anything else must exist (``resolve_device``).
    """
    if requested not in (None, "auto"):
        return resolve_device(requested)
    if config is not None and runs_only_on_the_cpu((config.env_config or {}).get("backend", "auto")):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        if worker_index and num_gpus_per_env_runner:
            logger.warning("Ray assigned a GPU to env runner %d, but torch sees no CUDA device: using the CPU", worker_index)
        return torch.device("cpu")
    if worker_index and num_gpus_per_env_runner:
        return get_device(config, num_gpus_per_env_runner)
    if not worker_index:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")  # a remote runner without GPUs (Ray hides them from it)


def check_prefixed_id(env_spec: str) -> None:
    """Import the module of a ``"module:Env-v0"`` id, as gymnasium does, and check that the id is
    one it registered. gymnasium itself would fall back to any env of that name, so that
    ``"gymnax:CartPole-v1"`` silently trained on gymnasium's own CPU CartPole.

    ``"gymnax:<id>"`` and ``"brax:<name>"`` are gymnax's and Brax's JAX envs (``jax_envs/``): the
    library must be installed and have it. Otherwise, where the import is new, the id must be one it registered (or registered
    again); where the module was imported before, the id's entry point must not be gymnasium's
    own, nor the suite's (``rllib_gpuenv``'s) unless the module is this package."""
    module, name = env_spec.split(":", 1)
    top = module.split(".")[0]
    if is_jax_id(env_spec):
        check_jax_id(env_spec)
        return
    if top in ("gymnax", "brax"):
        raise ValueError(
            f"{env_spec!r}: {top} registers no gymnasium env {name!r} (its envs are JAX functions): write "
            f"'{top}:{name}' for its JAX env on the device env runner, or drop the '{module}:' prefix for a gymnasium id"
        )
    newly_imported = module not in sys.modules
    before = gym.registry.get(name)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise ValueError(unimportable_prefix(env_spec, module, err)) from None
    spec = gym.registry.get(name)
    if spec is None:
        raise ValueError(f"{env_spec!r}: importing {module} registered no gymnasium env {name!r}") from None
    entry = spec.entry_point or spec.vector_entry_point
    origin = str(entry if isinstance(entry, str) else getattr(entry, "__module__", ""))
    origin_top = origin.split(".")[0].split(":")[0]
    if newly_imported:
        fallback = spec is before and top != origin_top
    else:
        from rllib_gpuenv.registration import ENV_IDS, PACKAGE

        suite = origin_top == PACKAGE and name in ENV_IDS
        fallback = top != origin_top and (origin_top == "gymnasium" or suite)
    if fallback:
        elsewhere = "its own" if origin_top == "gymnasium" else f"the one from {origin_top}"
        raise ValueError(
            f"{env_spec!r}: {module} registers no gymnasium env {name!r}, and gymnasium would use {elsewhere} instead "
            f"({origin}): name an env that {module} registers with gymnasium, or drop the '{module}:' prefix for that one"
        )


def envs_start_anew(why: str, *args) -> None:
    """Say that a checkpoint's envs are not used: ``why`` (%-formatted with ``args``), ending with
    the envs it is about, which start new episodes; the rest of the checkpoint is restored."""
    logger.warning(why + " start new episodes (the weights, optimizer and counters are restored)", *args)


def as_the_module_sees_it(env: gym.vector.VectorEnv, config) -> gym.vector.VectorEnv:
    """``env`` with the observation wrappers between it and the module: ``Discrete`` observations
    one-hot (``OneHotObservations``: RLlib's default networks take ``Box`` ones only), ``Box`` ones
    as float32 (``Float32Observations``) and, where they have 2 dimensions or more than 3 (neither
    a vector nor an image), flat (``FlatObservations``), and rescaled to [-1, 1] where the config
    asks (``rescale_observations``). The runner and ``rllib-gpuenv evaluate`` both step their envs
    through it, so a checkpoint's policy is played on the observations it was trained on."""
    space = env.single_observation_space
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        env = OneHotObservations(env)
    elif isinstance(space, gym.spaces.Box):
        if space.dtype != np.float32:
            env = Float32Observations(env)
        if len(space.shape) == 2 or len(space.shape) > 3:
            env = FlatObservations(env)
    if getattr(config, "rescale_observations", False):
        env = RescaleObservations(env)
    return env


# What the runner sets itself on the envs it makes: no env's parameters.
RUNNER_KEYS = ("num_envs", "device", "output", "episode_statistics")


def make_device_env(
    env_spec,
    num_envs: int,
    device: torch.device,
    env_config: dict,
    num_threads: int | None = None,
    vectorize_mode: str | None = None,
) -> gym.vector.VectorEnv:
    """A vector env whose inputs and outputs are tensors on ``device``.

    * Registered ``GPUVectorEnv`` ids (the suite's, or yours: ``"your_module:Env-v0"`` imports
      ``your_module`` first) are built directly on the device, with ``num_threads`` CPU threads
      where they run on numba-cpu.
    * Your own vector env (``bring_your_own_env``): a ``tune.register_env`` name or a callable
      (called with one config dict, RLlib's convention), a ``VectorEnv`` class, or a gymnasium id
      with a ``vector_entry_point`` and no single-env ``entry_point`` (or any id, with
      ``gym_env_vectorize_mode="vector_entry_point"``). It gets ``num_envs`` and the runner's
      ``device`` besides ``env_config``, and runs as it is if it returns tensors (on ``device``);
      one that returns numpy is wrapped in ``DeviceEnv``. A creator or class that makes one
      ordinary gymnasium ``Env`` (RLlib's ``MyEnv(config)``) is called ``num_envs`` times, the
      copies stepped by gymnasium's ``SyncVectorEnv``, as RLlib's own runner does.
    * ``"gymnax:<id>"``, ``"brax:<name>"``: gymnax's or Brax's JAX env, jit-compiled and vmapped on
      the device, sharing its arrays with torch (``jax_envs/``); ``env_config`` sets its params.
    * Any other gymnasium id is vectorised by gymnasium (``sync``) and wrapped in ``DeviceEnv``.
    """
    env_config = {k: v for k, v in dict(env_config or {}).items() if k not in RUNNER_KEYS}
    if is_jax_id(env_spec):
        env = make_jax_env(env_spec, num_envs, device, env_config)
        env.validate_actions = False  # the policy's actions: no read-back of their values each step
        return env
    if isinstance(env_spec, str) and ":" in env_spec:  # "module:Env-v0": the module registers it (as gymnasium does)
        check_prefixed_id(env_spec)
    if isinstance(env_spec, str) and env_definition(env_spec) is not None:
        if num_threads is not None and env_config.get("backend", "auto") in ("auto", "numba-cpu"):
            env_config.setdefault("num_threads", num_threads)
        return make_vector_env(
            env_spec,
            num_envs,
            device=device,
            output="torch",
            reuse_outputs=True,
            validate_actions=False,
            episode_statistics=True,
            **env_config,
        )
    env = bring_your_own_env(env_spec, num_envs, device, env_config, vectorize_mode)
    if env is None:
        return DeviceEnv(gym.make_vec(env_spec, num_envs=num_envs, vectorization_mode="sync", **env_config), device)
    return env


def bring_your_own_env(
    env_spec, num_envs: int, device: torch.device, env_config: dict, vectorize_mode
) -> gym.vector.VectorEnv | None:
    """Your vector env as ``make_device_env`` describes, or None for a gymnasium id that gymnasium vectorises."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    made_by = None  # an RLlib-style creator, called with one config dict
    if isinstance(env_spec, str) and _global_registry.contains(ENV_CREATOR, env_spec):
        made_by = _global_registry.get(ENV_CREATOR, env_spec)
    elif isinstance(env_spec, type) and issubclass(env_spec, gym.vector.VectorEnv):
        kwargs = _with_device(env_spec, env_config, device)
        _check_call(env_spec, env_spec.__name__, num_envs=num_envs, **kwargs)
        env = env_spec(num_envs=num_envs, **kwargs)
    elif callable(env_spec) and not isinstance(env_spec, str):
        made_by = env_spec
    elif isinstance(env_spec, str):
        try:
            spec = gym.spec(env_spec.split(":", 1)[-1])  # a "module:" prefix: make_device_env imported the module
        except gym.error.Error as err:  # no such id (gymnasium's message suggests a near one)
            raise ValueError(
                f"env {env_spec!r}: {err} It is no gymnasium id, nor a tune.register_env name in this process (such a "
                "name lasts only in the process that registered it: to use the env from a command, register it with "
                "gymnasium in a module of yours and give its id as 'your_module:YourEnv-v0', which is imported first)"
            ) from None
        mode = str(getattr(vectorize_mode, "value", vectorize_mode)).lower()
        if spec.vector_entry_point is None or (spec.entry_point is not None and mode != "vector_entry_point"):
            return None
        creator = spec.vector_entry_point
        creator = load_env_creator(creator) if isinstance(creator, str) else creator
        kwargs = _with_device(creator, env_config, device)
        _check_call(creator, f"{env_spec!r}'s vector_entry_point", num_envs=num_envs, **kwargs)
        env = gym.make_vec(env_spec, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
    else:
        raise ValueError(
            f"the device env runner needs a gymnasium id, a tune.register_env name or a callable, got {env_spec!r}"
        )
    if made_by is not None:
        config = {**env_config, "num_envs": num_envs, "device": str(device)}
        env = made_by(config)
        if isinstance(env, gym.Env):  # a single env, as RLlib's own runner takes: num_envs of them, stepped in turn
            envs = [env, *(made_by(config) for _ in range(num_envs - 1))]
            env = gym.vector.SyncVectorEnv([lambda env=env: env for env in envs])
    if not isinstance(env, gym.vector.VectorEnv):
        raise TypeError(
            f"{env_spec!r} made a {type(env).__name__}, but the device env runner steps a gymnasium VectorEnv "
            f"(num_envs={num_envs}) or a gymnasium Env (num_envs copies of it): return one of those"
        )
    obs, _ = env.reset()  # numpy or tensors?
    if not isinstance(obs, torch.Tensor):
        return DeviceEnv(env, device)
    if obs.device != device:
        raise ValueError(
            f"{env_spec!r} returns observations on {obs.device}, but its env runner works on {device}: make the env "
            f"use the device it is given (its 'device' argument), or put the runner there (devices(env_runners=...))"
        )
    return CheckTensorEnvOutputs(env, device)


def _check_call(creator, name: str, **kwargs) -> None:
    """That ``creator`` takes the keyword arguments the runner makes an env with, else an error
    naming the convention (rather than Python's bare "missing 1 required positional argument")."""
    try:
        inspect.signature(creator).bind(**kwargs)
    except TypeError as err:
        raise TypeError(
            f"{name}: {err}. The device env runner makes your env with keyword arguments: num_envs, device (where "
            f"it takes one) and env_config's keys (here: {', '.join(kwargs)}): take those, or register a creator "
            "that does (tune.register_env(name, lambda config: ...))"
        ) from None
    except ValueError:  # no signature to read (a builtin): the call itself will say
        pass


def _with_device(creator, kwargs: dict, device: torch.device) -> dict:
    """``kwargs`` plus ``device``, where ``creator`` (a vector entry point, a ``VectorEnv`` class) takes one."""
    try:
        parameters = inspect.signature(creator).parameters
    except (TypeError, ValueError):
        return kwargs
    return {**kwargs, "device": device} if "device" in parameters else kwargs


class ActionsForEnv:
    """What RLlib's ``NormalizeAndClipActions`` does to a ``Box`` action before the env gets it,
    on the device: unsquash from [-1, 1] to the bounds (``normalize_actions``), or clip to them
    (``clip_actions``), or neither. Other spaces pass through."""

    def __init__(self, space: gym.Space, normalize: bool, clip: bool, device: torch.device):
        self.box = isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating)
        bounded = self.box and bool(np.all(space.bounded_below) and np.all(space.bounded_above))
        self.normalize = bool(normalize) and bounded
        self.clip = bool(clip) and not self.normalize and bounded
        if self.box:
            self.low = torch.as_tensor(space.low, device=device)
            self.high = torch.as_tensor(space.high, device=device)

    def __call__(self, actions: torch.Tensor) -> torch.Tensor:
        if self.normalize:
            actions = self.low + (actions + 1.0) * (self.high - self.low) / 2.0
        if self.normalize or self.clip:
            actions = torch.maximum(torch.minimum(actions, self.high), self.low)
        return actions


class DeviceEnvRunner(SingleAgentEnvRunner):
    """An RLlib env runner whose env, module and rollout buffers share one device."""

    # A local runner beside remote ones never makes its env (RLlib's default): it has no obs.
    _obs: torch.Tensor | None = None
    _said_stateless = False  # that the env keeps no state a checkpoint could hold (said once)

    def __init__(self, *, config, **kwargs):
        # Only the driver's own runner (index 0, which RLlib builds beside remote ones too) refuses an
        # algorithm that wants episodes. A remote runner's error would not reach the user: RLlib's
        # fault tolerance (restart_failed_env_runners, on by default) logs it, takes the runner out,
        # and fails later on an IndexError, asking the missing runner for the spaces.
        if not kwargs.get("worker_index") and not hasattr(config, "rollout_length"):  # not a DeviceRolloutsConfig
            raise ValueError(
                f"DeviceEnvRunner returns rollouts, which only the device algorithms train on, not RLlib's "
                f"{config.algo_class.__name__}: use DevicePPOConfig, DeviceDQNConfig or DeviceSACConfig (they plug this "
                f"runner in) instead of {type(config).__name__} with env_runner_cls=DeviceEnvRunner"
            )
        super().__init__(config=config, **kwargs)

    def make_env(self) -> None:
        config = self.config
        worker = self.worker_index or 0
        self._device = self._choose_device()
        # With colocated learners the driver's runner samples nothing: one env gives the spaces.
        num_envs = 1 if getattr(config, "colocated_learners", False) and not worker else config.num_envs_per_env_runner
        env = make_device_env(
            config.env, num_envs, self._device, config.env_config, self._num_threads(), config.gym_env_vectorize_mode
        )
        if isinstance(env.unwrapped, JaxVectorEnv) and num_envs == config.num_envs_per_env_runner:
            env.unwrapped.compile()  # now, while the runner is built, not in its first sample (the spaces' env: never)
        keeps_statistics = (
            env.episode_statistics
            if isinstance(env, DeviceEnv)
            else getattr(env.unwrapped, "episode_statistics", False) is True
        )
        self._steps = StepReader(env, keeps_statistics)  # its autoreset mode; an env without one fails here
        env = as_the_module_sees_it(env, config)
        if getattr(config, "check_devices", False):
            env = CheckDevice(env, self._device)
        self.env = env
        self.num_envs = env.num_envs
        self._obs = None
        self._buffers: Rollout | None = None
        self._rollout_graph: RolloutGraph | None = None  # on a GPU: the rollout recorded (rollout_graph.py)
        self._graph_failure: str | None = None  # why recording failed: every rollout steps from Python
        self._module_draws = False  # the module chose the actions itself (with the step count, e.g. DQN's epsilon)
        self._step_count: torch.Tensor | None = None  # the global step a recorded rollout starts from, on the device
        self._actions_for_env = ActionsForEnv(
            env.single_action_space, config.normalize_actions, config.clip_actions, self._device
        )
        # (return, length) of this runner's share of the last metrics_num_episodes_for_smoothing episodes
        window = math.ceil(config.metrics_num_episodes_for_smoothing / self._samplers())
        self._recent_episodes: collections.deque = collections.deque(maxlen=max(1, window))
        role = "evaluation env runner" if config.in_evaluation else "env runner"
        if num_envs != config.num_envs_per_env_runner:
            role += " (for the spaces: the colocated learners step the envs)"
        logger.info("%s %d: %d envs of %s on %s", role, worker, self.num_envs, config.env, self._device)
        context = EnvContext(config.env_config or {}, worker_index=worker, num_workers=config.num_env_runners)
        self._callback("on_environment_created", env=self.env.unwrapped, env_context=context)

    def _callback(self, name: str, **kwargs) -> None:
        """RLlib's ``name`` callbacks (the config's classes and functions), as its runner calls
        them. Per-episode ones are refused in ``validate()``: no episode steps in Python here."""
        make_callback(
            name,
            callbacks_objects=self._callbacks,
            callbacks_functions=getattr(self.config, f"callbacks_{name}"),
            kwargs=dict(env_runner=self, metrics_logger=self.metrics, **kwargs),
        )

    def _choose_device(self) -> torch.device:
        config = self.config
        requested = getattr(config, "env_runner_device", "auto")
        if config.in_evaluation and getattr(config, "eval_env_runner_device", None) is not None:
            requested = config.eval_env_runner_device
        return runner_device(requested, self.worker_index or 0, config.num_gpus_per_env_runner, config)

    def _num_threads(self) -> int | None:
        """numba-cpu envs use the CPUs Ray gave a remote runner; the local runner's process all of its own,
        but half of them where it steps the envs beside a local learner (``learner_process_threads``)."""
        if self.worker_index:
            return max(1, int(self.config.num_cpus_per_env_runner))
        if not self.config.num_env_runners and not self.config.num_learners:
            from rllib_gpuenv.backends.numba_cpu import learner_process_threads

            return learner_process_threads(self.config.num_envs_per_env_runner)
        return None

    def _samplers(self) -> int:
        """How many runners share the training envs (the episode window and the step count are split over them)."""
        return max(1, self.config.num_env_runners)

    def make_module(self) -> None:
        """RLlib's inference-only module (the actor; the algorithm syncs its weights), on the device."""
        super().make_module()
        if self.module is not None and self.module.is_stateful():  # a module of the user's (use_lstm: validate())
            raise ValueError(
                f"{type(self.module).__name__} is stateful (get_initial_state() gives a recurrent state), but the device "
                "env runner carries no state between steps: use a stateless module, or RLlib's own algorithm and env runners"
            )
        if getattr(self.config, "check_devices", False):
            CheckDevice(self.module, self._device)

    # ------------------------------------------------------------------ acting
    def _act(self, obs: torch.Tensor, explore: bool, t: int):
        """The module's actions for ``obs``: ``(actions, logp, dist_inputs)`` (None where the
        module chose the actions itself, as DQN's epsilon-greedy does). Called under ``no_grad``."""
        batch = {Columns.OBS: obs}
        # The module's own hooks, in eval mode, as RLlib's forward_exploration/forward_inference
        # call them; those switch the mode there and back on every call (two walks over the
        # submodules, 0.1-0.2 ms a step on a CPU). Here it is switched when it is not in eval mode:
        # once for a runner's own module, once a rollout for a colocated learner's (its update
        # puts it back in training mode, as RLlib's does).
        if self.module.training:
            self.module.eval()
        out = self.module._forward_exploration(batch, t=t) if explore else self.module._forward_inference(batch)
        if Columns.ACTIONS in out:
            self._module_draws = True
            actions = out[Columns.ACTIONS]
            return actions, out.get(Columns.ACTION_LOGP), out.get(Columns.ACTION_DIST_INPUTS)
        dist_inputs = out[Columns.ACTION_DIST_INPUTS]
        cls = self.module.get_exploration_action_dist_cls() if explore else self.module.get_inference_action_dist_cls()
        actions, logp = action_sampling.draw(cls, dist_inputs, explore)  # torch's own samplers wait for the GPU
        return actions, logp, dist_inputs

    def _global_step(self) -> int:
        """Env steps sampled by all runners so far (RLlib's stock runner's estimate), for
        exploration schedules such as DQN's epsilon."""
        runners = self._samplers()
        return (self.num_env_steps_sampled_lifetime // runners) * runners

    def _reset(self) -> None:
        self._rollout_graph = None  # the envs' constants may change with a reset: record anew
        seed = None if self.config.seed is None else self.config.seed + (self.worker_index or 0)
        self._obs, _ = self.env.reset(seed=seed)
        self._steps.reset(self.num_envs, self._device)

    def _allocate(self, actions: torch.Tensor, logp, dist_inputs) -> Rollout:
        T, N, device = self.config.rollout_length, self.num_envs, self._device

        def empty(like, dtype=None):
            return torch.empty((T, *like.shape), dtype=dtype or like.dtype, device=device)

        flags = torch.zeros(N, dtype=torch.bool, device=device)
        rewards = torch.zeros(N, dtype=torch.float32, device=device)
        return Rollout(
            obs=empty(self._obs),
            actions=empty(actions),
            logp=empty(rewards),
            rewards=empty(rewards),
            dist_inputs=None if dist_inputs is None else empty(dist_inputs),
            terminated=empty(flags),
            truncated=empty(flags),
            valid=empty(flags),
            last_obs=torch.empty_like(self._obs),
            next_observations=empty(self._obs) if self._steps.same_step else None,
        )

    def sample(
        self, *, num_timesteps=None, num_episodes=None, explore=None, random_actions=False, force_reset=False, **kwargs
    ):
        """Collect ``rollout_length`` steps of every env into a ``Rollout``.

        Asked for a number of episodes or timesteps (what RLlib's evaluation does), the runner
        plays fresh episodes instead (``_evaluate``) and returns them as RLlib episodes.
        """
        explore = self.config.explore if explore is None else explore
        if num_episodes is not None or num_timesteps is not None:
            return self._evaluate(num_episodes, num_timesteps, explore)
        if random_actions:
            raise NotImplementedError("DeviceEnvRunner samples from the module; random_actions is not supported")
        if self._obs is None or force_reset:
            self._reset()
        with torch.no_grad():
            if self._records_rollouts():
                episodes = self._recorded_rollout(explore)
            else:
                episodes = self._rollout_steps(self.config.rollout_length, self._global_step(), explore)
        self._log_metrics(self.config.rollout_length * self.num_envs, *self._ended_episodes(episodes))
        self._callback("on_sample_end", samples=self._buffers)  # the Rollout, on the runner's device
        return self._buffers.to("cpu") if self._rollout_travels() else self._buffers

    def _rollout_steps(self, T: int, t0: int | torch.Tensor, explore: bool):
        """Step every env ``T`` times into the rollout buffers, from global step ``t0`` (a device
        tensor where the rollout is recorded); ``(ended, returns, lengths)`` of each step,
        ``(T, N)`` on the device (None for an env that reports no episodes)."""
        episodes = []  # (mask, returns, lengths) per step, on the device
        for t in range(T):
            actions, logp, dist_inputs = self._act(self._obs, explore, t0 + t * self.num_envs)
            if self._buffers is None or self._buffers.actions.shape[1:] != actions.shape:
                self._buffers = self._allocate(actions, logp, dist_inputs)
            r = self._buffers
            r.obs[t] = self._obs
            r.actions[t] = actions
            r.logp[t] = 0.0 if logp is None else logp
            if r.dist_inputs is not None:
                r.dist_inputs[t] = dist_inputs
            step = self._steps.step(r.obs[t], *self.env.step(self._actions_for_env(actions)))
            self._obs = step.obs
            r.rewards[t], r.terminated[t], r.truncated[t], r.valid[t] = step[1:5]
            if step.next_obs is not None:
                r.next_observations[t] = step.next_obs
            if step.cut_before is not None and t:  # the step before a truncation without its final obs ends it
                r.truncated[t - 1] |= step.cut_before
            if step.episodes is not None:
                episodes.append(step.episodes)
        self._buffers.last_obs.copy_(self._obs)
        return tuple(torch.stack(x) for x in zip(*episodes)) if episodes else None

    # ------------------------------------------------------------------ the rollout as a CUDA graph
    def _records_rollouts(self) -> bool:
        """Whether this rollout replays a recorded one (``rollout_graph.py``): on a GPU, for this
        package's envs, after a first rollout stepped from Python (it compiles the kernel, allocates
        the buffers, initialises cuBLAS), where the runner draws the actions or the module draws
        them from a device step count (DQN's)."""
        env = self.env.unwrapped
        return (
            self._device.type == "cuda"
            and getattr(self.config, "rollout_cuda_graph", True)
            and self._graph_failure is None
            and self._buffers is not None
            and (not self._module_draws or getattr(self.module, "explores_with_device_step", False))
            and isinstance(env, GPUVectorEnv)
        )

    def _carried(self) -> dict[str, torch.Tensor]:
        """What a rollout's first step reads that the last step before it wrote."""
        return {"obs": self._obs, **self._steps.carried()}

    def _set_carried(self, tensors: dict[str, torch.Tensor]) -> None:
        self._obs = tensors["obs"]
        self._steps.set_carried(tensors)

    def _recorded_rollout(self, explore: bool):
        """The rollout, by replaying the recorded one (recorded first where none holds this
        rollout length, buffers, module and exploration); stepped from Python where recording
        fails. The step count a module explores with (DQN's epsilon) is a device tensor the
        recording reads, set before each replay."""
        T = self.config.rollout_length
        key, owners = (T, explore), (self._buffers, self.module)
        if self._step_count is None:
            self._step_count = torch.zeros((), dtype=torch.int64, device=self._device)
        self._step_count.fill_(self._global_step())  # a kernel with the value as its argument: no wait
        graph = self._rollout_graph
        if graph is None or not graph.holds(key, owners):
            self._rollout_graph = None
            try:
                graph = RolloutGraph.record(
                    lambda: self._rollout_steps(T, self._step_count, explore),
                    self._carried,
                    self._set_carried,
                    key,
                    owners,
                    self._device,
                )
            except Exception as error:  # noqa: BLE001 - any failure to record means: step from Python
                self._graph_failure = f"{type(error).__name__}: {error}"
                logger.warning("The rollout could not be recorded as a CUDA graph (%s): it steps from Python", error)
                return self._rollout_steps(T, self._global_step(), explore)
            self._rollout_graph = graph
            logger.info("The rollout (%d envs x %d steps) is recorded as a CUDA graph: later ones replay it", self.num_envs, T)
        return graph.replay(self._carried, self._set_carried)

    def _rollout_travels(self) -> bool:
        """Whether ``sample()``'s rollout leaves this process: a remote runner's goes through Ray's
        object store, so it is handed over on the host; the local runner's stays on its device."""
        return bool(self.worker_index)

    def _evaluate(self, num_episodes: int | None, num_timesteps: int | None, explore: bool) -> list[SingleAgentEpisode]:
        """Play episodes in all envs at once; return them (RLlib episodes) and log their metrics.

        Asked for episodes: the episodes that end first are the short ones, so counting the
        first ``num_episodes`` to end would bias the return low. Instead every env starts an
        episode at once, and the first episode of each of the first ``num_episodes`` envs
        counts, however long it takes (more envs than that still step, and are not counted);
        for more episodes than envs, rounds of this. Asked for timesteps: all envs step
        ``ceil(num_timesteps / N)`` times, going on from where the last call stopped, as RLlib's
        own runner does; the episodes that end count (whole: their return and length come from
        the env), and what was played is returned as episode chunks. The host asks the device
        whether all counted envs are done once every ``CHECK_EVERY`` steps, not every step.
        """
        N = self.num_envs
        if num_episodes is not None:
            episodes: list[SingleAgentEpisode] = []
            returns, lengths, steps = [], [], 0
            while len(episodes) < num_episodes:
                count = min(N, num_episodes - len(episodes))
                played = self._play(
                    explore,
                    getattr(self.env, "max_episode_steps", None) or 100_000,
                    count,
                    stop=lambda done, count=count: bool(done[:count].all()),
                    reset=True,
                )
                new = [chunk for i in range(count) for chunk in self._chunks(played, i, first_only=True) if chunk.is_done]
                episodes += new
                returns += [float(e.get_rewards().sum(dtype=np.float64)) for e in new]  # RLlib's get_return() sums in Python
                lengths += [len(e) for e in new]
                steps += played["steps"] * N
            self._obs = None  # the next rollout starts from fresh episodes
        else:
            played = self._play(explore, math.ceil(num_timesteps / N), N, stop=lambda done: False, reset=self._obs is None)
            episodes = [chunk for i in range(N) for chunk in self._chunks(played, i)]
            returns, lengths, steps = played["ended_returns"], played["ended_lengths"], played["steps"] * N
        self._log_metrics(steps, len(returns), returns, lengths, windowed=False)
        self._callback("on_sample_end", samples=episodes)
        return episodes

    def _play(self, explore: bool, max_steps: int, recorded: int, stop, reset: bool) -> dict:
        """Step all envs (from a reset, if ``reset``) until ``stop(done_once)`` (asked every
        ``CHECK_EVERY`` steps) or ``max_steps``, recording the first ``recorded`` envs:
        ``(steps, recorded, ...)`` arrays of what they saw and did, what each step led to (the
        real final observation where an episode ended, in any autoreset mode), which steps were
        NEXT_STEP resets, and the returns and lengths of all episodes that ended."""
        if reset:
            self._reset()
        record = {key: [] for key in ("obs", "next_obs", "actions", "rewards", "terminated", "truncated", "valid")}
        record["obs"].append(self._obs[:recorded].clone())
        ended = []
        done_once = torch.zeros(self.num_envs, dtype=torch.bool, device=self._device)
        with torch.no_grad():
            for t in range(max_steps):
                actions, _, _ = self._act(self._obs, explore, self._global_step())
                before = self._obs.clone() if self._steps.same_step else self._obs  # the env may overwrite its outputs
                step = self._steps.step(before, *self.env.step(self._actions_for_env(actions)))
                self._obs, term, trunc = step.obs, step.terminated, step.truncated
                for key, value in (
                    ("obs", self._obs),
                    ("next_obs", self._obs if step.next_obs is None else step.next_obs),
                    ("actions", actions),
                    ("rewards", step.rewards),
                    ("terminated", term),
                    ("truncated", trunc),
                    ("valid", step.played),
                ):
                    record[key].append(value[:recorded].clone())
                if step.episodes is not None:
                    ended.append(step.episodes)
                done_once |= term | trunc
                if (t + 1) % CHECK_EVERY == 0 and stop(done_once):
                    break
        played = {key: torch.stack(values).cpu().numpy() for key, values in record.items()}
        played["steps"] = len(record["rewards"])
        mask, rets, lens = (torch.stack(x) for x in zip(*ended)) if ended else (torch.zeros(0, dtype=torch.bool),) * 3
        played["ended_returns"], played["ended_lengths"] = rets[mask].tolist(), lens[mask].tolist()
        return played

    def _chunks(self, played: dict, i: int, first_only: bool = False) -> list[SingleAgentEpisode]:
        """Env ``i``'s steps in ``played`` as RLlib episodes: whole episodes and, at either end,
        the pieces of episodes the recording cut (NEXT_STEP reset steps belong to none); with
        ``first_only``, the first of them. Only the steps where an episode ends or an env resets
        are visited: an evaluation round of 512 envs x 500 steps visited all 256,000."""
        valid = played["valid"][:, i]
        done = played["terminated"][:, i] | played["truncated"][:, i]
        chunks, start = [], 0  # the episode in progress starts at the first valid step from ``start``
        for t in np.flatnonzero(~valid | done).tolist():
            if valid[t]:  # an episode ends here
                chunks.append(self._episode(played, i, start, t + 1))
                if first_only:
                    return chunks
            start = t + 1  # after an end, or a reset step (a piece cut by it, not ended, is dropped)
        if start < played["steps"]:
            chunks.append(self._episode(played, i, start, played["steps"]))
        return chunks

    def _episode(self, played: dict, i: int, start: int, end: int) -> SingleAgentEpisode:
        """Env ``i``'s steps ``[start, end)`` as an RLlib episode, made from numpy arrays as
        ``to_numpy()`` would leave it: built step by step from lists and then stacked, 512
        evaluation episodes of 500 steps took as long as playing them."""

        def buffer(data: np.ndarray, space=None) -> InfiniteLookbackBuffer:
            return InfiniteLookbackBuffer(data=np.array(data), lookback=0, space=space)  # a copy: not a view of ``played``

        observations = np.concatenate([played["obs"][start : start + 1, i], played["next_obs"][start:end, i]])
        return SingleAgentEpisode(
            observations=buffer(observations, self.env.single_observation_space),
            actions=buffer(played["actions"][start:end, i], self.env.single_action_space),
            rewards=buffer(played["rewards"][start:end, i]),
            terminated=bool(played["terminated"][end - 1, i]),
            truncated=bool(played["truncated"][end - 1, i]),
            len_lookback_buffer=0,
            observation_space=self.env.single_observation_space,
            action_space=self.env.single_action_space,
        )

    # ------------------------------------------------------------------ checkpoints
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        """RLlib's runner state, plus where the envs are (``rollout_state``)."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(DEVICE_ROLLOUT_STATE, components, not_components):
            rollout_state = self.rollout_state()
            if rollout_state is not None:
                state[DEVICE_ROLLOUT_STATE] = rollout_state
        return state

    def rollout_state(self) -> dict | None:
        """Where the envs are, for exact resume (``checkpointing.py``): the env's state, the last
        observations, the pending-reset mask and the episode window; None before the first rollout.
        An env without ``get_state``/``set_state`` (yours, or gymnasium's through ``DeviceEnv``)
        keeps only the episode window, so that the reported mean return goes on from it; its envs
        start new episodes on restore, and the first save says so."""
        if self._obs is None:
            return None
        window = {"recent_episodes": list(self._recent_episodes)}
        env = self.env.unwrapped
        if not (hasattr(env, "get_state") and hasattr(env, "set_state")):  # wrappers hold no state
            if not self._said_stateless:
                logger.warning(
                    "%s has no get_state()/set_state(): checkpoints keep the weights, optimizer, counters and "
                    "episode window, but not where its envs are, and a restored run starts new episodes. To resume "
                    "exactly, an env of your own can define get_state() (its state as a picklable dict) and "
                    "set_state(state)",
                    type(env).__name__,
                )
                self._said_stateless = True
            return window
        return {
            "env": env.get_state(),
            "obs": self._obs.cpu().clone(),
            "prev_done": self._steps.prev_done.cpu().clone(),
            "episodes_so_far": self._steps.episodes_so_far(),
            **window,
        }

    def set_module_weights(self, weights: dict[str, torch.Tensor], weights_seq_no: int) -> None:
        """The module's weights from another module's ``state_dict`` in this process, copied in
        place on this runner's device. RLlib's ``set_state`` would take them through host memory
        (its state is numpy). Keys this (inference-only) module lacks are ignored, as RLlib does."""
        missing, _ = self.module.load_state_dict(weights, strict=False)
        if missing:
            raise ValueError(f"the weights lack {missing}: they come from a module of another architecture")
        self._weights_seq_no = weights_seq_no

    def set_state(self, state: dict) -> None:
        super().set_state({k: v for k, v in state.items() if k != DEVICE_ROLLOUT_STATE})
        saved = state.get(DEVICE_ROLLOUT_STATE)
        # An evaluation runner synced from the training runner keeps its own envs' positions, and
        # with colocated learners the driver's runner has none to take.
        driver_of_colocated = getattr(self.config, "colocated_learners", False) and not self.worker_index
        if saved is None or getattr(self, "env", None) is None or self.config.in_evaluation:
            return
        if not driver_of_colocated:
            self.set_rollout_state(saved)
        elif "env" in saved:  # a checkpoint of a run whose envs were on env runners (the colocated driver saves none)
            envs_start_anew(
                "The checkpoint holds the envs of an env runner, this run's colocated learners step envs of their own: they"
            )

    def set_rollout_state(self, saved: dict) -> None:
        """Put the envs where ``rollout_state()`` found them (the same env). A checkpoint of
        another number of envs (a run going on from it with more or fewer) restores only the
        episode window: the envs start new episodes, as an env without state does (its checkpoint
        holds only the window)."""
        if "env" in saved and saved["obs"].shape[0] == self.num_envs:
            self.env.unwrapped.set_state(saved["env"])
            self._rollout_graph = None  # the envs' buffers and constants may be others now: record anew
            self._obs = saved["obs"].to(self._device)
            self._steps.resume(saved["prev_done"], saved.get("episodes_so_far"), self._device)
        elif "env" in saved:
            envs_start_anew(
                "The checkpoint holds %d envs, this env runner has %d: its envs", saved["obs"].shape[0], self.num_envs
            )
        self._recent_episodes.clear()
        self._recent_episodes.extend(saved["recent_episodes"])

    # ------------------------------------------------------------------ metrics
    def _ended_episodes(self, episodes) -> tuple[int, list[float], list[int]]:
        """How many episodes ended in a rollout, and the returns and lengths of the last of them
        (as many as the metrics' window holds), from the rollout's ``(ended, returns, lengths)``
        on the device. The rollout's one read-back: both columns under one mask, then one copy,
        so a GPU is waited for twice per rollout (the mask's count, the copy), not per step."""
        if episodes is None:
            return 0, [], []
        ended, returns, lengths = episodes
        stats = torch.stack((returns.to(torch.float64), lengths.to(torch.float64)))[:, ended]
        returns, lengths = stats[:, -self._recent_episodes.maxlen :].tolist()
        return stats.shape[1], returns, [int(length) for length in lengths]

    def _log_metrics(
        self, num_steps: int, num_episodes: int, returns: list[float], lengths: list[int], windowed: bool = True
    ) -> None:
        """RLlib's standard counters and episode metrics, from host lists of the returns and
        lengths of the episodes that ended (``_ended_episodes``).

        ``episode_return_mean`` is the mean of this runner's last
        ``metrics_num_episodes_for_smoothing / num_env_runners`` episodes, as RLlib documents
        that setting (RLlib 2.60's own runner clears its window on every reduce, so there it is
        the mean of the episodes that ended in the iteration, and one lucky iteration passes a
        stop criterion). The runner keeps the window on the host. Not ``windowed``
        (evaluation), it reports just the given episodes.
        """
        self._increase_sampled_metrics(num_steps, num_episodes)
        if windowed:
            self._recent_episodes.extend(zip(returns, lengths))
            returns, lengths = zip(*self._recent_episodes) if self._recent_episodes else ((), ())
        if returns:
            self._log_episode_summary(returns, lengths)

    def _log_episode_summary(self, returns, lengths) -> None:
        """The keys RLlib's runner logs per episode (``_log_episode_metrics``), logged once
        for the whole window: its mean, min and max. RLlib reduces each runner's values to
        one mean (min, max) anyway, so the results are the same, at 9 calls instead of 9
        per episode."""
        win = self._recent_episodes.maxlen  # RLlib's: metrics_num_episodes_for_smoothing / runners
        mean_return = sum(returns) / len(returns)
        for key, value in (
            (EPISODE_LEN_MEAN, sum(lengths) / len(lengths)),
            (EPISODE_RETURN_MEAN, mean_return),
            (EPISODE_DURATION_SEC_MEAN, 0.0),  # per-episode wall time is not tracked
            (("agent_episode_return_mean", DEFAULT_AGENT_ID), mean_return),
            (("module_episode_return_mean", DEFAULT_MODULE_ID), mean_return),
        ):
            self.metrics.log_value(key, value, window=win)
        for key, reduce, value in (
            (EPISODE_LEN_MIN, "min", min(lengths)),
            (EPISODE_RETURN_MIN, "min", min(returns)),
            (EPISODE_LEN_MAX, "max", max(lengths)),
            (EPISODE_RETURN_MAX, "max", max(returns)),
        ):
            self.metrics.log_value(key, value, reduce=reduce, window=win)

    def get_metrics(self):
        return self.metrics.reduce()
