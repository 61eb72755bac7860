"""Check, before anything is scheduled, that Ray can grant what an algorithm config asks for.

Ray never refuses a request it cannot meet: an env runner that needs a GPU on a cluster
without one, or more env runners than there are CPUs, waits forever (``build_algo()`` never
returns, a Tune trial stays PENDING), and a local learner with ``num_gpus_per_learner=1`` on a
machine without a GPU ends in RLlib's bare ``AssertionError: local_gpu_idx 0 is not a valid GPU
ID``. ``check_cluster_fits`` turns each of these into one error naming the settings and the fix.

It counts what RLlib itself asks Ray for (the bundles of ``Algorithm.default_resource_request``,
role by role) against the cluster's totals. The device algorithms call it (``ChecksResources``)
when Tune computes a trial's resources and when an algorithm is built; ``rllib train`` before it
starts Tune.
"""

from __future__ import annotations

import dataclasses
import math

RESOURCES = ("CPU", "GPU")


class ResourceError(ValueError):
    """An algorithm config asks for more CPUs or GPUs than Ray (or this process) has."""


@dataclasses.dataclass
class Demand:
    """What one role (the main process, env runners, learners, ...) asks Ray for."""

    role: str
    count: int  # how many actors (1 for the main process)
    count_setting: str | None  # the setting that says how many, e.g. "num_env_runners"
    per_actor: dict[str, float]  # e.g. {"CPU": 1, "GPU": 0}
    settings: dict[str, str | None]  # resource -> the setting that sets per_actor[resource] (None: fixed)

    def per(self, resource: str) -> float:
        return float(self.per_actor.get(resource, 0) or 0)

    def total(self, resource: str) -> float:
        return self.count * self.per(resource)

    def describe(self, resource: str) -> str:
        setting = self.settings.get(resource)
        each = f"{setting}={_fmt(self.per(resource))}" if setting else f"{_fmt(self.per(resource))} {resource} each"
        how = f"{self.count_setting}={self.count} × {each}" if self.count_setting else each
        return f"{_fmt(self.total(resource))} for the {self.role} ({how})"


def _fmt(x: float) -> str:
    return f"{x:g}"


def resource_demands(config, *, main_process_here: bool = False) -> list[Demand]:
    """Role by role, what RLlib asks Ray for with this config (its own bundle helpers).

    ``main_process_here``: the algorithm's main process (local env runner, local learner) is
    the calling process, as in ``build_algo()``, so Ray schedules only the other roles. Else
    (a Tune trial) Ray must also find room for the main process.
    """
    from ray.rllib.algorithms.utils import _get_env_runner_bundles, _get_learner_bundles, _get_main_process_bundle

    if not config._is_frozen:  # settings that validate() derives (e.g. DevicePPO's learner GPU) count too
        config = config.copy(copy_frozen=False)
        config.validate()

    def role(name, count_setting, bundles, settings) -> list[Demand]:
        return [Demand(name, len(bundles), count_setting, bundles[0], settings)] if bundles else []

    demands: list[Demand] = []
    if not main_process_here:
        cpu_setting = "num_cpus_for_main_process"
        if (
            config.num_learners == 0
            and config.num_cpus_per_learner != "auto"
            and config.num_cpus_per_learner > config.num_cpus_for_main_process
        ):
            cpu_setting = "num_cpus_per_learner"
        demands += role(
            "algorithm's main process",
            None,
            [_get_main_process_bundle(config)],
            {"CPU": cpu_setting, "GPU": "num_gpus_per_learner"},
        )
    runner_settings = {"CPU": "num_cpus_per_env_runner", "GPU": "num_gpus_per_env_runner"}
    demands += role("env runners", "num_env_runners", _get_env_runner_bundles(config), runner_settings)
    eval_config = config.get_evaluation_config_object()
    algo_class = config.algo_class
    if getattr(algo_class, "_should_create_evaluation_env_runners", lambda c: c.evaluation_num_env_runners > 0)(eval_config):
        demands += role(
            "evaluation env runners", "evaluation_num_env_runners", _get_env_runner_bundles(eval_config), runner_settings
        )
    if config.num_learners > 0:  # a learner's bundle also holds its aggregator actors' CPUs
        cpu = None if config.num_aggregator_actors_per_learner else "num_cpus_per_learner"
        demands += role("learners", "num_learners", _get_learner_bundles(config), {"CPU": cpu, "GPU": "num_gpus_per_learner"})
    else:  # aggregator actors beside a local learner, 1 CPU each
        demands += role(
            "aggregator actors", "num_aggregator_actors_per_learner", _get_learner_bundles(config), {"CPU": None, "GPU": None}
        )
    return demands


def cluster_resources() -> dict[str, float]:
    """The Ray cluster's total CPUs and GPUs; before ``ray.init``, what it would find here."""
    import ray

    if ray.is_initialized():
        return dict(ray.cluster_resources())
    import torch
    from ray._private.utils import get_num_cpus

    return {"CPU": float(get_num_cpus()), "GPU": float(torch.cuda.device_count())}


