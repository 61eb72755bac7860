"""``python -m rllib_gpuenv.cli``: the ``rllib-gpuenv`` command."""

import sys

from rllib_gpuenv.cli.main import main

sys.exit(main())
