"""Tune chooses the resources: the search space from the cluster, fail-fast, ranking, a real Tune run
whose winner is written whole and re-runs the same."""

import logging
import math

import pytest
import yaml

from rllib_gpuenv.experiments import RETURN_METRIC, ExperimentError, inline_experiment, load_experiments, run_experiment
from rllib_gpuenv.experiments.tune_resources import (
    GPU_KEYS,
    ResourceSpace,
    _same,
    candidates,
    layout,
    rank,
    search_resources,
    trial_rows,
)
from rllib_gpuenv.rllib import DevicePPOConfig


def test_without_gpus_the_gpu_options_drop_out(caplog):
    space = ResourceSpace(
        num_envs_per_env_runner=[64, 256],
        num_env_runners=[0, 1],
        num_gpus_per_env_runner=[0, 0.5],
        num_gpus_per_learner=[0, 1],
    )
    with caplog.at_level(logging.WARNING, logger="rllib_gpuenv.experiments.tune_resources"):
        combos = candidates(space, {"CPU": 2.0})
    assert "the cluster has no GPU: dropping the GPU options" in caplog.text
    assert len(combos) == 4 and all(c["num_gpus_per_env_runner"] == 0 == c["num_gpus_per_learner"] for c in combos)


def test_with_a_gpu_fractions_are_tried_but_not_on_the_local_runner():
    space = ResourceSpace(
        num_envs_per_env_runner=[1024], num_env_runners=[0, 2], num_gpus_per_env_runner=[0, 0.5], num_gpus_per_learner=[0, 1]
    )
    combos = candidates(space, {"CPU": 16.0, "GPU": 1.0})
    assert {(c["num_env_runners"], c["num_gpus_per_env_runner"]) for c in combos} == {(0, 0), (2, 0), (2, 0.5)}
    assert len(combos) == 6


def test_learners_auto_are_the_counts_the_cluster_holds_in_both_layouts():
    space = ResourceSpace(num_envs_per_env_runner=[64], num_env_runners=[0, 1], num_learners="auto")
    combos = candidates(space, {"CPU": 4.0}, fits=lambda c: 1 + c["num_env_runners"] + c["num_learners"] <= 4)
    assert [(c["num_env_runners"], c["num_learners"], layout(c)) for c in combos] == [
        (0, 0, "local"), (0, 1, "colocated"), (0, 2, "colocated"), (1, 0, "local"), (1, 1, "separate"), (1, 2, "separate"),
    ]  # fmt: skip


def test_a_candidate_that_cannot_fit_fails_before_any_trial(ray_local):
    exp = inline_experiment("DevicePPO", "GPUCartPole-v1", stop={"env_runners/episode_return_mean": 100})
    with pytest.raises(ExperimentError, match=r"asks Ray for 4 CPU\(s\) but the cluster has 2"):
        search_resources(exp, ResourceSpace(num_envs_per_env_runner=[64], num_env_runners=[3]))


@pytest.mark.parametrize(
    "search, message",
    [  # each was a traceback inside the search, or a trial run with it, after Ray had started
        (
            "{num_envs_per_env_runner: 32}",
            r"num_envs_per_env_runner: a list of the values to try \(integers >= 1\), e.g. \[1\], got 32$",
        ),
        ("{num_envs_per_env_runner: []}", r"num_envs_per_env_runner: a list of the values to try .*got \[\]$"),
        (
            "{num_learners: all}",
            r"num_learners: a list of the values to try \(integers >= 0, or auto\), e.g. \[1\], got 'all'$",
        ),
        ("{num_learners: [-1]}", r"num_learners: the values to try are integers >= 0, or auto, got -1 in \[-1\]$"),
        ("{num_gpus_per_env_runner: 0.5}", r"num_gpus_per_env_runner: a list of the values to try \(numbers >= 0\)"),
        ("{num_env_runners: [1.5]}", r"num_env_runners: the values to try are integers >= 0, got 1.5 in \[1.5\]$"),
        (
            "{num_envs_per_env_runner: [.inf]}",
            r"num_envs_per_env_runner: the values to try are integers >= 1, got inf in \[inf\]$",
        ),
        ("{num_learners: [1.0]}", r"num_learners: the values to try are integers >= 0, or auto, got 1.0 in \[1.0\]$"),
        ("{time_budget_s: abc}", r"time_budget_s: seconds a trial may take: a number > 0, got 'abc'$"),
        ("{time_budget_s: -1}", r"time_budget_s: seconds a trial may take: a number > 0, got -1$"),
        ("[16, 32]", r"resource_search: expected a mapping of the values to try, got \[16, 32\]$"),
    ],
)
def test_a_wrong_search_value_is_one_line_when_the_file_is_read(tmp_path, search, message):
    path = tmp_path / "search.yaml"
    path.write_text(
        "s:\n  run: DevicePPO\n  env: GPUCartPole-v1\n  stop: {env_runners/episode_return_mean: 100}\n"
        f"  resource_search: {search}\n"
    )
    with pytest.raises(ExperimentError, match=r"^" + str(path) + r": experiment 's': (resource_search: )?.*" + message):
        load_experiments(str(path))


