"""Episode metrics on RLlib's stock env runner, with our env and with gymnasium's CartPole-v1.

Every CartPole step pays 1, so a finished episode's length equals its return, and no episode
outlives the time limit. RLlib 2.60's runner in the driver breaks both unless the learner gets
copies of its episodes (``CopyEpisodesForLearner``, set in the stock-runner config file).
"""

import math
import os

import pytest
from ray.rllib.callbacks.callbacks import RLlibCallback

from rllib_gpuenv.experiments import apply_config, load_experiments
from tests.helpers import CONFIGS

STOCK_RUNNER_CONFIG = os.path.join(CONFIGS, "gpu_cartpole_stock_runner.yaml")
# Tiny PPO: 8 envs x 8 steps per iteration, so episodes span several sample() calls.
TINY = {"num_envs_per_env_runner": 8, "train_batch_size_per_learner": 64, "minibatch_size": 32, "num_epochs": 1}
ITERATIONS = 6


def _train(env: str, max_episode_steps: int | None, workaround: bool = True) -> tuple[list[tuple], list[dict]]:
    """Train the stock-runner config a few tiny iterations; return every finished episode's
    (length, return, chunks), as its ``on_episode_end`` sees it, and RLlib's env-runner results."""
    (experiment,) = load_experiments(STOCK_RUNNER_CONFIG)
    config = experiment.config.environment(
        env, env_config={"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    )
    apply_config(config, dict(TINY), "test")
    if not workaround:
        config.callbacks(RLlibCallback)
    finished = []

    def record(*, episode, prev_episode_chunks, **_):
        chunks = [*prev_episode_chunks, episode]
        finished.append((sum(len(c) for c in chunks), sum(c.get_return() for c in chunks), len(chunks)))

    config.callbacks(on_episode_end=record)  # runs in this process: the runner is the local one
    algo = config.build_algo()
    try:
        results = [algo.train()["env_runners"] for _ in range(ITERATIONS)]
    finally:
        algo.stop()
    return finished, results


@pytest.mark.parametrize("max_episode_steps", [None, 20], ids=["500-step-limit", "20-step-limit"])
@pytest.mark.parametrize("env", ["GPUCartPole-v1", "CartPole-v1"], ids=["ours", "gymnasium"])
def test_every_finished_episode_has_length_equal_to_return_within_the_limit(ray_local, env, max_episode_steps):
    limit = max_episode_steps or 500
    finished, results = _train(env, max_episode_steps)
    assert finished, "no episode finished: the test would check nothing"
    assert any(chunks > 1 for _, _, chunks in finished), "no episode spanned two sample() calls"
    for length, ret, chunks in finished:
        assert length == ret and length <= limit, f"episode of {chunks} chunks: length {length}, return {ret}"
    if max_episode_steps:
        assert any(length == limit for length, _, _ in finished), "no episode reached the time limit"
    reported = [r for r in results if r.get("num_episodes")]
    assert reported
    for r in reported:  # what RLlib reports (and Tune stops on) agrees
        assert math.isclose(r["episode_len_mean"], r["episode_return_mean"], rel_tol=1e-6)
        assert r["episode_len_max"] <= limit and r["episode_len_max"] == r["episode_return_max"]


def test_rllib_still_needs_the_workaround(ray_local):
    """Without ``CopyEpisodesForLearner`` RLlib 2.60 counts PPO's bootstrap step once per
    earlier chunk. If this fails, RLlib has fixed it: drop the callback from the config file."""
    finished, _ = _train("GPUCartPole-v1", None, workaround=False)
    assert any(length == ret + chunks - 1 for length, ret, chunks in finished if chunks > 1)
