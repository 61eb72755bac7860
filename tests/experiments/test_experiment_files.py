"""Experiment files (old `rllib train` format): legacy names translated, everything checked before Ray starts."""

import logging
import os
import sys

import gymnasium as gym
import pytest

from rllib_gpuenv.experiments import ExperimentError, check_fits_cluster, inline_experiment, load_experiments
from rllib_gpuenv.experiments.legacy import TRANSITION_FLAGS, mean_std_filter_connector
from rllib_gpuenv.rllib import DevicePPO
from tests.helpers import (
    CONFIGS,
    OLD_EXPERIMENTS,
    write,
)

# --- loading and checking files (no Ray) ---------------------------------------------------------


def test_every_old_tuned_example_file_translates_to_a_config_rllib_accepts():
    """RLlib's old tuned examples (tests/old_experiments): each becomes the algorithm and config
    its file names, and RLlib's own validate() passes. test_rllib_train.py runs the PPO and DQN
    ones for an iteration; APPO, IMPALA (a grid search) and Pendulum PPO start RLlib's own
    algorithms the same way, at a minute's cost, and are checked here."""
    expected = {
        "cartpole-appo.yaml": ("cartpole-appo-vtrace", "APPO", "CartPole-v1"),
        "cartpole-dqn.yaml": ("cartpole-dqn", "DQN", "CartPole-v1"),
        "cartpole-impala.yaml": ("cartpole-impala", "IMPALA", "CartPole-v1"),
        "cartpole-ppo.yaml": ("cartpole-ppo", "PPO", "CartPole-v1"),
        "pendulum-ppo.yaml": ("pendulum-ppo", "PPO", "Pendulum-v1"),
    }
    found = {}
    for name in sorted(f for f in os.listdir(OLD_EXPERIMENTS) if f.endswith(".yaml")):
        (experiment,) = load_experiments(os.path.join(OLD_EXPERIMENTS, name))
        experiment.config.validate()
        found[name] = (experiment.name, experiment.algo_class.__name__, experiment.config.env)
    assert found == expected


def test_the_metric_paths_are_rllib_s_and_tune_s_own():
    """``metric_names`` spells RLlib's names out (reading them needs no RLlib import): they must
    stay what RLlib reports."""
    from ray.rllib.utils import metrics

    from rllib_gpuenv.experiments import metric_names

    runners = metrics.ENV_RUNNER_RESULTS
    assert metric_names.RETURN_METRIC == f"{runners}/{metrics.EPISODE_RETURN_MEAN}"
    assert metric_names.EVALUATION_RETURN_METRIC == f"{metrics.EVALUATION_RESULTS}/{runners}/{metrics.EPISODE_RETURN_MEAN}"
    assert metric_names.ENV_STEPS_METRIC == f"{runners}/{metrics.NUM_ENV_STEPS_SAMPLED_LIFETIME}"
    assert metric_names.EPISODES_METRIC == f"{runners}/{metrics.NUM_EPISODES_LIFETIME}"


def test_every_shipped_config_loads():
    for name in sorted(os.listdir(CONFIGS)):
        experiments = load_experiments(os.path.join(CONFIGS, name))
        assert experiments and all(e.stop for e in experiments), name


def test_a_learning_rate_schedule_may_anneal_to_zero(tmp_path):
    """As PureJaxRL's and SB3's linear schedules do (RLlib trains on with lr 0); a constant 0 is refused (above)."""
    path = write(tmp_path, "x: {run: DevicePPO, env: GPUCartPole-v1, stop: {training_iteration: 1}, "
                 "config: {lr: [[0, 0.004], [286720, 0.0]]}}")  # fmt: skip
    (experiment,) = load_experiments(path)
    assert experiment.config.lr == [[0, 0.004], [286720, 0.0]]


def test_legacy_keys_and_metrics_are_translated_with_warnings(tmp_path, caplog):
    path = write(
        tmp_path,
        """
        old-style:
          run: PPO
          env: CartPole-v1
          local_dir: results
          checkpoint_freq: 5
          keep_checkpoints_num: 2
          checkpoint_score_attr: min-env_runners/episode_len_mean
          stop: {episode_reward_mean: 150, timesteps_total: 100000}
          config:
            framework: torch
            num_workers: 1
            num_envs_per_worker: 4
            sgd_minibatch_size: 64
            num_sgd_iter: 3
            lambda: 0.9
            lr_schedule: [[0, 0.001], [10000, 0.0001]]
            model: {fcnet_hiddens: [32, 32], post_fcnet_hiddens: [16], custom_model: my_model}
    """,
    )
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv"):
        (exp,) = load_experiments(path)
    c = exp.config
    assert (c.num_env_runners, c.num_envs_per_env_runner, c.minibatch_size, c.num_epochs, c.lambda_) == (1, 4, 64, 3, 0.9)
    assert c.lr == [[0, 0.001], [10000, 0.0001]]
    assert c.model_config["fcnet_hiddens"] == [32, 32] and c.model_config["head_fcnet_hiddens"] == [16]
    assert "custom_model" not in c.model_config
    assert exp.stop == {"env_runners/episode_return_mean": 150, "env_runners/num_env_steps_sampled_lifetime": 100000}
    assert exp.checkpoint_config == {
        "checkpoint_frequency": 5,
        "num_to_keep": 2,
        "checkpoint_score_attribute": "env_runners/episode_len_mean",
        "checkpoint_score_order": "min",  # old Tune's "min-" prefix
    }
    assert exp.storage_path == str(tmp_path / "results")
    warned = caplog.text
    for old in (
        "num_workers",
        "num_envs_per_worker",
        "sgd_minibatch_size",
        "num_sgd_iter",
        " model:",
        "lr_schedule",
        "stop.episode_reward_mean",
        "stop.timesteps_total",
        "local_dir",
        "checkpoint_freq",
        "keep_checkpoints_num",
        "checkpoint_score_attr",
        "framework",
        "model_config.post_fcnet_hiddens",
        "model_config.custom_model: dropped",
    ):
        assert old in warned, old


