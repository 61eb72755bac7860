"""What a ``resource_search`` section may try, checked when the file is read (before Ray starts)."""

from __future__ import annotations

import dataclasses
import math

from rllib_gpuenv.experiments.errors import ExperimentError, key_error

# The keys whose values are lists to try, and the least value each takes.
LEAST = {
    "num_envs_per_env_runner": 1,
    "num_env_runners": 0,
    "num_gpus_per_env_runner": 0,
    "num_gpus_per_learner": 0,
    "num_learners": 0,
}
INTEGERS = ("num_envs_per_env_runner", "num_env_runners", "num_learners")


@dataclasses.dataclass
class ResourceSpace:
    """The values to try; every combination that makes sense is a candidate."""

    num_envs_per_env_runner: list[int] = dataclasses.field(default_factory=lambda: [64, 256, 1024])
    num_env_runners: list[int] = dataclasses.field(default_factory=lambda: [0, 1])
    num_gpus_per_env_runner: list[float] = dataclasses.field(default_factory=lambda: [0, 0.5, 1])
    num_gpus_per_learner: list[float] = dataclasses.field(default_factory=lambda: [0, 1])
    # Learners: 0 is one learner in the algorithm's process; "auto" tries 0, 1, 2, 4, ... as far as
    # the cluster can hold them beside the rest of each candidate.
    num_learners: list[int] | str = dataclasses.field(default_factory=lambda: [0])
    time_budget_s: float = 120.0  # a trial that has not reached the target by then stops

    @classmethod
    def from_dict(cls, values, source: str = "resource_search") -> ResourceSpace:
        """The space ``values`` describe, or an ``ExperimentError`` naming the key and the fix."""
        if not isinstance(values, dict):
            raise ExperimentError(f"{source}: expected a mapping of the values to try, got {values!r}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ExperimentError(f"{source}: unknown key(s) {unknown}; resource_search has {sorted(fields)}")
        for key, value in values.items():
            _check(source, key, value)
        return cls(**values)


def _check(source: str, key: str, value) -> None:
    if key == "time_budget_s":
        if not _number(value) or not 0 < value < math.inf:
            raise key_error(source, key, f"seconds a trial may take: a number > 0, got {value!r}")
        return
    if key == "num_learners" and value == "auto":
        return
    integer = key in INTEGERS
    kind = f"{'integers' if integer else 'numbers'} >= {LEAST[key]}" + (", or auto" if key == "num_learners" else "")
    if not isinstance(value, list) or not value:
        raise key_error(source, key, f"a list of the values to try ({kind}), e.g. [{max(LEAST[key], 1)}], got {value!r}")
    for item in value:
        if not _number(item) or (integer and not isinstance(item, int)) or not LEAST[key] <= item < math.inf:
            raise key_error(source, key, f"the values to try are {kind}, got {item!r} in {value!r}")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
