"""Option values out of range end a command in argparse's one line, before anything is built:
counts, seeds and size lists (``rllib_gpuenv/options.py``), and a folder that is not a checkpoint."""

import argparse
import json
import os
import pickle
import sys

import pytest
import torch

from rllib_gpuenv import options
from rllib_gpuenv.cli.main import build_parser as rllib_gpuenv_parser
from rllib_gpuenv.cli.rllib import build_parser as rllib_parser
from rllib_gpuenv.rllib.checkpointing import CheckpointError, check_checkpoint_files


@pytest.mark.parametrize(
    "parser, args, message",
    [
        (rllib_gpuenv_parser, ["train", "--max-iterations", "0"], "argument --max-iterations: must be at least 1, got 0"),
        (rllib_gpuenv_parser, ["train", "--num-learners", "-1"], "argument --num-learners: must be at least 0, got -1"),
        # RLlib takes a negative seed as no seed at all: the run would be unseeded
        (rllib_gpuenv_parser, ["train", "--seed", "-1"], "argument --seed: a seed is an integer from 0 to 2**32 - 1, got -1"),
        (rllib_gpuenv_parser, ["train", "--seed", str(2**32)], "argument --seed: a seed is an integer from 0 to 2**32 - 1"),
        (rllib_gpuenv_parser, ["evaluate", "ckpt", "--episodes", "0"], "argument --episodes: must be at least 1, got 0"),
        (rllib_gpuenv_parser, ["bench", "scaling", "--num-envs", "0"], "argument --num-envs: must be at least 1, got 0"),
        (rllib_gpuenv_parser, ["bench", "scaling", "--num-envs", "64..4"], "argument --num-envs: '64..4' is an empty range"),
        (rllib_gpuenv_parser, ["bench", "scaling", "--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
        (
            rllib_gpuenv_parser,
            ["bench", "scaling", "--min-seconds", "0"],
            "argument --min-seconds: must be more than 0 seconds",
        ),
        (
            rllib_gpuenv_parser,
            ["bench", "training", "--budget", "-5"],
            "argument --budget: must be more than 0 seconds, got -5",
        ),
        (rllib_gpuenv_parser, ["bench", "files", "--budget", "x"], "argument --budget: 'x' is not a number"),
        (rllib_gpuenv_parser, ["train", "--target", "nan"], "argument --target: must be a finite number, got nan"),
        # every id is checked before the first env's benchmark runs
        (
            rllib_gpuenv_parser,
            ["bench", "scaling", "--env", "GPUPendulum-v1", "gymnax:CartPole-v1"],
            "argument --env: 'gymnax:CartPole-v1' is not an env of this package: GPUCartPole-v1, ",
        ),
        (
            rllib_gpuenv_parser,
            ["bench", "ops", "--env", "CartPole"],
            "argument --env: 'CartPole' is not an env of this package",
        ),
        (rllib_gpuenv_parser, ["bench", "breakdown", "--iterations", "0"], "argument --iterations: must be at least 1"),
        (rllib_gpuenv_parser, ["bench", "training", "--seeds", "0,a"], "argument --seeds: 'a' is not an integer"),
        (rllib_gpuenv_parser, ["bench", "update", "--minibatch-sizes", "128,-5"], "--minibatch-sizes: must be at least 1"),
        (rllib_parser, ["train", "file", "x.yaml", "--num-samples", "0"], "argument --num-samples: must be at least 1, got 0"),
        (rllib_gpuenv_parser, ["bench", "sampling", "--device", "tpu"], "argument --device: unknown device 'tpu'"),
        (
            rllib_gpuenv_parser,
            ["bench", "update", "--algos", "PPO,TD3"],
            "argument --algos: unknown TD3: choose from PPO, DQN, SAC",
        ),
        pytest.param(
            rllib_gpuenv_parser,
            ["bench", "learners", "--device", "cuda"],  # was a choice only: refused once Ray had started
            "argument --device: device 'cuda' asked for, but this machine has no CUDA GPU",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU"),
        ),
        pytest.param(
            rllib_gpuenv_parser,
            ["bench", "ops", "--device", "cuda"],
            "argument --device: device 'cuda' asked for, but this machine has no CUDA GPU",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU"),
        ),
    ],
)
def test_an_option_out_of_range_is_one_line_before_anything_runs(parser, args, message, capsys):
    with pytest.raises(SystemExit) as ended:
        parser().parse_args(args)
    assert ended.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "parser, args, message",
    [
        (
            rllib_parser,
            ["train", "--algo", "PPO", "--env", "X", "--stopp", "{}"],
            "rllib train: error: unrecognized arguments: --stopp (did you mean --stop?)",
        ),
        (
            rllib_gpuenv_parser,
            ["bench", "scaling", "--nmu-envs", "4"],
            "rllib-gpuenv bench scaling: error: unrecognized arguments: --nmu-envs 4 (did you mean --num-envs?)",
        ),
        (rllib_parser, ["train", "file", "x.yaml", "--zzz"], "rllib train: error: unrecognized arguments: --zzz"),
        (
            rllib_gpuenv_parser,
            ["bench", "scaling", "--nmu-envs", "4", "--rounds=2", "--plto"],
            "rllib-gpuenv bench scaling: error: unrecognized arguments: --nmu-envs 4 --plto (--nmu-envs: did you mean "
            "--num-envs?; --plto: did you mean --plot?)",
        ),
    ],
)
def test_a_misspelt_option_is_named_with_the_closest_one_of_its_command(parser, args, message, capsys):
    from rllib_gpuenv.cli.parsing import parse_args

    with pytest.raises(SystemExit) as ended:
        parse_args(parser(), args)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("usage: " + message.split(":")[0]), err


@pytest.mark.parametrize(
    "args, message",
    [  # each was a traceback once the run had ended, its results unwritten
        (["bench", "scaling", "--out", "{file}"], "argument --out: {file} is a file, not a folder: choose another path"),
        (["bench", "ops", "--out", "{file}/sub"], "argument --out: {file} is a file, not a folder"),
        (["evaluate", "ckpt", "--video", "{dir}"], "argument --video: {dir} is a folder: name a file in it"),
        (["evaluate", "ckpt", "--video", "{file}/a/x.gif"], "argument --video: {file} is a file, not a folder"),
    ],
)
def test_an_output_path_that_cannot_be_written_is_one_line_before_anything_runs(args, message, tmp_path, capsys):
    paths = {"file": str(tmp_path / "a_file"), "dir": str(tmp_path)}
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit) as ended:
        rllib_gpuenv_parser().parse_args([arg.format(**paths) for arg in args])
    assert ended.value.code == 2
    assert message.format(**paths) in capsys.readouterr().err
    assert rllib_gpuenv_parser().parse_args(["bench", "ops", "--out", str(tmp_path / "new" / "folder")])  # made later


