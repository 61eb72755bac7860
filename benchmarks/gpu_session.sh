#!/usr/bin/env bash
# The GPU proof in one call, for a session that has the lent GPU machine (device tool).
#
#   bash benchmarks/gpu_session.sh pack     # here, once: .whl/ with Ray, gymnasium and pytest
#   # then the device call: command "bash benchmarks/gpu_session.sh run [stages]", carry [".whl"]
#
# "run" installs the carried wheels, then runs the GPU tests (tests/test_gpu.py: numba-cuda and
# torch on CUDA against the CPU, no host sync per step, PPO trained on the GPU and restored on
# a CPU; tests/test_cuda_compile.py for the device's own compute capability), the block-size
# search, the scaling benchmark up to 2^22 envs, the iteration breakdown and the device path's
# time to 475. Everything lands in $OUT (the device tool returns it); the figures go into
# benchmarks/RESULTS.md with the GPU model and versions from machine.txt.
set -uo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
pack)
    set -e
    mkdir -p "$(git rev-parse --git-dir)/info"  # the shared script lists .whl/ in info/exclude
    bash ../shared/device/pack-ray-wheels.sh
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
        pytest pluggy iniconfig tqdm
    du -sh .whl
    ;;
run)
    # Stages (default: all; one device call has 10 minutes, so split them if need be).
    stages=${2:-"tests bench training"}
    OUT=${OUT:-gpu_results}
    mkdir -p "$OUT"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
    bench() { python3 -m rllib_gpuenv.cli bench "$@" --out "$OUT" 2>>"$OUT/bench.log"; }
    {
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
        python3 -c "import sys, torch, numba, ray, gymnasium; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'numba', numba.__version__, 'ray', ray.__version__, 'gymnasium', gymnasium.__version__)"
    } | tee "$OUT/machine.txt"
    for stage in $stages; do
        case $stage in
        tests) python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_cuda_compile.py tests/test_backends_agree.py tests/test_numba_cuda_sim.py 2>&1 | tee "$OUT/tests.txt" | tail -15 ;;
        bench)
            bench block-size --plot --num-envs 65536,1048576,16777216 | tee "$OUT/block_size.txt" | tail -12
            bench scaling --plot --num-envs 1024..16777216 --only numba torch | tee "$OUT/scaling.txt" | tail -25
            bench breakdown --plot | tee "$OUT/breakdown.txt" | tail -16 ;;
        training) bench training --plot --contenders device --budget 60 | tee "$OUT/training.txt" | tail -8 ;;
        *) echo "unknown stage $stage (tests, bench, training)" >&2 ;;
        esac
    done
    ;;
*)
    echo "usage: $0 pack|run" >&2
    exit 2
    ;;
esac
