"""Check, before anything is scheduled, that Ray can grant what an algorithm config asks for.

Ray never refuses a request it cannot meet: an env runner that needs a GPU on a cluster
without one, or more env runners than there are CPUs, waits forever (``build_algo()`` never
returns, a Tune trial stays PENDING), and a local learner with ``num_gpus_per_learner=1`` on a
machine without a GPU ends in RLlib's bare ``AssertionError: local_gpu_idx 0 is not a valid GPU
ID``. ``check_cluster_fits`` turns each of these into one error naming the settings and the fix.

It counts what RLlib itself asks Ray for (the bundles of ``Algorithm.default_resource_request``,
role by role) against the cluster's totals, and, on a cluster of several nodes, places them on
the nodes as Ray does: every actor runs on one node, and Ray places a Tune trial's actors (one
placement group) greedily, so two nodes of 2 and 1 CPUs never get a trial of 1 + 3 × 0.66 CPUs,
though the sum fits and another order would place it. The device algorithms call it (``ChecksResources``)
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


def node_resources() -> list[dict[str, float]] | None:
    """Each live node's CPUs and GPUs in the running Ray cluster; None where Ray is not running
    (this machine alone, which the totals describe)."""
    import ray

    if not ray.is_initialized():
        return None
    return [{r: float(node["Resources"].get(r, 0)) for r in RESOURCES} for node in ray.nodes() if node.get("Alive")]


def check_cluster_fits(
    config,
    cluster: dict[str, float] | None = None,
    *,
    main_process_here: bool = False,
    nodes: list[dict[str, float]] | None = None,
) -> None:
    """Raise ``ResourceError`` when Ray could never grant what ``config`` asks for.

    ``cluster``: total resources (default: the running Ray cluster's). ``nodes``: each node's
    (default: the running cluster's, when ``cluster`` is not given): every actor must fit on one.
    ``main_process_here``: see ``resource_demands``; it also checks that this process can hold a
    local learner's GPU.
    """
    if cluster is None:
        cluster = cluster_resources()
        nodes = node_resources() if nodes is None else nodes
    demands = resource_demands(config, main_process_here=main_process_here)
    problems = [_shortage(resource, demands, float(cluster.get(resource, 0))) for resource in RESOURCES]
    if not any(problems) and nodes and len(nodes) > 1:
        # a Tune trial's actors are one placement group; build_algo() places them one by one
        strategy = None if main_process_here else config.placement_strategy
        problems.append(_placement_problem(demands, nodes, strategy))
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


def _bundles(demands: list[Demand]) -> list[dict[str, float]]:
    return [{r: d.per(r) for r in RESOURCES} for d in demands for _ in range(d.count)]


def places(bundles: list[dict[str, float]], nodes: list[dict[str, float]], strategy: str | None = None) -> bool:
    """Whether Ray can place every bundle (an actor's CPUs and GPUs), each on one node.

    ``strategy``: a Tune trial's placement group's (RLlib's ``placement_strategy``). Ray places a
    ``"PACK"`` group greedily (``ray_packs``): it can leave a group pending that another order
    would place. ``"STRICT_PACK"``: all on one node. Otherwise (actors placed one by one, as
    ``build_algo()`` does, or a spread group) any placement will do: an exact search."""
    if strategy == "PACK":
        return ray_packs(bundles, nodes)
    if strategy == "STRICT_PACK":
        return any(all(sum(b[r] for b in bundles) <= node.get(r, 0) + 1e-9 for r in RESOURCES) for node in nodes)
    return _packs(bundles, nodes)


def _largest_first(bundles: list[dict[str, float]]) -> list[tuple[float, ...]]:
    """Ray's order for placing bundles: the most GPUs first, then the most CPUs."""
    return sorted((tuple(b[r] for r in RESOURCES) for b in bundles), key=lambda b: b[::-1], reverse=True)


def _fits(need: tuple[float, ...], room: tuple[float, ...]) -> bool:
    return all(x <= y + 1e-9 for x, y in zip(need, room))


def ray_packs(bundles: list[dict[str, float]], nodes: list[dict[str, float]]) -> bool:
    """Ray's placement of a ``PACK`` group, as its scheduler does it (``BundlePackSchedulingPolicy``
    with ``LeastResourceScorer``): the largest bundle left goes to the node it leaves the largest
    share free on, that node takes every other bundle left that still fits it, in order, and is
    then done with; until no bundle is left, or none fits a node left. Where two nodes score the
    same, Ray may take either: placed if either way places."""
    order = _largest_first(bundles)

    def score(need, room) -> float:  # -1: it does not fit
        if not _fits(need, room):
            return -1.0
        return sum((y - x) / y for x, y in zip(need, room) if x > 0 and y > 0)

    def place(left: list[tuple[float, ...]], free: list[tuple[float, ...]]) -> bool:
        if not left:
            return True
        scores = [score(left[0], room) for room in free]
        best = max(scores, default=-1.0)
        if best < 0:
            return False
        for n in {n for n, s in enumerate(scores) if abs(s - best) < 1e-12}:
            room, rest = free[n], []
            for need in left:
                if _fits(need, room):
                    room = tuple(y - x for x, y in zip(need, room))
                else:
                    rest.append(need)
            if place(rest, free[:n] + free[n + 1 :]):
                return True
        return False

    return place(order, [tuple(node.get(r, 0.0) for r in RESOURCES) for node in nodes])


def _packs(bundles: list[dict[str, float]], nodes: list[dict[str, float]]) -> bool:
    """Whether some placement of every bundle on the nodes exists: an exact search, the largest
    bundles first (the few actors of an algorithm, many of them alike, make it quick)."""
    order = _largest_first(bundles)
    failed: set[tuple] = set()

    def place(i: int, free: tuple[tuple[float, ...], ...]) -> bool:
        if i == len(order):
            return True
        state = (i, tuple(sorted(free)))
        if state in failed:
            return False
        for n, room in enumerate(free):
            if room not in free[:n] and _fits(order[i], room):
                left = tuple(y - x for x, y in zip(order[i], room))
                if place(i + 1, free[:n] + (left,) + free[n + 1 :]):
                    return True
        failed.add(state)
        return False

    return place(0, tuple(tuple(node.get(r, 0.0) for r in RESOURCES) for node in nodes))


def _placement_problem(demands: list[Demand], nodes: list[dict[str, float]], strategy: str | None) -> str | None:
    """The cluster's totals hold what the roles ask for, but its nodes cannot: name each node's
    resources, what every actor asks for, and changes that make the actors fit on the nodes."""
    if places(_bundles(demands), nodes, strategy):
        return None
    used = [r for r in RESOURCES if any(d.total(r) for d in demands)]
    have = ", ".join("(" + ", ".join(f"{_fmt(node.get(r, 0))} {r}" for r in used) + ")" for node in nodes)
    asks = " + ".join(
        f"the {d.role}: {d.count} × (" + ", ".join(f"{_fmt(d.per(r))} {r}" for r in used) + ")" for d in demands if d.count
    )
    fixes = [fix for d in demands for fix in _placement_fixes(d, demands, nodes, strategy)]
    fixes.append("add a node, or more CPUs or GPUs to the nodes (ray start --num-cpus/--num-gpus)")
    return (
        f"its actors fit the cluster's totals, but Ray cannot place them on its {len(nodes)} nodes (each actor runs "
        f"on one node; a trial's actors are placed largest first, a node filled at a time): the nodes have {have}; "
        f"{asks}. Fix: {'; or '.join(fixes)}"
    )


def _placement_fixes(demand: Demand, demands: list[Demand], nodes: list[dict[str, float]], strategy: str | None) -> list[str]:
    """Settings of ``demand``'s role with which every actor fits on the nodes: fewer actors (the
    most that fit), or less of a resource per actor (the most that fits, in hundredths)."""

    def fits(changed: Demand) -> bool:
        return places(_bundles([changed if d is demand else d for d in demands]), nodes, strategy)

    options = []
    if demand.count_setting:
        count = next((c for c in range(demand.count - 1, 0, -1) if fits(dataclasses.replace(demand, count=c))), 0)
        if count:
            options.append(f"{demand.count_setting}={count}")
    for resource in RESOURCES:
        setting, per = demand.settings.get(resource), demand.per(resource)
        if not setting or per <= 0.01:
            continue

        def with_per(hundredths: int, resource: str = resource) -> Demand:
            return dataclasses.replace(demand, per_actor={**demand.per_actor, resource: hundredths / 100})

        low, high = 0, math.ceil(per * 100) - 1  # the most hundredths below `per` that fit, if any
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits(with_per(middle)) else (low, middle - 1)
        if low > 0 and fits(with_per(low)):
            options.append(f"{setting}={_fmt(low / 100)}")
    return [" or ".join(f"set {o}" for o in options)] if options else []


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
