"""The metric paths every command reads (the return, env steps and episodes, as RLlib reports
them), and reading one from a result.

They are RLlib's own names (``ray.rllib.utils.metrics``: ``ENV_RUNNER_RESULTS``,
``EPISODE_RETURN_MEAN``, ...), spelled out so that what only reads names (a command's
``--help``, an experiment file's stop criteria, old metric names) imports no RLlib, which takes
1-3 s; ``tests/experiments/test_experiment_files.py`` checks them against RLlib's constants.
"""

from __future__ import annotations

from typing import Any

ENV_RUNNERS = "env_runners"  # ray.rllib.utils.metrics.ENV_RUNNER_RESULTS
RETURN_METRIC = f"{ENV_RUNNERS}/episode_return_mean"  # ... EPISODE_RETURN_MEAN
EVALUATION_RETURN_METRIC = f"evaluation/{RETURN_METRIC}"  # ... EVALUATION_RESULTS
ENV_STEPS_METRIC = f"{ENV_RUNNERS}/num_env_steps_sampled_lifetime"  # ... NUM_ENV_STEPS_SAMPLED_LIFETIME
EPISODES_METRIC = f"{ENV_RUNNERS}/num_episodes_lifetime"  # ... NUM_EPISODES_LIFETIME


def lookup(result: dict, path: str, default: Any = None) -> Any:
    """``result["a"]["b"]`` for ``"a/b"``; ``default`` when any part is missing."""
    for key in path.split("/"):
        if not isinstance(result, dict) or key not in result:
            return default
        result = result[key]
    return result
