"""The package's layout holds: imports go one way (from the ground floor up), and the import
paths and commands the README has named keep working."""

import ast
import importlib
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# Floors, bottom up: a module may import from its own floor and the ones below it.
FLOORS = ["core options", "backends", "envs", "registration wrappers jax_envs", "rllib", "experiments", "bench", "cli"]
FLOOR = {part: i for i, parts in enumerate(FLOORS) for part in parts.split()}
# Earlier names of moved modules: each is the moved module itself.
MOVED = {
    "rllib_gpuenv.train": "rllib_gpuenv.cli.train",
    "rllib_gpuenv.config_files": "rllib_gpuenv.experiments.shipped",
    "rllib_gpuenv.tune_resources": "rllib_gpuenv.experiments.tune_resources",
    "rllib_gpuenv.legacy": "rllib_gpuenv.experiments.legacy",
    "rllib_gpuenv.rllib_cli": "rllib_gpuenv.cli.rllib",
    "rllib_gpuenv.jax_env": "rllib_gpuenv.jax_envs.gymnax_envs",
}


def _imports(path: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.split(".")[0] == "rllib_gpuenv"}


def test_imports_go_from_the_ground_floor_up():
    package = os.path.join(ROOT, "rllib_gpuenv")
    upward = []
    for folder, _, files in os.walk(package):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = os.path.join(folder, file)
            part = os.path.relpath(path, package).split(os.sep)[0].removesuffix(".py")
            if part not in FLOOR:  # the package's __init__ and the old names' modules
                assert part == "__init__" or f"rllib_gpuenv.{part}" in MOVED, f"{path}: on no floor of {FLOORS}"
                continue
            for name in _imports(path):
                target = name.split(".")[1] if "." in name else "__init__"
                if target == part:
                    continue
                assert target in FLOOR, f"{path} imports {name}, which is not on a floor (import from where it lives)"
                if FLOOR[target] > FLOOR[part]:
                    upward.append(f"{os.path.relpath(path, ROOT)} imports {name}")
    assert not upward, upward


def _module_files() -> dict[str, str]:
    """Every module of the package by its dotted name (a package by its own name)."""
    modules = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "rllib_gpuenv")):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                name = os.path.relpath(path, ROOT).removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__")
                modules[name] = path
    return modules


def _imported_modules(path: str, modules: dict[str, str]) -> set[str]:
    """The package's modules a file imports, at its top or inside a function (``from a import b``:
    module ``a.b`` where there is one, else ``a``)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                found.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & modules.keys()


def test_no_modules_import_each_other():
    """Not even through a function's import: a circle of modules is one module's job in several files."""
    modules = _module_files()
    graph = {name: _imported_modules(path, modules) - {name} for name, path in modules.items()}
    circles, done = [], set()

    def visit(name: str, path: list[str]) -> None:
        for target in sorted(graph[name]):
            if target in path:
                circles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in done:
                visit(target, path + [target])
        done.add(name)

    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    assert not circles, circles


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_old_module_names_are_the_moved_modules(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


@pytest.mark.parametrize("module", ["rllib_gpuenv.cli", "rllib_gpuenv.rllib_cli", "rllib_gpuenv.cli.rllib"])
def test_python_dash_m_commands_run(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "usage: rllib" in proc.stdout


def test_the_files_started_first_exist():
    from tests.conftest import LONGEST_FIRST

    missing = [name for name in LONGEST_FIRST if not os.path.isfile(os.path.join(ROOT, "tests", name))]
    assert not missing, f"tests/conftest.py's LONGEST_FIRST names files that are not there: {missing}"


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_readme_s_links_lead_somewhere():
    """Its contents list and every other ``(#anchor)`` name a heading; its relative links name files."""
    text = open(os.path.join(ROOT, "README.md")).read()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # a code block's "# comment" is no heading
    anchors = {_github_anchor(h) for h in re.findall(r"^#+ (.+)$", prose, flags=re.M)}
    links = re.findall(r"\]\(([^)\s]+)\)", prose)
    broken = [link for link in links if link.startswith("#") and link[1:] not in anchors]
    broken += [
        link
        for link in links
        if not link.startswith(("#", "http://", "https://")) and not os.path.exists(os.path.join(ROOT, link.split("#")[0]))
    ]
    assert len([link for link in links if link.startswith("#")]) >= 10  # the contents list is there
    assert not broken, broken
