"""The main job's result files: what every Tune run writes (``progress.csv``, ``result.json``,
``params.json``, ``params.pkl``, TensorBoard events), by Tune's logger callbacks, one result per
iteration, written between the iterations.

Between, not in a thread beside them: a thread of Python work costs the training loop more than
its own CPU time, since it may keep the GIL for up to 5 ms (the interpreter's switch interval)
each time the loop gives it up, in every torch op. With Tune's TensorBoard callback (9–15 ms of
CPU a result) in such a thread, the main job's 49 iterations to 475 took ~0.9 s longer on a 2-core
CPU than with no files (4.9 s against 4.0 s); with ours (``TensorBoardCallback``, ~2 ms) the three
callbacks take ~3 ms between two iterations (benchmarks/RESULTS.md, "The main job's result files").
"""

from __future__ import annotations

import os


class _RunDirectory:
    """The run as Tune's logger callbacks see a trial: a folder, a config, no checkpoint to resume."""

    def __init__(self, path: str, config: dict):
        self.local_path = path
        self.config = config
        self.evaluated_params: dict = {}
        self.checkpoint = None

    def init_local_path(self) -> None:
        os.makedirs(self.local_path, exist_ok=True)


class ResultLoggers:
    """Tune's CSV (``ProgressCSVCallback``: its columns grow with the keys), JSON and TensorBoard
    (``TensorBoardCallback``) logger callbacks, fed one result per iteration. The episode metrics,
    missing from an iteration in which no episode ended, are logged as NaN there (``episode_keys``;
    TensorBoard skips NaN). A callback that fails writes nothing more, and
    ``close`` raises what it raised: the run goes on to its checkpoint."""

    def __init__(self, directory: str, config: dict, episode_keys: tuple[str, ...] = ()):
        from ray.tune.logger import JsonLoggerCallback

        from rllib_gpuenv.experiments.progress_csv import ProgressCSVCallback
        from rllib_gpuenv.experiments.tensorboard import TensorBoardCallback

        self.run = _RunDirectory(directory, config)
        self.run.init_local_path()  # as Tune does before the callbacks see a trial
        self.callbacks = [ProgressCSVCallback(), JsonLoggerCallback(), TensorBoardCallback()]
        for callback in self.callbacks:
            callback.log_trial_start(self.run)
        self._episode_keys = episode_keys
        self._error: BaseException | None = None

    def log(self, iteration: int, result: dict) -> None:
        if self._error is not None:
            return
        runners = {**{key: float("nan") for key in self._episode_keys}, **result.get("env_runners", {})}
        try:
            for callback in self.callbacks:
                callback.log_trial_result(iteration, self.run, {**result, "env_runners": runners})
        except Exception as err:  # noqa: BLE001 (close raises it)
            self._error = err

    def close(self, failed: bool = False) -> None:
        for callback in self.callbacks:
            callback.log_trial_end(self.run, failed=failed)
        if self._error is not None:
            raise self._error
