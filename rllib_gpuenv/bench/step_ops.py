"""What one env step asks of the device: its ATen ops and the bytes they read and write.

On a GPU every ATen op of the torch backend is a kernel launch and a pass over its tensors, so
for a bandwidth-bound step the bytes per env set the speed and, at small sizes, the op count
does. Counting them needs no GPU: a ``TorchDispatchMode`` sees every op that a step runs, on any
device, and the counts are exact (no timing noise). The draw of initial states is counted apart:
the counter-based hash that gives every backend the same episodes. On a GPU the torch backend
runs it for every env at every step (asking the host whether any env resets would wait for the
GPU); on the CPU whenever some env resets, which at thousands of envs is every step too.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import sys
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import pyplot, report, save_figure, suite_env
from rllib_gpuenv.core import ops
from rllib_gpuenv.experiments.tables import format_table

WARMUP_STEPS = 50  # episodes under way, some ending at every step


class OpCount(TorchDispatchMode):
    """Counts the ATen ops run inside it and the bytes of their tensor inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops[str(func)] += 1
        values = [*args, *(kwargs or {}).values(), *(out if isinstance(out, (list, tuple)) else [out])]
        flat = [t for v in values for t in (v if isinstance(v, (list, tuple)) else [v])]
        self.bytes += sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor))
        return out


def _count(step: Callable[[], object], draw_owner=None) -> tuple[OpCount, OpCount | None]:
    """The ops of one ``step()``, and of the initial-state draw within it where ``draw_owner`` (a
    bound env definition) has one."""
    draw = None
    if draw_owner is not None:
        original = draw_owner.initial_states
        draw = OpCount()

        def counted(*args, **kwargs):
            with draw:
                return original(*args, **kwargs)

        object.__setattr__(draw_owner, "initial_states", counted)  # a frozen dataclass: for this count only
    try:
        with OpCount() as whole:
            step()
    finally:
        if draw_owner is not None:
            object.__setattr__(draw_owner, "initial_states", original)
    return whole, draw


GPU_WAY = "ours: torch (reuse, no checks), as on a GPU"


def contenders(env_id: str, n: int, device: str) -> list[tuple[str, Callable[[], object], object]]:
    """(name, one step, the bound env whose initial-state draw is counted apart, or None); on the
    CPU also the GPU's way (``GPU_WAY``), which ``run`` counts within ``ops.gpu_code_paths``."""
    from rllib_gpuenv.bench.baselines import PlainTorchCartPole
    from rllib_gpuenv.envs import make_vector_env

    found = []
    if env_id == "GPUCartPole-v1":
        plain = PlainTorchCartPole(n, device)
        actions = torch.randint(0, 2, (n,), device=device)
        found.append(("plain torch", lambda: plain.step(actions), None))
    lean = {"reuse_outputs": True, "validate_actions": False}
    ours = [("ours: torch", {}), ("ours: torch (reuse, no checks)", lean)]
    for name, env_options in ours + ([(GPU_WAY, lean)] if torch.device(device).type == "cpu" else []):
        env = make_vector_env(env_id, n, backend="torch", device=device, **env_options)
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = torch.as_tensor(env.action_space.sample()).to(env.device)
        found.append((name, functools.partial(env.step, actions), env._backend.env))
    return found


def run(env_id: str, num_envs: int, device: str, out_dir: str = "bench_results", plot: bool = False) -> list[dict]:
    rows = []
    for name, step, draw_owner in contenders(env_id, num_envs, device):
        print(f"  {name} ...", file=sys.stderr, flush=True)
        with ops.gpu_code_paths() if name == GPU_WAY else contextlib.nullcontext():
            for _ in range(WARMUP_STEPS):
                step()
            whole, draw = _count(step, draw_owner)
        rows.append(
            {
                "contender": name,
                "env_id": env_id,
                "num_envs": num_envs,
                "device": device,
                "ops": sum(whole.ops.values()),
                "bytes_per_env": whole.bytes / num_envs,
                "draw_ops": sum(draw.ops.values()) if draw else 0,
                "draw_bytes_per_env": draw.bytes / num_envs if draw else 0.0,
                "most_common": whole.ops.most_common(8),
            }
        )
    print(summary_text(rows))
    meta = {"env_id": env_id, "num_envs": num_envs, "device": device}
    report(rows, out_dir, "ops", meta, plot=(lambda: plot_ops(rows, out_dir)) if plot else None)
    return rows


def summary_text(rows: list[dict]) -> str:
    table = [
        [
            r["contender"],
            r["ops"],
            f"{r['bytes_per_env']:,.0f}",
            r["draw_ops"] or "-",
            f"{r['draw_bytes_per_env']:,.0f}" if r["draw_ops"] else "-",
            r["ops"] - r["draw_ops"],
            f"{r['bytes_per_env'] - r['draw_bytes_per_env']:,.0f}",
        ]
        for r in rows
    ]
    head = f"ATen ops of one step (each a kernel launch on a GPU), {rows[0]['env_id']}, {rows[0]['num_envs']:,} envs"
    return (
        head
        + "\n"
        + format_table(
            [
                "contender",
                "ops",
                "bytes per env",
                "initial-state draw: ops",
                "its bytes per env",
                "ops without it",
                "bytes per env without it",
            ],
            table,
        )
    )


def plot_ops(rows: list[dict], out_dir: str) -> str:
    """Ops and bytes per env of each contender's step, the initial-state draw's share marked."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 0.6 * len(rows) + 1.6))
    names = [r["contender"] for r in rows]
    for ax, total, part, label in (
        (axes[0], "ops", "draw_ops", "ATen ops per step (kernel launches on a GPU)"),
        (axes[1], "bytes_per_env", "draw_bytes_per_env", "bytes read and written per env per step"),
    ):
        drawn = [r[part] for r in rows]
        rest = [r[total] - r[part] for r in rows]
        ax.barh(names, rest, color="tab:blue", label="the step")
        ax.barh(names, drawn, left=rest, color="tab:orange", label="initial-state draw")
        ax.set(xlabel=label)
        ax.invert_yaxis()
        ax.grid(True, axis="x", alpha=0.3)
    axes[1].set_yticks([])
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside the bars
    fig.suptitle(f"One step of {rows[0]['env_id']} at {rows[0]['num_envs']:,} envs ({rows[0]['device']})", fontsize=10)
    return save_figure(fig, out_dir, "ops")


def add_arguments(parser) -> None:
    parser.add_argument("--env", type=suite_env, default="GPUCartPole-v1", help="an env of the suite (default: %(default)s)")
    parser.add_argument("--num-envs", type=options.count(), default=65536, help="envs stepped (default: %(default)s)")
    parser.add_argument(
        "--device", type=options.device, default="cpu", help="the device the step runs on (default: %(default)s)"
    )


def run_from_args(args) -> None:
    run(args.env, args.num_envs, args.device, out_dir=args.out, plot=args.plot)