def check_cluster_fits(config, cluster: dict[str, float] | None = None, *, main_process_here: bool = False) -> None:
    """Raise ``ResourceError`` when Ray could never grant what ``config`` asks for.

    ``cluster``: total resources (default: the running Ray cluster's). ``main_process_here``:
    see ``resource_demands``; it also checks that this process can hold a local learner's GPU.
    """
    cluster = cluster_resources() if cluster is None else cluster
    demands = resource_demands(config, main_process_here=main_process_here)
    problems = [_shortage(resource, demands, float(cluster.get(resource, 0))) for resource in RESOURCES]
    if main_process_here:
        problems.append(_local_learner_gpu_problem(config))
    else:  # a Tune trial reserves a placement-group bundle per actor
        problems += [_empty_bundle(d) for d in demands]
    problems = [p for p in problems if p]
    if problems:
        raise ResourceError(f"{_algo_name(config)} cannot run on this Ray cluster: " + "; and ".join(problems))


def _algo_name(config) -> str:
    algo = config.algo_class
    return getattr(algo, "__name__", str(algo)) if algo is not None else type(config).__name__


def _shortage(resource: str, demands: list[Demand], have: float) -> str | None:
    need = sum(d.total(resource) for d in demands)
    if need <= have + 1e-9:
        return None
    parts = " + ".join(d.describe(resource) for d in demands if d.total(resource))
    fixes = [_fix(d, resource, have, need) for d in demands if d.total(resource)]
    fixes.append(
        "add a node with a GPU to the cluster"
        if resource == "GPU"
        else f"give Ray more CPUs (a local instance: ray.init(num_cpus={math.ceil(need)}), or rllib train's "
        f"--ray-num-cpus {math.ceil(need)}; a cluster: more nodes, or ray start --num-cpus on them)"
    )
    return (
        f"it asks Ray for {_fmt(need)} {resource}(s) but the cluster has {_fmt(have)}: {parts}. "
        f"Fix: {'; or '.join(f for f in fixes if f)}"
    )


def _empty_bundle(demand: Demand) -> str | None:
    """A role whose actors ask for nothing: Tune reserves a placement-group bundle for each, and
    Ray refuses an empty bundle (a traceback once the trial starts). ``build_algo()`` without Tune
    reserves no bundles and runs such actors."""
    if demand.count_setting is None or any(demand.per(resource) for resource in RESOURCES):
        return None
    cpu = demand.settings.get("CPU") or "its CPUs"
    return (
        f"the {demand.role} ask for no CPU and no GPU ({demand.count_setting}={demand.count}, {cpu}=0), and Ray refuses "
        f"the empty placement-group bundle Tune reserves for each. Fix: set {cpu} to a small fraction, e.g. 0.01"
    )


def _fix(demand: Demand, resource: str, have: float, need: float) -> str | None:
    """A change of this role's settings that makes the total fit, if one exists."""
    per, setting = demand.per(resource), demand.settings.get(resource)
    room = have - (need - demand.total(resource))  # what is left for this role
    if resource == "GPU" and have == 0 and setting:
        who = "the learner then works" if setting == "num_gpus_per_learner" else f"the {demand.role} then work"
        return f"set {setting}=0 ({who} on the CPU)"
    if room <= 0:
        return None
    options = []
    if demand.count_setting and per > 0 and math.floor(room / per + 1e-9) >= 1:
        options.append(f"{demand.count_setting}={math.floor(room / per + 1e-9)}")
    if setting:
        options.append(f"{setting}={_fmt(_round_down(room / demand.count))}")
    return " or ".join(f"set {o}" for o in options) or None


def _round_down(x: float) -> float:
    """``x`` rounded down to two decimals (a setting a person would type), at least 0.01."""
    return max(math.floor(x * 100 + 1e-9) / 100, 0.01)


def _local_learner_gpu_problem(config) -> str | None:
    """A local learner on a GPU needs a GPU that torch can use in this very process."""
    if config.num_learners > 0 or not config.num_gpus_per_learner:
        return None
    import torch

    visible = torch.cuda.device_count()
    if visible > 0:
        return None
    return (
        f"num_gpus_per_learner={_fmt(config.num_gpus_per_learner)} puts the local learner (num_learners=0) on a GPU, "
        "but torch sees no CUDA GPU in this process. Fix: set num_gpus_per_learner=0 (the learner then works on the "
        "CPU), or run where a GPU is"
    )


class ChecksResources:
    """Mixin for an ``Algorithm``: fail at once, with ``check_cluster_fits``'s message, where Ray
    would otherwise wait forever (the device algorithms use it)."""

    @classmethod
    def default_resource_request(cls, config):
        """RLlib's request for a Tune trial, once it is sure the cluster can grant it."""
        import ray

        if ray.is_initialized():  # Tune asks here, in the driver, before it schedules the trial
            check_cluster_fits(cls.get_default_config().update_from_dict(config))
        return super().default_resource_request(config)

    def setup(self, config) -> None:
        check_cluster_fits(config, main_process_here=True)  # before any actor waits for resources
        super().setup(config)
