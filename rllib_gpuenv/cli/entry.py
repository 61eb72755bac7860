"""The console scripts, ``rllib-gpuenv`` and ``rllib``: each imports its command with the garbage
collector paused (``collector.py``), which the command resumes once it is ready to work."""

from __future__ import annotations

from rllib_gpuenv.cli import collector


def rllib_gpuenv_command() -> int:
    collector.pause()
    from rllib_gpuenv.cli.main import main

    return main()


def rllib_command() -> int:
    collector.pause()
    from rllib_gpuenv.cli.rllib import main

    return main()
