"""Collect rollouts from an algorithm's env runners, surviving runners that hang or die.

RLlib's own algorithms sample through ``synchronous_parallel_sample``, which waits at most
``sample_timeout_s`` for remote runners and carries on with those that answered; the device
algorithms (``DevicePPO``, ``DeviceDQN``) do the same here: a runner that hangs (stopped, stuck
in a device call) costs one timeout per iteration instead of blocking ``train()`` forever, and
RLlib's fault tolerance restarts runners that die.
"""

from __future__ import annotations

import logging

from rllib_gpuenv.rllib.rollout import Rollout

logger = logging.getLogger(__name__)


def _sample_and_metrics(runner):
    return runner.sample(), runner.get_metrics()


def sample_rollouts(env_runner_group, timeout_s: float | None) -> tuple[list[Rollout], list[dict]]:
    """One rollout and the metrics of every runner that answers within ``timeout_s``."""
    if env_runner_group.num_remote_env_runners() == 0:
        runner = env_runner_group.local_env_runner
        return [runner.sample()], [runner.get_metrics()]
    results = env_runner_group.foreach_env_runner(_sample_and_metrics, local_env_runner=False, timeout_seconds=timeout_s)
    expected = env_runner_group.num_healthy_remote_workers()
    if len(results) < expected:
        logger.warning(
            "%d of %d env runners did not return a rollout within sample_timeout_s=%s s; training on the others",
            expected - len(results),
            expected,
            timeout_s,
        )
    return [r[0] for r in results], [r[1] for r in results]
