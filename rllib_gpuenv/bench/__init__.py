"""The benchmarks, one module each: ``rllib-gpuenv bench <name>`` (``rllib-gpuenv bench --help``).

Each module owns its command-line options (``add_arguments``) and its entry
(``run_from_args``), prints a table, writes JSON/CSV (and a PNG with ``--plot``);
``replot.py`` draws the plots again from recorded JSON.
"""

# Command name -> (module, one-line help, aliases). The command line's parser imports every module for its
# options, so a module imports Ray and RLlib only in the functions that run (tests/cli/test_options.py).
BENCHMARKS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "scaling": (
        "scaling",
        "env-steps/s and time per step vs num_envs: every backend vs gymnasium and plain torch",
        ("throughput",),
    ),
    "block-size": ("block_size", "numba-cuda threads per block at several num_envs (GPU)", ()),
    "workload": ("workload", "time per step vs substeps (work per step) for the torch and numba backends", ()),
    "ops": ("step_ops", "ATen ops and bytes per env of one torch-backend step vs plain torch (no timing: exact counts)", ()),
    "sampling": (
        "sampling",
        "env-steps/s of an env runner's sample(), policy included: device runner vs env alone and RLlib's runner",
        (),
    ),
    "training": ("training", "reward vs wall time, side by side: our device path, stock RLlib, SB3 (PPO or DQN)", ()),
    "files": (
        "files",
        "experiment files trained to their own stop criteria, seed by seed: does each still solve its env?",
        (),
    ),
    "breakdown": ("breakdown", "where the time of a training iteration goes, device path (vs stock runner for PPO)", ()),
    "update": ("update", "time per gradient step (PPO, DQN, SAC): the lean update vs RLlib's update vs plain torch", ()),
    "learners": (
        "learners",
        "one learner against several: env-steps/s and time to target, colocated and separate layouts",
        (),
    ),
}
