"""Scaling with the number of envs (the CS267 paper's figure 4): every backend side by side
with the usual alternatives, for any env of the suite (``--env``).

Every contender is driven the same way: ``step()`` called once per step from Python, with
actions taken from a pre-made pool on the contender's own device (no policy, no copies). The
alternatives: gymnasium's ``SyncVectorEnv`` (one env object per env, a Python loop) and
``AsyncVectorEnv`` (one process per env: the Stable-Baselines ``SubprocVecEnv`` setup, so
capped at a few times the core count), gymnasium's own numpy vector env where it has one
(CartPole), and for CartPole a plain torch batched port. The "turning point" of a contender is
the size from which the time per step grows about linearly with num_envs: more envs stop
being free.

``--reference DIR`` adds a contender from another checkout of this package (DIR holds its
``rllib_gpuenv``): its numba-cpu CartPole, loaded into this process under another name and timed
in the same interleaved rounds, so that a change is measured against the code before it in one
run.

The machines this runs on are shared, and another tenant can slow one contender's whole
measurement by a third. So at each size every contender is built first, then timed in
``rounds`` interleaved turns, and its figure is the median of its turns: a slow spell then
falls on all contenders alike rather than on one, and the ratios hold up between runs. The
order of the turns rotates from round to round: a contender that uses torch's CPU ops leaves
its OpenMP threads spinning for a while afterwards, and whoever always came next would pay
for it (this cost numba-cpu CartPole ~5 % against the reference before the rotation).
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import (
    busy_processes,
    default_sizes,
    parse_sizes,
    pyplot,
    report,
    save_figure,
    suite_env,
    time_calls,
)
from rllib_gpuenv.experiments.tables import format_table

logger = logging.getLogger(__name__)

POOL = 8  # distinct action vectors, cycled
GYMNASIUM_IDS = {
    "GPUCartPole-v1": "CartPole-v1",
    "GPUAcrobot-v1": "Acrobot-v1",
    "GPUMountainCar-v0": "MountainCar-v0",
    "GPUMountainCarContinuous-v0": "MountainCarContinuous-v0",
    "GPUPendulum-v1": "Pendulum-v1",
}


@dataclass
class Contender:
    name: str
    make: Callable[[int], Callable[[int], object]]  # num_envs -> step(i)
    device: str
    max_envs: int = 1 << 30


def _action_pool(space, device) -> torch.Tensor:
    space.seed(0)
    return torch.stack([torch.as_tensor(space.sample()) for _ in range(POOL)]).to(device)


def _ours(env_id: str, backend: str, device: str, replay_launches: bool = True, **kwargs) -> Callable:
    """Our env on ``backend``; ``replay_launches=False``: numba-cuda launches every step itself
    instead of replaying the launch it recorded (``backends/numba_cuda.py``)."""

    def make(n: int):
        from rllib_gpuenv.envs import make_vector_env

        env = make_vector_env(env_id, n, backend=backend, device=device, **kwargs)
        if not replay_launches:
            env.unwrapped._backend.replay_launches = False
        env.reset(seed=0)
        pool = _action_pool(env.action_space, env.device)
        return lambda i: env.step(pool[i % POOL])

    return make


def _gymnasium(env_id: str, mode: str) -> Callable:
    """gymnasium's own vectorisation of the env ``env_id`` reproduces (``vector_entry_point``:
    its numpy vector env, where it has one)."""

    def make(n: int):
        import gymnasium as gym

        env = gym.make_vec(GYMNASIUM_IDS[env_id], num_envs=n, vectorization_mode=mode)
        env.reset(seed=0)
        pool = _action_pool(env.action_space, "cpu").numpy()
        step = lambda i: env.step(pool[i % POOL])  # noqa: E731
        step.close = env.close
        return step

    return make


def _plain_torch(device: str) -> Callable:
    def make(n: int):
        from rllib_gpuenv.bench.baselines import PlainTorchCartPole

        env = PlainTorchCartPole(n, device)
        pool = torch.randint(0, 2, (POOL, n), device=device)
        return lambda i: env.step(pool[i % POOL])

    return make


def _load_reference(checkout: str):
    """The ``rllib_gpuenv`` package of another checkout, imported as ``rllib_gpuenv_reference``
    (a copy with its imports renamed), so that both run in this process and share numba's thread
    pool: a second process's idle OpenMP threads would spin against the timed ones."""
    import importlib
    import re
    import shutil
    import tempfile

    source = os.path.join(os.path.abspath(checkout), "rllib_gpuenv")
    if not os.path.isdir(source):
        raise ValueError(f"--reference {checkout}: no rllib_gpuenv package there (give a checkout of this repository)")
    root = tempfile.mkdtemp(prefix="rllib_gpuenv_reference_")
    target = os.path.join(root, "rllib_gpuenv_reference")
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for folder, _, files in os.walk(target):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    text = re.sub(r"\brllib_gpuenv\b", "rllib_gpuenv_reference", f.read())
                with open(path, "w") as f:
                    f.write(text)
    sys.path.insert(0, root)
    return importlib.import_module("rllib_gpuenv_reference")


