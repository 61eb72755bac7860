"""The experiment files shipped with the package: ``rllib_gpuenv/configs/*.yaml``.

They are package data, read through ``importlib.resources``, so the main job and the
benchmarks find them wherever the package is installed (a wheel, a cluster node), not only in
a checkout. In the repository the same files are also reached as ``configs/`` at the top
(a symbolic link, not a copy).
"""

from __future__ import annotations

import atexit
import contextlib
from importlib import resources
from pathlib import Path

PACKAGE = "rllib_gpuenv"
FOLDER = "configs"

# A package imported from a zip archive has no file paths: such files are extracted once and
# removed at exit. From a wheel installed as usual (or a checkout) this is the file itself.
_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


def _folder():
    return resources.files(PACKAGE).joinpath(FOLDER)


def config_names() -> list[str]:
    """The names of the shipped experiment files, e.g. ``gpu_cartpole_ppo.yaml``."""
    return sorted(entry.name for entry in _folder().iterdir() if entry.name.endswith((".yaml", ".yml")))


def config_file(name: str) -> Path:
    """The path of a shipped experiment file, e.g. ``config_file("gpu_cartpole_ppo.yaml")``."""
    resource = _folder().joinpath(name)
    if not resource.is_file():
        raise FileNotFoundError(
            f"{name!r} is not an experiment file shipped with {PACKAGE}; they are: {', '.join(config_names())}"
        )
    return _extracted.enter_context(resources.as_file(resource))


def shipped_settings(algo: str, env: str) -> tuple[str, dict] | None:
    """``(file name, config)`` of the shipped experiment that runs ``algo`` on ``env``, if one
    does: ``rllib train --algo DevicePPO --env GPUPendulum-v1`` starts from its tuned settings
    rather than from the algorithm's generic defaults (PPO's lr 5e-5 barely moves Pendulum)."""
    import yaml

    for name in config_names():
        experiments = yaml.safe_load(_folder().joinpath(name).read_text()) or {}
        for spec in experiments.values():
            if isinstance(spec, dict) and spec.get("run") == algo and spec.get("env") == env:
                return name, dict(spec.get("config") or {})
    return None
