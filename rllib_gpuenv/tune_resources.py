"""Let Ray Tune choose the resources: GPUs and envs per env runner, runners, learner GPUs.

Each candidate is one Tune trial of the same experiment with other resource settings; Tune
gives each trial what RLlib computes it needs (``Algorithm.default_resource_request``), so
nothing is passed as ``resources_per_trial``. The objective is what users care about: the
wall time to reach the target return (ties and misses ranked by the best return, then by
throughput). The return is ``env_runners/episode_return_mean``: on the device env runner the
mean of the last 100 episodes, on RLlib 2.60's stock runner the mean of the episodes that ended
in one iteration. The search space is built from what the cluster has: without GPUs the GPU
options drop out (logged), and a candidate that asks for more than the cluster has is an
error before any trial starts, not a trial PENDING forever.

From a file (an experiment with a ``resource_search`` section, see
``configs/tune_resources.yaml``)::

    rllib train file configs/tune_resources.yaml

or from Python: ``search_resources(experiment, ResourceSpace(...))``.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import math
import os

import yaml

from rllib_gpuenv.experiments import RETURN_METRIC, Experiment, ExperimentError, check_fits_cluster

logger = logging.getLogger(__name__)

GPU_KEYS = ("num_gpus_per_env_runner", "num_gpus_per_learner")


@dataclasses.dataclass
class ResourceSpace:
    """The values to try; every combination that makes sense is a candidate."""

    num_envs_per_env_runner: list[int] = dataclasses.field(default_factory=lambda: [64, 256, 1024])
    num_env_runners: list[int] = dataclasses.field(default_factory=lambda: [0, 1])
    num_gpus_per_env_runner: list[float] = dataclasses.field(default_factory=lambda: [0, 0.5, 1])
    num_gpus_per_learner: list[float] = dataclasses.field(default_factory=lambda: [0, 1])
    time_budget_s: float = 120.0  # a trial that has not reached the target by then stops

    @classmethod
    def from_dict(cls, values: dict, source: str = "resource_search") -> "ResourceSpace":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ExperimentError(f"{source}: unknown key(s) {unknown}; resource_search has {sorted(fields)}")
        return cls(**values)


def candidates(space: ResourceSpace, cluster: dict) -> list[dict]:
    """The combinations to try on this cluster (GPU options dropped when it has no GPU)."""
    values = {k: list(getattr(space, k)) for k in ("num_envs_per_env_runner", "num_env_runners", *GPU_KEYS)}
    if cluster.get("GPU", 0) <= 0:
        dropped = {k: [v for v in values[k] if v] for k in GPU_KEYS}
        if any(dropped.values()):
            logger.warning("the cluster has no GPU: dropping the GPU options %s from the search", dropped)
        for k in GPU_KEYS:
            values[k] = [0]
    combos = []
    for envs, runners, runner_gpus, learner_gpus in itertools.product(*values.values()):
        if runners == 0 and runner_gpus:
            continue  # the local runner has no GPU share of its own: it uses the driver's device
        combo = {
            "num_envs_per_env_runner": envs,
            "num_env_runners": runners,
            "num_gpus_per_env_runner": runner_gpus,
            "num_gpus_per_learner": learner_gpus,
        }
        if combo not in combos:
            combos.append(combo)
    return combos


def _with(experiment: Experiment, combo: dict) -> Experiment:
    config = copy.deepcopy(experiment.config)
    config.env_runners(
        num_env_runners=combo["num_env_runners"],
        num_envs_per_env_runner=combo["num_envs_per_env_runner"],
        num_gpus_per_env_runner=combo["num_gpus_per_env_runner"],
    )
    config.learners(num_gpus_per_learner=combo["num_gpus_per_learner"])
    if hasattr(config, "devices"):  # DevicePPO: let Ray's assignment decide, not a fixed device
        config.devices(learner=None, env_runners="auto")
    return dataclasses.replace(experiment, config=config, resource_search=None)


def search_resources(experiment: Experiment, space: ResourceSpace | None = None, storage_path: str | None = None,
                     best_file: str | None = None, verbose: int = 1) -> list[dict]:  # fmt: skip
    """Run one Tune trial per candidate; print the table and the best; write the best as an experiment file.

    Returns the rows of the table, best first.
    """
    import ray
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    space = space or ResourceSpace.from_dict(experiment.resource_search or {})
    cluster = ray.cluster_resources()
    combos = candidates(space, cluster)
    for combo in combos:  # every candidate must fit before anything runs
        check_fits_cluster(_with(experiment, combo), cluster)
    target = experiment.stop.get(RETURN_METRIC)
    if target is None:
        raise ExperimentError(f"experiment {experiment.name!r}: the resource search needs a stop value for {RETURN_METRIC}")
    stop = {**experiment.stop, "time_total_s": space.time_budget_s}
    logger.info("resource search: %d candidates on a cluster with %s", len(combos), {k: cluster.get(k, 0) for k in ("CPU", "GPU")})

    # The resource keys are searchable (so Tune takes each candidate's values from
    # points_to_evaluate); everything else is the experiment's config.
    param_space = _with(experiment, combos[0]).config.to_dict()
    param_space.update({key: tune.choice(sorted({c[key] for c in combos})) for key in combos[0]})
    points = [dict(combo) for combo in combos]
    tuner = tune.Tuner(
        experiment.algo_class,
        param_space=param_space,
        tune_config=tune.TuneConfig(search_alg=BasicVariantGenerator(points_to_evaluate=points), num_samples=len(points)),
        run_config=tune.RunConfig(name=experiment.name, stop=stop, storage_path=storage_path or experiment.storage_path, verbose=verbose),
    )
    results = tuner.fit()
    rows = []
    for result in results:
        config, metrics = result.config, result.metrics or {}
        ret = metrics.get("env_runners", {}).get("episode_return_mean", float("nan"))
        seconds = metrics.get("time_total_s", float("nan"))
        steps = metrics.get("env_runners", {}).get("num_env_steps_sampled_lifetime", 0)
        rows.append({
            **{k: config[k] for k in combos[0]},
            "return": ret,
            "time_to_target_s": seconds if ret >= target else math.inf,
            "env_steps_per_s": steps / seconds if seconds else 0.0,
            "error": None if result.error is None else type(result.error).__name__,
        })  # fmt: skip
    rows.sort(key=lambda r: (r["time_to_target_s"], -_finite(r["return"]), -r["env_steps_per_s"]))
    _print_table(rows, target)
    best = rows[0]
    print("best:", {k: best[k] for k in combos[0]})
    best_file = best_file or os.path.join(results.experiment_path, "best.yaml")
    write_best(experiment, best, best_file)
    print(f"best configuration written to {best_file}; run it with: rllib train file {best_file}")
    return rows


def _finite(x: float) -> float:
    return x if x == x else -math.inf


def _print_table(rows: list[dict], target: float) -> None:
    from rllib_gpuenv.bench.common import format_table

    headers = ["envs/runner", "runners", "GPUs/runner", "learner GPUs", "return", f"s to {target:g}", "env-steps/s", "error"]
    table = [
        [r["num_envs_per_env_runner"], r["num_env_runners"], r["num_gpus_per_env_runner"], r["num_gpus_per_learner"],
         f"{r['return']:.1f}", "-" if math.isinf(r["time_to_target_s"]) else f"{r['time_to_target_s']:.1f}",
         f"{r['env_steps_per_s']:,.0f}", r["error"] or ""]
        for r in rows
    ]  # fmt: skip
    print(format_table(headers, table))


def write_best(experiment: Experiment, best: dict, path: str) -> None:
    """The winning candidate as an experiment file that ``rllib train file`` runs as it is."""
    from rllib_gpuenv.rllib.ppo import DevicePPO

    run = "DevicePPO" if experiment.algo_class is DevicePPO else experiment.algo_class.__name__
    config = {k: best[k] for k in ("num_envs_per_env_runner", "num_env_runners", "num_gpus_per_env_runner", "num_gpus_per_learner")}
    source = experiment.config
    for key in ("seed", "lr", "gamma", "lambda_", "num_epochs", "minibatch_size", "entropy_coeff", "vf_loss_coeff"):
        config[key] = getattr(source, key)
    if hasattr(source, "rollout_length"):
        config["device_rollouts"] = {"rollout_length": source.rollout_length}
    model = {k: v for k, v in source.model_config.items() if k in ("fcnet_hiddens", "fcnet_activation", "vf_share_layers")}
    if model:
        config["model_config"] = model
    spec = {f"{experiment.name}-best": {"run": run, "env": source.env, "stop": dict(experiment.stop), "config": config}}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"# The fastest configuration of the resource search {experiment.name!r}: {best['time_to_target_s']} s to the target.\n")
        yaml.safe_dump(spec, f, sort_keys=False)
