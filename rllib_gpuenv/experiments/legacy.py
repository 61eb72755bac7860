"""Old RLlib experiment files in today's terms: renamed keys, transition flags, old-stack settings.

Files written for ``rllib train`` of Ray 0.8 to 2.x (RLlib's own ``tuned_examples`` among them)
carry three kinds of stale settings. Each is handled here, with one warning line naming it, so
that one run reports all of them (never one error per run):

* renamed keys and metrics (``num_workers``, ``sgd_minibatch_size``, ``episode_reward_mean``):
  translated to today's name;
* RLlib's transition flags (``_enable_learner_api``, ``enable_connectors``, ``use_pytorch``, ...),
  which switched between old and new code paths that no longer both exist: dropped;
* settings that only the old API stack read (``observation_filter``, ``lr_schedule``,
  ``exploration_config``, old ``model`` keys): translated where RLlib has a replacement
  (``MeanStdFilter`` becomes RLlib's env-to-module connector), else dropped, saying what
  replaces them.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from typing import Any

from rllib_gpuenv.experiments.errors import key_error
from rllib_gpuenv.experiments.metric_names import ENV_STEPS_METRIC, EPISODES_METRIC, RETURN_METRIC

logger = logging.getLogger(__name__)


# Old AlgorithmConfig keys -> today's (RLlib's own deprecation messages name most of these).
CONFIG_RENAMES = {
    "num_workers": "num_env_runners",
    "num_rollout_workers": "num_env_runners",
    "num_envs_per_worker": "num_envs_per_env_runner",
    "num_cpus_per_worker": "num_cpus_per_env_runner",
    "num_gpus_per_worker": "num_gpus_per_env_runner",
    "custom_resources_per_worker": "custom_resources_per_env_runner",
    "num_gpus": "num_gpus_per_learner",
    "num_learner_workers": "num_learners",
    "num_cpus_per_learner_worker": "num_cpus_per_learner",
    "num_gpus_per_learner_worker": "num_gpus_per_learner",
    "sgd_minibatch_size": "minibatch_size",
    "num_sgd_iter": "num_epochs",
    "lambda": "lambda_",
    "model": "model_config",
    "evaluation_num_workers": "evaluation_num_env_runners",
    "evaluation_num_episodes": "evaluation_duration",
    "recreate_failed_workers": "restart_failed_env_runners",
    "ignore_worker_failures": "ignore_env_runner_failures",
    "num_cpus_for_driver": "num_cpus_for_main_process",
    "num_cpus_for_local_worker": "num_cpus_for_main_process",
    "metrics_smoothing_episodes": "metrics_num_episodes_for_smoothing",
    "min_iter_time_s": "min_time_s_per_iteration",
    "min_time_s_per_reporting": "min_time_s_per_iteration",
    "timesteps_per_iteration": "min_sample_timesteps_per_iteration",
    "min_sample_timesteps_per_reporting": "min_sample_timesteps_per_iteration",
    "min_train_timesteps_per_reporting": "min_train_timesteps_per_iteration",
    "collect_metrics_timeout": "metrics_episode_collection_timeout_s",
    "learning_starts": "num_steps_sampled_before_learning_starts",
    "lr_schedule": "lr",  # the new stack's lr takes the same [[timestep, value], ...] schedule
    "entropy_coeff_schedule": "entropy_coeff",
}

_NEW_STACK = "RLlib's new API stack is the only one here"
_TF_ONLY = "a TensorFlow option; RLlib's new API stack runs torch only"
# RLlib's switches between old and new code paths (Ray 0.8 to 2.x): dropped.
TRANSITION_FLAGS = {
    "_enable_rl_trainer_api": _NEW_STACK,
    "_enable_learner_api": _NEW_STACK,
    "_enable_rl_module_api": _NEW_STACK,
    "_enable_new_api_stack": _NEW_STACK,
    "enable_rl_module_and_learner": _NEW_STACK,
    "enable_env_runner_and_connector_v2": _NEW_STACK,
    "enable_connectors": "the new API stack always runs ConnectorV2 pipelines",
    "_disable_execution_plan_api": "the execution-plan API is gone; every algorithm has a training_step",
    "_use_trajectory_view_api": "the trajectory view API belonged to the old API stack",
    "_disable_preprocessor_api": "preprocessors belonged to the old API stack",
    "_disable_action_flattening": "action flattening belonged to the old API stack",
    "_disable_initialize_loss_from_dummy_batch": "dummy-batch loss initialisation belonged to the old API stack",
    "simple_optimizer": "the old API stack's optimizer choice; Learners optimise on the new one",
    "vtrace_drop_last_ts": "the new API stack's v-trace keeps every timestep",
    "auto_wrap_old_gym_envs": "envs are gymnasium envs; old gym envs are not wrapped any more",
    "_fake_gpus": "an old-API-stack testing option",
    "use_pytorch": "torch is the only framework",
    "eager": _TF_ONLY,
    "eager_tracing": _TF_ONLY,
    "eager_max_retraces": _TF_ONLY,
    "enable_tf1_exec_eagerly": _TF_ONLY,
    "tf_session_args": _TF_ONLY,
    "local_tf_session_args": _TF_ONLY,
    "_tf_policy_handles_more_than_one_loss": _TF_ONLY,
}

# Settings only the old API stack read: dropped, naming the replacement.
OLD_STACK_SETTINGS = {
    "exploration_config": "exploration is part of the RLModule (DQN: set `epsilon: [[0, 1.0], [10000, 0.05]]`)",
    "sample_collector": "episodes replace sample collectors",
    "sample_async": "use an asynchronous algorithm such as APPO or IMPALA",
    "remote_worker_envs": "run more env runners (num_env_runners) instead",
    "remote_env_batch_wait_ms": "run more env runners (num_env_runners) instead",
    "preprocessor_pref": "preprocess observations in the env or an env-to-module connector",
    "compress_observations": "no replacement",
    "sampler_perf_stats_ema_coef": "no replacement",
    "synchronize_filters": "RLlib's MeanStdFilter connector merges its statistics across env runners itself",
    "update_worker_filter_stats": "RLlib's MeanStdFilter connector merges its statistics across env runners itself",
    "use_worker_filter_stats": "RLlib's MeanStdFilter connector merges its statistics across env runners itself",
    "optimizer": "Learners build their optimizers (lr, grad_clip)",
    "num_multi_gpu_tower_stacks": "use num_learners and num_gpus_per_learner",
    "minibatch_buffer_size": "no replacement",
    "replay_proportion": "no replacement",
    "replay_buffer_num_slots": "no replacement",
    "learner_queue_size": "no replacement",
    "learner_queue_timeout": "no replacement",
    "_separate_vf_optimizer": "no replacement",
    "_lr_vf": "no replacement",
    "no_done_at_end": "gymnasium envs report terminated and truncated separately",
    "horizon": "limit episodes in the env (gymnasium's TimeLimit, max_episode_steps)",
    "soft_horizon": "limit episodes in the env (gymnasium's TimeLimit, max_episode_steps)",
    "monitor": "record videos with gymnasium's RecordVideo wrapper",
    "record_env": "record videos with gymnasium's RecordVideo wrapper",
    "input_evaluation": "use offline_evaluation_type",
    "prioritized_replay_eps": "no replacement",
    "final_prioritized_replay_beta": "no replacement",
    "prioritized_replay_beta_annealing_timesteps": "no replacement",
    "worker_side_prioritization": "no replacement",
    "replay_sequence_length": "no replacement",
    "replay_batch_size": "set train_batch_size_per_learner",
    "replay_mode": "no replacement",
    # Old SAC's (and DQN's) separate network settings: one model_config describes the RLModule today.
    "Q_model": "the Q network is set in model_config today: fcnet_hiddens/fcnet_activation (encoder), "
    "head_fcnet_hiddens/head_fcnet_activation (the Q and policy heads)",
    "policy_model": "the policy network is set in model_config today: fcnet_hiddens/fcnet_activation (encoder), "
    "head_fcnet_hiddens/head_fcnet_activation (the Q and policy heads)",
    "q_model_config": "the Q network is set in model_config today: head_fcnet_hiddens/head_fcnet_activation",
    "policy_model_config": "the policy network is set in model_config today: head_fcnet_hiddens/head_fcnet_activation",
}

# Old replay settings (DQN, SAC; Ray 0.8 to 2.x) -> today's replay_buffer_config entries, for an
# algorithm that has one: top-level keys of Ray 1.x, and the old buffer's own keys inside Ray 2.x's
# replay_buffer_config (None: dropped, with what replaces it).
REPLAY_KEYS = {
    "buffer_size": "capacity",
    "prioritized_replay_alpha": "alpha",
    "prioritized_replay_beta": "beta",
}
OLD_BUFFER_KEYS = {
    **REPLAY_KEYS,
    "prioritized_replay_eps": None,
    "worker_side_prioritization": None,
    "replay_mode": None,
    "replay_sequence_length": None,
    "replay_burn_in": None,
    "replay_zero_init_states": None,
    "storage_unit": None,
}
# The old stack's buffers -> the episode buffers of the new one (single-agent: the files' envs are).
OLD_BUFFER_TYPES = {
    "ReplayBuffer": "EpisodeReplayBuffer",
    "MultiAgentReplayBuffer": "EpisodeReplayBuffer",
    "PrioritizedReplayBuffer": "PrioritizedEpisodeReplayBuffer",
    "MultiAgentPrioritizedReplayBuffer": "PrioritizedEpisodeReplayBuffer",
}

# Algorithms RLlib removed (Ray 2.x; rllib_contrib kept some for a while) -> the successor to run
# (None: none in RLlib 2.60).
REMOVED_ALGORITHMS = {
    "A2C": "PPO",
    "A3C": "PPO",
    "PG": "PPO",
    "DDPPO": "PPO",
    "ES": "PPO",
    "ARS": "PPO",
    "DDPG": "SAC",
    "TD3": "SAC",
    "APEX_DDPG": "SAC",
    "MADDPG": "SAC",
    "APEX": "DQN",
    "ApexDQN": "DQN",
    "SimpleQ": "DQN",
    "R2D2": "DQN",
    "QMIX": "DQN",
    "SlateQ": "DQN",
    "Dreamer": "DreamerV3",
    "CRR": "CQL",
    "DT": "BC",
    "AlphaZero": None,
    "AlphaStar": None,
    "LeelaChessZero": None,
    "MAML": None,
    "MBMPO": None,
    "BanditLinUCB": None,
    "BanditLinTS": None,
    "Random": None,
}


def removed_algorithm_hint(run: str) -> str | None:
    """What to run instead of an algorithm RLlib removed (None for a name that never was one)."""
    if run not in REMOVED_ALGORITHMS:
        return None
    successor = REMOVED_ALGORITHMS[run]
    if successor is None:
        return f"RLlib removed {run} and has no successor for it"
    device = {"PPO": "DevicePPO", "DQN": "DeviceDQN", "SAC": "DeviceSAC"}.get(successor)
    device = f" ({device} for this package's envs)" if device else ""
    return f"RLlib removed {run}; its successor is {successor}: run: {successor}{device}"


# IMPALA/APPO's RMSProp settings were old-stack only (DQN's `epsilon` is today's exploration schedule).
IMPALA_OLD_STACK_SETTINGS = {
    key: "IMPALA/APPO Learners use Adam (lr, grad_clip)" for key in ("opt_type", "decay", "momentum", "epsilon")
}

OBSERVATION_FILTERS = {"NoFilter", "MeanStdFilter", "ConcurrentMeanStdFilter"}

# Old ModelV2 `model` keys -> DefaultModelConfig fields.
MODEL_RENAMES = {
    "post_fcnet_hiddens": "head_fcnet_hiddens",
    "post_fcnet_activation": "head_fcnet_activation",
    "post_fcnet_weights_initializer": "head_fcnet_kernel_initializer",
    "post_fcnet_weights_initializer_config": "head_fcnet_kernel_initializer_kwargs",
    "post_fcnet_bias_initializer_config": "head_fcnet_bias_initializer_kwargs",
    "fcnet_weights_initializer": "fcnet_kernel_initializer",
    "fcnet_weights_initializer_config": "fcnet_kernel_initializer_kwargs",
    "fcnet_bias_initializer_config": "fcnet_bias_initializer_kwargs",
    "conv_kernel_initializer_config": "conv_kernel_initializer_kwargs",
    "conv_bias_initializer_config": "conv_bias_initializer_kwargs",
    "lstm_weights_initializer": "lstm_kernel_initializer",
    "lstm_weights_initializer_config": "lstm_kernel_initializer_kwargs",
    "lstm_bias_initializer_config": "lstm_bias_initializer_kwargs",
}
_MODEL_HINTS = {
    "custom_model": "write an RLModule and pass its RLModuleSpec (config.rl_module(rl_module_spec=...)) from a Python "
    "experiment file",
    "custom_model_config": "pass it to your RLModule through model_config",
    "custom_action_dist": "an RLModule chooses its action distribution",
    "custom_preprocessor": "preprocess observations in the env or an env-to-module connector",
    "dim": "resize observations in the env (gymnasium's AtariPreprocessing/ResizeObservation wrappers)",
    "grayscale": "grey-scale observations in the env (gymnasium's AtariPreprocessing/GrayscaleObservation wrappers)",
    "zero_mean": "normalise observations in the env or with RLlib's MeanStdFilter connector",
    "framestack": "stack frames with RLlib's FrameStackingEnvToModule connector",
    "use_attention": "DefaultModelConfig has no attention net; write an RLModule",
    "lstm_use_prev_action_reward": "set lstm_use_prev_action and lstm_use_prev_reward",
}

# Old result metric names (stop criteria, checkpoint scores) -> today's.
METRIC_RENAMES = {
    "episode_reward_mean": RETURN_METRIC,
    "episode_reward_max": "env_runners/episode_return_max",
    "episode_reward_min": "env_runners/episode_return_min",
    "episode_len_mean": "env_runners/episode_len_mean",
    "sampler_results/episode_reward_mean": RETURN_METRIC,
    "env_runners/episode_reward_mean": RETURN_METRIC,
    "evaluation/episode_reward_mean": "evaluation/" + RETURN_METRIC,
    "evaluation/sampler_results/episode_reward_mean": "evaluation/" + RETURN_METRIC,
    "timesteps_total": ENV_STEPS_METRIC,
    "episodes_total": EPISODES_METRIC,
}

# Old top-level experiment keys (Tune's old ``Experiment``) -> where they go today.
EXPERIMENT_RENAMES = {
    "local_dir": "storage_path",
    "upload_dir": "storage_path",  # old Tune copied the results there; today's writes them there
    "checkpoint_freq": "checkpoint_config.checkpoint_frequency",
    "checkpoint_at_end": "checkpoint_config.checkpoint_at_end",
    "keep_checkpoints_num": "checkpoint_config.num_to_keep",
    "checkpoint_score_attr": "checkpoint_config.checkpoint_score_attribute",
    "max_failures": "failure_config.max_failures",
}

# Old top-level experiment keys and ``rllib train`` options whose work is done otherwise today:
# what to do instead. (An error, not a warning: the run would not be the one asked for.)
REPLACED = {
    "resources_per_trial": "RLlib asks Tune for each trial's resources from the algorithm's config: set "
    "num_env_runners, num_cpus_per_env_runner, num_gpus_per_env_runner, num_learners and num_gpus_per_learner there",
    "export_formats": "RLlib's new API stack exports no model formats: a checkpoint holds the RLModule, which "
    "RLModule.from_checkpoint(<checkpoint>/learner_group/learner/rl_module/default_policy) loads",
}
# Old keys that no longer do anything: dropped with a warning.
DROPPED = {
    "sync_on_checkpoint": "Tune syncs each checkpoint to the storage path itself",
    "sync_to_driver": "Tune syncs the trials' results to the storage path itself",
}


def _warn(where: str, key: str, message: str) -> None:
    logger.warning("%s: %s: %s", where, key, message)


def mean_std_filter_connector(env=None, spaces=None, device=None):
    """``env_to_module_connector`` for ``observation_filter: MeanStdFilter`` (old RLlib's filter:
    running mean/std normalisation, clipped at 10)."""
    from ray.rllib.connectors.env_to_module import MeanStdFilter

    return MeanStdFilter(clip_by_value=10.0)


def translate_metric(metric: str, where: str) -> str:
    """Today's name of a result metric (stop criterion), warning when it was an old name."""
    new = METRIC_RENAMES.get(metric)
    if new is None:
        return metric
    _warn(where, f"stop.{metric}", f"called {new!r} today; using that")
    return new


