"""What Tune tells a trial's algorithm about the trial, kept.

Tune hands a trial's actor its trial (id, name, resources) and, with ``RunConfig(log_to_file=...)``,
the files for its stdout and stderr, as entries of the config dict. RLlib's ``Algorithm`` turns
that dict into an ``AlgorithmConfig`` before Tune's ``Trainable`` reads them, and the entries are
lost: a trial's algorithm says ``trial_id == "default"`` (a callback cannot tell its trial) and the
log files stay empty (ray-project/ray#27702). Tune's ``reset`` for a reused actor reads them
itself, so only a new actor lost them.
"""

from __future__ import annotations

from ray.tune.result import STDERR_FILE, STDOUT_FILE, TRIAL_INFO


class KeepsTrialSettings:
    """Mixin for an ``Algorithm``: Tune's trial entries of a config dict reach ``Trainable``."""

    def __init__(self, config=None, *args, **kwargs) -> None:
        if isinstance(config, dict):
            self._from_tune = {key: config[key] for key in (TRIAL_INFO, STDOUT_FILE, STDERR_FILE) if key in config}
        super().__init__(config, *args, **kwargs)

    def _open_logfiles(self, stdout_file, stderr_file) -> None:
        """Called by ``Trainable.__init__`` once it has read (and, here, missed) the entries."""
        given = self.__dict__.pop("_from_tune", {})
        self._trial_info = self._trial_info or given.get(TRIAL_INFO)
        self._stdout_file = stdout_file = stdout_file or given.get(STDOUT_FILE)
        self._stderr_file = stderr_file = stderr_file or given.get(STDERR_FILE)
        super()._open_logfiles(stdout_file, stderr_file)
