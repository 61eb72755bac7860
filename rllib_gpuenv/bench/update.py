"""Time per gradient step of the PPO, DQN and SAC updates: the lean update, RLlib's update, plain torch.

All three train the same 64×64 tanh actor-critic on the same rollout (one rollout of the main
job's env; each update computes its values and GAE first) with the same clipped PPO loss and
fused Adam, epochs × minibatches at each minibatch size; the time of an update (GAE included)
is divided by its gradient steps. "ours: lean" is ``DevicePPOTorchLearner.update``
as the device path runs it on a CPU; on a GPU "ours: captured" is the same update with its
gradient step replayed from a CUDA graph (the default there; ``update_graph.py``) and "ours:
lean" the eager loop (``cuda_graphs=False``); "RLlib's update" is the same learner with ``lean_update=False``
(RLlib's ``Learner.update``: its minibatch iterator, hooks and per-minibatch metrics); "plain
torch" is the loop a CleanRL user writes (``nn.Sequential`` networks, ``clip_grad_norm_``
where the config clips, no framework). The contenders take turns, round after round, and each
figure is the median over rounds: the ratio to plain torch is the number to read
(benchmarks/RESULTS.md, "The lean update").

DQN's and SAC's rows (``--algos``) time one update of 16 minibatches drawn from one rollout's
n-step transitions, with their algorithm's default networks (``DeviceReplayLearner.update_on_draws``);
their "plain torch" is ``PlainDQN`` and ``PlainSAC``, RLlib's DQN and SAC networks in plain
torch (RESULTS.md, "SAC's gradient step", "DQN's gradient step beside plain torch").
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from functools import partial

import torch

import rllib_gpuenv.options as options
from rllib_gpuenv.bench.common import pyplot, report, save_figure, synchronize
from rllib_gpuenv.experiments.tables import format_table

LEAN, CAPTURED, RLLIB, PLAIN = "ours: lean update", "ours: captured", "RLlib's update", "plain torch"
CONTENDERS = (CAPTURED, LEAN, RLLIB, PLAIN)


class PlainPPO:
    """The same networks, loss, gradient clipping and optimizer as the learner's, in plain torch
    (CleanRL's shape)."""

    def __init__(self, obs_dim: int, num_actions: int, config, device):
        def mlp(out: int) -> torch.nn.Sequential:
            sizes = [obs_dim, *config.model_config["fcnet_hiddens"]]
            layers = [m for a, b in zip(sizes, sizes[1:]) for m in (torch.nn.Linear(a, b), torch.nn.Tanh())]
            return torch.nn.Sequential(*layers, torch.nn.Linear(sizes[-1], out))

        self.actor, self.critic = mlp(num_actions).to(device), mlp(1).to(device)
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr, fused=True)
        self.config = config
        if config.grad_clip and config.grad_clip_by != "global_norm":
            raise ValueError(f"plain torch clips gradients by global norm only, not by {config.grad_clip_by}")

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
        if config.grad_clip:  # as CleanRL clips (max_grad_norm)
            torch.nn.utils.clip_grad_norm_(self.params, config.grad_clip)
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


class PlainReplayUpdate:
    """The update of a plain-torch replay algorithm: its ``step`` on each minibatch of the draws, in order."""

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def update(self, draws: dict[str, torch.Tensor], minibatch_size: int) -> None:
        rows = len(draws["obs"])
        for start in range(0, rows - minibatch_size + 1, minibatch_size):
            self.step({key: column[start : start + minibatch_size] for key, column in draws.items()})


