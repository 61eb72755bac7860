"""What every device algorithm's config adds to RLlib's: the device env runner, a device per
role, the rollout length, and the training batch that follows from the rollout shape."""

from __future__ import annotations

import torch
from ray.rllib.algorithms.algorithm_config import NotProvided

from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner


class DeviceRolloutsConfig:
    """Mixin for an ``AlgorithmConfig`` whose env runners are ``DeviceEnvRunner``s.

    ``rollout_length × num_envs_per_env_runner × max(1, num_env_runners)`` env steps are
    collected per ``sample`` round (``device_batch_size``).
    """

    def _init_device_rollouts(self) -> None:
        self.env_runner_cls = DeviceEnvRunner
        self.env_runner_device = "auto"
        self.eval_env_runner_device = None  # None: where the training env runners are
        self.learner_device = None  # None: RLlib's own choice from num_gpus_per_learner
        self.rollout_length = 32
        self.check_devices = False
        self.rescale_observations = False
        self.num_env_runners = 0  # one local runner on the default device
        self.num_envs_per_env_runner = 64

    def device_rollouts(
        self, *, device=NotProvided, rollout_length=NotProvided, check_devices=NotProvided, rescale_observations=NotProvided
    ):
        """Where env runners work (``"auto"``, ``"cpu"``, ``"cuda:N"``), steps per env per
        rollout, whether to check every env/module tensor's device (debugging), and whether
        the module sees observations rescaled from their space's finite bounds to [-1, 1]
        (``RescaleObservations``: for envs whose observations differ in scale, as RLlib's
        ``normalize_actions`` does for actions)."""
        return self._set_provided(
            env_runner_device=device,
            rollout_length=rollout_length,
            check_devices=check_devices,
            rescale_observations=rescale_observations,
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
    def device_batch_size(self) -> int:
        """Env steps one sampling round collects: rollout_length × envs per runner × runners."""
        return self.rollout_length * self.num_envs_per_env_runner * max(1, self.num_env_runners)

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
        self._place_learner()

    def _place_learner(self) -> None:
        """Turn ``learner_device`` into RLlib's ``num_gpus_per_learner`` and ``local_gpu_idx``."""
        if self.learner_device is None:
            return
        from rllib_gpuenv.core.devices import resolve_device

        device = resolve_device(self.learner_device)
        if self.num_learners > 0:
            raise ValueError(
                f"learner_device={self.learner_device!r} places the local learner, but num_learners={self.num_learners} "
                "asks for remote learners, whose GPUs Ray assigns: set num_gpus_per_learner instead, or num_learners=0"
            )
        if device.type == "cuda":
            self.num_gpus_per_learner = self.num_gpus_per_learner or 1
            self.local_gpu_idx = device.index if device.index is not None else torch.cuda.current_device()
        else:
            self.num_gpus_per_learner = 0


def divisor_near(n: int, target: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: abs(d - target))
