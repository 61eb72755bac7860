"""The commands: ``rllib-gpuenv`` (``main.py``: the main job, ``evaluate``, ``bench``) and
``rllib`` (``rllib.py``: experiment files with Ray Tune, RLlib's old command line)."""

from rllib_gpuenv.cli.main import main

__all__ = ["main"]
