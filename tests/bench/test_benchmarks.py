"""Smoke test of every benchmark at tiny sizes: it runs, prints its table, writes JSON/CSV/PNG."""

import json
import os
import pathlib
import shutil

import pytest
import torch

from tests.bench.runs import bench, outputs, tiny_dqn_file
from tests.helpers import ROOT, run_module


def test_scaling_with_only_a_name_no_contender_has_names_them_all(tmp_path):
    from rllib_gpuenv.bench.scaling import run

    with pytest.raises(
        ValueError, match=r"--only nosuch: no contender's name contains it; they are: gymnasium SyncVectorEnv, "
    ):
        run(num_envs=[1], only=["nosuch"], out_dir=str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_scaling(tmp_path):
    out = bench(tmp_path, "scaling", "--num-envs", "1,4,16", "--min-seconds", "0.01", "--rounds", "3")
    assert "turning points" in out.stdout and "gymnasium AsyncVectorEnv" in out.stdout and "ours: numba-cpu" in out.stdout
    result = outputs(tmp_path, "scaling")
    assert {r["contender"] for r in result["rows"]} >= {
        "gymnasium SyncVectorEnv",
        "gymnasium numpy",
        "plain torch (cpu)",
        "ours: torch (cpu)",
    }
    for row in result["rows"]:  # each point is the median of its interleaved rounds
        assert len(row["seconds_per_step_by_round"]) == 3
        assert row["seconds_per_step"] == sorted(row["seconds_per_step_by_round"])[1]


def test_workload(tmp_path):
    out = bench(tmp_path, "workload", "--num-envs", "16", "--substeps", "1,4", "--min-seconds", "0.01")
    assert "time growth from substeps=1 to 4" in out.stdout
    assert len(outputs(tmp_path, "workload")["rows"]) == 4  # 2 backends x 2 substeps


def test_ops_counts_a_step_and_its_initial_state_draw(tmp_path):
    """In this process (counting needs no subprocess): exact counts, the draw's share apart, and
    the step as a GPU runs it, which draws CartPole's 4 state components at once."""
    from rllib_gpuenv.bench import step_ops

    rows = {r["contender"]: r for r in step_ops.run("GPUCartPole-v1", 4096, "cpu", out_dir=str(tmp_path), plot=True)}
    names = ("plain torch", "ours: torch", "ours: torch (reuse, no checks)", step_ops.GPU_WAY)
    plain, ours, lean, gpu = (rows[name] for name in names)
    assert plain["draw_ops"] == 0 and 0 < ours["draw_ops"] < ours["ops"] and plain["ops"] < ours["ops"]
    assert 0 < ours["draw_bytes_per_env"] < ours["bytes_per_env"]
    assert 0 < gpu["draw_ops"] <= lean["draw_ops"] / 3 and gpu["ops"] - gpu["draw_ops"] <= lean["ops"] - lean["draw_ops"]
    assert {p.name for p in tmp_path.iterdir()} == {"ops.json", "ops.csv", "ops.png"}


def test_block_size_under_the_cuda_simulator(tmp_path):
    out = bench(
        tmp_path, "block-size", "--num-envs", "32", "--candidates", "16,32", "--steps", "2", env={"NUMBA_ENABLE_CUDASIM": "1"}
    )
    assert "CUDA SIMULATOR: timings mean nothing" in out.stdout and "best threads per block" in out.stdout
    assert outputs(tmp_path, "block_size")["meta"]["simulated"] is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_block_size_without_a_gpu_says_so(tmp_path):
    out = run_module("rllib_gpuenv.cli", "bench", "block-size", "--out", str(tmp_path))
    assert out.returncode != 0 and "needs a CUDA GPU" in out.stderr


def test_learners_names_a_missing_file_before_ray_starts(tmp_path):
    out = run_module(
        "rllib_gpuenv.cli", "bench", "learners", "--config-file", str(tmp_path / "none.yaml"), "--out", str(tmp_path)
    )
    assert out.returncode == 2 and "none.yaml" in out.stderr.splitlines()[-1], out.stderr[-3000:]
    assert "Ray" not in out.stderr, out.stderr[-3000:]  # was found by the first run, once Ray had started


@pytest.mark.parametrize(
    "args, message",
    [
        (["breakdown", "--env", "NoSuch-v0"], "--env NoSuch-v0: the breakdown times an env of this package: GPUCartPole-v1"),
        (["files", "--files", "none.yaml"], "'none.yaml' is not an experiment file shipped with rllib_gpuenv"),
        (["update", "--algos", "ppo", "--minibatch-sizes", "100"], "minibatch size 100 does not divide the rollout's"),
    ],
    ids=["breakdown", "files", "update"],
)
def test_a_benchmarks_mistake_is_one_line_and_exit_code_2(tmp_path, args, message):
    """As argparse's own mistakes: one line after the benchmark's name, exit code 2 (it was 1)."""
    out = run_module("rllib_gpuenv.cli", "bench", *args, "--out", str(tmp_path))
    last = out.stderr.splitlines()[-1]
    assert out.returncode == 2 and last.startswith(f"rllib-gpuenv bench {args[0]}: error: ") and message in last, out.stderr


def test_sampling(tmp_path):
    """The device runner's sample() side by side with the env alone, RLlib's draw and RLlib's runner."""
    out = bench(tmp_path, "sampling", "--num-envs", "8,16", "--rollout-length", "4", "--rounds", "2", "--min-seconds", "0.02")
    assert "device runner / stock runner" in out.stdout
    rows = outputs(tmp_path, "sampling")["rows"]
    assert {r["contender"] for r in rows} == {
        "env step alone",
        "device runner",
        "device runner, RLlib's action draw",
        "stock RLlib runner (gymnasium CartPole-v1)",
    }
    for row in rows:
        assert row["env_steps_per_s"] == pytest.approx(row["num_envs"] * row["steps_per_call"] / row["seconds_per_call"])
        assert row["steps_per_call"] == (1 if row["contender"] == "env step alone" else 4)


def test_replot_draws_the_recorded_results_again(tmp_path):
    """The committed results' plots can be drawn again from their JSON (no benchmark rerun): one
    result of each kind, as a variant (``training_<task>.json``) is drawn by its kind's code (all
    of them: 29 plots, 40 s on a 2-core machine)."""
    one_of_each = {}
    for path in sorted(pathlib.Path(ROOT, "benchmarks").glob("*.json")):
        one_of_each.setdefault(path.stem.split("_", 1)[0], path)
    assert {"scaling", "training", "breakdown", "sampling", "learners", "update"} <= set(one_of_each)
    results = tmp_path / "results"
    results.mkdir()
    for path in one_of_each.values():
        shutil.copy(path, results)
    out = run_module("rllib_gpuenv.bench.replot", str(results), "--out", str(tmp_path / "plots"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert {p.name for p in (tmp_path / "plots").iterdir()} == {f"{p.stem}.png" for p in one_of_each.values()}
    assert (
        "iteration (sum of the parts)" in out.stdout
        and "env steps to target" in out.stdout
        and "speed-ups measured" in out.stdout
        and "turning points" in out.stdout  # as bench scaling prints them
    )


def test_replot_skips_a_file_that_is_not_a_result_naming_it_and_draws_the_others(tmp_path, capsys):
    """Before, a truncated JSON stopped replot with the decoder's words and no file name, and a
    ``[]`` or a notes file named like a result stopped it with a traceback, drawing none of the
    results after it."""
    from rllib_gpuenv.bench.replot import replot

    shutil.copy(pathlib.Path(ROOT, "benchmarks", "scaling.json"), tmp_path / "training.json")  # a result of another kind
    shutil.copy(pathlib.Path(ROOT, "benchmarks", "scaling.json"), tmp_path / "scaling.json")
    (tmp_path / "breakdown.json").write_text(pathlib.Path(ROOT, "benchmarks", "breakdown.json").read_text()[:1500])
    (tmp_path / "sampling.json").write_text("[]")
    assert replot(str(tmp_path)) == [str(tmp_path / "scaling.png")]
    skipped = [line for line in capsys.readouterr().err.splitlines() if line.startswith("replot: skipped")]
    assert len(skipped) == 3, skipped
    assert f"{tmp_path / 'breakdown.json'}: not a breakdown result this tool can read (not valid JSON" in skipped[0]
    with pytest.raises(ValueError, match=r"scaling.json is a file: give the folder it is in"):
        replot(str(tmp_path / "scaling.json"))
    (tmp_path / "scaling.json").unlink()
    with pytest.raises(ValueError, match=r"sampling.json: not a sampling result"):
        replot(str(tmp_path))  # nothing drawn: an error naming each file


def test_replot_of_a_folder_that_is_not_there_says_so_and_makes_none(tmp_path):
    from rllib_gpuenv.bench.replot import replot

    with pytest.raises(ValueError, match=r"missing: no such folder"):
        replot(str(tmp_path / "missing"))
    assert not (tmp_path / "missing").exists()
    out = run_module("rllib_gpuenv.bench.replot", str(tmp_path / "missing"))
    assert out.returncode == 2 and out.stderr.splitlines()[-1].endswith(
        "error: " + str(tmp_path / "missing") + ": no such folder"
    )


def test_breakdown(tmp_path):
    out = bench(tmp_path, "breakdown", "--num-envs", "16", "--rollout-length", "8", "--iterations", "1")
    assert "env stepping" in out.stdout and "learner update" in out.stdout and "GPU utilisation" in out.stdout
    assert "iteration (sum of the parts)" in out.stdout
    rows = outputs(tmp_path, "breakdown")["rows"]
    assert [r["setup"] for r in rows] == ["ours: device path", "RLlib stock runner, our env"]
    assert [r["ray"] for r in rows] == [False, True]  # Ray started for RLlib's stock algorithm only
    # two warm-up iterations: on a GPU the second records the rollout, which the timed ones replay
    assert rows[0]["first_timed_iteration"] == 3
    for r in rows:  # the parts partition the iteration: each is a share of it, and together they are all of it
        parts = [v for k, v in r.items() if k.startswith("s_")]
        assert len(parts) == 8 and all(v >= 0 for v in parts) and r["s_env stepping"] > 0 and r["s_learner update"] > 0
        assert sum(parts) == pytest.approx(r["seconds_per_iteration"], rel=1e-9)


def test_breakdown_of_pendulum_ppo(tmp_path):
    """Another env, a Box action space: both setups on GPUPendulum-v1 (the device path with its
    own settings file); the device path's build profiled."""
    out = bench(
        tmp_path, "breakdown", "--env", "GPUPendulum-v1", "--num-envs", "16", "--rollout-length", "8", "--iterations", "1",
        "--profile-build", "5",
    )  # fmt: skip
    assert "one DevicePPO iteration on GPUPendulum-v1" in out.stdout
    assert (
        "build_algo() took" in out.stdout
        and "cumulative" in out.stdout
        and "build_algo() (before the iterations)" in out.stdout
    )
    rows = outputs(tmp_path, "breakdown_DevicePPO_GPUPendulum-v1")["rows"]
    assert [r["setup"] for r in rows] == [
        "ours: device path (DevicePPO, GPUPendulum-v1)",
        "RLlib stock runner, our env (GPUPendulum-v1)",
    ]
    assert rows[0]["update"] == rows[1]["update"] == {"num_epochs": 10, "minibatch_size": 128}  # Pendulum's file, for both
    assert rows[0]["build_s"] > 0 and "build_s" not in rows[1]
    for r in rows:
        assert r["s_env stepping"] > 0 and sum(v for k, v in r.items() if k.startswith("s_")) == pytest.approx(
            r["seconds_per_iteration"], rel=1e-9
        )


def test_breakdown_of_device_dqn(tmp_path):
    """DQN's iteration: its training data (n-step transitions, replay buffer) is a part of its own."""
    out = bench(
        tmp_path,
        "breakdown",
        "--algo",
        "DeviceDQN",
        "--device-config",
        str(tiny_dqn_file(tmp_path)),
        "--iterations",
        "2",
    )
    assert "training data: GAE (PPO), n-step + replay buffer (DQN, SAC)" in out.stdout
    (row,) = outputs(tmp_path, "breakdown_DeviceDQN_GPUCartPole-v1")["rows"]
    # the file's own shape (no --num-envs, --rollout-length), and how many rounds of it an iteration is
    rounds = row["env_steps_per_iteration"] // (12 * 4)
    assert f"of {row['env_steps_per_iteration']:,} env steps ({rounds} rounds of rollouts of 12 envs x 4 steps)" in out.stdout
    # one train() call: as many rounds of 12 envs x 4 steps as RLlib's DQN samples per iteration
    assert row["setup"] == "ours: device path (DeviceDQN, GPUCartPole-v1)" and row["env_steps_per_iteration"] % (12 * 4) == 0
    assert row["ray"] is False  # as the main job: its runner and learner in this process, no Ray started
    assert row["update"] == {
        "train_batch_size_per_learner": 64,
        "training_intensity": 8,
    }  # the file's minibatch, DeviceDQN's default
    assert row["s_advantages (GAE)"] > 0 and row["s_learner update"] > 0 and row["s_env stepping"] > 0
    assert sum(v for k, v in row.items() if k.startswith("s_")) == pytest.approx(row["seconds_per_iteration"], rel=1e-9)


def test_breakdown_of_device_sac_runs_on_its_files_env(tmp_path):
    """Without --env, DeviceSAC's breakdown times its shipped file's env, Pendulum, not CartPole."""
    out = bench(tmp_path, "breakdown", "--algo", "DeviceSAC", "--num-envs", "8", "--rollout-length", "4", "--iterations", "1")
    (row,) = outputs(tmp_path, "breakdown_DeviceSAC_GPUPendulum-v1")["rows"]
    assert "one DeviceSAC iteration on GPUPendulum-v1" in out.stdout
    assert row["s_learner update"] > 0 and row["s_advantages (GAE)"] > 0


def test_files_trains_each_file_to_its_own_stop(tmp_path):
    """The Acrobot file reaches its evaluation target (seed 0: at its second evaluation); a file
    whose target is out of reach stops at its iteration limit, not reached; a file without a
    return to reach is refused before anything runs."""
    unreachable = tmp_path / "unreachable.yaml"
    unreachable.write_text(tiny_dqn_file(tmp_path).read_text().replace("stop: {training_iteration: 5}", STOP_UNREACHABLE))
    out = bench(tmp_path, "files", "--files", "gpu_acrobot_ppo.yaml", str(unreachable), "--seeds", "0", "--budget", "3600")
    assert "evaluation mean >= -100" in out.stdout and "last-100 mean >= 10000" in out.stdout
    rows = {row["file"]: row for row in outputs(tmp_path, "files")["rows"]}
    acrobot, tiny = rows["gpu_acrobot_ppo.yaml"], rows["unreachable.yaml"]
    assert acrobot["reached"] and acrobot["stopped_by"] == ["evaluation/env_runners/episode_return_mean"]
    assert acrobot["iterations"] % 5 == 0 and acrobot["env"] == "GPUAcrobot-v1"
    assert not tiny["reached"] and tiny["stopped_by"] == ["training_iteration"] and tiny["iterations"] == 2
    assert 0 < acrobot["evaluation_s"] < acrobot["seconds"] and tiny["evaluation_s"] == 0  # the tiny file never evaluates
    assert "of which evaluating" in out.stdout
    assert not list(tmp_path.glob("files.partial.*"))
    refused = run_module("rllib_gpuenv.cli", "bench", "files", "--files", str(tiny_dqn_file(tmp_path)), "--out", str(tmp_path))
    assert refused.returncode != 0 and "stop criteria name no return to reach" in refused.stderr


STOP_UNREACHABLE = "stop: {env_runners/episode_return_mean: 10000, training_iteration: 2}"


def test_update(tmp_path):
    out = bench(
        tmp_path, "update", "--algos", "PPO,DQN,SAC", "--minibatch-sizes", "256", "--rounds", "1", "--dqn-hiddens", "32,32"
    )
    assert "PPO: time per gradient step on cpu (ratio" in out.stdout
    assert "DQN: time per gradient step on cpu, 32x32 network (ratio" in out.stdout
    result = outputs(tmp_path, "update")
    rows = result["rows"]
    assert result["meta"]["dqn_hiddens"] == [32, 32]
    contenders = {(r["algo"], r["contender"]) for r in rows}
    assert contenders == {
        ("PPO", "ours: lean update"),
        ("PPO", "RLlib's update"),
        ("PPO", "plain torch"),
        ("DQN", "ours: lean update"),
        ("DQN", "RLlib's update"),
        ("DQN", "plain torch"),
        ("SAC", "ours: lean update"),
        ("SAC", "RLlib's update"),
        ("SAC", "plain torch"),
    }
    assert all(r["ms_per_step"] > 0 for r in rows) and {r["minibatch_size"] for r in rows} == {256}


def test_the_gpu_targets_are_read_from_gpu_results_only(tmp_path, capsys):
    from rllib_gpuenv.bench import targets

    gpu = {"gpu": "NVIDIA H100 80GB HBM3", "cuda": "13.0"}

    def result(name: str, rows: list[dict], machine: dict = gpu) -> None:
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"machine": machine, "meta": {}, "rows": rows}))

    scaling = [
        {"contender": "ours: numba-cuda", "num_envs": 1 << 20, "env_steps_per_s": 3.5e9},
        {"contender": "ours: torch (cuda)", "num_envs": 1 << 20, "env_steps_per_s": 1e9},
        {"contender": "ours: numba-cuda (reuse, no checks)", "num_envs": 1 << 24, "env_steps_per_s": 1.9e10},
    ]
    result("scaling.json", scaling)
    result("block_size.json", [{"num_envs": 1 << 24, "threads_per_block": 512, "env_steps_per_s": 2.2e10}])
    result("sampling.json", [{"contender": "device runner", "device": "cuda", "num_envs": 65536, "env_steps_per_s": 6e7}])
    result("training.json", [{"contender": "device", "seed": s, "time_to_target_s": t} for s, t in enumerate([4.0, 6.0, 5.0])])
    cpu = [{"contender": "device", "seed": 0, "time_to_target_s": 1.0}]
    result("ppo_512envs/training.json", cpu, machine={"cpu": "AMD EPYC"})  # a CPU's result measures no GPU target
    verdicts = {row["target"]: (row["verdict"], row["value"]) for row in targets.check(str(tmp_path))}
    assert verdicts == {
        "numba-cuda / torch at 2^20 CartPole envs": ("met", 3.5),
        "CartPole env-steps/s at 2^24 envs": ("met", 2.2e10),  # the best block size counts
        "sampling with the policy at 65,536 envs": ("missed", 6e7),
        "PPO to 475 (main job's file)": ("met", 5.0),  # the median of the seeds
        "PPO to 475 (512-env file)": ("unmeasured", None),
    }
    cut = tmp_path / "cut"  # a run cut by its cap: what it wrote as it went counts, and says so
    result(
        "cut/sampling.partial.json",
        [{"contender": "device runner", "device": "cuda", "num_envs": 65536, "env_steps_per_s": 2e8}],
    )
    sampling = {row["target"]: row for row in targets.check(str(cut))}["sampling with the policy at 65,536 envs"]
    assert (sampling["verdict"], sampling["value"]) == ("met", 2e8) and sampling["source"].startswith("sampling.partial.json")
    targets.main([os.path.join(ROOT, "benchmarks")])  # the results recorded there: measured on a CPU
    out = capsys.readouterr().out
    assert out.count("unmeasured") == len(targets.TARGETS)
    h100 = {row["target"]: row["verdict"] for row in targets.check(os.path.join(ROOT, "benchmarks", "gpu", "2026-11-26-h100"))}
    # Its lease ran out first: the main job's two seeds are in training.partial.json, the 512-env file unmeasured.
    assert list(h100.values()) == ["met", "met", "unmeasured", "missed", "unmeasured"]
    every_lease = targets.check(os.path.join(ROOT, "benchmarks", "gpu"))  # each target from the latest lease with it
    assert [row["verdict"] for row in every_lease] == ["met", "met", "met", "met", "met"]
    sources = [row["source"].split("/")[0] for row in every_lease]  # the H200's lease did not rerun the 512-env file
    assert sources == ["2026-11-29-h200"] * 4 + ["2026-11-27-h100"], sources


