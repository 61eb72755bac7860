"""An algorithm whose env runner and learner both live in this process needs no Ray cluster.

RLlib's ``EnvRunnerGroup`` puts its config into Ray's object store as it is created, for the
remote env runners it may start, even when there are none (``num_env_runners=0``). That one
``ray.put`` makes Ray start a local cluster (~3 s on a 2-core CPU, ~1.5 s more to shut it down)
for a main job that never schedules a Ray task. ``InProcess`` builds such an algorithm with the
config itself standing in for that object reference, which is all a remote runner created later
would need (Ray passes a value to an actor's constructor as well as a reference to it), and
does the same for the weights each evaluation sends its (local) evaluation runner. Anything
else that does call Ray (remote learners, an offline dataset, a later ``add_workers``) still
starts Ray the usual way, by Ray's auto-init.
"""

from __future__ import annotations

import contextlib

from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME, WEIGHTS_SEQ_NO


def builds_without_ray(config) -> bool:
    """True when building ``config``'s algorithm here schedules nothing on Ray: no remote env
    runners or learners, no remote evaluation runners, and no Ray already running (then it is used)."""
    import ray

    remote_evaluation = bool(config.evaluation_interval) and (config.evaluation_num_env_runners or 0) > 0
    return not (ray.is_initialized() or config.num_env_runners or config.num_learners or remote_evaluation)


@contextlib.contextmanager
def config_in_place_of_object_store():
    """While active, RLlib's env-runner groups keep their config as a value, not in Ray's object store."""
    import ray
    from ray.rllib.env import env_runner_group

    env_runner_group.ray = _RayKeepingValues()
    try:
        yield
    finally:
        env_runner_group.ray = ray


class _RayKeepingValues:
    """Ray, except that ``put`` hands back the value it is given."""

    @staticmethod
    def put(value, **_):
        return value

    def __getattr__(self, name: str):
        import ray

        return getattr(ray, name)


class InProcess:
    """Mixin for an ``Algorithm``: set up and restore without starting Ray when
    ``builds_without_ray``, and hand the learner's weights to a runner in this process without
    Ray's object store (to remote runners, through it, with the env-step count)."""

    def setup(self, config) -> None:
        with config_in_place_of_object_store() if builds_without_ray(config) else contextlib.nullcontext():
            super().setup(config)

    def evaluate(self, *args, **kwargs):
        """RLlib's evaluation, whose weight sync to the evaluation runners goes through Ray's
        object store: here as a value when ``builds_without_ray`` (its evaluation runner is local),
        so that the first evaluation does not start Ray (~3 s, and ~1.5 s more at the end)."""
        with config_in_place_of_object_store() if builds_without_ray(self.config) else contextlib.nullcontext():
            return super().evaluate(*args, **kwargs)

    def restore_from_path(self, path, *args, **kwargs):
        """RLlib's restore, whose closing weight sync goes through Ray's object store: here as a
        value when ``builds_without_ray``, so that a resumed main job starts no Ray either."""
        local = builds_without_ray(self.config)
        with config_in_place_of_object_store() if local else contextlib.nullcontext():
            return super().restore_from_path(path, *args, **kwargs)

    def sync_runner_weights(self) -> None:
        """The learner's inference weights to the env runners. RLlib's ``sync_weights`` puts them
        into Ray's object store on every call, for remote runners, even when the only runner is the
        local one. Here a runner that can (``DeviceEnvRunner.set_module_weights``) copies the
        learner's tensors in place, on a GPU device to device; RLlib's state would go through
        numpy, to the host and back. Remote runners get them as RLlib sends them, with the
        env-step count (``_send_weights_and_step_count``)."""
        group = self.env_runner_group
        runner = group.local_env_runner
        if group.num_remote_workers():
            self._send_weights_and_step_count()
            return
        if runner is None or not self.learner_group.is_local:
            group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)
            return
        learner = self.learner_group._learner
        if hasattr(runner, "set_module_weights") and list(learner.module.keys()) == [DEFAULT_MODULE_ID]:
            runner.set_module_weights(learner.module[DEFAULT_MODULE_ID].state_dict(), learner._weights_seq_no)
            return
        runner.set_state(self._learner_weights())

    def _learner_weights(self) -> dict:
        """The learner group's inference weights and their sequence number, as RLlib's runners take them."""
        state = self.learner_group.get_state(components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True)
        return {key: state[COMPONENT_LEARNER][key] for key in (COMPONENT_RL_MODULE, WEIGHTS_SEQ_NO)}

    def _send_weights_and_step_count(self) -> None:
        """The weights to the env runners as RLlib's ``sync_weights`` sends them, with RLlib's
        env-step count in the same message (exploration schedules read it). RLlib broadcasts the
        count after each iteration, behind a gather of every remote runner's connector states: a
        blocking call to each, which device runners skip (they run no connectors:
        ``merge_env_runner_states`` is off, ``device_config.py``). Without that gather the
        broadcast is dropped while these weights are still on their way to a runner (one request
        in flight per runner), so the count travels with them."""
        import ray

        group = self.env_runner_group
        weights = self._learner_weights()
        steps = int(self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0))
        state = ray.put({**weights, NUM_ENV_STEPS_SAMPLED_LIFETIME: steps})
        group.foreach_env_runner_async_fetch_ready(func="set_state", tag="set_state", kwargs={"state": state})
        if group.local_env_runner is not None:
            group.local_env_runner.set_state(weights)