def _reference(checkout: str) -> Callable:
    """numba-cpu CartPole of another checkout of this package (see ``_load_reference``)."""
    package = _load_reference(checkout)

    def make(n: int):
        env = package.CartPoleVectorEnv(n, backend="numba-cpu")
        env.reset(seed=0)
        pool = torch.randint(0, 2, (POOL, n), generator=torch.Generator().manual_seed(0))
        return lambda i: env.step(pool[i % POOL])

    return make


def contenders(env_id: str, with_gpu: bool, reference: str | None = None) -> list[Contender]:
    from rllib_gpuenv.backends import available_backends

    cores = os.cpu_count() or 1
    numpy_vector = env_id == "GPUCartPole-v1"  # gymnasium has a numpy vector env for CartPole only
    found = []
    if env_id in GYMNASIUM_IDS:  # not for an env gymnasium does not have (GPUBreakout-MinAtar)
        found += [
            Contender("gymnasium SyncVectorEnv", _gymnasium(env_id, "sync"), "cpu", max_envs=4096),
            Contender("gymnasium AsyncVectorEnv", _gymnasium(env_id, "async"), "cpu", max_envs=max(4, 4 * cores)),
        ]
    if numpy_vector:
        found += [
            Contender("gymnasium numpy", _gymnasium(env_id, "vector_entry_point"), "cpu", max_envs=1 << 20),
            Contender("plain torch (cpu)", _plain_torch("cpu"), "cpu"),
        ]
    found += [
        Contender("ours: torch (cpu)", _ours(env_id, "torch", "cpu"), "cpu"),
        Contender("ours: numba-cpu", _ours(env_id, "numba-cpu", "cpu"), "cpu"),
        # As the device env runner drives it: outputs reused, action checks off.
        Contender(
            "ours: numba-cpu (reuse, no checks)",
            _ours(env_id, "numba-cpu", "cpu", reuse_outputs=True, validate_actions=False),
            "cpu",
        ),
    ]
    if reference and numpy_vector:
        found.append(
            Contender(f"reference numba-cpu ({os.path.basename(os.path.abspath(reference))})", _reference(reference), "cpu")
        )
    if with_gpu:
        gpu = "cuda"
        if numpy_vector:
            found.append(Contender("plain torch (cuda)", _plain_torch(gpu), gpu))
        found.append(Contender("ours: torch (cuda)", _ours(env_id, "torch", gpu), gpu))
        if "numba-cuda" in available_backends(torch.device(gpu)):
            found.append(Contender("ours: numba-cuda", _ours(env_id, "numba-cuda", gpu), gpu))
            found.append(
                Contender(
                    "ours: numba-cuda (reuse, no checks)",
                    _ours(env_id, "numba-cuda", gpu, reuse_outputs=True, validate_actions=False),
                    gpu,
                )
            )
            found.append(
                Contender(
                    "ours: numba-cuda (reuse, no checks), launched per step",
                    _ours(env_id, "numba-cuda", gpu, replay_launches=False, reuse_outputs=True, validate_actions=False),
                    gpu,
                )
            )
    return found


