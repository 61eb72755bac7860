"""Training progress for ``rllib train``: one readable row per result, as RLlib's examples show it.

RLlib's example utilities give Tune a ``CLIReporter`` with metric columns (iteration, time, env
steps, return). This reporter keeps that pattern and prints one row per new result instead of
re-printing a table, with the env-steps/s of that report; a trial's config (hundreds of lines)
is printed only when asked (``rllib train -v``).
"""

from __future__ import annotations

import math
import sys
from typing import Any, TextIO

from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)
from ray.tune import ProgressReporter
from ray.tune.result import TIME_TOTAL_S, TRAINING_ITERATION
from ray.tune.utils import flatten_dict

RETURN = f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"
ENV_STEPS = f"{ENV_RUNNER_RESULTS}/{NUM_ENV_STEPS_SAMPLED_LIFETIME}"
_ENDED = ("TERMINATED", "ERROR")


def lookup(result: dict, path: str, default: Any = None) -> Any:
    """``result["a"]["b"]`` for ``"a/b"``; ``default`` when any part is missing."""
    for key in path.split("/"):
        if not isinstance(result, dict) or key not in result:
            return default
        result = result[key]
    return result


class ResultRows(ProgressReporter):
    """One row per training result: trial, iteration, return, env steps, env-steps/s, time.

    Env-steps/s is over the span since the trial's previous row (env steps and training time
    both grow by what that span added), so it follows the run rather than averaging from the
    start. A return of ``-`` means no episode has ended yet.
    """

    def __init__(self, show_config: bool = False, stream: TextIO | None = None):
        self.show_config = show_config
        self.stream = stream
        self._last: dict[str, tuple[int, float, float]] = {}  # trial id -> (iteration, env steps, time)
        self._configs_shown: set[str] = set()
        self._ended: set[str] = set()
        self._width = 0  # of the trial column: the longest trial name seen when the header was printed

    def should_report(self, trials, done: bool = False) -> bool:
        return any(self._has_news(t) for t in trials)

    def _has_news(self, trial) -> bool:
        iteration = (trial.last_result or {}).get(TRAINING_ITERATION)
        last = self._last.get(trial.trial_id)
        return (
            (iteration is not None and (last is None or last[0] != iteration))
            or (trial.status in _ENDED and trial.trial_id not in self._ended)
            or (self.show_config and trial.trial_id not in self._configs_shown and trial.status != "PENDING")
        )

    def report(self, trials, done: bool, *sys_info: str) -> None:
        if not self._width and any((t.last_result or {}).get(TRAINING_ITERATION) for t in trials):
            self._width = max(len(str(t)) for t in trials)
            self._print(f"{'trial':<{self._width}} {'iter':>5} {'return':>8} {'env steps':>11} {'env-steps/s':>11} {'time (s)':>9}")
        for trial in trials:
            if self.show_config and trial.trial_id not in self._configs_shown and trial.status != "PENDING":
                self._configs_shown.add(trial.trial_id)
                self._print_config(trial)
            self._print_row(trial)
            if trial.status in _ENDED and trial.trial_id not in self._ended:
                self._ended.add(trial.trial_id)
                iterations = (trial.last_result or {}).get(TRAINING_ITERATION, 0)
                error = f": {trial.error_file}" if trial.status == "ERROR" and getattr(trial, "error_file", None) else ""
                self._print(f"{trial}: {trial.status} after {iterations} iteration(s){error}")

    def _print_row(self, trial) -> None:
        result = trial.last_result or {}
        iteration = result.get(TRAINING_ITERATION)
        last = self._last.get(trial.trial_id)
        if iteration is None or (last is not None and last[0] == iteration):
            return
        steps = float(lookup(result, ENV_STEPS, lookup(result, NUM_ENV_STEPS_SAMPLED_LIFETIME, math.nan)))
        seconds = float(result.get(TIME_TOTAL_S, math.nan))
        previous_steps, previous_seconds = (last[1], last[2]) if last else (0.0, 0.0)
        span = seconds - previous_seconds
        rate = (steps - previous_steps) / span if span > 0 else math.nan
        self._last[trial.trial_id] = (iteration, steps, seconds)
        value = lookup(result, RETURN)
        ret = "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.1f}"
        self._print(f"{str(trial):<{self._width}} {iteration:>5} {ret:>8} {_count(steps):>11} {_count(rate):>11} {seconds:>9.1f}")

    def _print_config(self, trial) -> None:
        self._print(f"{trial} config:")
        for key, value in sorted(flatten_dict(trial.config or {}).items()):
            self._print(f"  {key}: {value!r}")

    def _print(self, line: str) -> None:
        print(line, file=self.stream or sys.stdout, flush=True)


def _count(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"
