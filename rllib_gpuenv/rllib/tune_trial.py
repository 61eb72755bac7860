"""A trial's algorithm knows its trial.

Tune hands a trial's actor its trial (id, name, resources) as an entry of the config dict. RLlib's
``Algorithm`` turns that dict into an ``AlgorithmConfig`` before Tune's ``Trainable`` reads the
entry, and skips it: in a new actor the algorithm says ``trial_id == "default"``, and a callback
cannot tell which trial it reports for. (Tune's ``reset``, for a reused actor, reads the entry
itself.)
"""

from __future__ import annotations

from ray.tune.result import TRIAL_INFO


class KnowsItsTrial:
    """Mixin for an ``Algorithm``: Tune's trial entry of a config dict reaches ``Trainable``."""

    def __init__(self, config=None, *args, **kwargs) -> None:
        if isinstance(config, dict) and TRIAL_INFO in config:
            self._trial_from_tune = config[TRIAL_INFO]
        super().__init__(config, *args, **kwargs)

    def setup(self, config) -> None:
        """Called by ``Trainable.__init__`` once it has read (and missed) the entry."""
        trial = self.__dict__.pop("_trial_from_tune", None)
        if trial is not None and self._trial_info is None:
            self._trial_info = trial
        super().setup(config)
