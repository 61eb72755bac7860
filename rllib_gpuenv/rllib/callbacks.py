"""A workaround for RLlib 2.60's episode metrics on its stock env runner in the driver.

With ``num_env_runners=0`` the stock ``SingleAgentEnvRunner`` returns, from ``sample()``, the
very episode objects it keeps to compute episode lengths and returns when an episode ends
(``_ongoing_episodes_for_metrics``). PPO's learner connector ``AddOneTsToEpisodesAndTruncate``
then appends a bootstrap timestep (reward 0) to each of them in place. An episode that spanned
k ``sample()`` calls is therefore reported k - 1 steps too long: ``episode_len_max`` 530 for
CartPole's 500-step episodes, ``episode_len_mean`` above ``episode_return_mean``. Remote env
runners are not affected (their episodes reach the learner as copies), nor are returns (the
added reward is 0), nor is what PPO learns. ``CopyEpisodesForLearner`` hands the learner copies,
so the runner's own objects stay as they were sampled.
"""

from __future__ import annotations

from ray.rllib.callbacks.callbacks import RLlibCallback


class CopyEpisodesForLearner(RLlibCallback):
    """Replace the episodes ``sample()`` returns by copies (``SingleAgentEpisode.slice``).

    The copies hold the same data (lookback included) and ids, so training is unchanged; only
    the env runner's metrics stop seeing the learner's in-place edits. Its cost per episode
    chunk is in benchmarks/RESULTS.md ("Episode metrics on RLlib's stock runner").
    """

    def on_sample_end(self, *, samples, **kwargs) -> None:
        if isinstance(samples, list):
            samples[:] = [episode.slice(slice(0, len(episode))) for episode in samples]
