"""Moved to ``rllib_gpuenv.experiments.shipped``; this name stays importable (the shipped experiment files)."""

import sys

from rllib_gpuenv.experiments import shipped as _moved

sys.modules[__name__] = _moved