class PlainDQN(PlainReplayUpdate):
    """DQN's gradient step in plain torch (CleanRL's shape) with the network of RLlib's DQN module
    for the config: a ``fcnet_hiddens`` encoder, dueling advantage and value heads; double Q,
    the n-step target from a target network, the Huber loss, the gradients' global norm clipped,
    fused Adam."""

    def __init__(self, obs_dim: int, num_actions: int, config, device):
        if not (config.dueling and config.double_q and config.td_error_loss_fn == "huber" and config.num_atoms == 1):
            raise ValueError("plain torch DQN is written for dueling heads, double Q, the Huber loss and one atom")
        model = config.model_config
        activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[model["fcnet_activation"]]

        def network() -> torch.nn.ModuleList:
            sizes = [obs_dim, *model["fcnet_hiddens"]]
            encoder = torch.nn.Sequential(
                *[m for a, b in zip(sizes, sizes[1:]) for m in (torch.nn.Linear(a, b), activation())]
            )
            return torch.nn.ModuleList([encoder, torch.nn.Linear(sizes[-1], num_actions), torch.nn.Linear(sizes[-1], 1)]).to(
                device
            )

        self.q, self.target = network(), network()
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=config.lr, fused=True)
        self.config = config

    @staticmethod
    def values(network: torch.nn.ModuleList, obs: torch.Tensor) -> torch.Tensor:
        encoder, advantage, value = network
        features = encoder(obs)
        advantages = advantage(features)
        return value(features) + advantages - advantages.mean(-1, keepdim=True)

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        from ray.rllib.core.columns import Columns

        from rllib_gpuenv.rllib.device_replay import N_STEP, WEIGHTS

        config = self.config
        actions = batch[Columns.ACTIONS].long().unsqueeze(-1)
        q = self.values(self.q, batch[Columns.OBS]).gather(-1, actions).squeeze(-1)
        with torch.no_grad():
            best = self.values(self.q, batch[Columns.NEXT_OBS]).argmax(-1, keepdim=True)
            next_q = self.values(self.target, batch[Columns.NEXT_OBS]).gather(-1, best).squeeze(-1)
            not_terminated = 1.0 - batch[Columns.TERMINATEDS].float()
            target = batch[Columns.REWARDS] + config.gamma ** batch[N_STEP] * not_terminated * next_q
        loss = (batch[WEIGHTS] * torch.nn.functional.huber_loss(q, target, reduction="none")).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.q.parameters(), config.grad_clip)
        self.optimizer.step()


