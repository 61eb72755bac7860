"""``progress.csv`` for Tune runs and the main job: Tune's CSV logger callback, with a column for
every key a result brings.

Tune's ``CSVLoggerCallback`` fixes a trial's columns at its first result and drops keys that come
later: the evaluation's metrics (first reported at the first evaluation: the metric a shipped
file stops on), the learners' once learning starts (DQN's, SAC's). A trial resumed from a
checkpoint wrote its rows by its new first result's keys under the file's old header, so every
column past a new key (a timer RLlib reports after a restore) held its neighbour's values.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from ray.tune.logger import CSVLoggerCallback
from ray.tune.result import EXPR_PROGRESS_FILE
from ray.tune.utils import flatten_dict


class ProgressCSVCallback(CSVLoggerCallback):
    """Tune's CSV logger callback whose columns grow: a key first reported later adds its column
    (the earlier rows empty there), the file rewritten once with the wider header. A resumed
    trial's rows go under the file's own header, widened the same way."""

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self._trial_files:
            self._setup_trial(trial)
        flat = flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")
        writer = self._trial_csv[trial]
        if writer is None or not flat.keys() <= set(writer.fieldnames):
            writer = self._widen(trial, list(flat))
        writer.writerow(flat)
        self._trial_files[trial].flush()

    def _widen(self, trial, keys: list[str]) -> csv.DictWriter:
        """Rewrite the trial's file with its header and ``keys`` it lacks (its rows kept), and
        return a writer that appends rows of those columns."""
        path = Path(trial.local_path, EXPR_PROGRESS_FILE)
        self._trial_files[trial].close()
        fields, rows = [], []
        if path.exists() and path.stat().st_size > 0:
            with path.open() as f:
                reader = csv.DictReader(f)
                fields, rows = list(reader.fieldnames or []), list(reader)
        fields += [key for key in keys if key not in fields]
        scratch = path.with_name(f".{path.name}.widening")
        with scratch.open("w") as f:  # as Tune writes it ("\r\n" rows); in place at once, never half
            rewritten = csv.DictWriter(f, fields, extrasaction="ignore")  # a row longer than its header
            rewritten.writeheader()
            rewritten.writerows(rows)
        os.replace(scratch, path)
        self._trial_files[trial] = path.open("at")
        self._trial_csv[trial] = csv.DictWriter(self._trial_files[trial], fields)
        return self._trial_csv[trial]
