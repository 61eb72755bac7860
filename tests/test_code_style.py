"""The repository keeps one style: ruff's formatter and linter as pyproject.toml configures them."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.mark.parametrize("command", [["format", "--check", "--diff"], ["check"]], ids=["format", "lint"])
def test_ruff_finds_nothing_to_change(command):
    proc = subprocess.run([sys.executable, "-m", "ruff", *command, "."], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, (
        f"`ruff {' '.join(command)} .` (fix with `ruff format . && ruff check --fix .`):\n{proc.stdout}{proc.stderr}"
    )