class PlainSAC(PlainReplayUpdate):
    """SAC's gradient step in plain torch (CleanRL's shape) with the networks of RLlib's SAC
    module for the config: a ``fcnet_hiddens`` MLP for the actor and, per Q network, one for
    the observation and one for the action, joined (``fusionnet_hiddens``, tanh) into a layer of
    the last hidden size, then the head; RLlib's squashed Gaussian, its four losses in one sum,
    fused Adams. Continuous actions, twin Q."""

    def __init__(self, obs_dim: int, action_dim: int, config, device):
        model = config.model_config
        hidden, fusion = list(model["fcnet_hiddens"]), list(model.get("fusionnet_hiddens", [256, 256]))
        relu = torch.nn.ReLU

        def mlp(sizes: list[int], activation=relu, last_activation: bool = True) -> torch.nn.Sequential:
            layers = []
            for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
                layers.append(torch.nn.Linear(a, b))
                if last_activation or i < len(sizes) - 2:
                    layers.append(activation())
            return torch.nn.Sequential(*layers)

        class Q(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.obs, self.action = mlp([obs_dim, *hidden]), mlp([action_dim, *hidden])
                self.joined = mlp([2 * hidden[-1], *fusion, hidden[-1]], torch.nn.Tanh)
                self.head = torch.nn.Linear(hidden[-1], 1)

            def forward(self, obs, action):
                return self.head(self.joined(torch.cat([self.obs(obs), self.action(action)], -1))).squeeze(-1)

        self.actor = mlp([obs_dim, *hidden, 2 * action_dim], last_activation=False).to(device)
        self.qs = [Q().to(device), Q().to(device)]
        self.targets = [Q().to(device), Q().to(device)]
        for q, target in zip(self.qs, self.targets):
            target.load_state_dict(q.state_dict())
        self.q_params = [p for q in self.qs for p in q.parameters()]
        self.log_alpha = torch.zeros(1, device=device, requires_grad=True)
        self.target_entropy = -float(action_dim)
        groups = [list(self.actor.parameters()), *[list(q.parameters()) for q in self.qs], [self.log_alpha]]
        self.optimizers = [torch.optim.Adam(g, lr=1e-3, eps=1e-7, fused=True) for g in groups]
        self.gamma = config.gamma

    def _sample(self, obs):
        loc, log_std = self.actor(obs).chunk(2, dim=-1)
        std = log_std.clamp(-20.0, 2.0).exp()
        raw = loc + std * torch.randn_like(loc)
        jacobian = 2.0 * (math.log(2.0) - raw - torch.nn.functional.softplus(-2.0 * raw))
        logp = (-0.5 * ((raw - loc) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi) - jacobian).sum(-1)
        return torch.tanh(raw), logp

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        from ray.rllib.core.columns import Columns

        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_logp = self._sample(next_obs)
            q_next = torch.min(*(t(next_obs, next_action) for t in self.targets)) - alpha * next_logp
            target = (
                batch[Columns.REWARDS] + self.gamma ** batch["n_step"] * (1.0 - batch[Columns.TERMINATEDS].float()) * q_next
            )
        critic = sum(torch.nn.functional.huber_loss(q(obs, batch[Columns.ACTIONS]), target) for q in self.qs)
        action, logp = self._sample(obs)
        for p in self.q_params:
            p.requires_grad_(False)
        q_pi = torch.min(*(q(obs, action) for q in self.qs))
        for p in self.q_params:
            p.requires_grad_(True)
        actor = (alpha * logp - q_pi).mean()
        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        (critic + actor + alpha_loss).backward()
        for optimizer in self.optimizers:
            optimizer.step()


def measure_ppo(minibatch_sizes: list[int], device: str, rounds: int, steps_per_update: int = 16) -> list[dict]:
    """PPO rows (contender, minibatch size, ms per gradient step): one rollout of 128 envs × 32
    steps, as many epochs at each size as give ``steps_per_update`` gradient steps."""
    from rllib_gpuenv.experiments.spec import cartpole_config
    from rllib_gpuenv.rllib.learner import rollout_batch
    from rllib_gpuenv.rllib.logdir import stop_algorithm

    config = cartpole_config(device=device, seed=0)
    config.env_runners(num_envs_per_env_runner=128).device_rollouts(rollout_length=32)
    algo = config.build_algo()
    try:
        rollout, learner, env = algo.env_runner.sample(), algo.learner_group._learner, algo.env_runner.env
        plain = PlainPPO(env.single_observation_space.shape[0], int(env.single_action_space.n), config, learner._device)
        rows = rollout.num_env_steps
        results = []
        for size in minibatch_sizes:
            if rows % size:
                raise ValueError(f"minibatch size {size} does not divide the rollout's {rows} rows")
            epochs = max(1, steps_per_update * size // rows)
            settings = {"num_epochs": epochs, "minibatch_size": size, "shuffle_batch_per_epoch": True}

            def ours(path: str, settings=settings) -> None:
                use(learner, path)
                learner.update(
                    batch=rollout_batch(rollout), rollout_length=rollout.length, timesteps=_timesteps(rows), **settings
                )

            runs = {path: partial(ours, path) for path in _paths(learner)}
            runs[PLAIN] = partial(plain.update, rollout, epochs, size)
            results += _rows("PPO", size, time_turns(runs, epochs * rows // size, rounds, learner._device))
        return results
    finally:
        stop_algorithm(algo)


def measure_dqn(
    minibatch_sizes: list[int], device: str, rounds: int, steps_per_update: int = 16, hiddens: list[int] | None = None
) -> list[dict]:
    """DQN rows (``measure_replay``) with DeviceDQN's defaults on GPUCartPole-v1, its network's
    hidden layers ``hiddens`` where given (the MountainCar file's 256x256)."""
    from rllib_gpuenv.rllib import DeviceDQNConfig

    config = DeviceDQNConfig().environment("GPUCartPole-v1")
    if hiddens:
        config.rl_module(model_config={**config.model_config, "fcnet_hiddens": list(hiddens)})
    return measure_replay("DQN", config, minibatch_sizes, device, rounds, steps_per_update, plain=PlainDQN)


def measure_sac(minibatch_sizes: list[int], device: str, rounds: int, steps_per_update: int = 16) -> list[dict]:
    """SAC rows (``measure_replay``) with DeviceSAC's defaults (configs/gpu_pendulum_sac.yaml's
    networks) on GPUPendulum-v1: the lean update's one backward against RLlib's four."""
    from rllib_gpuenv.rllib import DeviceSACConfig

    config = DeviceSACConfig().environment("GPUPendulum-v1")
    return measure_replay("SAC", config, minibatch_sizes, device, rounds, steps_per_update, plain=PlainSAC)


def measure_replay(
    algo_name: str, config, minibatch_sizes: list[int], device: str, rounds: int, steps_per_update: int, plain=None
) -> list[dict]:
    """``steps_per_update`` minibatches per update, drawn from one rollout's n-step transitions,
    through the lean update and RLlib's (``DeviceReplayLearner.update_on_draws``), and through
    ``plain`` (a class like ``PlainSAC``) where there is one."""
    from rllib_gpuenv.rllib.device_replay import WEIGHTS, n_step_transitions
    from rllib_gpuenv.rllib.logdir import stop_algorithm

    config = config.devices(learner=device, env_runners=device).debugging(seed=0)
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        transitions = n_step_transitions(algo.env_runner.sample(), config.n_step, config.gamma)
        transitions[WEIGHTS] = torch.ones(len(transitions["obs"]), device=transitions["obs"].device)
        results = []
        for size in minibatch_sizes:
            rows = torch.randint(
                len(transitions["obs"]), (steps_per_update * size,), generator=torch.Generator().manual_seed(0)
            )
            draws = {key: column[rows.to(column.device)] for key, column in transitions.items()}

            def ours(path: str, draws=draws, size=size) -> None:
                use(learner, path)
                learner.config.train_batch_size_per_learner = size
                learner.update_on_draws(draws, _timesteps(0))

            runs = {path: partial(ours, path) for path in _paths(learner)}
            if plain is not None:
                space = algo.env_runner.env.single_action_space  # Discrete: its actions; Box: its dimensions
                actions = space.n if hasattr(space, "n") else space.shape[-1]
                runs[PLAIN] = partial(
                    plain(transitions["obs"].shape[-1], actions, config, learner._device).update, draws, size
                )
            results += _rows(algo_name, size, time_turns(runs, steps_per_update, rounds, learner._device))
        return results
    finally:
        stop_algorithm(algo)


def _paths(learner) -> list[str]:
    """Our contenders on the learner's device: the captured step only where there is one to capture."""
    return [CAPTURED, LEAN, RLLIB] if learner._device.type == "cuda" else [LEAN, RLLIB]


def use(learner, path: str) -> None:
    """Make ``learner`` update through ``path`` (CAPTURED, LEAN or RLLIB)."""
    learner.config.lean_update = path != RLLIB
    learner.config.cuda_graphs = path == CAPTURED


def _timesteps(sampled: int) -> dict:
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    return {NUM_ENV_STEPS_SAMPLED_LIFETIME: sampled}


def _rows(algo: str, size: int, seconds: dict[str, float]) -> list[dict]:
    return [{"algo": algo, "contender": name, "minibatch_size": size, "ms_per_step": 1e3 * s} for name, s in seconds.items()]


def time_turns(runs: dict, steps: int, rounds: int, device) -> dict[str, float]:
    """Median seconds per gradient step of each of ``runs`` (one update of ``steps`` gradient
    steps each), the contenders taking turns round after round; the first round warms up."""
    times = {name: [] for name in runs}
    for round_ in range(rounds + 1):
        for name, run in runs.items():
            synchronize(device)
            start = time.perf_counter()
            run()
            synchronize(device)
            if round_:
                times[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def run(
    minibatch_sizes: list[int],
    algos: list[str],
    device: str = "cpu",
    rounds: int = 5,
    out_dir: str = "bench_results",
    plot: bool = False,
    dqn_hiddens: list[int] | None = None,
) -> list[dict]:
    measures = {"PPO": measure_ppo, "DQN": partial(measure_dqn, hiddens=dqn_hiddens), "SAC": measure_sac}
    rows = []
    for algo in algos:
        print(f"  {algo} ...", file=sys.stderr, flush=True)
        rows += measures[algo](minibatch_sizes, device, rounds)
    meta = {"device": device, "minibatch_sizes": minibatch_sizes, "rounds": rounds, "algos": algos}
    if dqn_hiddens:
        meta["dqn_hiddens"] = dqn_hiddens
    print(tables(rows, meta))
    report(rows, out_dir, "update", meta, plot=(lambda: plot_update(rows, out_dir)) if plot else None)
    return rows


def tables(rows: list[dict], meta: dict) -> str:
    """One table per algorithm: ms per gradient step and the ratio to plain torch (else to RLlib's update)."""
    sizes, text = meta["minibatch_sizes"], []
    for algo in meta["algos"]:
        ms = {(r["contender"], r["minibatch_size"]): r["ms_per_step"] for r in rows if r["algo"] == algo}
        reference = PLAIN if (PLAIN, sizes[0]) in ms else RLLIB
        table = [
            [name] + [f"{ms[name, size]:.2f} ms ({ms[name, size] / ms[reference, size]:.2f}×)" for size in sizes]
            for name in CONTENDERS
            if (name, sizes[0]) in ms
        ]
        network = f", {'x'.join(map(str, meta['dqn_hiddens']))} network" if algo == "DQN" and meta.get("dqn_hiddens") else ""
        text.append(
            f"{algo}: time per gradient step on {meta['device']}{network} (ratio to {reference}), "
            f"median of {meta['rounds']} rounds\n"
            + format_table(["contender"] + [f"minibatch {size:,}" for size in sizes], table)
        )
    return "\n\n".join(text)


def plot_update(rows: list[dict], out_dir: str) -> str:
    plt = pyplot()
    algos = list(dict.fromkeys(r["algo"] for r in rows))
    fig, axes = plt.subplots(1, len(algos), figsize=(6 * len(algos), 4.5), squeeze=False)
    for ax, algo in zip(axes[0], algos):
        for name in CONTENDERS:
            mine = sorted((r for r in rows if r["algo"] == algo and r["contender"] == name), key=lambda r: r["minibatch_size"])
            if mine:
                ax.plot([r["minibatch_size"] for r in mine], [r["ms_per_step"] for r in mine], marker="o", label=name)
        ax.set(xscale="log", yscale="log", xlabel="minibatch size", ylabel="ms per gradient step", title=f"{algo} update")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, out_dir, "update")


def add_arguments(parser) -> None:
    parser.add_argument(
        "--minibatch-sizes", type=options.sizes(), default="128,512,1024,4096", help="minibatch sizes (default %(default)s)"
    )
    parser.add_argument(
        "--algos",
        type=options.names(("PPO", "DQN", "SAC")),
        default="PPO,DQN",
        help="the updates to time: PPO, DQN, SAC (default %(default)s)",
    )
    parser.add_argument("--device", type=options.device, default="cpu", help="the learner's device (default %(default)s)")
    parser.add_argument("--rounds", type=options.count(), default=5, help="measured rounds per contender and size")
    parser.add_argument(
        "--dqn-hiddens",
        type=options.sizes(),
        help="hidden layers of the DQN rows' network (default DeviceDQN's 64,64; configs/gpu_mountaincar_dqn.yaml: 256,256)",
    )


def run_from_args(args) -> None:
    run(
        args.minibatch_sizes,
        args.algos,
        device=args.device,
        rounds=args.rounds,
        out_dir=args.out,
        plot=args.plot,
        dqn_hiddens=args.dqn_hiddens,
    )
