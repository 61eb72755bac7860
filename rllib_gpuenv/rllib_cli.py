"""Moved to ``rllib_gpuenv.cli.rllib`` (the ``rllib`` command); ``python -m rllib_gpuenv.rllib_cli``
keeps working, as the README's ``ray job submit`` recipe once wrote it."""

import sys

from rllib_gpuenv.cli import rllib as _moved

if __name__ == "__main__":
    sys.exit(_moved.main())
sys.modules[__name__] = _moved
