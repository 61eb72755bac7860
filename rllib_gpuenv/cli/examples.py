"""``rllib example list|get|run``: the last RLlib CLI's examples, here the experiment files that
ship with the package (``rllib_gpuenv/configs/``).

    rllib example list                       # every shipped experiment: its id, file and what it does
    rllib example list --filter dqn          # those whose id or file holds "dqn"
    rllib example get gpu-cartpole-dqn       # the file, to read or to copy and change
    rllib example run gpu-cartpole-dqn --stop '{"training_iteration": 5}'   # = rllib train file <its file> ...

An example's id is the name of the experiment its file holds (the id RLlib's examples had, e.g.
``gpu-cartpole-ppo``); the file's name, with or without ``.yaml``, names it too.
"""

from __future__ import annotations

import argparse
import difflib
import re
from dataclasses import dataclass

from rllib_gpuenv.experiments.errors import ExperimentError


@dataclass(frozen=True)
class Example:
    id: str  # the experiment's name in its file
    file: str  # the shipped file's name, e.g. gpu_cartpole_ppo.yaml
    description: str  # the first sentence of the file's opening comment


def examples() -> list[Example]:
    """Every experiment of the shipped files, in the files' order."""
    import yaml

    from rllib_gpuenv.experiments.shipped import config_file, config_names

    found = []
    for name in config_names():
        text = config_file(name).read_text()
        for experiment in yaml.safe_load(text) or {}:
            found.append(Example(str(experiment), name, _first_sentence(text)))
    return found


def _first_sentence(text: str, most: int = 100) -> str:
    """The first sentence of a file's opening comment, cut at ``most`` characters."""
    comment = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    sentence = re.split(r"(?<=\.)\s", " ".join(comment), maxsplit=1)[0]
    return sentence if len(sentence) <= most else sentence[: most - 3].rstrip() + "..."


def find_example(name: str) -> Example:
    """The example an id or a file name names; an unknown one is an error that lists them."""
    known = examples()
    for example in known:
        if name in (example.id, example.file, example.file.rsplit(".", 1)[0]):
            return example
    close = difflib.get_close_matches(name, [e.id for e in known], n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ExperimentError(
        f"{name!r} is not a shipped example; {hint}they are: {', '.join(e.id for e in known)} (rllib example list)"
    )


def list_examples(args) -> int:
    shown = [e for e in examples() if not args.filter or re.search(args.filter, f"{e.id} {e.file}", re.I)]
    if not shown:
        print(f"no example matches {args.filter!r}: rllib example list shows them all")
        return 0
    width = max(len(e.id) for e in shown)
    for example in shown:
        print(f"{example.id:<{width}}  {example.file}: {example.description}")
    return 0


def print_example(args) -> int:
    from rllib_gpuenv.experiments.shipped import config_file

    print(config_file(find_example(args.id).file).read_text(), end="")
    return 0


def run_example(args) -> int:
    """``rllib train file <the example's file> [options]``: its options as ``rllib train`` has them."""
    from rllib_gpuenv.experiments.shipped import config_file

    path = str(config_file(find_example(args.id).file))
    train = args.train_parser.parse_args(["file", path, *args.train_options])
    return train.func(train)


def add_example_command(subparsers, train: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``rllib example``, beside ``train``, the command whose parser ``run`` hands the example's file to."""
    example = subparsers.add_parser(
        "example",
        help="the shipped experiment files as examples: list, get, run",
        description=__doc__.split("\n\n")[0].replace("``", "`"),
    )
    verbs = example.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="every shipped example: its id, file and what it does")
    listing.add_argument("--filter", "-f", help="only examples whose id or file matches this (a regular expression)")
    listing.set_defaults(func=list_examples)
    get = verbs.add_parser("get", help="print an example's experiment file")
    get.add_argument("id", help="the example's id (rllib example list) or its file's name")
    get.set_defaults(func=print_example)
    run = verbs.add_parser("run", help="run an example: rllib train file <its file> [train options]")
    run.add_argument("id", help="the example's id (rllib example list) or its file's name")
    run.add_argument(
        "train_options", nargs=argparse.REMAINDER, help="rllib train's options (rllib train --help), e.g. --stop JSON"
    )
    run.set_defaults(func=run_example, train_parser=train)
    return example
