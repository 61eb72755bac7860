"""No empty folder left behind in ``~/ray_results`` by an algorithm built outside a Tune run."""

from __future__ import annotations

import os


def remove_empty_logdir(algo) -> None:
    """Remove the folder Tune made for ``algo``'s logs if the algorithm was built outside a Tune
    run and nothing was written there.

    Tune's ``Trainable``, built without a Tune run (``config.build_algo()``,
    ``Algorithm.from_checkpoint``: the main job, a script, a benchmark), makes a folder
    ``~/ray_results/<date>_<time><random>`` for its logs. RLlib 2.60 writes nothing there and Tune
    keeps it after ``stop()``: one empty folder in the user's home per algorithm built. A folder
    that a callback wrote to is kept, as is a Tune trial's."""
    from ray.train.constants import DEFAULT_STORAGE_PATH

    logdir = getattr(algo, "logdir", None)
    if getattr(algo, "_storage", None) is not None or not logdir:
        return
    if os.path.dirname(os.path.abspath(logdir)) != os.path.abspath(os.path.expanduser(DEFAULT_STORAGE_PATH)):
        return
    try:
        os.rmdir(logdir)  # only an empty folder
    except OSError:
        pass  # something was written there, or it is gone


def stop_algorithm(algo) -> None:
    """``algo.stop()``, then its empty log folder removed: for any algorithm a command builds,
    RLlib's own too (the device algorithms' ``stop()`` does it already)."""
    algo.stop()
    remove_empty_logdir(algo)


class LeavesNoEmptyLogdir:
    """Mixin: ``stop()`` removes the algorithm's log folder if Tune made it outside a run and it
    is still empty (``remove_empty_logdir``), and so does a build that fails (a setting the
    cluster cannot place, found in ``setup()``, after Tune made the folder)."""

    def __init__(self, *args, **kwargs) -> None:
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            remove_empty_logdir(self)
            raise

    def stop(self) -> None:
        super().stop()
        remove_empty_logdir(self)
