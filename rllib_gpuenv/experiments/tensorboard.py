"""TensorBoard events for Tune runs and the main job: Tune's logger callback, with a result's
scalars written as one event.

Tune's ``TBXLoggerCallback`` writes an event per scalar, and tensorboardX hands each event to its
writer thread through a ``multiprocessing.Queue`` (pickled, down a pipe, read back in the same
process): 9–15 ms of CPU for an RLlib result's ~67 scalars on a 2-core CPU, a sixth of a
CartPole PPO iteration there, and taken from the trials' CPU in a Tune run's driver. One event
holding them all took ~2 ms (benchmarks/RESULTS.md, "The main job's result files").
"""

from __future__ import annotations

from ray.tune.logger import TBXLoggerCallback
from ray.tune.logger.tensorboardx import VALID_SUMMARY_TYPES
from ray.tune.result import TIME_TOTAL_S, TIMESTEPS_TOTAL, TRAINING_ITERATION
from ray.tune.utils import flatten_dict

NOT_LOGGED = ("config", "pid", "timestamp", TIME_TOTAL_S, TRAINING_ITERATION)  # as Tune's callback has it
SCALARS = tuple(VALID_SUMMARY_TYPES)  # the values Tune's callback writes as scalars (bool among them, an int)


class TensorBoardCallback(TBXLoggerCallback):
    """Tune's TensorBoard logger callback, writing a result's scalars as one event: the same tags
    (``ray/tune/<key>``), steps and values, which TensorBoard reads as it reads one event per scalar.
    Whatever else a result holds (lists, arrays: histograms, images) Tune's callback writes."""

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        from tensorboardX.summary import Summary, scalar

        if trial not in self._trial_writer:
            self.log_trial_start(trial)
        step = result.get(TIMESTEPS_TOTAL) or result[TRAINING_ITERATION]
        flat = flatten_dict({k: v for k, v in result.items() if k not in NOT_LOGGED}, delimiter="/")
        scalars = {f"ray/tune/{key}": value for key, value in flat.items() if isinstance(value, SCALARS) and value == value}
        others = {key: value for key, value in flat.items() if not isinstance(value, SCALARS)}
        summary = Summary(value=[v for tag, value in scalars.items() for v in scalar(tag, value).value])
        self._trial_writer[trial].file_writer.add_summary(summary, global_step=step)
        super().log_trial_result(iteration, trial, {**others, TRAINING_ITERATION: step})  # and flushes
        self._trial_result[trial].update(scalars)  # the hparams Tune's callback writes at the end