def test_old_tune_run_keys_retry_failed_trials_and_write_results_to_a_uri(tmp_path, caplog):
    """Old Tune's ``max_failures`` is today's ``failure_config`` (checked by Tune's FailureConfig);
    ``upload_dir``, where old Tune copied the results, is the storage path, a URI kept as written
    (``local_dir`` beside it is dropped: Tune writes to one place). Keys whose work RLlib does
    otherwise are an error that says how; ``sync_on_checkpoint`` is dropped with a warning."""
    path = write(
        tmp_path,
        f"""
        old-run:
          run: PPO
          env: CartPole-v1
          {STOP}
          local_dir: results
          upload_dir: s3://bucket/runs
          max_failures: 3
          sync_on_checkpoint: true
        new-run:
          run: PPO
          env: CartPole-v1
          {STOP}
          storage_path: gs://bucket/runs
          failure_config: {{max_failures: -1, fail_fast: false}}
        both-places:
          run: PPO
          env: CartPole-v1
          {STOP}
          storage_path: results
          upload_dir: s3://bucket/both
    """,
    )
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv"):
        old, new, both = load_experiments(path)
    assert both.storage_path == "s3://bucket/both"
    assert "experiment 'both-places': storage_path: dropped: Tune writes the results to upload_dir" in caplog.text
    assert old.failure_config == {"max_failures": 3} and old.storage_path == "s3://bucket/runs"
    assert new.failure_config == {"max_failures": -1, "fail_fast": False} and new.storage_path == "gs://bucket/runs"
    for text in (
        "max_failures: called 'failure_config.max_failures' today",
        "upload_dir: called 'storage_path' today",
        "local_dir: dropped: Tune writes the results to upload_dir",
        "sync_on_checkpoint: dropped: Tune syncs each checkpoint",
    ):
        assert text in caplog.text, text
    for body, message in [
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, resources_per_trial: {{cpu: 2}}}}",
            r"experiment 'x': resources_per_trial: RLlib asks Tune for each trial's resources from the algorithm's config",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, export_formats: [model]}}",
            r"experiment 'x': export_formats: RLlib's new API stack exports no model formats",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, failure_config: {{max_retries: 2}}}}",
            r"experiment 'x': failure_config: .*max_retries",
        ),
        (f"x: {{run: PPO, env: CartPole-v1, {STOP}, failure_config: 2}}", r"failure_config: expected a mapping of tune"),
    ]:
        with pytest.raises(ExperimentError, match=message):
            load_experiments(write(tmp_path, body))


def test_transition_flags_and_old_stack_settings_are_dropped_with_one_warning_each(tmp_path, caplog):
    flags = "\n".join(f"    {flag}: true" for flag in TRANSITION_FLAGS)
    path = write(
        tmp_path,
        f"""
x:
  run: DQN
  env: CartPole-v1
  stop: {{training_iteration: 1}}
  config:
{flags}
    observation_filter: MeanStdFilter
    exploration_config: {{type: EpsilonGreedy, initial_epsilon: 1.0, final_epsilon: 0.1, epsilon_timesteps: 500}}
    sample_async: true
    remote_worker_envs: true
    compress_observations: true
    synchronize_filters: true
    """,
    )
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv"):
        (exp,) = load_experiments(path)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("rllib_gpuenv")]
    for key in [
        *TRANSITION_FLAGS,
        "sample_async",
        "remote_worker_envs",
        "compress_observations",
        "synchronize_filters",
    ]:
        named = [line for line in lines if f": {key}: " in line]
        assert len(named) == 1 and "dropped" in named[0], (key, named)
    filter_line = next(line for line in lines if ": observation_filter: " in line)
    assert "MeanStdFilter env-to-module connector" in filter_line
    assert exp.config._env_to_module_connector is mean_std_filter_connector
    assert exp.config.epsilon == [[0, 1.0], [500, 0.1]]
    assert exp.config.enable_rl_module_and_learner and exp.config.enable_env_runner_and_connector_v2


