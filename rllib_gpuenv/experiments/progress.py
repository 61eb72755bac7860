"""Metric names and progress output: one place for both.

The metric paths every command reads (the return, env steps and episodes) are RLlib's
(``metric_names.py``). Two reporters print training progress, each named for what it prints:

* ``IterationLines``: the main job's one line per iteration (and a tqdm bar on a terminal);
* ``ResultRows``: ``rllib train``'s Tune reporter, one row per trial result. RLlib's example
  utilities give Tune a ``CLIReporter`` with metric columns (iteration, time, env steps,
  return); this keeps that pattern and prints one row per new result instead of re-printing a
  table, with the env-steps/s of that report; a trial's config (hundreds of lines) is printed
  only when asked (``rllib train -v``).
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED, NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.tune import ProgressReporter
from ray.tune.result import TIME_THIS_ITER_S, TIME_TOTAL_S, TRAINING_ITERATION
from ray.tune.utils import flatten_dict

from rllib_gpuenv.experiments.metric_names import (
    ENV_STEPS_METRIC,
    EPISODES_METRIC,
    EVALUATION_RETURN_METRIC,
    RETURN_METRIC,
    lookup,
)

_ENDED = ("TERMINATED", "ERROR")


class EvaluationTime:
    """The seconds ``algo.evaluate()`` takes from now on, summed (``seconds``): the training races
    take them off every contender's clock. RLlib's ``evaluation_iteration`` timer is a running
    mean, reported an iteration late; this wraps the method ``train()`` calls in the iterations
    that evaluate. ``total_seconds`` adds what a restored algorithm had spent before (the device
    algorithms' checkpoints keep it, ``rllib.checkpointing``): the main job's "of which
    evaluating", beside ``time_total_s``, which counts from the first run too."""

    def __init__(self, algo) -> None:
        self.seconds = 0.0
        self.earlier_seconds = getattr(algo, "evaluation_time_total_s", 0.0)
        evaluate = algo.evaluate

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return evaluate(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                algo.evaluation_time_total_s = self.total_seconds  # what its checkpoints keep

        algo.evaluate = timed

    @property
    def total_seconds(self) -> float:
        return self.earlier_seconds + self.seconds


class IterationLines:
    """The main job's progress: one line per iteration, and on a terminal a tqdm bar with an ETA
    toward the iteration limit.

    The env-steps/s of a line is that iteration's own (its env steps over its wall time), so
    start-up and compilation do not weigh on later lines. When no episode ended in an
    iteration, the line says so: the return shown is then the previous episodes' mean. The
    iterations that evaluate (``evaluation_interval``) add the evaluation's mean return.
    """

    def __init__(
        self,
        max_iterations: int,
        target: float,
        bar: bool | None = None,
        evaluation_interval: int = 0,
        evaluation_target: bool = False,
        steps: int = 0,
        episodes: int = 0,
    ):
        """``steps`` and ``episodes``: the counts a resumed run starts from (its checkpoint's), so
        that its first line shows that iteration's own env steps, episodes and env-steps/s."""
        from tqdm import tqdm

        self.target = target  # of the training window's return, or (evaluation_target) of the evaluation's
        self.evaluation_interval = evaluation_interval  # the iterations that evaluate: their lines add its return
        self.evaluation_target = evaluation_target
        self.last_evaluation = math.nan
        # bar=None: a bar only when stderr is a terminal (tqdm's own rule); lines always.
        self.bar = tqdm(
            total=max_iterations, unit="iter", dynamic_ncols=True, disable=None if bar is None else not bar, file=sys.stderr
        )
        self.steps = steps
        self.episodes = episodes

    def update(self, result: dict, iteration_s: float) -> None:
        ret = lookup(result, RETURN_METRIC, math.nan)
        steps = int(lookup(result, ENV_STEPS_METRIC, 0))
        episodes = int(lookup(result, EPISODES_METRIC, self.episodes))
        new_steps, new_episodes = steps - self.steps, episodes - self.episodes
        self.steps, self.episodes = steps, episodes
        rate = new_steps / iteration_s if iteration_s > 0 else math.nan
        if new_episodes:
            ended = f"{new_episodes:4d} episode" + ("s" if new_episodes != 1 else " ")  # the columns stay in line
        else:  # the return shown is the last one measured, if any was
            ended = "no episode ended (return as before)" if ret == ret else "no episode ended yet"
        iteration = result[TRAINING_ITERATION]
        evaluation = ""
        if self.evaluation_interval and iteration % self.evaluation_interval == 0:
            self.last_evaluation = float(lookup(result, EVALUATION_RETURN_METRIC, math.nan))
            evaluation = f"  evaluation {self.last_evaluation:7.1f}"
        self.bar.write(
            f"iter {iteration:4d}  return {ret:7.1f}  {ended}  env steps {steps:>10,}  "
            f"{rate:>10,.0f} env-steps/s  {result.get(TIME_TOTAL_S, math.nan):7.1f} s{evaluation}",
            file=sys.stdout,
        )
        shown = f"evaluation {self.last_evaluation:.1f}" if self.evaluation_target else f"return {ret:.1f}"
        self.bar.set_postfix_str(f"{shown}/{self.target:g}, {rate:,.0f} env-steps/s", refresh=False)
        self.bar.update(1)
        sys.stdout.flush()

    def close(self) -> None:
        self.bar.close()


class ResultRows(ProgressReporter):
    """One row per training result: trial, iteration, return, env steps, env-steps/s, time.

    Env-steps/s is over the span since the trial's previous row (env steps and training time
    both grow by what that span added), so it follows the run rather than averaging from the
    start; a trial's first row has its own iteration's (a trial restored from a checkpoint
    starts with the checkpoint's env steps, not with 0), as has a row after a trial went back to
    an earlier checkpoint (``--resume``). A return of ``-`` means no episode has
    ended yet. Where a trial evaluates, an ``eval`` column gives the evaluation's mean return in
    the iterations that evaluate (``evaluation_interval``), the metric files such as
    ``gpu_acrobot_ppo.yaml`` stop on; RLlib's results carry its keys in between (as NaN, or the
    last evaluation's again), which are not shown.
    """

    def __init__(self, show_config: bool = False, stream: TextIO | None = None):
        self.show_config = show_config
        self.stream = stream
        self._last: dict[str, tuple[int, float, float]] = {}  # trial id -> (iteration, env steps, time)
        self._configs_shown: set[str] = set()
        self._ended: set[str] = set()
        self._width = 0  # of the trial column: the longest trial name seen when the header was printed
        self._evaluates = False  # whether the header has an eval column

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
            self._evaluates = any(_evaluation_interval(t) for t in trials)
            self._print(
                f"{'trial':<{self._width}} {'iter':>5} {'return':>8} {'env steps':>11} {'env-steps/s':>11} {'time (s)':>9}"
                + (f" {'eval':>8}" if self._evaluates else "")
            )
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
        steps = float(lookup(result, ENV_STEPS_METRIC, lookup(result, NUM_ENV_STEPS_SAMPLED_LIFETIME, math.nan)))
        seconds = float(result.get(TIME_TOTAL_S, math.nan))
        if last is None or iteration < last[0]:  # the trial's first row, or it went back to a checkpoint: its own
            previous_steps = steps - float(lookup(result, f"{ENV_RUNNER_RESULTS}/{NUM_ENV_STEPS_SAMPLED}", steps))
            previous_seconds = seconds - float(result.get(TIME_THIS_ITER_S, seconds))
        else:
            previous_steps, previous_seconds = last[1], last[2]
        span = seconds - previous_seconds
        rate = (steps - previous_steps) / span if span > 0 else math.nan
        self._last[trial.trial_id] = (iteration, steps, seconds)
        row = (
            f"{str(trial):<{self._width}} {iteration:>5} {_return(lookup(result, RETURN_METRIC)):>8} "
            f"{_count(steps):>11} {_count(rate):>11} {seconds:>9.1f}"
        )
        if self._evaluates:
            interval = _evaluation_interval(trial)
            evaluated = interval and iteration % interval == 0
            row += f" {_return(lookup(result, EVALUATION_RETURN_METRIC) if evaluated else None):>8}"
        self._print(row)

    def _print_config(self, trial) -> None:
        self._print(f"{trial} config:")
        for key, value in sorted(flatten_dict(trial.config or {}).items()):
            self._print(f"  {key}: {value!r}")

    def _print(self, line: str) -> None:
        print(line, file=self.stream or sys.stdout, flush=True)


def _evaluation_interval(trial) -> int:
    return int((trial.config or {}).get("evaluation_interval") or 0)


def _return(value) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.1f}"


def _count(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"