def test_an_interrupted_search_writes_no_winner(ray_local, tmp_path, capsys):
    """Ctrl-C stops Tune's run (``rllib train`` tells the search, cli/rllib.py): the trials cut short
    are in the table, and no winner is chosen among them."""
    exp = inline_experiment("DevicePPO", "GPUCartPole-v1", stop={RETURN_METRIC: 475, "training_iteration": 1}, name="cut")
    space = ResourceSpace(num_envs_per_env_runner=[16], num_env_runners=[0])
    rows = search_resources(
        exp, space, storage_path=str(tmp_path), best_file=str(tmp_path / "best.yaml"), interrupted=lambda: True
    )
    assert len(rows) == 1 and not (tmp_path / "best.yaml").exists()
    out = capsys.readouterr().out
    assert "| " in out and "best:" not in out
    # a row per result, as `rllib train` prints a run's (was Tune's status tables and every trial's config)
    assert "TERMINATED after 1 iteration(s)" in out and "Trial status" not in out, out


def _validated(config) -> dict:
    config = config.copy(copy_frozen=False)
    config.validate()
    return config.to_dict()


def test_tune_finds_the_device_algorithms_by_name_as_it_finds_rllib_s(ray_local, tmp_path):
    """`tune.Tuner("DevicePPO", param_space=...)`, as RLlib's docs write `tune.Tuner("PPO", ...)`: the
    name is found in this module's Ray session. Under the suite that is seldom its test process's
    first (a name sent only to the first session would be missing here); run alone, it is."""
    from ray import tune
    from ray.tune.registry import get_trainable_cls

    from rllib_gpuenv.rllib import DeviceDQN, DevicePPO, DeviceSAC

    assert [get_trainable_cls(name) for name in ("DevicePPO", "DeviceDQN", "DeviceSAC")] == [DevicePPO, DeviceDQN, DeviceSAC]
    config = DevicePPOConfig().environment("GPUCartPole-v1").device_rollouts(rollout_length=8)
    param_space = {
        **config.training(minibatch_size=64, num_epochs=1).to_dict(),
        "num_envs_per_env_runner": tune.grid_search([8]),
    }
    run = tune.RunConfig(stop={"training_iteration": 2}, storage_path=str(tmp_path), verbose=0)
    (result,) = tune.Tuner("DevicePPO", param_space=param_space, run_config=run).fit()
    assert result.error is None and result.metrics["env_runners"]["num_env_steps_sampled_lifetime"] == 2 * 8 * 8


def test_a_trial_stopped_before_its_first_result_has_no_row():
    """Ctrl-C as a search's next trial starts: Tune gives it a result with no config, and the
    table of the trials so far failed with a TypeError (a walkthrough's)."""
    from ray.tune import Result

    reported = Result(
        metrics={"config": {"num_envs_per_env_runner": 32}, "training_iteration": 2, "time_total_s": 1.0},
        checkpoint=None,
        error=None,
        path="/nowhere/trial_0",
    )
    started = Result(metrics={}, checkpoint=None, error=None, path="/nowhere/trial_1")
    rows = trial_rows([reported, started], ["num_envs_per_env_runner"], 475.0)
    assert [(row["num_envs_per_env_runner"], row["iterations"]) for row in rows] == [(32, 2)]


def test_ranking_puts_reached_targets_first_by_time_then_misses_by_return():
    rows = [
        {"name": "miss-high", "time_to_target_s": math.inf, "return": 300.0, "env_steps_per_s": 1.0},
        {"name": "slow", "time_to_target_s": 20.0, "return": 480.0, "env_steps_per_s": 9.0},
        {"name": "failed", "time_to_target_s": math.inf, "return": math.nan, "env_steps_per_s": 0.0},
        {"name": "fast", "time_to_target_s": 10.0, "return": 476.0, "env_steps_per_s": 5.0},
        {"name": "miss-low", "time_to_target_s": math.inf, "return": 100.0, "env_steps_per_s": 99.0},
    ]
    assert [r["name"] for r in rank(rows)] == ["fast", "slow", "miss-high", "miss-low", "failed"]