@pytest.mark.parametrize(
    "run, settings",
    [
        (  # Ray 1.x: top-level keys
            "DeviceDQN",
            "{buffer_size: 20000, prioritized_replay: true, prioritized_replay_alpha: 0.5, prioritized_replay_beta: 0.3, "
            "learning_starts: 500}",
        ),
        (  # Ray 2.0-2.x: the old stack's buffer and its keys inside replay_buffer_config
            "DQN",
            "{replay_buffer_config: {type: MultiAgentPrioritizedReplayBuffer, capacity: 20000, prioritized_replay_alpha: "
            "0.5, prioritized_replay_beta: 0.3, prioritized_replay_eps: 1.0e-6, learning_starts: 500}}",
        ),
    ],
)
def test_old_replay_settings_become_todays_replay_buffer_config(tmp_path, caplog, run, settings):
    """Old DQN files' replay settings are translated, not dropped: before, a file's buffer_size
    and its prioritized replay were dropped with a hint, and the run used the default buffer."""
    path = write(tmp_path, f"x: {{run: {run}, env: GPUCartPole-v1, {STOP}, config: {settings}}}")
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv"):
        (exp,) = load_experiments(path)
    buffer = exp.config.replay_buffer_config
    assert (buffer["type"], buffer["capacity"], buffer["alpha"], buffer["beta"]) == (
        "PrioritizedEpisodeReplayBuffer",
        20000,
        0.5,
        0.3,
    ), buffer
    assert "prioritized_replay_eps" not in buffer and exp.config.num_steps_sampled_before_learning_starts == 500
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("rllib_gpuenv")]
    assert any("prioritized_replay_alpha: called replay_buffer_config.alpha today" in line for line in lines), lines
    exp.config.validate()  # the device buffer takes every translated setting


def test_observation_filter_on_device_ppo_is_an_error(tmp_path):
    path = write(
        tmp_path,
        "x: {run: DevicePPO, env: GPUCartPole-v1, stop: {training_iteration: 1}, config: {observation_filter: MeanStdFilter}}",
    )
    with pytest.raises(
        ExperimentError,
        match=r"exp.yaml: experiment 'x': observation_filter: MeanStdFilter needs an env-to-module connector, and the "
        r"device env runner runs none",
    ):
        load_experiments(path)


STOP = "stop: {training_iteration: 1}"