def translate_config(settings: dict, config: Any, where: str) -> dict:
    """Old settings -> today's, with one warning line per translated or dropped key.

    ``config`` (the algorithm's default AlgorithmConfig) decides what is old-stack only and
    whether an observation filter can be applied (DevicePPO's runner runs no env-to-module
    connectors).
    """
    from ray.rllib.algorithms.algorithm_config import DEPRECATED_VALUE

    out: dict = {}
    model_moves: dict = {}
    buffer_moves: dict = {}  # old top-level replay keys
    buffer_settings: dict | None = None  # the file's replay_buffer_config, old keys translated
    for key, value in settings.items():
        if key in TRANSITION_FLAGS:
            _warn(where, key, f"dropped: an RLlib transition flag ({TRANSITION_FLAGS[key]})")
            continue
        if key == "framework":
            _translate_framework(value, where)
            continue
        if key == "observation_filter":
            out.update(_observation_filter(value, config, where))
            continue
        if key == "exploration_config" and _epsilon_greedy(value) and _has_epsilon_schedule(config):
            out["epsilon"] = _epsilon_schedule(value)
            _warn(where, key, f"EpsilonGreedy is today's epsilon schedule: using epsilon: {out['epsilon']}")
            continue
        if hasattr(config, "replay_buffer_config") and (key in REPLAY_KEYS or key == "prioritized_replay"):
            buffer_moves.update(_old_replay_key(key, value, where))
            continue
        if key == "replay_buffer_config" and hasattr(config, "replay_buffer_config") and isinstance(value, dict):
            buffer_settings, learning_starts = _old_buffer_settings(value, where)
            if learning_starts is not None:
                out.setdefault("num_steps_sampled_before_learning_starts", learning_starts)
            continue
        if key == "vf_share_layers":  # old PPO/APPO put it next to the model
            _warn(where, key, "moved to model_config.vf_share_layers")
            model_moves[key] = value
            continue
        if key in CONFIG_RENAMES:
            new = CONFIG_RENAMES[key]
            if value is None and key.endswith("_schedule"):
                continue  # "no schedule": today's constant value stays
            _warn(where, key, f"called {new!r} today; using that")
            key = new
        elif key in OLD_STACK_SETTINGS or (key in IMPALA_OLD_STACK_SETTINGS and _is_impala(config)):
            hint = OLD_STACK_SETTINGS.get(key) or IMPALA_OLD_STACK_SETTINGS[key]
            _warn(where, key, f"dropped: only RLlib's old API stack read it ({hint})")
            continue
        elif type(getattr(config, key, None)) is int and getattr(config, key) == DEPRECATED_VALUE:
            _warn(where, key, "dropped: RLlib deprecated it and no longer reads it")
            continue
        out[key] = value
    if model_moves:
        out["model_config"] = {**(out.get("model_config") or {}), **model_moves}
    if buffer_moves or buffer_settings is not None:
        out["replay_buffer_config"] = {**buffer_moves, **(buffer_settings or {})}
    return out


