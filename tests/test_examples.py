"""The examples run as their docstrings say (at small sizes)."""

import os

import pytest

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
