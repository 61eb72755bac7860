"""Colocated learners: each learner actor steps its own envs on its own device (DD-PPO's layout).

With ``num_learners=N`` and no env runners, RLlib's ``LearnerGroup`` starts N learner actors,
each on the GPU Ray gives it (or a CPU share), their modules wrapped in DDP so that every
gradient is all-reduced (NCCL on GPUs, gloo on CPUs). Here each of them also holds a device env
runner's worth of envs (``num_envs_per_env_runner``) on its own device and samples them with its
own module: rollouts, advantages and replay transitions never leave the learner's device; only
gradients (all-reduce) and metrics (to the driver) cross processes. That is how GPU-env training
scales past one device elsewhere (Isaac Lab with rl_games or rsl_rl: one process per GPU; RLlib's
old DD-PPO); RLlib's new API stack has no such layout of its own.

* ``LearnerEnvRunner``: the device env runner inside a learner, sampling with the learner's
  module (no copy of the weights, no weight sync) on the learner's device.
* ``ColocatedEnvs``: what a learner adds to own its envs (built on first use, seeded per learner,
  their state in checkpoints together with the learner process's random generators).
* ``LearnerCalls``: what an algorithm adds to call its learners, each with its own arguments,
  to fail naming the learner that died rather than wait on the others (they would block in
  their next all-reduce), and to keep every learner's envs in its checkpoints.
"""

from __future__ import annotations

import functools
import logging
import time

import ray
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_gpuenv.rllib.checkpointing import random_generator_states, set_random_generator_states
from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner, envs_start_anew

logger = logging.getLogger(__name__)

COLOCATED_STATE = "colocated_learners"
POLL_S = 2.0  # how often the driver looks for a dead learner while the others work
DEATH_REPORT_S = 10.0  # after a learner failed, how long the driver waits for Ray to report a dead peer


class LearnerDiedError(RuntimeError):
    """A learner actor died during a training step: the run cannot go on without its envs and gradients."""


class LearnerEnvRunner(DeviceEnvRunner):
    """A ``DeviceEnvRunner`` inside a learner: the learner's module and device, its CPU share."""

    def __init__(self, *, module, device: torch.device, num_threads: int | None, **kwargs):
        self._given_module, self._given_device, self._given_threads = module, device, num_threads
        super().__init__(**kwargs)

    def _choose_device(self) -> torch.device:
        return self._given_device

    def _num_threads(self) -> int | None:
        return self._given_threads

    def _samplers(self) -> int:
        return max(1, self.config.num_learners)

    def _rollout_travels(self) -> bool:
        return False  # the learner trains on it where it is (its worker index only seeds it)

    def make_module(self) -> None:
        self.module = self._given_module  # the learner's own (DDP's inner module): sampled with as it trains


def cpu_share(config) -> int:
    """The threads a remote learner works with: its ``num_cpus_per_learner``, at least one (RLlib's
    "auto" reserves one CPU without a GPU and none beside one: one thread either way)."""
    cpus = config.num_cpus_per_learner
    return max(1, int(cpus)) if cpus != "auto" else 1


class ColocatedEnvs:
    """Mixin for a torch ``Learner`` of the device algorithms: its own envs, for the colocated layout.

    The envs are built with the learner, as an env runner builds its own (a JAX env compiles
    then, not in the first iteration: 22 s of a walkthrough's Brax run), on the learner's
    device, seeded as env runner ``learner index + 1`` (so that no two learners, nor the
    driver's runner, play the same episodes).

    A remote learner works with as many threads as Ray gave it CPUs (``use_cpu_share``): torch
    would start one per core in every learner, and learners sharing cores then fight over them
    (benchmarks/RESULTS.md, "Several learners", has what that cost).
    """

    _envs: LearnerEnvRunner | None = None

    def build(self) -> None:
        super().build()
        if self.config.colocated_learners:
            self.colocated_envs()

    def use_cpu_share(self) -> None:
        """torch's threads for this call (its setting is per calling thread) to the learner's CPU share."""
        if self.config.num_learners > 0:
            torch.set_num_threads(cpu_share(self.config))

    def colocated_envs(self) -> LearnerEnvRunner:
        if self._envs is None:
            threads = cpu_share(self.config)
            self._envs = LearnerEnvRunner(
                config=self.config,
                worker_index=self._learner_index + 1,
                num_workers=max(1, self.config.num_learners),
                module=self.module[DEFAULT_MODULE_ID].unwrapped(),
                device=torch.device(self._device),
                num_threads=threads,
            )
        return self._envs

    def get_colocated_state(self) -> dict:
        """This learner's part of a checkpoint: its envs' state and its process's random generators."""
        return {"envs": self.colocated_envs().rollout_state(), "random_generators": random_generator_states()}

    def set_colocated_state(self, state: dict) -> None:
        if state.get("envs") is not None:
            self.colocated_envs().set_rollout_state(state["envs"])
        set_random_generator_states(state["random_generators"])