def run(
    num_envs: list[int],
    min_seconds: float = 0.5,
    min_calls: int = 20,
    only: list[str] | None = None,
    out_dir: str = "bench_results",
    plot: bool = False,
    name: str = "scaling",
    rounds: int = 5,
    env_id: str = "GPUCartPole-v1",
    reference: str | None = None,
    load: int = 0,
) -> list[dict]:
    """Measure every contender at every size; print a table; write JSON/CSV (and a PNG).

    Each contender is timed for ``min_seconds`` at each size in all, split over ``rounds``
    interleaved turns (see the module doc). ``load``: that many busy processes run meanwhile
    (a shared machine on purpose).
    """
    with_gpu = torch.cuda.is_available()
    every = contenders(env_id, with_gpu, reference)
    chosen = [c for c in every if not only or any(o in c.name for o in only)]
    if not chosen:
        raise ValueError(
            f"--only {' '.join(only)}: no contender's name contains it; they are: {', '.join(c.name for c in every)}"
        )
    rows = []
    for n in num_envs:
        here = [c for c in chosen if n <= c.max_envs and not (c.device == "cpu" and n > (1 << 20))]
        print(
            f"  {env_id} num_envs={n:>9,}: {len(here)} contenders, {rounds} interleaved round{'s' * (rounds != 1)}",
            file=sys.stderr,
            flush=True,
        )
        steps = {c.name: c.make(n) for c in here}
        with busy_processes(load):
            turns = interleaved_turns(here, steps, rounds, min_seconds, min_calls)
        for c in here:
            seconds = statistics.median(turns[c.name])
            rows.append(
                {
                    "env": env_id,
                    "contender": c.name,
                    "num_envs": n,
                    "seconds_per_step": seconds,
                    "env_steps_per_s": n / seconds,
                    "seconds_per_step_by_round": turns[c.name],
                }
            )
            print(f"    {c.name:<38} {n / seconds:,.0f} env-steps/s", file=sys.stderr)
            getattr(steps[c.name], "close", lambda: None)()
        del steps
    turning = turning_points(rows)
    print(summary(rows))
    print(turning_table(turning))
    meta = {
        "env": env_id,
        "num_envs": num_envs,
        "min_seconds": min_seconds,
        "rounds": rounds,
        "turning_points": turning,
        "reference": reference,
        "busy_processes": load,
    }
    report(rows, out_dir, name, meta, plot=(lambda: plot_scaling(rows, out_dir, name, turning)) if plot else None)
    return rows