def _old_replay_key(key: str, value: Any, where: str) -> dict:
    """A top-level replay key of Ray 1.x as today's replay_buffer_config entry."""
    if key == "prioritized_replay":
        kind = "PrioritizedEpisodeReplayBuffer" if value else "EpisodeReplayBuffer"
        _warn(where, key, f"today's replay_buffer_config.type; using {kind!r}")
        return {"type": kind}
    new = REPLAY_KEYS[key]
    _warn(where, key, f"called replay_buffer_config.{new} today; using that")
    return {new: value}


def _old_buffer_settings(settings: dict, where: str) -> tuple[dict, Any]:
    """A replay_buffer_config in today's terms: an old buffer type and the old buffer's keys
    translated or dropped (one warning each); also returns its ``learning_starts`` (Ray 2.0-2.3
    kept it there; today's num_steps_sampled_before_learning_starts), or None."""
    out, learning_starts = {}, None
    for key, value in settings.items():
        if key == "type" and value in OLD_BUFFER_TYPES:
            out["type"] = OLD_BUFFER_TYPES[value]
            _warn(where, f"replay_buffer_config.type: {value}", f"an old API stack buffer; using {out['type']!r}")
        elif key == "learning_starts":
            learning_starts = value
            _warn(where, "replay_buffer_config.learning_starts", "called num_steps_sampled_before_learning_starts today")
        elif key in OLD_BUFFER_KEYS and OLD_BUFFER_KEYS[key] is None:
            _warn(where, f"replay_buffer_config.{key}", "dropped: only RLlib's old API stack buffers read it")
        elif key in OLD_BUFFER_KEYS:
            out[OLD_BUFFER_KEYS[key]] = value
            _warn(where, f"replay_buffer_config.{key}", f"called replay_buffer_config.{OLD_BUFFER_KEYS[key]} today")
        else:
            out[key] = value
    return out, learning_starts


