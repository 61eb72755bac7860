"""Time per gradient step of PPO's update: the lean update, RLlib's update, plain torch.

All three train the same 64×64 tanh actor-critic on the same rollout (one rollout of the main
job's env; each update computes its values and GAE first) with the same clipped PPO loss and
fused Adam, epochs × minibatches at each minibatch size; the time of an update (GAE included)
is divided by its gradient steps. "ours: lean" is ``DevicePPOTorchLearner.update``
as the device path runs it; "RLlib's update" is the same learner with ``lean_update=False``
(RLlib's ``Learner.update``: its minibatch iterator, hooks and per-minibatch metrics); "plain
torch" is the loop a CleanRL user writes (``nn.Sequential`` networks, no framework). The
contenders take turns, round after round, and each figure is the median over rounds: the ratio
to plain torch is the number to read (benchmarks/RESULTS.md, "The lean update").
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from rllib_gpuenv.bench.common import parse_sizes, pyplot, report, save_figure, synchronize
from rllib_gpuenv.experiments.progress import format_table

LEAN, RLLIB, PLAIN = "ours: lean update", "RLlib's update", "plain torch"
CONTENDERS = (LEAN, RLLIB, PLAIN)


class PlainPPO:
    """The same networks, loss and optimizer as the learner's, in plain torch (CleanRL's shape)."""

    def __init__(self, obs_dim: int, num_actions: int, config, device):
        def mlp(out: int) -> torch.nn.Sequential:
            sizes = [obs_dim, *config.model_config["fcnet_hiddens"]]
            layers = [m for a, b in zip(sizes, sizes[1:]) for m in (torch.nn.Linear(a, b), torch.nn.Tanh())]
            return torch.nn.Sequential(*layers, torch.nn.Linear(sizes[-1], out))

        self.actor, self.critic = mlp(num_actions).to(device), mlp(1).to(device)
        params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=config.lr, fused=True)
        self.config = config

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        from ray.rllib.core.columns import Columns

        from rllib_gpuenv.rllib.learner import ADVANTAGES, VALUE_TARGETS

        config = self.config
        logp_all = torch.log_softmax(self.actor(batch[Columns.OBS]), dim=-1)
        logp = logp_all.gather(-1, batch[Columns.ACTIONS].long().unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(logp - batch[Columns.ACTION_LOGP])
        advantages = batch[ADVANTAGES]
        surrogate = torch.min(advantages * ratio, advantages * ratio.clamp(1 - config.clip_param, 1 + config.clip_param))
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        value_loss = (self.critic(batch[Columns.OBS]).squeeze(-1) - batch[VALUE_TARGETS]).pow(2)
        loss = (-surrogate + config.vf_loss_coeff * value_loss - config.entropy_coeff * entropy).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    @torch.no_grad()
    def columns(self, rollout) -> dict[str, torch.Tensor]:
        """Values, GAE and normalised advantages of a rollout (as CleanRL computes them each
        update), flattened with the columns the loss reads."""
        from ray.rllib.core.columns import Columns

        from rllib_gpuenv.rllib.gae import compute_gae
        from rllib_gpuenv.rllib.learner import ADVANTAGES, VALUE_TARGETS

        config = self.config
        values = self.critic(torch.cat([rollout.obs, rollout.next_obs()[-1:]])).squeeze(-1)  # (T + 1, N)
        advantages, targets = compute_gae(
            rollout.rewards, values, rollout.terminated, rollout.truncated, config.gamma, config.lambda_
        )
        valid = rollout.valid
        advantages = (advantages - advantages[valid].mean()) / advantages[valid].std().clamp_min(1e-4)
        return {
            Columns.OBS: rollout.obs.flatten(0, 1),
            Columns.ACTIONS: rollout.actions.flatten(0, 1),
            Columns.ACTION_LOGP: rollout.logp.flatten(0, 1),
            ADVANTAGES: advantages.flatten(),
            VALUE_TARGETS: targets.flatten(),
        }

    def update(self, rollout, num_epochs: int, minibatch_size: int) -> None:
        columns = self.columns(rollout)
        rows = len(columns["obs"])
        for _ in range(num_epochs):
            order = torch.randperm(rows, device=columns["obs"].device)
            for start in range(0, rows, minibatch_size):
                index = order[start : start + minibatch_size]
                self.step({key: column[index] for key, column in columns.items()})


def measure(
    minibatch_sizes: list[int],
    device: str = "cpu",
    num_envs: int = 128,
    rollout_length: int = 32,
    steps_per_update: int = 16,
    rounds: int = 5,
) -> list[dict]:
    """Rows of (contender, minibatch size, ms per gradient step), medians over ``rounds``."""
    from rllib_gpuenv.experiments.spec import cartpole_config

    config = cartpole_config(device=device, seed=0)
    config.env_runners(num_envs_per_env_runner=num_envs).device_rollouts(rollout_length=rollout_length)
    algo = config.build_algo()
    try:
        rollout = algo.env_runner.sample()
        learner = algo.learner_group._learner
        rows = rollout.num_env_steps
        env = algo.env_runner.env
        plain = PlainPPO(env.single_observation_space.shape[0], int(env.single_action_space.n), config, learner._device)
        results = []
        for size in minibatch_sizes:
            if rows % size:
                raise SystemExit(f"minibatch size {size} does not divide the rollout's {rows} rows")
            epochs = max(1, steps_per_update * size // rows)
            print(
                f"  minibatch {size}: {epochs} epoch(s), {epochs * rows // size} gradient steps per update ...",
                file=sys.stderr,
            )
            for name, seconds in time_contenders(learner, plain, rollout, epochs, size, rounds).items():
                results.append({"contender": name, "minibatch_size": size, "ms_per_step": 1e3 * seconds})
        learner.config.lean_update = True
        return results
    finally:
        algo.stop()


def time_contenders(learner, plain: PlainPPO, rollout, epochs: int, size: int, rounds: int) -> dict[str, float]:
    """Median seconds per gradient step of each contender's update, taking turns each round."""
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    from rllib_gpuenv.rllib.learner import rollout_batch

    def ours(lean: bool) -> None:
        learner.config.lean_update = lean
        learner.update(
            batch=rollout_batch(rollout),
            rollout_length=rollout.length,
            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: rollout.num_env_steps},
            num_epochs=epochs,
            minibatch_size=size,
            shuffle_batch_per_epoch=True,
        )

    runs = {LEAN: lambda: ours(True), RLLIB: lambda: ours(False), PLAIN: lambda: plain.update(rollout, epochs, size)}
    steps = epochs * rollout.num_env_steps // size
    times = {name: [] for name in runs}
    for round_ in range(rounds + 1):  # the first round warms up
        for name, run in runs.items():
            synchronize(learner._device)
            start = time.perf_counter()
            run()
            synchronize(learner._device)
            if round_:
                times[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def run(minibatch_sizes: list[int], device: str = "cpu", rounds: int = 5, out_dir: str = "bench_results", plot: bool = False):
    rows = measure(minibatch_sizes, device=device, rounds=rounds)
    ms = {(r["contender"], r["minibatch_size"]): r["ms_per_step"] for r in rows}
    table = [
        [name] + [f"{ms[name, size]:.2f} ms ({ms[name, size] / ms[PLAIN, size]:.2f}×)" for size in minibatch_sizes]
        for name in CONTENDERS
    ]
    print(
        f"\nPPO: time per gradient step on {device} (ratio to plain torch), median of {rounds} rounds\n"
        + format_table(["contender"] + [f"minibatch {size:,}" for size in minibatch_sizes], table)
    )
    meta = {"device": device, "minibatch_sizes": minibatch_sizes, "rounds": rounds}
    report(rows, out_dir, "update", meta, plot=(lambda: plot_update(rows, out_dir)) if plot else None)
    return rows


def plot_update(rows: list[dict], out_dir: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name in CONTENDERS:
        mine = sorted((r for r in rows if r["contender"] == name), key=lambda r: r["minibatch_size"])
        ax.plot([r["minibatch_size"] for r in mine], [r["ms_per_step"] for r in mine], marker="o", label=name)
    ax.set(xscale="log", yscale="log", xlabel="minibatch size", ylabel="ms per gradient step", title="PPO update")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir, "update")


def add_arguments(parser) -> None:
    parser.add_argument("--minibatch-sizes", default="128,512,1024,4096", help="minibatch sizes (default %(default)s)")
    parser.add_argument("--device", default="cpu", help="the learner's device (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per contender and size")


def run_from_args(args) -> None:
    run(parse_sizes(args.minibatch_sizes), device=args.device, rounds=args.rounds, out_dir=args.out, plot=args.plot)
