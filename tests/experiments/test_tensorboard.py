"""TensorBoardCallback writes what Tune's TensorBoard callback writes, a result's scalars in one event.

Real Tune callbacks, tensorboardX and TensorBoard's own event reader.
"""

import glob

import numpy as np
import pytest
from ray.tune.logger import TBXLoggerCallback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from rllib_gpuenv.cli.result_files import _RunDirectory
from rllib_gpuenv.experiments.tensorboard import TensorBoardCallback


def _results(steps_key: str | None) -> list[dict]:
    """RLlib-like results: nested dicts, numpy and Python numbers, a bool, NaN, strings, the config,
    and once a list (a histogram) and a metric Tune leaves out (``pid``)."""
    results = []
    for i in range(1, 5):
        result = {
            "training_iteration": i,
            "env_runners": {"episode_return_mean": float("nan") if i == 1 else 10.0 * i, "num_episodes": np.int64(i)},
            "learners": {"default_policy": {"total_loss": np.float32(1.0 / i), "entropy": 0.5}},
            "done": i == 4,
            "date": "2026-11-29",
            "pid": 123,
            "config": {"lr": 0.1},
        }
        if steps_key:
            result[steps_key] = 100 * i
        if i == 2:
            result["custom"] = {"returns": [1.0, 2.0, 3.0]}
        results.append(result)
    return results


def _written(callback_class, folder, results) -> tuple[dict, list, list[int]]:
    """The scalars and histograms TensorBoard reads from ``callback_class``'s files, and the
    number of scalar values in each event."""
    run = _RunDirectory(str(folder), {})
    callback = callback_class()
    callback.log_trial_start(run)
    for result in results:
        callback.log_trial_result(result["training_iteration"], run, result)
    callback.log_trial_end(run)
    events = EventAccumulator(str(folder))
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    (path,) = glob.glob(str(folder / "events.out.tfevents.*"))
    per_event = [len(e.summary.value) for e in EventFileLoader(path).Load() if e.HasField("summary")]
    return scalars, sorted(events.Tags()["histograms"]), per_event


@pytest.mark.parametrize("steps_key", [None, "timesteps_total"], ids=["by-iteration", "by-timesteps"])
def test_the_same_scalars_and_histograms_as_tunes_callback_in_one_event_a_result(tmp_path, steps_key):
    results = _results(steps_key)
    tunes = _written(TBXLoggerCallback, tmp_path / "tune", results)
    ours = _written(TensorBoardCallback, tmp_path / "ours", results)
    assert ours[:2] == tunes[:2]
    scalars, histograms, _ = ours
    assert histograms == ["ray/tune/custom/returns"]
    assert scalars["ray/tune/env_runners/episode_return_mean"] == [(100 * i if steps_key else i, 10.0 * i) for i in (2, 3, 4)]
    assert "ray/tune/pid" not in scalars and "ray/tune/config/lr" not in scalars
    # Tune's: an event per scalar and one for the histogram; ours: an event per result and the histogram's
    assert set(tunes[2]) == {1} and len(tunes[2]) == sum(ours[2])
    assert ours[2].count(1) == 1 and len(ours[2]) == 5 and sorted(ours[2])[1] >= 4
