"""Evaluation beside training for as long as the training step takes, made to report when the
step is short.

With ``evaluation_parallel_to_training=True`` and ``evaluation_duration="auto"``, RLlib's
``_evaluate_with_auto_duration`` keeps asking the remote evaluation runners for samples while
the training step runs in a thread. It stops asking when the step is done, and drops any answer
that comes back after the iteration it was asked in. A device algorithm's training step can be
shorter than one such round trip: on a 2-core CPU the main job's step takes 0.1-0.3 s, and a
100-step evaluation sample in a runner that shares the cores took 0.07-0.2 s. Every answer then
came back an iteration late and was dropped, and no evaluation metric was ever reported. Here
RLlib's loop goes on after the training step until an answer asked for in this iteration has
come back, or until ``evaluation_sample_timeout_s`` has passed.
"""

from __future__ import annotations

import time

REQUEST_TAG = "_env_runner_remote"  # the tag of RLlib's evaluation requests in that loop


class _DoneOnceAnswered:
    """The training step's future as RLlib's loop polls it: done once the step is done and an
    evaluation answer of this iteration has come back (or the timeout has passed, or the step
    failed: its error is raised at once)."""

    def __init__(self, future, answered, timeout_s: float):
        self._future, self._answered = future, answered
        self._deadline = time.monotonic() + timeout_s

    def done(self) -> bool:
        if not self._future.done():
            return False
        return self._future.exception() is not None or self._answered() or time.monotonic() > self._deadline

    def __getattr__(self, name):
        return getattr(self._future, name)


class AnswersParallelEvaluation:
    """Mixin for an ``Algorithm``: RLlib's auto-duration parallel evaluation, waiting for one
    answer of the iteration (see the module doc)."""

    def _evaluate_with_auto_duration(self, parallel_train_future):
        group, iteration, answered = self.eval_env_runner_group, self.iteration, []
        fetch = group.foreach_env_runner_async_fetch_ready

        def fetch_and_count(*args, **kwargs):
            results = fetch(*args, **kwargs)
            if kwargs.get("tag") == REQUEST_TAG:  # (env steps, agent steps, metrics, iteration asked in)
                answered.extend(result for result in results if result[-1] == iteration)
            return results

        group.foreach_env_runner_async_fetch_ready = fetch_and_count
        try:
            future = _DoneOnceAnswered(parallel_train_future, lambda: bool(answered), self.config.evaluation_sample_timeout_s)
            return super()._evaluate_with_auto_duration(future)
        finally:
            del group.foreach_env_runner_async_fetch_ready  # the group's own method again
