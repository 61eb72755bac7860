"""The one error type of experiment files and ``rllib train``, in one line that names where."""

from __future__ import annotations


class ExperimentError(ValueError):
    """A bad experiment file or command line, with the file, experiment and key it concerns
    (one line per mistake when several experiments are bad)."""


def key_error(where: str, key: str, problem: str) -> ExperimentError:
    """``<file>: experiment '<name>': <key>: <problem and fix>`` (``where`` names file and experiment)."""
    return ExperimentError(f"{where}: {key}: {problem}")
