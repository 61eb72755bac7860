"""The examples run as their docstrings say (at small sizes)."""

import ast
import os

import pytest
import yaml

from tests.helpers import ROOT, run_script


def example(name: str, *args) -> str:
    out = run_script(os.path.join(ROOT, "examples", name), *args)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_every_example_has_the_three_part_docstring():
    for name in os.listdir(os.path.join(ROOT, "examples")):
        if name.endswith(".py"):
            text = open(os.path.join(ROOT, "examples", name)).read()
            for part in ("What it shows:", "How to run it:", "What to expect:"):
                assert part in text, (name, part)


@pytest.mark.parametrize("env_id", ["GPUCartPole-v1", "GPUMountainCarContinuous-v0"])
def test_vector_env_backends_agree(env_id):
    out = example("vector_env_backends.py", "--env", env_id, "--num-envs", "256", "--steps", "60")
    assert "all backends agree" in out and "numba-cpu" in out and "torch" in out


def test_write_your_own_env():
    """The example's env runs on every CPU backend alike and learns under DevicePPO."""
    out = example("write_your_own_env.py", "--iterations", "20", "--device", "cpu")
    assert "all backends agree" in out and "numba-cpu" in out
    lines = [line for line in out.splitlines() if line.startswith("iter ")]
    returns = [float(line.split()[-1]) for line in lines if not line.endswith("none yet")]
    assert len(lines) == 20 and min(returns) < -50 and returns[-1] > 0


@pytest.mark.parametrize(
    "name, args, expected",
    [
        (
            "train_device_ppo.py",
            ["--device", "cpu", "--target", "25", "--max-iterations", "10"],
            "env runner on cpu, learner on cpu",
        ),
        ("device_env_any_gymnasium_env.py", ["--iterations", "1"], "iter   1"),
        ("torch_vector_env.py", ["--iterations", "2"], "iter   2"),
        ("jax_env.py", ["--iterations", "1"], "iter   1"),
    ],
)
def test_training_examples(name, args, expected):
    assert expected in example(name, *args)


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("vector_env_backends.py", ["--num-envs", "-1"], "argument --num-envs: must be at least 1, got -1"),
        ("vector_env_backends.py", ["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        ("write_your_own_env.py", ["--iterations", "0"], "argument --iterations: must be at least 1, got 0"),
        ("write_your_own_env.py", ["--device", "cuda:7"], "argument --device: "),
        ("train_device_ppo.py", ["--target", "nan"], "argument --target: must be a finite number, got nan"),
        ("train_device_ppo.py", ["--max-iterations", "x"], "argument --max-iterations: 'x' is not an integer"),
        ("torch_vector_env.py", ["--iterations", "-2"], "argument --iterations: must be at least 1, got -2"),
        ("jax_env.py", ["--device", "gpu"], "argument --device: "),
        ("device_env_any_gymnasium_env.py", ["--iterations", "0"], "argument --iterations: must be at least 1, got 0"),
        ("tune_resources.py", ["--target", "inf"], "argument --target: must be a finite number, got inf"),
    ],
)
def test_examples_refuse_bad_options_in_one_line(name, args, message):
    """argparse's usage and one line naming the option, before anything is built (no traceback)."""
    out = run_script(os.path.join(ROOT, "examples", name), *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]


def builder_calls(path: str) -> dict[str, dict]:
    """The keyword arguments of each config-builder call in a script (``.training(lr=4e-3)``), as
    values; calls whose arguments are not constants (``.devices(learner=args.device)``) are left out."""
    calls = {}
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.keywords:
            try:
                calls[node.func.attr] = {
                    kw.arg: eval(compile(ast.Expression(kw.value), path, "eval"), {"float": float}) for kw in node.keywords
                }
            except NameError:
                continue
    return calls


def test_the_device_ppo_example_trains_with_the_main_job_s_settings():
    """The example spells out in Python what the main job's file says: the same settings, so
    the same run (the file says why each is what it is)."""
    from rllib_gpuenv.experiments.shipped import config_file
    from rllib_gpuenv.experiments.spec import MAIN_JOB_FILE
    from rllib_gpuenv.rllib import DevicePPOConfig

    calls = builder_calls(os.path.join(ROOT, "examples", "train_device_ppo.py"))
    settings = {key: value for arguments in calls.values() for key, value in arguments.items()}
    with open(config_file(MAIN_JOB_FILE)) as f:
        ((_, experiment),) = yaml.safe_load(f).items()
    defaults = DevicePPOConfig()
    for key, value in experiment["config"].items():
        if key == "devices":  # the example's --device
            continue
        if isinstance(value, dict) and key in calls:  # a section: device_rollouts: {rollout_length: 64}
            assert calls[key] == value, key
        else:
            assert settings.get(key, getattr(defaults, key)) == value, key
