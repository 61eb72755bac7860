"""Moved to ``rllib_gpuenv.experiments.legacy`` (old RLlib names). This name stays importable:
checkpoints written before the move pickle ``mean_std_filter_connector`` under it."""

import sys

from rllib_gpuenv.experiments import legacy as _moved

sys.modules[__name__] = _moved
