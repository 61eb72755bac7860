"""The progress rows `rllib train` prints (``experiments/progress.py``), fed Tune's own ``Trial``."""

import io

from ray.tune.experiment import Trial

from rllib_gpuenv.experiments.progress import IterationLines, ResultRows


def result(iteration: int, ret: float, evaluation: float | None) -> dict:
    out = {
        "training_iteration": iteration,
        "time_total_s": 0.5 * iteration,
        "time_this_iter_s": 0.5,
        "env_runners": {
            "episode_return_mean": ret,
            "num_env_steps_sampled_lifetime": 2048 * iteration,
            "num_env_steps_sampled": 2048,
        },
    }
    if evaluation is not None:
        out["evaluation"] = {"env_runners": {"episode_return_mean": evaluation}}
    return out


def rows(config: dict, results: list[dict]) -> list[list[str]]:
    stream = io.StringIO()
    reporter, trial = ResultRows(stream=stream), Trial("DevicePPO", config=config, stub=True)
    for r in results:
        trial.update_last_result(r)
        reporter.report([trial], done=False)
    return [line.split() for line in stream.getvalue().splitlines()]


def test_an_evaluating_trial_shows_its_evaluation_return_where_it_evaluates():
    """Iteration 5 evaluates; RLlib's results carry the evaluation keys at 6 (the same value again)
    and 7 (NaN): only 5's is the evaluation's."""
    header, *lines = rows(
        {"evaluation_interval": 5},
        [result(4, -300.0, None), result(5, -250.0, -95.5), result(6, -240.0, -95.5), result(7, -230.0, float("nan"))],
    )
    assert header == ["trial", "iter", "return", "env", "steps", "env-steps/s", "time", "(s)", "eval"]
    assert [(line[1], line[2], line[-1]) for line in lines] == [
        ("4", "-300.0", "-"),
        ("5", "-250.0", "-95.5"),
        ("6", "-240.0", "-"),
        ("7", "-230.0", "-"),
    ]


def test_a_trial_that_does_not_evaluate_has_no_eval_column():
    header, line = rows({}, [result(1, 20.0, None)])
    assert header[-2:] == ["time", "(s)"] and line[1:3] == ["1", "20.0"] and len(line) == 6


def test_a_resumed_main_job_s_first_line_counts_its_own_iteration(capsys):
    """The main job resumed at iteration 7 of 2,048 env steps each: its first line's env steps per
    second and episodes are iteration 8's own, not the whole run's since iteration 1."""
    lines = IterationLines(100, 475.0, bar=False, steps=7 * 2048, episodes=70)
    update = result(8, 30.0, None)
    update["env_runners"]["num_episodes_lifetime"] = 74
    lines.update(update, iteration_s=0.5)
    line = capsys.readouterr().out
    assert "   4 episodes" in line and "4,096 env-steps/s" in line and "16,384" in line, line


def test_one_episode_is_said_in_the_singular_and_the_columns_stay_in_line(capsys):
    lines = IterationLines(100, 475.0, bar=False)
    for iteration, episodes in ((1, 1), (2, 3)):
        update = result(iteration, 30.0, None)
        update["env_runners"]["num_episodes_lifetime"] = episodes
        lines.update(update, iteration_s=0.5)
    one, two = capsys.readouterr().out.splitlines()
    assert "   1 episode   env steps" in one and "   2 episodes  env steps" in two
    assert one.index("env steps") == two.index("env steps")


def test_a_trial_is_named_by_its_env_s_bare_id():
    """Tune's name, with the env as the file wrote it: not the module prefix the trials import it by."""
    from rllib_gpuenv.experiments.running import trial_name

    def named(env) -> str:
        return trial_name(Trial("DevicePPO", config={"env": env}, trial_id="3a477_00000", stub=True))

    assert named("rllib_gpuenv:GPUCartPole-v1") == "DevicePPO_GPUCartPole-v1_3a477_00000"
    assert named("my_envs:Reach1D-v0") == "DevicePPO_Reach1D-v0_3a477_00000"
    assert named("ALE/Pong-v5") == "DevicePPO_ALE_Pong-v5_3a477_00000"  # one folder, as Tune's own name
    assert named(None) == "DevicePPO_3a477_00000"