def test_a_benchmarks_interrupted_child_cleans_up_before_it_ends(tmp_path):
    """A benchmark run in a child process (``run_child``) that is interrupted gets to run its
    ``finally`` (its algorithm stopped, its empty log folder in ~/ray_results removed), also
    when a Ctrl-C at the terminal reached it before the parent's interrupt; a child that does not
    end is killed. Before, ``subprocess.run`` killed it at once, and an interrupted ``bench
    training`` left an empty folder there."""
    import subprocess
    import sys

    from rllib_gpuenv.bench.common import _stop_child

    cleaned = tmp_path / "cleaned"
    code = (
        "import signal, sys, time\n"
        "from rllib_gpuenv.bench.common import interrupted_once\n"
        "interrupted_once()\n"
        "try:\n"
        "    print('ready', flush=True)  # inside the try: an interrupt from now on runs the finally\n"
        "    time.sleep(600)\n"
        "finally:\n"
        "    signal.raise_signal(signal.SIGINT)  # the parent's interrupt, after the terminal's: ignored\n"
        f"    open({str(cleaned)!r}, 'w').close()\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    with open(tmp_path / "stderr", "w") as stderr:
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        assert child.stdout.readline() == "ready\n"
        _stop_child(child, grace_s=600)  # the grace: a hang guard
    assert child.returncode != -9 and cleaned.exists(), (tmp_path / "stderr").read_text()[-2000:]
    deaf = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                             "print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert deaf.stdout.readline() == "ready\n"
    _stop_child(deaf, grace_s=1)  # one that does not stop is killed
    assert deaf.returncode == -9