def test_real_tune_search_writes_the_winning_experiment_whole(ray_local, tmp_path, capsys):
    """Pass/fail rests on what is computed: trials stop on an iteration count, and the written
    file must rebuild the winning trial's config and, re-run, repeat its returns."""
    settings = {
        "seed": 0,
        "device_rollouts": {"rollout_length": 16},
        "minibatch_size": 256,
        "num_epochs": 2,
        "lr": 0.001,
        "vf_clip_param": float("inf"),
        "use_kl_loss": False,
        "model_config": {"fcnet_hiddens": [32, 32]},
    }
    stop = {"env_runners/episode_return_mean": 475, "training_iteration": 3}
    exp = inline_experiment("DevicePPO", "GPUCartPole-v1", settings, stop=stop, name="search")
    space = ResourceSpace(num_envs_per_env_runner=[32], num_env_runners=[0], num_learners=[0, 1], time_budget_s=3600)
    best_file = str(tmp_path / "best.yaml")
    rows = search_resources(exp, space, storage_path=str(tmp_path / "results"), best_file=best_file, verbose=0)
    out = capsys.readouterr().out

    assert "Trials run one at a time (at most 1 concurrent trial)" in out and "each of the 2 trials ran alone" in out
    assert [r["error"] for r in rows] == [None, None]
    assert sorted((r["num_learners"], layout(r)) for r in rows) == [(0, "local"), (1, "colocated")]
    assert all(r["iterations"] == 3 and not r["reached"] and r["env_steps_to_target"] is None for r in rows)
    lines = [line for line in out.splitlines() if line.startswith("| ")]  # the table's header and trials, best first
    assert [line.split("|")[5].strip() for line in lines] == ["learners", *(str(r["num_learners"]) for r in rows)]

    winner = rows[0]["result"]
    (best,) = load_experiments(best_file)  # what `rllib train file best.yaml` runs
    ran = {
        k: v for k, v in winner.config.items() if not k.startswith("__")
    }  # as the trial validated it, without Tune's entries
    trial_config, written = (_validated(c) for c in (DevicePPOConfig().update_from_dict(ran), best.config))
    assert {k for k in trial_config if not _same(trial_config[k], written.get(k))} == set()
    assert best.config.num_learners == rows[0]["num_learners"] and best.config.rollout_length == 16
    assert best.config.vf_clip_param == math.inf and best.config.use_kl_loss is False
    assert best.config.model_config["fcnet_hiddens"] == [32, 32] and best.stop == {**stop, "time_total_s": 3600}
    with open(best_file) as f:  # the searched resources are spelled out even where they are defaults
        assert set(rows[0]) & set(yaml.safe_load(f)["search-best"]["config"]) == set(GPU_KEYS) | {
            "num_envs_per_env_runner",
            "num_env_runners",
            "num_learners",
        }

    (rerun,) = run_experiment(best, storage_path=str(tmp_path / "rerun"), verbose=0)
    assert rerun.error is None
    returns = [frame[RETURN_METRIC].tolist() for frame in (winner.metrics_dataframe, rerun.metrics_dataframe)]
    assert len(returns[1]) == 3 and returns[0] == returns[1]


def test_a_search_with_several_samples_is_refused_before_ray_starts(tmp_path):
    """`--num-samples 3` (or the file's num_samples) was ignored: the search runs one trial per candidate."""
    from rllib_gpuenv.cli.rllib import apply_run_options, build_parser, experiments_from_args

    path = tmp_path / "search.yaml"
    path.write_text(
        "s:\n  run: DevicePPO\n  env: GPUCartPole-v1\n  stop: {env_runners/episode_return_mean: 100}\n"
        "  resource_search: {num_envs_per_env_runner: [16]}\n"
    )
    args = build_parser().parse_args(["train", "file", str(path), "--num-samples", "3"])
    with pytest.raises(ExperimentError, match=r"experiment 's': num_samples is 3, but a resource search runs one trial per"):
        apply_run_options(experiments_from_args(args), args)
    args = build_parser().parse_args(["train", "file", str(path)])
    assert apply_run_options(experiments_from_args(args), args) is None  # one sample: as before
