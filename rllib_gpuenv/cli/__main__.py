"""``python -m rllib_gpuenv.cli``: the ``rllib-gpuenv`` command."""

import sys

from rllib_gpuenv.cli.entry import rllib_gpuenv_command

sys.exit(rllib_gpuenv_command())
