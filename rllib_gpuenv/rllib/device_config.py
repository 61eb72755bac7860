"""What every device algorithm's config adds to RLlib's: the device env runner, a device per
role, the rollout length, where the envs are when there are several learners (the layout), and
the training batch that follows from the rollout shape."""

from __future__ import annotations

import functools
import logging

import torch
from ray.rllib.algorithms.algorithm_config import NotProvided

from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner, check_prefixed_id

logger = logging.getLogger(__name__)

# Where the envs are when there are remote learners (num_learners >= 1): "colocated", in the
# learners (each steps num_envs_per_env_runner envs on its own device and trains on them);
# "separate", in env runners (the driver's, or remote ones) whose rollouts go to the learners;
# "auto": colocated without env runners (num_env_runners=0), separate with them.
LAYOUTS = ("auto", "colocated", "separate")

# RLlib's callbacks that its own env runner calls per env and step; the device runner cannot.
EPISODE_CALLBACKS = ("on_episode_created", "on_episode_start", "on_episode_step", "on_episode_end")


@functools.cache  # once per process: RLlib validates a config more than once
def _warn_torch_compile_learner(what: str) -> None:
    """Why ``torch_compile_learner`` slows the device path down (RLlib 2.60, measured on a CPU:
    benchmarks/RESULTS.md, "One gradient step compiled")."""
    compiled = (
        "compiles RLlib's whole update (15 s at the first iteration on a 2-core CPU), whose iterations "
        "then ran no faster than uncompiled (42 against 40 ms for the main job)"
        if what == "complete_update"
        else f"with torch_compile_learner_what_to_compile={what!r} compiles nothing in RLlib 2.60 (its learner "
        "skips the modules of a MultiRLModule)"
    )
    logger.warning(
        "torch_compile_learner=True replaces this package's lean update with RLlib's update, and %s: the main "
        "job's iteration took 40 ms against the lean update's 28 ms. On a GPU the lean update's gradient step "
        "is captured as a CUDA graph instead (cuda_graphs=True); leave torch_compile_learner off.",
        compiled,
    )