def _epsilon_greedy(exploration: Any) -> bool:
    return isinstance(exploration, dict) and exploration.get("type", "EpsilonGreedy") in (
        "EpsilonGreedy",
        "PerWorkerEpsilonGreedy",
    )


def _has_epsilon_schedule(config: Any) -> bool:
    """DQN-like configs, whose ``epsilon`` is the exploration schedule (IMPALA's is RMSProp's)."""
    return hasattr(config, "epsilon") and not _is_impala(config)


def _epsilon_schedule(exploration: dict) -> list:
    """Old ``EpsilonGreedy`` (linear decay; old DQN's defaults) -> ``[[0, initial], [timesteps, final]]``."""
    initial = exploration.get("initial_epsilon", 1.0)
    final = exploration.get("final_epsilon", 0.02)
    return [[0, initial], [int(exploration.get("epsilon_timesteps", 10000)), final]]


def _is_impala(config: Any) -> bool:
    from ray.rllib.algorithms.impala import IMPALAConfig

    return isinstance(config, IMPALAConfig)


def _translate_framework(value: Any, where: str) -> None:
    if value in ("torch", None):
        _warn(where, "framework", "dropped: torch is the only framework on RLlib's new API stack")
    elif value in ("tf", "tf2", "tfe"):
        _warn(where, "framework", f"{value!r} dropped: RLlib's new API stack runs torch only; running with torch")
    else:
        raise key_error(
            where, "framework", f"unknown framework {value!r}; RLlib's new API stack runs torch only: drop the key"
        )


