"""The commands: ``rllib-gpuenv`` (``main.py``: the main job, ``evaluate``, ``bench``) and
``rllib`` (``rllib.py``: experiment files with Ray Tune, RLlib's old command line)."""

from rllib_gpuenv.cli.quiet import without_rllib_jax_import

without_rllib_jax_import()  # before the first import of ray.rllib

from rllib_gpuenv.cli.main import main  # noqa: E402

__all__ = ["main"]
