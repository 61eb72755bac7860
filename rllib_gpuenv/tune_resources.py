"""Moved to ``rllib_gpuenv.experiments.tune_resources``; this name stays importable (the Tune resource search)."""

import sys

from rllib_gpuenv.experiments import tune_resources as _moved

sys.modules[__name__] = _moved
