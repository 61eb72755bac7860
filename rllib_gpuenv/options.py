"""Command-line value types shared by the commands (``cli/``) and the benchmarks (``bench/``).

Each is an ``argparse`` ``type``: a value out of range ends the command in argparse's one line
(``argument --max-iterations: must be at least 1, got 0``) before anything is built or started,
where it would otherwise fail late with a traceback (a division by zero, a median of nothing) or,
worse, run as something else (RLlib takes a negative seed as no seed at all).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

MAX_SEED = 2**32 - 1  # numpy's and torch's seeding take 32-bit seeds (and RLlib seeds both)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def count(minimum: int = 1) -> Callable[[str], int]:
    """An integer of at least ``minimum``."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # what argparse names in its own messages
    return parse


def number(text: str) -> float:
    """A finite number (a target return: no NaN, which nothing would ever reach)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def seconds(text: str) -> float:
    """A time in seconds, more than 0."""
    value = number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def _writable_below(path: str) -> None:
    """The nearest folder of ``path`` that exists must be a folder (a file there would stop
    ``makedirs`` after the run, with the results unwritten)."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"{parent} is a file, not a folder: choose another path")


def output_folder(text: str) -> str:
    """A folder to write into: one that exists, or one that can be made."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: choose another path")
    _writable_below(text)
    return text


def output_file(text: str) -> str:
    """A file to write: not a folder, and in a folder that exists or can be made."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a folder: name a file in it")
    _writable_below(text)
    return text


def seed(text: str) -> int:
    """A seed: an integer from 0 to 2**32 - 1."""
    value = _integer(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to 2**32 - 1, got {value}")
    return value


def device(text: str) -> str:
    """A device this machine has: ``auto``, ``cpu`` or ``cuda[:N]`` (kept as written, so that
    ``auto`` still means "the GPU if there is one" where it is used)."""
    from rllib_gpuenv.core.devices import resolve_device

    try:
        resolve_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def names(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """A comma-separated list of some of ``choices`` (case-insensitive), e.g. ``'PPO,DQN'``."""

    def parse(text: str) -> list[str]:
        chosen = [name.strip().upper() for name in text.split(",")]
        unknown = [name for name in chosen if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}: choose from {', '.join(choices)}")
        return chosen

    parse.__name__ = "list of names"
    return parse


def sizes(minimum: int = 1, allow_empty: bool = False) -> Callable[[str], list[int]]:
    """A list of integers of at least ``minimum``: ``'1,16,256'``, or ``'1..65536'`` for the
    powers of 4 from the first bound up to the second (``''``: none, where ``allow_empty``)."""
    one = count(minimum)

    def parse(text: str) -> list[int]:
        if allow_empty and not text.strip():
            return []
        if ".." in text:
            low, _, high = text.partition("..")
            low, high = count(max(1, minimum))(low), _integer(high)  # powers of 4 of a positive start
            values = []
            while low <= high:
                values.append(low)
                low *= 4
            if not values:
                raise argparse.ArgumentTypeError(f"{text!r} is an empty range: write LOW..HIGH with LOW <= HIGH")
            return values
        return [one(value) for value in text.split(",")]

    parse.__name__ = "list of integers"
    return parse
