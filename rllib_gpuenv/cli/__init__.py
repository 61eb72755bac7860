"""The commands: ``rllib-gpuenv`` (``main.py``: the main job, ``evaluate``, ``bench``) and
``rllib`` (``rllib.py``: experiment files with Ray Tune, RLlib's old command line), started by
``entry.py``."""

from rllib_gpuenv.cli.quiet import without_rllib_jax_import

without_rllib_jax_import()  # before the first import of ray.rllib