@pytest.mark.parametrize(
    "body, message",
    [
        (
            f"x: {{run: NoSuchAlgo, env: CartPole-v1, {STOP}}}",
            r"exp.yaml: experiment 'x': run: unknown algorithm 'NoSuchAlgo'; available: DevicePPO.*PPO",
        ),
        (  # each algorithm named once, whatever RLlib's registry holds
            f"x: {{run: DevicePP0, env: CartPole-v1, {STOP}}}",
            r"run: unknown algorithm 'DevicePP0'; did you mean DevicePPO, [^?]*\? available: DevicePPO, DeviceDQN, DeviceSAC, "
            r"(?!.*DevicePPO)",
        ),
        (f"x: {{run: ppo, env: CartPole-v1, {STOP}}}", r"run: unknown algorithm 'ppo'; did you mean PPO\? available:"),
        (
            f"x: {{run: PPO, env: CartPoel-v1, {STOP}}}",
            r"exp.yaml: experiment 'x': env: unknown env 'CartPoel-v1'; did you mean CartPole-v1",
        ),
        (
            f"x: {{run: PPO, env: 'no_such_module_x:Knobs-v0', {STOP}}}",
            r"exp.yaml: experiment 'x': env: 'no_such_module_x:Knobs-v0': no module 'no_such_module_x' to import: "
            r"install it, put its folder on PYTHONPATH, or drop the 'no_such_module_x:' prefix$",
        ),
        (
            f"x: {{run: PPO, env: Pendulum-v0, {STOP}}}",
            r"exp.yaml: experiment 'x': env: Environment version v0 for `Pendulum` is deprecated. Please use `Pendulum-v1`",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{num_env_runer: 2}}}}",
            r"exp.yaml: experiment 'x': num_env_runer: not a PPOConfig setting; did you mean num_env_runners",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, stopp: {{}}}}",
            r"exp.yaml: experiment 'x': stopp: not an experiment key; did you mean stop\?",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{devices: {{learner: cpu}}}}}}",
            r"experiment 'x': devices: a section of the device algorithms: needs run: DevicePPO, DeviceDQN or DeviceSAC",
        ),
        (
            f"x: {{run: DevicePPO, env: GPUCartPole-v1, {STOP}, config: {{devices: {{learnr: cpu}}}}}}",
            r"experiment 'x': devices.learnr: not an argument of devices\(\); did you mean learner\? they are: learner, ",
        ),
        (
            f"x: {{run: DevicePPO, env: GPUCartPole-v1, {STOP}, config: {{device_rollouts: {{rollout_lenght: 8}}}}}}",
            r"experiment 'x': device_rollouts.rollout_lenght: not an argument of device_rollouts\(\); did you mean "
            r"rollout_length\?",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{model: {{fcnet_hidens: [8]}}}}}}",
            r"experiment 'x': model_config.fcnet_hidens: not a DefaultModelConfig field; did you mean fcnet_hiddens",
        ),
        # values (issue 17): RLlib's validate() and the checks RLlib does not make, before Ray starts
        (
            f"x: {{run: DevicePPO, env: GPUCartPole-v1, {STOP}, config: {{device_rollouts: {{rollout_length: 0}}}}}}",
            r"experiment 'x': device_rollouts.rollout_length: must be a positive integer, got 0",
        ),
        (
            f"x: {{run: DevicePPO, env: GPUCartPole-v1, {STOP}, config: {{minibatch_size: 100}}}}",
            r"experiment 'x': minibatch_size: minibatch_size=100 does not divide the per-learner batch of 2048 env steps: "
            r"use a divisor such as 128",
        ),
        (  # each variant of a search is validated, and the one that fails named
            f"x: {{run: DevicePPO, env: GPUCartPole-v1, {STOP}, config: {{num_envs_per_env_runner: {{grid_search: [32, 4]}}, "
            f"device_rollouts: {{rollout_length: 64}}, minibatch_size: 512}}}}",
            r"minibatch_size=512 is larger than the per-learner batch of 256 env steps: use a divisor such as 256 \(in the "
            r"search's variant num_envs_per_env_runner=4\)$",
        ),
        (
            f"x: {{run: DevicePPO, env: GPUCartPole-v1, {STOP}, config: {{devices: {{env_runners: 'cuda:7'}}}}}}",
            r"experiment 'x': devices.env_runners: device 'cuda:7' asked for, but .*GPU",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{num_envs_per_env_runner: 0}}}}",
            r"experiment 'x': num_envs_per_env_runner: must be a positive integer, got 0",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{minibatch_size: 100000}}}}",
            r"experiment 'x': minibatch_size: `minibatch_size` \(100000\) must be <= `train_batch_size_per_learner` \(4000\)",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{gamma: 1.5}}}}",
            r"experiment 'x': gamma: must be a number in \[0, 1\], got 1.5",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{lr: [[0, 0.1], [100, -1]]}}}}",
            r"experiment 'x': lr: must be a number > 0 or a schedule \[\[timestep, value\], ...\] of numbers >= 0",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{lr: 0}}}}",
            r"experiment 'x': lr: must be a number > 0 or a schedule",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, "
            "checkpoint_config: {checkpoint_score_attribute: episode_retrn_mean}}",
            r"experiment 'x': checkpoint_config.checkpoint_score_attribute: no RLlib or Tune result has this metric; did "
            r"you mean",
        ),
        (  # SAC's own learning rates (its lr is unused) and its temperature: they trained on, negative
            f"x: {{run: DeviceSAC, env: GPUPendulum-v1, {STOP}, config: {{actor_lr: -0.001}}}}",
            r"experiment 'x': actor_lr: must be a number > 0 or a schedule",
        ),
        (
            f"x: {{run: DeviceSAC, env: GPUPendulum-v1, {STOP}, config: {{critic_lr: 0}}}}",
            r"experiment 'x': critic_lr: must be a number > 0 or a schedule",
        ),
        (
            f"x: {{run: DeviceSAC, env: GPUPendulum-v1, {STOP}, config: {{initial_alpha: -1.0}}}}",
            r"experiment 'x': initial_alpha: must be a number > 0, got -1.0",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, config: {{batch_mode: whole_episodes}}}}",
            r"experiment 'x': batch_mode: `batch_mode` \(whole_episodes\) must be one of",
        ),
        (
            f"x: {{run: APPO, env: CartPole-v1, {STOP}, config: {{vtrace: false}}}}",
            r"experiment 'x': vtrace: IMPALA and APPO do NOT support vtrace=False anymore! Set "
            r"`config.training\(vtrace=True\)`.$",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, "
            "config: {seed: {grid_search: [1, 2]}, num_epochs: {grid_search: [1, 0]}}}",
            r"experiment 'x': num_epochs: must be a positive integer, got 0",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, num_samples: 0}}",
            r"experiment 'x': num_samples: must be a positive integer, got 0",
        ),
        (  # RLlib seeds numpy with it inside the trial, which fails there
            f"x: {{run: DevicePPO, env: GPUCartPole-v1, {STOP}, config: {{seed: -1}}}}",
            r"experiment 'x': seed: must be an integer from 0 to 2\*\*32 - 1, got -1",
        ),
        (  # RLlib would fail building its module, with an unrelated deprecation message
            f"x: {{run: DeviceDQN, env: GPUPendulum-v1, {STOP}}}",
            r"experiment 'x': env: the env GPUPendulum-v1 has Box\(-2.0, 2.0, \(1,\), float32\) actions, but DeviceDQN "
            r"needs Discrete ones .*: train it with DevicePPO",
        ),
        (
            f"x: {{run: PPO, env: CartPole-v1, {STOP}, checkpoint_config: {{checkpoint_frequncy: 2}}}}",
            r"experiment 'x': checkpoint_config: .*checkpoint_frequncy",
        ),
        # stop criteria and names
        (
            "x: {run: PPO, env: CartPole-v1, stop: {env_runners/episode_retrun_mean: 100}}",
            r"experiment 'x': stop.env_runners/episode_retrun_mean: no RLlib or Tune result has this metric; did you mean "
            r"env_runners/episode_return_mean",
        ),
        (
            "x: {run: PPO, env: CartPole-v1, stop: {evaluation/env_runners/episode_return_mean: 100}}",
            r"experiment 'x': stop.evaluation/env_runners/episode_return_mean: an evaluation metric, but the config "
            r"never evaluates: set evaluation_interval",
        ),
        (
            "x: {run: PPO, env: CartPole-v1, stop: {training_iteration: ten}}",
            r"experiment 'x': stop.training_iteration: the threshold must be a number, got 'ten'",
        ),
        (
            "x: {run: PPO, env: CartPole-v1}",
            r"experiment 'x': stop: no stop criteria, so the run would never end: .* or pass --no-stop",
        ),
        (
            f"'../../../x': {{run: PPO, env: CartPole-v1, {STOP}}}",
            r"experiment '../../../x': name: '../../../x' is not a plain directory name",
        ),
        (f"'/tmp/x': {{run: PPO, env: CartPole-v1, {STOP}}}", r"experiment '/tmp/x': name: .* is not a plain directory name"),
        (f"'..': {{run: PPO, env: CartPole-v1, {STOP}}}", r"experiment '..': name: '..' is not a plain directory name"),
        (  # was blamed on devices.learner, whose 'auto' the fix's words quote
            f"x: {{run: DevicePPO, env: GPUCartPole-v1, {STOP}, "
            "config: {devices: {learner: auto, env_runners: auto, evaluation: 'cuda:7'}}}",
            r"experiment 'x': devices.evaluation: device 'cuda:7'",
        ),
        ("x: [run: PPO\n", r"exp.yaml: not valid YAML"),
        ("- just a list", r"exp.yaml: expected experiments as"),
    ],
)
def test_bad_experiment_files_name_the_file_experiment_and_key(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(ExperimentError, match=message) as err:
        load_experiments(path)
    assert "\n" not in str(err.value)


def test_every_misspelt_key_of_an_experiment_is_named_at_once(tmp_path):
    """A walkthrough's file named its stop key's typo, then on the next run its config's: one line
    each now, the experiment's keys and its config's."""
    path = write(
        tmp_path,
        "x:\n  run: DevicePPO\n  env: GPUCartPole-v1\n  stopp: {training_iteration: 2}\n"
        "  config: {lamda: 0.9, num_epoch: 2}\n",
    )
    with pytest.raises(ExperimentError) as err:
        load_experiments(path)
    lines = str(err.value).splitlines()
    assert [line.split(": ")[2] for line in lines] == ["stopp", "lamda", "num_epoch"], lines
    assert "did you mean stop?" in lines[0] and "did you mean num_epochs?" in lines[2]


@pytest.mark.parametrize(
    "body, message",
    [
        # RLlib 2.60's own message for this combination fails with "'int' object is not subscriptable"
        (
            f"x: {{run: SAC, env: Pendulum-v1, {STOP}, config: {{n_step: 3, rollout_fragment_length: 1}}}}",
            r"experiment 'x': rollout_fragment_length: rollout_fragment_length=1 is shorter than n_step=3 needs: "
            r"set rollout_fragment_length: 3 \(or auto\), or a smaller n_step$",
        ),
        (
            f"x: {{run: SAC, env: Pendulum-v1, {STOP}, config: {{n_step: [2, 4], rollout_fragment_length: 3}}}}",
            r"experiment 'x': rollout_fragment_length: .* set rollout_fragment_length: 4 ",
        ),
        # the file never set lr: RLlib's own default for CQL fails RLlib's own check
        (
            f"x: {{run: CQL, env: Pendulum-v1, {STOP}, config: {{input: dataset}}}}",
            r"experiment 'x': lr: not set in this file: RLlib's default for CQL \(lr=0.0003\) fails RLlib's own check; "
            r"set lr in the config \(in the file: lr: null\)",
        ),
        # removed algorithms name their successor, not a look-alike name (A2C is not SAC)
        (
            f"x: {{run: A2C, env: CartPole-v1, {STOP}}}",
            r"run: unknown algorithm 'A2C': RLlib removed A2C; its successor is PPO: run: PPO",
        ),
        (
            f"x: {{run: DDPG, env: Pendulum-v1, {STOP}}}",
            r"run: unknown algorithm 'DDPG': RLlib removed DDPG; its successor is SAC",
        ),
        (f"x: {{run: APEX, env: CartPole-v1, {STOP}}}", r"run: unknown algorithm 'APEX': .* its successor is DQN: run: DQN"),
        # RLlib's example envs moved
        (
            f"x: {{run: PPO, env: ray.rllib.examples.env.repeat_after_me_env.RepeatAfterMeEnv, {STOP}}}",
            r"env: unknown env 'ray.rllib.examples.env.repeat_after_me_env.RepeatAfterMeEnv': RLlib moved that class to "
            r"ray.rllib.examples.envs.classes.repeat_after_me_env.RepeatAfterMeEnv; .*config.environment\(RepeatAfterMeEnv\)",
        ),
    ],
)
def test_old_files_errors_name_the_real_cause(tmp_path, body, message):
    """Issue 28, 6g: what real old files got blamed on the wrong thing."""
    path = write(tmp_path, body)
    with pytest.raises(ExperimentError, match=message) as err:
        load_experiments(path)
    assert "\n" not in str(err.value)


def test_old_sac_network_keys_point_to_model_config(tmp_path, caplog):
    path = write(
        tmp_path,
        f"x: {{run: SAC, env: Pendulum-v1, {STOP}, config: {{Q_model: {{fcnet_hiddens: [64]}}, policy_model: {{}}}}}}",
    )
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv"):
        load_experiments(path)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("rllib_gpuenv")]
    for key in ("Q_model", "policy_model"):
        (line,) = [line for line in lines if f": {key}: " in line]
        assert "dropped" in line and "model_config" in line and "head_fcnet_hiddens" in line, line