class DeviceRolloutsConfig:
    """Mixin for an ``AlgorithmConfig`` whose env runners are ``DeviceEnvRunner``s.

    ``rollout_length × num_envs_per_env_runner`` env steps per sampler are collected per
    ``sample`` round, ``device_batch_size`` in all; the samplers are the env runners
    (``max(1, num_env_runners)``), or the learners when they are colocated with their envs.
    """

    def _init_device_rollouts(self) -> None:
        self.env_runner_cls = DeviceEnvRunner
        self.env_runner_device = "auto"
        self.eval_env_runner_device = None  # None: where the training env runners are
        self.learner_device = None  # None: RLlib's own choice from num_gpus_per_learner
        self.rollout_length = 32
        self.rollout_cuda_graph = True  # on a GPU, a rollout recorded once and replayed (rollout_graph.py)
        self.check_devices = False
        self.rescale_observations = False
        self.num_env_runners = 0  # one local runner on the default device
        self.num_envs_per_env_runner = 64
        self.learner_layout = "auto"
        self._default_train_batch_size = self.train_batch_size  # RLlib's old total batch, which no device algorithm reads

    def training(self, *, train_batch_size=NotProvided, **kwargs):
        """RLlib's ``training()``. A ``train_batch_size`` given is remembered whatever its value:
        no device algorithm reads it, and ``validate`` says so, RLlib's default (32) too, which an
        old DQN file often gives meaning its minibatch."""
        if train_batch_size is not NotProvided:
            self._train_batch_size_given = True
        return super().training(train_batch_size=train_batch_size, **kwargs)

    def device_rollouts(
        self,
        *,
        device=NotProvided,
        rollout_length=NotProvided,
        cuda_graph=NotProvided,
        check_devices=NotProvided,
        rescale_observations=NotProvided,
        layout=NotProvided,
    ):
        """Where env runners work (``"auto"``, ``"cpu"``, ``"cuda:N"``), steps per env per
        rollout, whether a runner on a GPU records its rollout as a CUDA graph and replays it
        (``cuda_graph``, default True: ``rollout_graph.py`` says where it applies), whether to
        check every env/module tensor's device (debugging), whether
        the module sees observations rescaled from their space's finite bounds to [-1, 1]
        (``RescaleObservations``: for envs whose observations differ in scale, as RLlib's
        ``normalize_actions`` does for actions), and, with remote learners, where the envs are
        (``layout``: ``"colocated"`` in the learners, ``"separate"`` in env runners, ``"auto"``:
        colocated unless there are remote env runners)."""
        return self._set_provided(
            env_runner_device=device,
            rollout_length=rollout_length,
            rollout_cuda_graph=cuda_graph,
            check_devices=check_devices,
            rescale_observations=rescale_observations,
            learner_layout=layout,
        )

    def devices(self, *, learner=NotProvided, env_runners=NotProvided, evaluation=NotProvided):
        """One device per role, as rlstructures does: e.g. the learner on ``"cuda:0"``, the
        training env runners on ``"cuda:1"``, the evaluation env runners on ``"cuda:2"``.

        Each is ``"auto"``, ``"cpu"`` or ``"cuda[:N]"``; on one GPU, or on the CPU, the roles
        share it. The learner's device applies to the local learner (``num_learners=0``); Ray
        assigns remote learners their GPUs (``num_gpus_per_learner``).
        """
        return self._set_provided(learner_device=learner, env_runner_device=env_runners, eval_env_runner_device=evaluation)

    def _set_provided(self, **settings):
        """Set the attributes whose value was given (RLlib's ``NotProvided`` convention)."""
        for name, value in settings.items():
            if value is not NotProvided:
                setattr(self, name, value)
        return self

    @property
    def colocated_learners(self) -> bool:
        """Whether the learners step the envs themselves (see ``LAYOUTS``)."""
        if self.num_learners < 1 or self.in_evaluation:
            return False
        if self.learner_layout == "auto":
            return self.num_env_runners == 0
        return self.learner_layout == "colocated"

    @property
    def num_samplers(self) -> int:
        """How many processes step envs for training: the learners when colocated, else the env runners."""
        return self.num_learners if self.colocated_learners else max(1, self.num_env_runners)

    @property
    def device_batch_size(self) -> int:
        """Env steps one sampling round collects: rollout_length × envs per sampler × samplers."""
        return self.rollout_length * self.num_envs_per_env_runner * self.num_samplers

    def _validate_device_rollouts(self) -> None:
        if isinstance(self.rollout_length, bool) or not isinstance(self.rollout_length, int) or self.rollout_length < 1:
            raise ValueError(f"rollout_length must be a positive integer, got {self.rollout_length!r}")
        if (
            isinstance(self.num_envs_per_env_runner, bool)
            or not isinstance(self.num_envs_per_env_runner, int)
            or self.num_envs_per_env_runner < 1
        ):
            raise ValueError(f"num_envs_per_env_runner must be a positive integer, got {self.num_envs_per_env_runner!r}")
        from rllib_gpuenv.core.devices import resolve_device

        for device in (self.env_runner_device, self.eval_env_runner_device):
            if device not in (None, "auto"):
                resolve_device(device)  # an unknown or absent device fails here, clearly
        if isinstance(self.env, str) and ":" in self.env:
            check_prefixed_id(self.env)  # "gymnax:CartPole-v1" is not gymnasium's CartPole-v1
        self._check_env_config_leaves_the_runner_its_settings()
        device_runners = isinstance(self.env_runner_cls, type) and issubclass(self.env_runner_cls, DeviceEnvRunner)
        self._check_what_the_device_path_runs(device_runners)
        if device_runners and self.merge_env_runner_states == "training_only":  # RLlib's default
            # After every iteration RLlib gathers the remote runners' connector states (a blocking
            # call to each, up to sync_filters_on_rollout_workers_timeout_s for one that hangs) to
            # merge them. A device env runner runs no connectors: nothing to merge. The env-step
            # count, which exploration schedules read, travels with the weights (in_process.py).
            self.merge_env_runner_states = False
        mode = getattr(self.gym_env_vectorize_mode, "value", self.gym_env_vectorize_mode)
        if device_runners and str(mode).lower() == "async":
            raise ValueError(
                "gym_env_vectorize_mode='async' asks for gymnasium's AsyncVectorEnv, but the device env runner steps its "
                "envs in its own process (this package's ids batched on its device, other ids through gymnasium's sync "
                f"vectorisation): leave it unset, or use {self._stock_algorithm} on its own env runners"
            )
        for flag in ("lean_update", "cuda_graphs"):  # the learners' update paths (rllib/lean_update.py)
            if not isinstance(getattr(self, flag, True), bool):
                raise ValueError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        if self.torch_compile_learner:
            what = getattr(self.torch_compile_learner_what_to_compile, "value", self.torch_compile_learner_what_to_compile)
            _warn_torch_compile_learner(str(what))
        if not isinstance(self.rollout_cuda_graph, bool):
            raise ValueError(f"device_rollouts(cuda_graph=...) must be true or false, got {self.rollout_cuda_graph!r}")
        if self.learner_layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {self.learner_layout!r}")
        if self.learner_layout == "colocated" and self.num_env_runners > 0:
            raise ValueError(
                f"layout='colocated' puts the envs in the learners, but num_env_runners={self.num_env_runners} asks for "
                "env runners too: set num_env_runners=0, or layout='separate' (or 'auto')"
            )
        self._place_learner()

    def _check_env_config_leaves_the_runner_its_settings(self) -> None:
        """The runner gives every env it makes its ``num_envs`` and ``device``: the same keys in
        ``env_config`` with other values would be dropped in silence. The rest, for an env of this
        package or yours, are its options and parameters: checked by name and value."""
        env_config = self.env_config or {}
        given = env_config.get("num_envs", self.num_envs_per_env_runner)
        if given != self.num_envs_per_env_runner:
            raise ValueError(
                f"env_config sets num_envs={given!r}, but each env runner makes num_envs_per_env_runner="
                f"{self.num_envs_per_env_runner} envs: set env_runners(num_envs_per_env_runner={given!r}) and drop "
                "num_envs from env_config"
            )
        from rllib_gpuenv.core.devices import resolve_device

        runners = self.env_runner_device or "auto"
        if "device" in env_config and resolve_device(str(env_config["device"])) != resolve_device(runners):
            raise ValueError(
                f"env_config sets device={env_config['device']!r}, but the env runners put their envs on their own "
                f"device ({runners}): set devices(env_runners={str(env_config['device'])!r}) "
                "and drop device from env_config"
            )
        from rllib_gpuenv.envs import env_definition
        from rllib_gpuenv.envs.vector_env import check_options

        definition = env_definition(self.env) if isinstance(self.env, str) else None
        if definition is not None:  # a misspelt parameter fails here, not in each env runner once Ray has started
            try:
                check_options(definition, {k: v for k, v in env_config.items() if k not in ("num_envs", "device")})
            except TypeError as err:
                raise ValueError(f"env_config: {err}") from None

    @property
    def _stock_algorithm(self) -> str:
        """The RLlib algorithm this one builds on, as errors suggest it (``"RLlib's PPO"``)."""
        return f"RLlib's {self.algo_class.__name__.removeprefix('Device')}"

    def _check_what_the_device_path_runs(self, device_runners: bool) -> None:
        """Refuse what the device path would otherwise drop in silence or crash on: RLlib's env
        runners for training (their episodes are no rollouts), RLlib's sampling settings (the
        rollout shape replaces them), connectors (none runs between the device env, the module
        and the learner), per-episode callbacks (no episode steps in Python) and recurrent modules
        (no state is carried between steps)."""
        stock = self._stock_algorithm
        if not device_runners and not self.in_evaluation:
            name = getattr(self.env_runner_cls, "__name__", repr(self.env_runner_cls))
            raise ValueError(
                f"{self.algo_class.__name__} trains on DeviceEnvRunner's rollouts, but env_runner_cls={name} returns "
                f"episodes: leave env_runner_cls unset (or give a subclass of DeviceEnvRunner), or use {stock} "
                "for RLlib's env runners"
            )
        if not device_runners:
            return  # evaluation on RLlib's runners: its connectors and modules are RLlib's business
        if not self.in_evaluation:  # evaluation plays whole episodes (RLlib sets its batch_mode so)
            self._check_sampling_settings(stock)
        connectors = {
            "env_runners(env_to_module_connector=...)": self._env_to_module_connector,
            "env_runners(module_to_env_connector=...)": self._module_to_env_connector,
            "training(learner_connector=...)": self._learner_connector,
        }
        for setting, value in connectors.items():
            if value is not None:
                raise ValueError(
                    f"{setting} is given, but the device path runs no connectors (observations go from the device env "
                    "to the module, and rollouts to the learner, as tensors): normalise or reshape observations in the "
                    "env (device_rollouts(rescale_observations=True) rescales bounded ones to [-1, 1]), or use "
                    f"{stock} on its own env runners"
                )
        episode_callbacks = self._episode_callbacks()
        if episode_callbacks:
            raise ValueError(
                f"{', '.join(episode_callbacks)}: per-episode callbacks, but the device env runner steps all its envs "
                "at once and makes no episode objects while it does: compute per-episode values in on_sample_end, "
                "which gets each Rollout ((T, N) tensors of rewards, terminateds, truncateds, ...), or use "
                f"{stock} on its own env runners"
            )
        if self.model_config.get("use_lstm"):
            raise ValueError(
                "model_config use_lstm=True asks for a recurrent module, but the device env runner carries no state "
                f"between steps: leave use_lstm off, or use {stock} on its own env runners"
            )

    def _check_sampling_settings(self, stock: str) -> None:
        """RLlib's sampling settings that the device runner's fixed-shape rollouts replace."""
        name = self.algo_class.__name__
        if self.is_multi_agent:
            raise ValueError(
                f"multi_agent(policies={sorted(self.policies)}) asks for several policies, but {name} trains one on a "
                "single-agent vector env: leave multi_agent() unset, or use RLlib's algorithms for multi-agent envs"
            )
        if self.batch_mode == "complete_episodes":
            raise ValueError(
                f"batch_mode='complete_episodes', but the device env runner's rollouts are rollout_length="
                f"{self.rollout_length} steps of every env, episodes going on across rollouts (a cut one bootstraps "
                f"from its value): leave batch_mode unset, or use {stock} on its own env runners"
            )
        fragment = self.rollout_fragment_length
        derived = getattr(self, "_derived_rollout_fragment_length", None)  # set by the replay algorithms' validate()
        if fragment not in ("auto", self.rollout_length, derived):
            raise ValueError(
                f"rollout_fragment_length={fragment!r}, but the device env runner's rollouts are rollout_length="
                f"{self.rollout_length} steps of each env: set device_rollouts(rollout_length={fragment!r}) instead, "
                "and leave rollout_fragment_length unset"
            )
        default = getattr(self, "_default_train_batch_size", None)
        if default is not None and (self.train_batch_size != default or getattr(self, "_train_batch_size_given", False)):
            derivation = (
                " (which it derives from rollout_length × num_envs_per_env_runner × runners / learners)"
                if hasattr(self, "_derived_train_batch_size")
                else ""
            )
            raise ValueError(
                f"train_batch_size={self.train_batch_size} is RLlib's old total batch, which {name} does not read: "
                f"its batch per learner is train_batch_size_per_learner{derivation}; leave train_batch_size unset"
            )

    def _episode_callbacks(self) -> list[str]:
        """The per-episode callbacks the config asks for: its classes' overrides and its functions."""
        from ray.rllib.callbacks.callbacks import RLlibCallback
        from ray.rllib.utils import force_list

        found = [f"callbacks({name}=...)" for name in EPISODE_CALLBACKS if getattr(self, f"callbacks_{name}", None)]
        for cls in force_list(self.callbacks_class):
            overridden = [
                n for n in EPISODE_CALLBACKS if getattr(cls, n, getattr(RLlibCallback, n)) is not getattr(RLlibCallback, n)
            ]
            found += [f"{getattr(cls, '__name__', cls)}.{name}" for name in overridden]
        return found

    def _place_learner(self) -> None:
        """Turn ``learner_device`` into RLlib's ``num_gpus_per_learner`` and ``local_gpu_idx``.

        It places the local learner (``num_learners=0``). Remote learners work on what Ray gives
        them (a GPU each with ``num_gpus_per_learner=1``, else the CPU): for them ``"auto"`` is
        that, ``"cpu"`` is accepted, and a GPU index is an error (Ray chooses which GPU)."""
        if self.learner_device is None:
            return
        from rllib_gpuenv.core.devices import parse_device, resolve_device

        if self.num_learners > 0:
            on_the_cpu = self.learner_device != "auto" and parse_device(self.learner_device).type == "cpu"
            if self.learner_device == "auto" or (on_the_cpu and not self.num_gpus_per_learner):
                return
            if on_the_cpu:
                raise ValueError(
                    f"devices(learner='cpu') but num_gpus_per_learner={self.num_gpus_per_learner}: "
                    "set num_gpus_per_learner=0 for learners on the CPU"
                )
            raise ValueError(
                f"devices(learner={self.learner_device!r}) with num_learners={self.num_learners}: Ray chooses each remote "
                "learner's GPU: leave devices(learner=...) unset and set num_gpus_per_learner=1"
            )
        device = resolve_device(self.learner_device)
        if device.type == "cuda":
            self.num_gpus_per_learner = self.num_gpus_per_learner or 1
            self.local_gpu_idx = device.index if device.index is not None else torch.cuda.current_device()
        else:
            self.num_gpus_per_learner = 0


def divisor_near(n: int, target: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: abs(d - target))
