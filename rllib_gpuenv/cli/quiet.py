"""A quiet start for the package's own commands.

Before a command's first line of its own, Ray and RLlib print notices that read as problems and
are none for these commands: that the algorithm runs on RLlib's new API stack (it is the only
stack here), that the local Ray instance the command started uses token authentication (it is
private to the command), that ``RLModule(config=...)`` is deprecated (RLlib 2.60's own
``RLModule.__init__`` builds the deprecated config object for every module: the package does
not pass one), that gputil is not installed (GPU monitoring the commands do not use), that a slow
setup could reuse Tune's actors (`rllib train` does for the device algorithms, and RLlib's own
cannot: their trials would fail), that a checkpoint was saved, and where (between the progress
table's rows; `rllib train` names each trial's latest checkpoint at the end), and, for
gymnax's envs, that JAX found no TPU library (it looks for one on every machine), and for Brax's,
which JAX device MuJoCo's MJX uses (the runner chose it).
``quiet_start`` filters exactly these messages from their loggers, in this process and, through
Ray's ``worker_process_setup_hook``, in the Ray workers the command starts. It is never applied
on import: a user's own script keeps every message.

One more, at the end: when a command's Ray shuts down, Ray sends SIGTERM to a trial's process that
is still exiting (Tune's ``fit()`` returns before its actors have gone), and Ray's handler raises
``SystemExit`` in whatever Python code runs then, often a finalizer (RLlib's ``LearnerGroup.__del__``).
Python prints such an exception as "Exception ignored in ..." with a traceback, after the command's
last line, from a run that succeeded. ``quiet_start`` drops exactly those: a ``SystemExit`` in a
finalizer, where the process is already ending. Any other exception in a finalizer is printed.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

NOTICES = {
    "ray.rllib.algorithms.algorithm_config": "on the new API stack! This is the new default behavior",
    "ray.rllib.algorithms.sac.sac": "You are running SAC on the new API stack!",  # SAC's own, once more
    "ray._private.authentication.authentication_token_setup": "Token authentication is enabled for this Ray cluster",
    "ray._common.deprecation": "`RLModule(config=[RLModuleConfig object])` has been deprecated",
    "ray.tune.utils.util": "Install gputil for GPU system monitoring",
    # an algorithm's build over 10 s (a JAX env's first compile): Tune's advice, reuse_actors=True, is
    # taken for the device algorithms and fails RLlib's own (no reset_config); the main job says where its start-up went
    "ray.tune.trainable.trainable": "Trainable.setup took",
    "jax._src.xla_bridge": "Unable to initialize backend 'tpu'",
    "": "Using JAX default device",  # MuJoCo's MJX logs it on the root logger whenever a Brax env is traced
    # every checkpoint's path, from the trial's process, between the progress table's rows: `rllib train`
    # names each trial's latest checkpoint when the experiment ends
    "ray.train._internal.storage": "Checkpoint successfully created at",
}
# A warning (not a log record) dropped alike: once JAX runs (a gymnax env was checked), it warns at
# every fork, and Ray starts its processes by fork and exec, where no JAX code runs in the child.
FORK_WARNING = r"os\.fork\(\) was called\. os\.fork\(\) is incompatible with multithreaded code, and JAX"
SETUP_HOOK = f"{__name__}.quiet_start"  # for ray.init(runtime_env={"worker_process_setup_hook": ...})


class _DropNotice(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def _exit_in_a_finalizer_is_silent(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``sys.unraisablehook`` that passes on everything but a ``SystemExit`` (the process is ending)."""

    def unraisable(info: Any) -> None:
        if not issubclass(info.exc_type, SystemExit):
            hook(info)

    unraisable.exit_silent = True
    return unraisable


def quiet_start() -> None:
    """Filter the notices from their loggers (once per process), JAX's fork warning, and a
    ``SystemExit`` raised in a finalizer while the process ends."""
    warnings.filterwarnings("ignore", message=FORK_WARNING, category=RuntimeWarning)
    if not getattr(sys.unraisablehook, "exit_silent", False):
        sys.unraisablehook = _exit_in_a_finalizer_is_silent(sys.unraisablehook)
    for name, text in NOTICES.items():
        target = logging.getLogger(name)
        if not any(isinstance(f, _DropNotice) for f in target.filters):
            target.addFilter(_DropNotice(text))


def without_rllib_jax_import() -> None:
    """RLlib's utilities import JAX and flax wherever they are installed (0.5 s of every command's
    start) for the old API stack's JAX models, which nothing here uses (a gymnax env imports JAX
    itself). Call before the first import of ``ray.rllib``; a user's own setting wins, and the
    notice RLlib logs for it is dropped."""
    os.environ.setdefault("RLLIB_TEST_NO_JAX_IMPORT", "1")
    logging.getLogger("ray.rllib.utils.framework").addFilter(_DropNotice("Not importing JAX for test purposes"))