def _learner_died(index: int, count: int, err: Exception) -> LearnerDiedError:
    return LearnerDiedError(
        f"learner {index} of {count} died during the training step ({type(err).__name__}: "
        f"{' '.join(str(err).split())[:300]}); the others cannot go on without its envs and gradients: "
        "restore the run from its last checkpoint"
    )


def _dead_learner(pending: dict, count: int) -> LearnerDiedError | None:
    """The error naming a learner among ``pending`` (call ref -> learner index) that died, once
    Ray has reported the calls (up to ``DEATH_REPORT_S``); None where none did."""
    remaining, deadline = dict(pending), time.monotonic() + DEATH_REPORT_S
    while remaining and (left := deadline - time.monotonic()) > 0:
        ready, _ = ray.wait(list(remaining), num_returns=1, timeout=left)
        for ref in ready:
            index = remaining.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as err:
                return _learner_died(index, count, err)
            except ray.exceptions.RayTaskError:
                pass
    return None


class LearnerCalls:
    """Mixin for an ``Algorithm``: call every learner (local or remote) with arguments of its own,
    and, with colocated learners, keep each learner's envs and random generators in checkpoints
    (they resume exactly, as ``ResumesExactly`` does for one process)."""

    def call_learners(self, func, per_learner: list[dict] | None = None, **kwargs) -> list:
        """``func(learner, **kwargs, **per_learner[i])`` on every learner; their results in order.

        A remote learner that dies is a ``LearnerDiedError`` naming it, raised as soon as it is
        seen: the others would wait for it in their next all-reduce.
        """
        group = self.learner_group
        if group.is_local:
            return [func(group._learner, **kwargs, **(per_learner or [{}])[0])]
        # RLlib's LearnerGroup calls every learner with the same arguments; its actors take any callable.
        workers = group._workers
        pending = {
            worker.apply.remote(functools.partial(func, **kwargs, **(per_learner[i] if per_learner else {}))): i
            for i, worker in enumerate(workers)
        }
        results: dict[int, object] = {}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    results[index] = ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    raise _learner_died(index, len(workers), err) from None
                except ray.exceptions.RayTaskError:
                    # A learner whose peer died fails in its all-reduce (gloo: "Connection reset by
                    # peer"), often before Ray reports the death: name the dead one where there is one.
                    died = _dead_learner(pending, len(workers))
                    if died is not None:
                        raise died from None
                    raise
        return [results[i] for i in range(len(workers))]

    def get_state(self, *args, **kwargs) -> dict:
        state = super().get_state(*args, **kwargs)
        if self.config.colocated_learners:
            state[COLOCATED_STATE] = self.call_learners(_get_colocated_state)
        return state

    def set_state(self, state: dict) -> None:
        saved = state.get(COLOCATED_STATE)
        super().set_state({k: v for k, v in state.items() if k != COLOCATED_STATE})
        if saved is None:
            return
        if not self.config.colocated_learners:  # going on with the envs on env runners (num_learners 0 or 1, separate)
            envs_start_anew(
                "The checkpoint holds the envs of %d colocated learner(s), this run steps its envs on its env runners: they",
                len(saved),
            )
            return
        if len(saved) != self.config.num_learners:  # going on with more or fewer learners (rllib train --restore)
            envs_start_anew(
                "The checkpoint holds the envs of %d colocated learner(s), this run has %d: their envs",
                len(saved),
                self.config.num_learners,
            )
            return
        if getattr(self, "_restoring", False):
            self._restored_learner_states = saved  # applied last, as the random generators of this process
        else:
            self.call_learners(_set_colocated_state, [{"state": s} for s in saved])

    def restore_from_path(self, path, *args, **kwargs):
        self._restoring, self._restored_learner_states = True, None
        try:
            result = super().restore_from_path(path, *args, **kwargs)
        finally:
            self._restoring = False
        if self._restored_learner_states is not None:
            self.call_learners(_set_colocated_state, [{"state": s} for s in self._restored_learner_states])
        return result


def _get_colocated_state(learner) -> dict:
    return learner.get_colocated_state()


def _set_colocated_state(learner, state: dict) -> None:
    learner.set_colocated_state(state)