def interleaved_turns(
    here: list[Contender], calls: dict[str, Callable[[int], object]], rounds: int, min_seconds: float, min_calls: int
) -> dict[str, list[float]]:
    """Seconds per call of each contender's ``calls[name]``, once per round, the contenders
    taking turns in an order that rotates from round to round (see the module doc)."""
    turns: dict[str, list[float]] = {c.name: [] for c in here}
    for r in range(rounds):
        for c in here[r % len(here) :] + here[: r % len(here)]:  # rotated: no fixed predecessor
            turns[c.name].append(time_calls(calls[c.name], min_seconds / rounds, max(1, min_calls // rounds), device=c.device))
    return turns


def turning_table(turning: dict[str, int | None]) -> str:
    """The turning points as the benchmark prints them (``turning_points``)."""
    return "\nturning points (time per step grows ~linearly from here on)\n" + format_table(
        ["contender", "num_envs"], [[c, n] for c, n in turning.items()]
    )


def turning_points(rows: list[dict], efficiency: float = 0.5) -> dict[str, int | None]:
    """Per contender, the first size from which every step up in num_envs costs at least
    ``efficiency`` of the proportional time (time per step growing about linearly)."""
    points = {}
    for c in dict.fromkeys(r["contender"] for r in rows):
        mine = sorted((r for r in rows if r["contender"] == c), key=lambda r: r["num_envs"])
        points[c] = None
        for i in range(1, len(mine)):
            later = mine[i - 1 :]
            if all(
                (b["seconds_per_step"] / a["seconds_per_step"]) >= efficiency * (b["num_envs"] / a["num_envs"])
                for a, b in zip(later, later[1:])
            ):
                points[c] = mine[i - 1]["num_envs"]
                break
    return points


def summary(rows: list[dict]) -> str:
    """env-steps/s per size and contender, and the ratios the claims are about."""
    names = list(dict.fromkeys(r["contender"] for r in rows))
    sizes = sorted({r["num_envs"] for r in rows})
    rate = {(r["contender"], r["num_envs"]): r["env_steps_per_s"] for r in rows}
    table = [[n] + [rate.get((c, n)) for c in names] for n in sizes]
    text = "env-steps per second (higher is better)\n" + format_table(["num_envs"] + names, table)
    ratios = []
    reference = next((c for c in names if c.startswith("reference")), None)
    for fast, slow in [
        ("ours: numba-cpu", "plain torch (cpu)"),
        ("ours: numba-cpu", "gymnasium numpy"),
        ("ours: numba-cpu (reuse, no checks)", "gymnasium numpy"),
        ("ours: numba-cpu", "gymnasium SyncVectorEnv"),
        ("ours: numba-cpu", "gymnasium AsyncVectorEnv"),
        ("ours: numba-cpu", reference),
        ("ours: numba-cuda", "plain torch (cuda)"),
        ("ours: numba-cuda", "ours: torch (cuda)"),
        ("ours: numba-cuda (reuse, no checks)", "ours: numba-cuda (reuse, no checks), launched per step"),
    ]:
        for n in sizes:
            if (fast, n) in rate and (slow, n) in rate:
                ratios.append([fast, slow, n, rate[(fast, n)] / rate[(slow, n)]])
    if ratios:
        text += "\n\nspeed-ups measured in this run\n" + format_table(["contender", "vs", "num_envs", "ratio"], ratios)
    return text


TURNING_POINT = (
    "turning point: from this num_envs on, the time per step grows about linearly with num_envs (more envs stop being free)"
)


def plot_scaling(rows: list[dict], out_dir: str, name: str, turning: dict | None = None) -> str:
    """Time per step and env-steps/s against num_envs, one line per contender (log-log); a star
    marks each contender's turning point, explained under the plots with the legend."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for c in dict.fromkeys(r["contender"] for r in rows):
        mine = sorted((r for r in rows if r["contender"] == c), key=lambda r: r["num_envs"])
        xs = [r["num_envs"] for r in mine]
        axes[0].plot(xs, [r["seconds_per_step"] * 1e3 for r in mine], marker="o", markersize=4, label=c)
        line = axes[1].plot(xs, [r["env_steps_per_s"] for r in mine], marker="o", markersize=4)[0]
        point = (turning or {}).get(c)
        if point is not None:
            at = next(r for r in mine if r["num_envs"] == point)
            axes[0].plot([point], [at["seconds_per_step"] * 1e3], marker="*", markersize=14, color=line.get_color())
    axes[0].set(
        xscale="log", yscale="log", xlabel="num_envs", ylabel="ms per step() call", title="Time per step (lower is better)"
    )
    axes[1].set(xscale="log", yscale="log", xlabel="num_envs", ylabel="env-steps / s", title="Throughput (higher is better)")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if turning and any(v is not None for v in turning.values()):
        handles.append(Line2D([], [], marker="*", markersize=12, color="grey", linestyle="none"))
        labels.append(TURNING_POINT)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=8, frameon=False)
    envs = sorted({r["env"] for r in rows if "env" in r})
    if envs:
        fig.suptitle(", ".join(envs))
    return save_figure(fig, out_dir, name)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--num-envs",
        type=options.sizes(),
        help="sizes: '1,256,65536' or '1..65536' (powers of 4); default 1..65536 on CPU, ..4194304 on GPU",
    )
    parser.add_argument(
        "--min-seconds", type=options.seconds, default=0.5, help="time each point at least this long (over all rounds)"
    )
    parser.add_argument(
        "--rounds", type=options.count(), default=5, help="interleaved timing rounds per size; each point is the median"
    )
    parser.add_argument("--only", nargs="*", help="only contenders whose name contains one of these")
    parser.add_argument(
        "--env",
        nargs="+",
        type=suite_env,
        default=["GPUCartPole-v1"],
        metavar="ID",
        help="env id(s) of the suite or GPUBreakout-MinAtar (default: %(default)s); several write scaling_<id>.* each",
    )
    parser.add_argument(
        "--load",
        type=options.count(0),
        default=0,
        metavar="N",
        help="run N busy processes meanwhile: a machine shared with another tenant, on purpose",
    )
    parser.add_argument(
        "--reference",
        metavar="DIR",
        help="another checkout of this package (a directory holding rllib_gpuenv/): its numba-cpu CartPole joins as "
        "a contender",
    )


def run_from_args(args) -> None:
    num_envs = args.num_envs or parse_sizes(default_sizes(cpu="1..65536", gpu="1..4194304"))
    for env_id in args.env:
        name = "scaling" if len(args.env) == 1 else f"scaling_{env_id}"
        run(
            num_envs,
            min_seconds=args.min_seconds,
            only=args.only,
            out_dir=args.out,
            plot=args.plot,
            rounds=args.rounds,
            env_id=env_id,
            reference=args.reference,
            name=name,
            load=args.load,
        )
