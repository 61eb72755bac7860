"""How a command ends: a user's mistake in one line that names the fix, a missing optional
dependency in one line that names the ``pip install`` that brings it, Ctrl-C without a traceback.

Both commands (``rllib-gpuenv`` and ``rllib``) run their subcommand through ``run_command``.
The traceback of an error turned into one line goes to the log at debug level
(``rllib-gpuenv -v`` shows it).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import signal
import sys
import threading

logger = logging.getLogger(__name__)

# Importable name -> the extra of setup.cfg that installs it.
EXTRAS = {
    "imageio": "video",
    "imageio_ffmpeg": "video",
    "pygame": "video",
    "matplotlib": "bench",
    "stable_baselines3": "bench",
    "tensorboardX": "tensorboard",
    "tensorboard": "tensorboard",
    "numba_cuda": "cuda",
    "jax": "jax",
    "gymnax": "jax",
    "brax": "brax",
    "mujoco": "brax",
}


def missing_extra(err: BaseException) -> str | None:
    """What to say when ``err`` is an optional dependency that is missing: the module and the
    ``pip install`` of the extra that brings it (None for anything else, whose traceback then
    shows: a module of this package missing, or ``cannot import name`` from an installed
    dependency of another version, is no missing extra)."""
    name = getattr(err, "name", None)
    named = re.search(r'pip install "rllib_gpuenv\[(\w+)\]"', str(err))
    if name and named:  # the error names the extra itself (a Brax env without jax needs brax's, not jax's)
        return f'{name} is not installed: pip install "rllib_gpuenv[{named.group(1)}]"'
    if name:  # Python's own: the module it could not find
        module = name.split(".")[0]
        if isinstance(err, ModuleNotFoundError) and module in EXTRAS:
            return f'{module} is not installed: pip install "rllib_gpuenv[{EXTRAS[module]}]"'
        return None
    for module, extra in EXTRAS.items():  # a library's own words (gymnasium's DependencyNotInstalled)
        if re.search(rf"\b{module}\b", str(err)):
            return f'{module} is not installed: pip install "rllib_gpuenv[{extra}]"'
    return None


def run_command(prog: str, func, args) -> int:
    """``func(args)`` as a command: its return code, or 2 after one line for a user's mistake,
    130 after Ctrl-C. Afterwards the objects made are frozen: Python's last garbage collection at
    exit would walk everything RLlib and torch made (seconds after the command's last line), and
    the OS frees a process's memory anyway."""
    try:
        return _run(prog, func, args)
    finally:
        gc.freeze()


def _run(prog: str, func, args) -> int:
    from gymnasium.error import DependencyNotInstalled

    from rllib_gpuenv.experiments.checks import one_line
    from rllib_gpuenv.experiments.errors import ExperimentError

    try:
        with _sigterm_as_ctrl_c():
            return int(func(args) or 0)
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
    except ExperimentError as err:  # one line per mistake, naming file, experiment and key
        for line in str(err).splitlines():
            print(f"{prog}: error: {line}", file=sys.stderr)
        return 2
    except (ImportError, DependencyNotInstalled) as err:
        missing = missing_extra(err)
        if missing is None:
            raise
        logger.debug("the traceback", exc_info=True)
        print(f"{prog}: error: {missing}", file=sys.stderr)
        return 2
    except (ValueError, OSError, MemoryError) as err:  # our checks, RLlib's validate(), a file missing or unwritable
        logger.debug("the traceback", exc_info=True)
        named = isinstance(err, OSError) and err.filename and err.strerror
        print(f"{prog}: error: {f'{err.filename}: {err.strerror}' if named else one_line(err)}", file=sys.stderr)
        return 2


@contextlib.contextmanager
def _sigterm_as_ctrl_c():
    """SIGTERM (``kill``, ``timeout``, a scheduler) ends the command as Ctrl-C does, where it would
    otherwise end the process at once: a benchmark's run in a process of its own is then stopped
    with it (``subprocess.run`` kills its child on the way out), not left running to its budget.
    The training loops and Tune runs put their own handlers in place around themselves."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # raises KeyboardInterrupt
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is signal.default_int_handler:  # not one put there meanwhile
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


class StopAfterThisIteration:
    """Ctrl-C (or SIGTERM, as ``ray job stop`` sends) during a training loop: the first asks it to
    stop after the current iteration (and save); a second quits at once. Use as a context manager
    around the loop and read ``requested``."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, message: str = "stopping after this iteration and saving a checkpoint (Ctrl-C again to quit at once)"):
        self.message, self.requested, self._previous = message, False, {}

    def __enter__(self) -> StopAfterThisIteration:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
            self._previous = {sig: signal.signal(sig, self._interrupted) for sig in self.SIGNALS}
        return self

    def _interrupted(self, signum, frame) -> None:
        if self.requested:
            self._restore()
            raise KeyboardInterrupt
        self.requested = True
        print(f"\n{self.message}", file=sys.stderr, flush=True)

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, previous if previous is not None else default)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._restore()


class TuneInterrupted:
    """Whether Ctrl-C (or SIGTERM) stopped the Ray Tune runs inside the ``with`` (read ``happened``
    after it).

    Tune stops a run on SIGINT itself: each run installs a handler of its own (in the main thread,
    unless ``TUNE_DISABLE_SIGINT_HANDLER`` is set), which saves the experiment's state, ends the
    run and puts the previous handler back; a run that ends otherwise leaves its handler in
    place. The trials of an interrupted run end TERMINATED, as finished ones do, so the handler
    is what tells them apart. SIGTERM (``ray job stop``, a scheduler's kill) is turned into that
    SIGINT here, so that a stopped job too saves its state on the way out and ``--resume`` goes
    on from its trials' checkpoints; Tune alone would die at once, leaving older state."""

    def __enter__(self) -> TuneInterrupted:
        self.happened = False
        self._before = signal.getsignal(signal.SIGINT)
        self._watched = threading.current_thread() is threading.main_thread() and not int(
            os.environ.get("TUNE_DISABLE_SIGINT_HANDLER", "0")
        )
        self._term = signal.signal(signal.SIGTERM, _as_sigint) if self._watched else None
        return self

    def __exit__(self, *exc) -> None:
        if self._term is not None:
            signal.signal(signal.SIGTERM, self._term)
        self.happened = self.so_far()

    def so_far(self) -> bool:
        """Whether a Tune run inside has been interrupted, before the ``with`` ends."""
        return self._watched and signal.getsignal(signal.SIGINT) is self._before


def _as_sigint(signum, frame) -> None:
    signal.raise_signal(signal.SIGINT)
