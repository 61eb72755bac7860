"""The commands' argument parsing: argparse's, with a "did you mean" for a misspelt option."""

from __future__ import annotations

import argparse
import difflib


def _subcommand(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command that ``args`` ran (``rllib train``, ``rllib-gpuenv bench scaling``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return _subcommand(action.choices[getattr(args, action.dest)], args)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``; arguments it does not know are an error in the usage of the
    command they were given to, each option named with the closest one that command has, or with
    the hint its parser keeps for it (``parser.option_hints``: an option of another command)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = _subcommand(parser, args)
        options = [option for action in command._actions for option in action.option_strings]
        notes = {}  # after the words as given, so that an option stays beside its value
        hints = getattr(command, "option_hints", {})
        for word in unknown:
            option = word.split("=", 1)[0]
            close = difflib.get_close_matches(option, options, n=1) if word.startswith("-") else []
            hint = hints.get(option) or (f"did you mean {close[0]}?" if close else None)
            if hint:
                notes[option] = hint
        said = "; ".join(hint if len(notes) == 1 else f"{option}: {hint}" for option, hint in notes.items())
        command.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" ({said})" if said else ""))
    return args
