"""Benchmarks: run them with ``rllib-gpuenv bench <name>`` (see ``rllib-gpuenv bench --help``)."""