def test_an_unwritable_file_met_while_running_is_one_line(tmp_path, capsys):
    """The commands' fallback (cli/errors.py) for a path only the run meets: its name and the reason."""
    from rllib_gpuenv.cli.errors import _run  # run_command without its gc.freeze() of this test process

    def write(_args):
        os.makedirs(tmp_path / "a_file" / "sub")

    (tmp_path / "a_file").write_text("")
    assert _run("rllib-gpuenv", write, None) == 2
    assert capsys.readouterr().err.strip() == f"rllib-gpuenv: error: {tmp_path / 'a_file' / 'sub'}: Not a directory"


def test_option_values_in_range_parse_as_before():
    args = rllib_gpuenv_parser().parse_args(["train", "--seed", "0", "--max-iterations", "1", "--num-learners", "0"])
    assert (args.seed, args.max_iterations, args.num_learners) == (0, 1, 0)
    args = rllib_gpuenv_parser().parse_args(["bench", "training", "--seeds", "0,1,2"])
    assert args.seeds == [0, 1, 2]
    assert rllib_gpuenv_parser().parse_args(["bench", "learners", "--seeds", ""]).seeds == []  # throughput only
    assert rllib_gpuenv_parser().parse_args(["bench", "scaling"]).num_envs is None  # the benchmark's own default
    assert rllib_gpuenv_parser().parse_args(["bench", "workload"]).substeps == [1, 4, 16, 64]  # a string default, parsed
    assert options.sizes()("1..64") == [1, 4, 16, 64] and options.sizes()("16") == [16]
    assert options.seed(str(2**32 - 1)) == 2**32 - 1
    with pytest.raises(argparse.ArgumentTypeError, match="must be at least 1, got 0"):
        options.sizes(0)("0..64")  # powers of 4 start above 0