def test_every_bad_experiment_of_a_file_is_named_at_once(tmp_path):
    path = write(
        tmp_path,
        """
        a: {run: PPO, env: CartPole-v1, stop: {training_iteration: 1}, config: {gamma: 2}}
        b: {run: PPO, env: CartPole-v1, stop: {training_iteration: 1}}
        c: {run: PPO, env: CartPole-v1, stop: {training_iteration: 1}, config: {num_epochs: 0}}
    """,
    )
    with pytest.raises(ExperimentError) as err:
        load_experiments(path)
    lines = str(err.value).splitlines()
    assert len(lines) == 2 and "experiment 'a': gamma:" in lines[0] and "experiment 'c': num_epochs:" in lines[1]


def test_command_line_overrides_are_checked_and_named(tmp_path):
    path = write(
        tmp_path, "x: {run: DevicePPO, env: GPUCartPole-v1, stop: {training_iteration: 1}, config: {minibatch_size: 128}}"
    )
    (exp,) = load_experiments(path, config_overrides={"minibatch_size": 256}, stop_overrides={"episode_reward_mean": 50})
    assert exp.config.minibatch_size == 256 and exp.stop == {"training_iteration": 1, "env_runners/episode_return_mean": 50}
    with pytest.raises(
        ExperimentError,
        match=r"exp.yaml: experiment 'x': minibatch_size \(from --config\): minibatch_size=100 does not divide",
    ):
        load_experiments(path, config_overrides={"minibatch_size": 100})
    with pytest.raises(
        ExperimentError, match=r"exp.yaml: experiment 'x': devices.env_runners \(from --config\): device 'cuda:7'"
    ):
        load_experiments(path, config_overrides={"devices": {"env_runners": "cuda:7"}})


