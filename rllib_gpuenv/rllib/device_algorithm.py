"""What each device algorithm (DevicePPO, DeviceDQN, DeviceSAC) adds to its RLlib algorithm."""

from __future__ import annotations

from rllib_gpuenv.rllib.checkpointing import ResumesExactly
from rllib_gpuenv.rllib.colocated import LearnerCalls
from rllib_gpuenv.rllib.in_process import InProcess
from rllib_gpuenv.rllib.logdir import LeavesNoEmptyLogdir
from rllib_gpuenv.rllib.parallel_evaluation import AnswersParallelEvaluation
from rllib_gpuenv.rllib.reset_in_place import ResetsInPlace
from rllib_gpuenv.rllib.resources import ChecksResources
from rllib_gpuenv.rllib.tune_trial import KnowsItsTrial


class DeviceAlgorithm(
    LearnerCalls,
    ResumesExactly,
    ChecksResources,
    InProcess,
    AnswersParallelEvaluation,
    ResetsInPlace,
    KnowsItsTrial,
    LeavesNoEmptyLogdir,
):
    """Mixins, before RLlib's algorithm in the bases: calls on every learner (colocated learners),
    exact resume, resources checked before Ray starts, no Ray where nothing needs it, parallel
    evaluation that reports, Tune's reuse_actors and its trial's id, and no empty log folder left
    in ~/ray_results."""
