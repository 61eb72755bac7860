"""Moved to ``rllib_gpuenv.cli.train`` (the main job); this name stays importable, as the README
once named it (``load_config`` lives in ``rllib_gpuenv.experiments`` now)."""

import sys

from rllib_gpuenv.cli import train as _moved

sys.modules[__name__] = _moved
