"""Tune's ``reuse_actors``: a trial's actor takes a new config without a new process.

Population-based training replaces a trial's config (and its weights, from a better trial's
checkpoint) every few iterations; with ``TuneConfig(reuse_actors=True)`` any scheduler hands a
finished trial's actor to the next trial. Tune asks the trainable to ``reset_config`` in place,
and an RLlib ``Algorithm`` cannot: Tune then ends the actor and starts another, whose process
imports torch, Ray and RLlib again (6-10 CPU-s) and, on a GPU, makes a new CUDA context, before
it builds the algorithm. With ``reuse_actors=True`` and no ``reset_config``, Tune fails the trial.

``ResetsInPlace`` builds the algorithm again in the same process from the new config (its env
runners, learners, envs and replay buffers anew, as a new actor would have them); Tune then
restores the checkpoint it chose, if any. ``rllib train`` turns ``reuse_actors`` on for the
algorithms that have it.
"""

from __future__ import annotations

# What Tune's ``Trainable.reset`` has already set for the trial (its log folder, its stdout and
# stderr files): building the algorithm again would set them afresh, as for a trial without files.
_TRIAL_STATE = (
    "_logdir",
    "_trial_info",
    "_stdout_file",
    "_stderr_file",
    "_stdout_context",
    "_stdout_fp",
    "_stdout_stream",
    "_stderr_context",
    "_stderr_fp",
    "_stderr_stream",
    "_stderr_logging_handler",
)


class ResetsInPlace:
    """Mixin for an ``Algorithm``: ``reset_config`` stops what the algorithm runs and builds it
    again from ``new_config`` in this process."""

    def reset_config(self, new_config) -> bool:
        trial = {name: getattr(self, name) for name in _TRIAL_STATE}
        if self._monitor.is_alive():
            self._monitor.stop()
            self._monitor.join()
        self.cleanup()
        type(self).__init__(self, config=new_config, storage=self._storage)
        self.__dict__.update(trial)
        return True


def resets_in_place(algo_class) -> bool:
    """Whether Tune may hand ``algo_class``'s actors new configs (``TuneConfig(reuse_actors=...)``)."""
    return isinstance(algo_class, type) and issubclass(algo_class, ResetsInPlace)