def test_a_nested_command_line_override_keeps_the_files_other_settings(tmp_path):
    """``--config '{"model_config": {"fcnet_activation": "relu"}}'`` changes the activation and
    keeps the file's hidden layers; ``device_rollouts``, ``env_config`` alike. Before, the nested
    mapping replaced the file's: RLlib's default 256x256 network trained, and rollouts of 32
    steps where the file said 64. A YAML file and a Python file merge alike; a search space and a
    replay buffer of another type replace."""
    path = write(
        tmp_path,
        """
        x:
          run: DevicePPO
          env: GPUCartPole-v1
          stop: {training_iteration: 1}
          config:
            num_envs_per_env_runner: 8
            device_rollouts: {rollout_length: 64}
            env_config: {max_episode_steps: 100, backend: torch}
            model_config: {fcnet_hiddens: [64, 64], fcnet_activation: tanh}
        """,
    )
    python = write(
        tmp_path,
        """
        from rllib_gpuenv.rllib import DevicePPOConfig
        config = (
            DevicePPOConfig()
            .environment("GPUCartPole-v1", env_config={"max_episode_steps": 100, "backend": "torch"})
            .env_runners(num_envs_per_env_runner=8)
            .device_rollouts(rollout_length=64)
            .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
        )
        stop = {"training_iteration": 1}
        """,
        name="exp.py",
    )
    overrides = {
        "model_config": {"fcnet_activation": "relu"},
        "device_rollouts": {"check_devices": True},
        "env_config": {"max_episode_steps": 50},
    }
    for file in (path, python):
        (exp,) = load_experiments(file, config_overrides=overrides)
        config = exp.config
        assert (config.model_config["fcnet_hiddens"], config.model_config["fcnet_activation"]) == ([64, 64], "relu"), file
        assert (config.rollout_length, config.check_devices) == (64, True), file
        assert (config.env_config["max_episode_steps"], config.env_config["backend"]) == (50, "torch"), file
    grid = {"model_config": {"fcnet_hiddens": {"grid_search": [[32], [16]]}}}
    (exp,) = load_experiments(path, config_overrides=grid)
    assert exp.config.to_dict()["_model_config"] == {
        "fcnet_hiddens": {"grid_search": [[32], [16]]},
        "fcnet_activation": "tanh",
    }
    dqn = write(
        tmp_path,
        "x: {run: DeviceDQN, env: GPUCartPole-v1, stop: {training_iteration: 1}, config: {replay_buffer_config: "
        "{type: PrioritizedEpisodeReplayBuffer, capacity: 5000, alpha: 0.5}}}",
        name="dqn.yaml",
    )
    (exp,) = load_experiments(dqn, config_overrides={"replay_buffer_config": {"capacity": 2000}})
    assert (exp.config.replay_buffer_config["capacity"], exp.config.replay_buffer_config["alpha"]) == (2000, 0.5)
    with pytest.raises(ExperimentError, match=r"replaces the whole dict when its 'type' changes\): give it"):
        load_experiments(dqn, config_overrides={"replay_buffer_config": {"type": "EpisodeReplayBuffer"}})