def test_a_folder_that_is_not_a_checkpoint_is_named_before_any_file_in_it_is_unpickled(tmp_path):
    """``train --resume`` and ``from_checkpoint`` check the files first; a folder that holds
    other things (here a file that is not a pickle) is said not to be a checkpoint, and the
    checkpoints below it are named."""
    (tmp_path / "notes.pkl").write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match=r"not an RLlib algorithm checkpoint .*a Tune run keeps them in"):
        check_checkpoint_files(tmp_path)
    below = tmp_path / "run" / "checkpoint"
    below.mkdir(parents=True)
    (below / "rllib_checkpoint.json").write_text("{}")
    (below / "state.pkl").write_bytes(pickle.dumps({}))
    with pytest.raises(CheckpointError, match=rf"not an RLlib algorithm checkpoint .*below it, newest first: {below}"):
        check_checkpoint_files(tmp_path)
    check_checkpoint_files(below)  # the checkpoint itself: every file readable


def test_a_checkpoint_file_that_needs_a_missing_module_is_named_as_such_not_as_damaged(tmp_path):
    """A pickled class of the user's (an env, callbacks) whose module this process cannot import:
    the fix is the module's folder, and the folder the run recorded is searched first."""
    (tmp_path / "rllib_checkpoint.json").write_text("{}")
    (tmp_path / "class_and_ctor_args.pkl").write_bytes(b"cckpt_user_module_xyz\nCallbacks\n.")  # pickle's GLOBAL opcode
    with pytest.raises(
        CheckpointError, match=r"class_and_ctor_args.pkl: needs the module 'ckpt_user_module_xyz', .*PYTHONPATH"
    ):
        check_checkpoint_files(tmp_path)
    code = tmp_path.parent / f"{tmp_path.name}_code"
    code.mkdir()
    (code / "ckpt_user_module_xyz.py").write_text("class Callbacks:\n    pass\n")
    (tmp_path / "code_folders.json").write_text(json.dumps([str(code), str(tmp_path / "gone")]))
    try:
        check_checkpoint_files(tmp_path)  # the recorded folder is searched; the one that is gone is left out
        assert str(code) in sys.path and str(tmp_path / "gone") not in sys.path
    finally:
        sys.path.remove(str(code))
        sys.modules.pop("ckpt_user_module_xyz", None)


def test_the_breakdown_names_the_envs_it_times_before_it_builds_anything():
    args = rllib_gpuenv_parser().parse_args(["bench", "breakdown", "--env", "NoEnv-v0"])
    with pytest.raises(ValueError, match=r"--env NoEnv-v0: the breakdown times an env of this package: GPUCartPole-v1, "):
        args.func(args)


def test_the_training_races_help_names_every_contender_and_target():
    """The help is written from the tasks themselves: a contender added to a race is in it."""
    from rllib_gpuenv.bench.training import TASKS, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    helps = {action.dest: action.help for action in parser._actions}
    for name, task in TASKS.items():
        assert f"{name}: {' '.join(task.contenders)}" in helps["contenders"]
        assert f"{name}: {task.target:g}" in helps["target"]


def test_help_and_a_mistaken_option_import_neither_ray_nor_rllib():
    """``--help`` and argparse's one line come before Ray, Tune and RLlib load (1-3 s of imports,
    twice that on a slow CPU): in a fresh interpreter, each command's help and an unknown option,
    then what it imported."""
    from tests.helpers import run_python

    code = """
import contextlib, io, sys
from rllib_gpuenv.cli import main, rllib
calls = [
    (main, ['--help']), (main, ['train', '--help']), (main, ['evaluate', '--help']), (main, ['bench', '--help']),
    *((main, ['bench', name, '--help']) for name in main.BENCHMARKS),
    (main, ['train', '--no-such-option']),
    (rllib, ['--help']), (rllib, ['train', '--help']), (rllib, ['evaluate', '--help']), (rllib, ['example', '--help']),
    (rllib, ['train', '--no-such-option']),
]
for command, argv in calls:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            command.main(argv)
        except SystemExit:
            pass
    loaded = [m for m in ('ray', 'ray.tune', 'ray.rllib') if m in sys.modules]
    if loaded:
        print(command.__name__, argv, 'imported', loaded)
        break
print('done')
"""
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done", out.stdout