def _observation_filter(value: Any, config: Any, where: str) -> dict:
    """Old ``observation_filter`` -> the settings that do the same on the new API stack."""
    if value not in OBSERVATION_FILTERS:
        raise key_error(where, "observation_filter", f"unknown filter {value!r}; use one of {sorted(OBSERVATION_FILTERS)}")
    if value == "NoFilter":
        return {}  # what the new stack does anyway
    from rllib_gpuenv.rllib.device_config import DeviceRolloutsConfig

    if isinstance(config, DeviceRolloutsConfig):
        raise key_error(
            where,
            "observation_filter",
            f"{value} needs an env-to-module connector, and the device env runner runs none: "
            "drop observation_filter (normalise in the env instead), or use run: PPO",
        )
    _warn(where, "observation_filter", f"{value} is applied as RLlib's MeanStdFilter env-to-module connector")
    return {"env_to_module_connector": mean_std_filter_connector}


def translate_model_config(model: dict, where: str, key: str = "model_config") -> dict:
    """Old ``model`` keys -> ``DefaultModelConfig`` fields; old-only keys dropped with a warning,
    unknown keys an error with close matches."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.models import MODEL_DEFAULTS

    if not isinstance(model, dict):
        raise key_error(where, key, f"expected a mapping of DefaultModelConfig fields, got {model!r}")
    fields = {f.name for f in dataclasses.fields(DefaultModelConfig)}
    out = {}
    for name, value in model.items():
        if name in fields:
            out[name] = value
        elif name in MODEL_RENAMES:
            _warn(where, f"{key}.{name}", f"called {MODEL_RENAMES[name]!r} today; using that")
            out[MODEL_RENAMES[name]] = value
        elif name in MODEL_DEFAULTS or name in _MODEL_HINTS:
            hint = _MODEL_HINTS.get(name, "no replacement in DefaultModelConfig")
            _warn(where, f"{key}.{name}", f"dropped: an old ModelV2 setting ({hint})")
        else:
            close = difflib.get_close_matches(name, sorted(fields), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; DefaultModelConfig has {', '.join(sorted(fields))}"
            raise key_error(where, f"{key}.{name}", f"not a DefaultModelConfig field{hint}")
    return out


def checkpoint_score(attribute: str) -> dict:
    """Old Tune's ``checkpoint_score_attr`` as today's ``CheckpointConfig`` settings: a ``min-``
    prefix meant that lower is better."""
    if isinstance(attribute, str) and attribute.startswith("min-"):
        return {"checkpoint_score_attribute": attribute[4:], "checkpoint_score_order": "min"}
    return {"checkpoint_score_attribute": attribute}


def translate_experiment_keys(spec: dict, run_settings: dict[str, dict], where: str) -> dict:
    """Old top-level experiment keys (``local_dir``, ``checkpoint_freq``, ``max_failures``, ...)
    -> today's; those that went into ``checkpoint_config`` or ``failure_config`` are put in
    ``run_settings`` (``{"checkpoint_config": {...}, "failure_config": {...}}``)."""
    spec = dict(spec)
    for old in REPLACED:
        if old in spec:
            raise key_error(where, old, REPLACED[old])
    for old in DROPPED:
        if old in spec:
            spec.pop(old)
            _warn(where, old, f"dropped: {DROPPED[old]}")
    for local in ("local_dir", "storage_path"):  # upload_dir is where the results go now: no second place
        if "upload_dir" in spec and local in spec:
            spec.pop(local)
            _warn(where, local, "dropped: Tune writes the results to upload_dir (storage_path), not to a folder as well")
    for old, new in EXPERIMENT_RENAMES.items():
        if old not in spec:
            continue
        _warn(where, old, f"called {new!r} today; using that")
        value = spec.pop(old)
        if old == "checkpoint_score_attr":
            run_settings["checkpoint_config"].update(checkpoint_score(value))
        elif "." in new:
            setting, key = new.split(".", 1)
            run_settings[setting][key] = value
        else:
            spec[new] = value
    return spec