def test_stop_metrics_nested_paths_and_custom_callbacks(tmp_path, caplog):
    good = {
        "training_iteration": 3,
        "time_total_s": 60,
        "env_runners/episode_return_mean": 100,
        "num_env_steps_sampled_lifetime": 10_000,
        "evaluation/env_runners/episode_return_mean": 100,
        "learners/default_policy/policy_loss": 0.0,
        "env_runners/num_env_steps_sampled_lifetime_throughput/throughput_since_last_reduce": 1e6,
        "episodes_total": 100,
    }
    exp = inline_experiment("PPO", "CartPole-v1", {"evaluation_interval": 5}, stop=good)
    assert exp.stop["env_runners/num_episodes_lifetime"] == 100
    with pytest.raises(ExperimentError, match=r"stop.env_runners/my_metric: no RLlib or Tune result has this metric"):
        inline_experiment("PPO", "CartPole-v1", stop={"env_runners/my_metric": 1})
    # With callbacks of its own, an experiment may stop on what they log: a warning, not an error.
    path = write(
        tmp_path,
        """
        from ray.rllib.algorithms.ppo import PPOConfig
        from ray.rllib.callbacks.callbacks import RLlibCallback
        config = PPOConfig().environment("CartPole-v1").callbacks(RLlibCallback)
        config.callbacks_on_episode_end = lambda **kwargs: None
        stop = {"env_runners/my_metric": 1}
    """,
        name="custom.py",
    )
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv"):
        (exp,) = load_experiments(path)
    assert (
        "stop.env_runners/my_metric: no RLlib or Tune result has this metric" in caplog.text
        and "assuming your callbacks log it" in caplog.text
    )
    assert load_experiments(write(tmp_path, "x: {run: PPO, env: CartPole-v1}"), allow_no_stop=True)[0].stop == {}


def test_python_experiment_file(tmp_path):
    path = write(
        tmp_path,
        """
        from rllib_gpuenv.rllib import DevicePPOConfig
        config = DevicePPOConfig().environment("GPUCartPole-v1").env_runners(num_envs_per_env_runner=32)
        stop = {"episode_reward_mean": 100}
    """,
        name="my_exp.py",
    )
    (exp,) = load_experiments(path)
    assert exp.name == "my_exp" and exp.algo_class is DevicePPO and exp.stop == {"env_runners/episode_return_mean": 100}
    assert exp.config.env == "rllib_gpuenv:GPUCartPole-v1"
    bad = write(
        tmp_path,
        """
        from ray.rllib.algorithms.ppo import PPOConfig
        config = PPOConfig().environment("CartPole-v1").training(minibatch_size=8000)
        stop = {"training_iteration": 1}
        name = "../escape"
    """,
        name="bad.py",
    )
    with pytest.raises(ExperimentError, match=r"bad.py: experiment '../escape': name: "):
        load_experiments(bad)
    grid = write(
        tmp_path,
        """
        from ray import tune
        from ray.rllib.algorithms.ppo import PPOConfig
        config = PPOConfig().environment("CartPole-v1")
        config.training(lr=tune.grid_search([1e-3, 1e-4]), num_epochs=tune.grid_search([1, 0]))
        stop = {"training_iteration": 1}
    """,
        name="grid.py",
    )
    with pytest.raises(ExperimentError, match=r"grid.py: experiment 'grid': num_epochs: must be a positive integer, got 0"):
        load_experiments(grid)  # every variant Tune would run is checked
    assert load_experiments(grid, config_overrides={"num_epochs": 2})[0].config.lr == {"grid_search": [1e-3, 1e-4]}


def test_our_env_ids_reach_rllib_module_qualified_without_tune():
    """Any gymnasium id whose entry points live in rllib_gpuenv goes to RLlib as
    "rllib_gpuenv:<id>" (trial processes import the package themselves; no Tune registry)."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    stock = inline_experiment("PPO", "GPUCartPole-v1", stop={"training_iteration": 1}).config
    assert stock.env == "rllib_gpuenv:GPUCartPole-v1" and stock.gym_env_vectorize_mode == "vector_entry_point"
    assert (
        inline_experiment("DevicePPO", "rllib_gpuenv:GPUCartPole-v1", stop={"training_iteration": 1}).config.env
        == "rllib_gpuenv:GPUCartPole-v1"
    )
    assert inline_experiment("PPO", "CartPole-v1", stop={"training_iteration": 1}).config.env == "CartPole-v1"
    gym.register(
        "GPUCartPoleTestOnly-v0", vector_entry_point="rllib_gpuenv.registration:make_vector_env", max_episode_steps=500
    )
    try:
        assert not _global_registry.contains(ENV_CREATOR, "GPUCartPoleTestOnly-v0")
        exp = inline_experiment("PPO", "GPUCartPoleTestOnly-v0", stop={"training_iteration": 1})
        assert exp.config.env == "rllib_gpuenv:GPUCartPoleTestOnly-v0" and exp.name == "PPO_GPUCartPoleTestOnly-v0"
    finally:
        gym.registry.pop("GPUCartPoleTestOnly-v0")


def test_a_vectorize_mode_the_file_sets_is_honoured_for_our_env(tmp_path):
    """Left unset, RLlib's stock runner gets our env's vector entry point; set, even to RLlib's
    default "sync", it is kept (issue 28, 6c: it used to be replaced)."""
    path = write(
        tmp_path,
        f"""
        unset: {{run: PPO, env: GPUCartPole-v1, {STOP}}}
        sync: {{run: PPO, env: GPUCartPole-v1, {STOP}, config: {{gym_env_vectorize_mode: sync}}}}
        async: {{run: PPO, env: GPUCartPole-v1, {STOP}, config: {{gym_env_vectorize_mode: async}}}}
        """,
    )
    modes = [str(e.config.gym_env_vectorize_mode) for e in load_experiments(path)]
    assert modes == ["vector_entry_point", "sync", "async"]


def test_asking_for_more_than_the_cluster_has_fails_at_once():
    stop = {"training_iteration": 1}
    exp = inline_experiment("DevicePPO", "GPUCartPole-v1", {"num_env_runners": 3, "num_gpus_per_env_runner": 1}, stop)
    with pytest.raises(
        ExperimentError, match=r"asks Ray for 4 CPU\(s\) but the cluster has 2.*asks Ray for 3 GPU\(s\) but the cluster has 0"
    ):
        check_fits_cluster(exp, cluster={"CPU": 2.0})
    check_fits_cluster(inline_experiment("DevicePPO", "GPUCartPole-v1", {"num_env_runners": 1}, stop), cluster={"CPU": 2.0})


def test_a_grid_search_is_checked_against_the_cluster_variant_by_variant():
    """What a trial asks Ray for follows from its own values: a grid over the learning rate (which
    RLlib validates as a number or a schedule) fits, a grid whose second variant asks for 3 env
    runners does not."""
    stop = {"training_iteration": 1}
    lr_grid = inline_experiment("DevicePPO", "GPUCartPole-v1", {"lr": {"grid_search": [0.001, 0.004]}}, stop)
    check_fits_cluster(lr_grid, cluster={"CPU": 2.0})
    runners_grid = inline_experiment("DevicePPO", "GPUCartPole-v1", {"num_env_runners": {"grid_search": [0, 3]}}, stop)
    with pytest.raises(ExperimentError, match=r"asks Ray for 4 CPU\(s\) but the cluster has 2: .*num_env_runners=3"):
        check_fits_cluster(runners_grid, cluster={"CPU": 2.0})


def test_a_python_file_that_parses_its_own_command_line_sees_its_own(tmp_path, monkeypatch):
    """RLlib's example scripts parse their arguments when they load; `rllib train`'s options are not theirs."""
    path = write(
        tmp_path,
        """
        import argparse
        from rllib_gpuenv.rllib import DevicePPOConfig
        parser = argparse.ArgumentParser()
        parser.add_argument("--stop-iters", type=int, default=2)
        args = parser.parse_args()
        config = DevicePPOConfig().environment("GPUCartPole-v1").training(minibatch_size=64)
        stop = {"training_iteration": args.stop_iters}
        if __name__ == "__main__":
            raise SystemExit("its own main block does not run")
        """,
        name="example.py",
    )
    monkeypatch.setattr(sys, "argv", ["rllib", "train", "file", path, "--stop", '{"training_iteration": 1}'])
    (experiment,) = load_experiments(path)
    assert experiment.stop == {"training_iteration": 2}


def test_an_error_while_a_python_file_runs_names_the_file_and_line(tmp_path):
    path = write(
        tmp_path,
        """
        from ray.rllib.algorithms.ppo import PPOConfig
        config = PPOConfig().environment("CartPole-v1")
        config = config.rollouts(num_rollout_workers=1)  # Ray 2.x's name
        """,
        name="old.py",
    )
    with pytest.raises(ExperimentError) as caught:
        load_experiments(path)
    (line,) = str(caught.value).splitlines()
    assert line.startswith(f"{path}:4: ValueError: `rollouts` has been deprecated. Use `AlgorithmConfig.env_runners(..)`"), (
        line
    )


def test_a_gymnasium_env_whose_extra_is_missing_is_named_before_ray_starts(tmp_path, monkeypatch):
    """A registered id whose code needs a library that is not installed (as `LunarLander-v3`
    needs Box2D) is one line from the file check, gymnasium's install hint in it, where it was a
    traceback from inside a trial."""
    (tmp_path / "needs_extra_x.py").write_text(
        "from gymnasium.error import DependencyNotInstalled\n"
        "raise DependencyNotInstalled('Foo is not installed, run `pip install foo`')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    gym.register("NeedsExtraX-v0", entry_point="needs_extra_x:Env")
    try:
        path = write(tmp_path, f"x: {{run: DevicePPO, env: NeedsExtraX-v0, {STOP}}}")
        with pytest.raises(
            ExperimentError,
            match=r"exp.yaml: experiment 'x': env: 'NeedsExtraX-v0': Foo is not installed, run `pip install foo`$",
        ):
            load_experiments(path)
    finally:
        del gym.registry["NeedsExtraX-v0"]


def test_a_shipped_file_named_where_it_is_not_says_where_the_package_keeps_it(tmp_path, monkeypatch):
    """A wheel install has no configs/ folder: the name alone points to the package's copy."""
    from rllib_gpuenv.experiments.shipped import config_file

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ExperimentError, match=r"^gpu_pendulum_ppo.yaml: no such experiment file; the package ships ") as err:
        load_experiments("gpu_pendulum_ppo.yaml")
    assert str(err.value).endswith(str(config_file("gpu_pendulum_ppo.yaml")))
    with pytest.raises(ExperimentError, match=r"^mine.yaml: no such experiment file$"):
        load_experiments("mine.yaml")
