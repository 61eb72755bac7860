#!/usr/bin/env bash
# The GPU proof, for a session that has the lent GPU machine (device tool).
#
#   bash benchmarks/gpu_session.sh pack     # here, once: .whl/ with Ray, gymnasium and gymnax
#   bash benchmarks/gpu_session.sh aside    # here: the CPU's results stay behind (64 MiB a call)
#   # then device calls (below) of "bash benchmarks/gpu_session.sh run [STAGES]", carry [".whl"]
#   git checkout -- benchmarks              # here, after the calls: the CPU's results back
#
# A lease is 15 minutes of device time, its start (~30 s) included, and one call runs 10 at most.
# Each command runs under its own cap (seconds, below; sized from the H100 run of 2026-11-26) and
# all under GPU_STAGE_BUDGET_S (default 560), in the order of what matters most. What a cap or
# the budget cuts is missing from the archive, listed in cut.txt and "unmeasured" in targets.txt,
# never guessed; timings.txt says what each command took. GPU_ONLY names the benchmarks to run
# (block_size scaling sampling update ops scaling_breakout breakdown breakdown_dqn training ppo_eager_step
# training_dqn training_purejaxrl training_purejaxrl_dqn training_pendulum training_sac sac_captured ppo_512envs
# learners), the rest skipped. Two calls fill a lease:
#   GPU_STAGE_BUDGET_S=380 bash benchmarks/gpu_session.sh run "tests bench"      (timeout_s 420)
#   GPU_STAGE_BUDGET_S=380 bash benchmarks/gpu_session.sh run "training"         (timeout_s 420)
# the second at once, while the machine is warm (30 s). benchmarks/RESULTS.md ("On a GPU") says
# what the last lease measured and what GPU_ONLY the next should give.
# The image has torch, numba-cuda, JAX, pytest and pytest-xdist; Ray, gymnasium and gymnax travel.
#   tests     tests/test_gpu.py (both CUDA backends against the CPU for every env, MinAtar Breakout's
#             array written in place by the kernel included, no host sync per step or per rollout
#             step, PPO trained on the GPU and restored on a CPU, two env runners sharing the GPU,
#             a colocated learner actor stepping its envs on the GPU, the PPO and DQN updates
#             captured as CUDA graphs against the eager ones: the same weights (SAC's with its
#             Gaussian noise fixed) and prioritized replay's TD errors, host syncs per
#             update, not per step, a step that cannot be captured falling back, a learner with
#             its own gradient postprocessing left uncaptured, numba-cuda's kernel compiled when
#             the env is made (no step compiles again) and loaded from numba's disk cache by a later
#             process, the main job built without starting Ray, its recorded launch replayed bit for bit
#             as a launch per step, PPO's and DQN's recorded rollouts replayed bit for
#             bit as the rollout stepped from Python, SAC's step captured with its noise drawn; gymnax stepping
#             on the GPU in memory shared with torch; Tune's reset in place freeing the previous
#             build's GPU memory; a prioritized replay round without a host sync), the PTX compile for the device's compute
#             capability, the simulator and host-read tests. Brax's GPU test skips there: MuJoCo's
#             wheels are over what a call carries beside Ray; it runs on a GPU machine of one's own;
#   bench     the block-size search at 2^16, 2^20, 2^24 envs, per-step scaling of the CUDA
#             contenders from 2^10 to 2^24 envs (numba-cuda's launch replayed from a CUDA graph
#             and launched per step among them; MinAtar Breakout, an env with a 10x10x4 array
#             each, to 2^20), sampling with the policy at 2^16 and 2^20 envs (the recorded rollout
#             against the rollout stepped from Python), the time per gradient
#             step of the captured and the eager lean update against RLlib's and plain torch on the
#             GPU, for PPO, DQN and SAC (bench update; SAC's captured step is what would decide
#             cuda_graphs' default for DeviceSAC), the torch step's ops counted on the GPU (bench ops), the
#             iteration breakdown with its build_algo() profiled (15-18 s on the H100, 0.9 s on a CPU),
#             and DeviceDQN's;
#   training  time to 475 for PPO (gpu_cartpole_ppo.yaml, gpu_cartpole_ppo_512envs.yaml), DQN,
#             PureJaxRL's PPO and DQN on the image's JAX (the fastest on a CPU: one XLA program each),
#             Pendulum PPO and SAC to -300, the first PPO file with the gradient step eager
#             (cuda_graphs false), SAC's with it captured (cuda_graphs true), on the device path,
#             3 seeds each, with the GPU's utilisation
#             sampled every 0.2 s;
#   learners  one learner in the driver against one colocated learner actor on the GPU and the
#             separate layout (an env runner and a learner sharing the GPU), with a rollout's trip
#             through Ray from the GPU (bench learners). N learners need N GPUs (NCCL cannot put
#             two on one): on a machine of several, run bench learners --learners 1,2,4.
# Everything lands in $OUT (the device tool returns it); the figures go into
# benchmarks/RESULTS.md with the GPU model and versions from machine.txt. Each call ends with the
# issue's targets as far as its stages measured them; with every archive unpacked into
# benchmarks/gpu/<date>-<gpu>/, `python -m rllib_gpuenv.bench.targets benchmarks/gpu` gives each target from
# the latest lease that measured it.
set -uo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
pack)
    set -e
    mkdir -p "$(git rev-parse --git-dir)/info"  # the shared script lists .whl/ in info/exclude
    bash ../shared/device/pack-ray-wheels.sh
    # gymnax is pure Python, and its needs (flax, chex, matplotlib, seaborn) are in the image
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .whl gymnax==1.0.1
    du -sh .whl
    ;;
aside)
    # A device call carries the working tree and .whl, 64 MiB at most; the wheels are ~49 MiB and
    # the CPU's results in benchmarks/ (JSON, CSV, PNG) ~10 MiB and growing: on 2026-11-29 the two
    # came to just over. Nothing the GPU runs reads them (its tests and benchmarks write to $OUT),
    # so the tracked files under benchmarks/ but this script are removed from the working tree;
    # git has them. Refused where one of them has changes of yours.
    set -e
    git diff --quiet -- benchmarks || { echo "benchmarks/ has uncommitted changes: commit them first" >&2; exit 1; }
    git ls-files -z benchmarks | grep -zv '^benchmarks/gpu_session.sh$' | xargs -0 rm -f
    echo "benchmarks/ results set aside (git checkout -- benchmarks brings them back)"
    ;;
run)
    # Stages (default: all, each command under its cap, all under GPU_STAGE_BUDGET_S).
    stages=${2:-"tests bench training learners"}
    OUT=${OUT:-gpu_results}
    # The device tool brings back at most 8 files from $OUT: results are written to $RES and
    # packed into one archive there, $OUT/gpu_<stages>.tgz (unpack it into benchmarks/gpu/).
    RES=$(mktemp -d)
    mkdir -p "$OUT"
    sampler=
    trap '[ -n "$sampler" ] && kill "$sampler" 2>/dev/null; tar czf "$OUT/gpu_${stages// /_}.tgz" -C "$RES" . && echo "results: $OUT/gpu_${stages// /_}.tgz"' EXIT
    if [ -d .whl ]; then  # the lent machine: Ray and gymnasium travel as wheels
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
        # The image pairs numpy 2.5 with a numba-cuda that registers np.row_stack at import, which
        # numpy 2.5 removed (numba 0.68.1 checks first; numba-cuda, as of 0.30.4, does not): every kernel
        # compile fails with "module 'numpy' has no attribute 'row_stack'". Put the alias back for
        # every process here (H100 lease, 2026-11-26).
        printf '%s\n' 'import numpy' 'if not hasattr(numpy, "row_stack"):  # removed in numpy 2.5; numba-cuda still registers it' \
            '    numpy.row_stack = numpy.vstack' >/tmp/site/sitecustomize.py
        export PYTHONPATH=/tmp/site:$PWD
    else  # a machine of your own: the python3 on PATH has everything (./run.sh's .venv/bin first on PATH)
        export PYTHONPATH=$PWD
    fi
    export PYTHONUNBUFFERED=1
    # Every command stops by this deadline (the device call's limit is 600 s), so that a slow stage
    # still leaves the archive of what it measured: a command killed from outside leaves nothing.
    deadline=$((SECONDS + ${GPU_STAGE_BUDGET_S:-560}))
    left() {  # left [CAP]: seconds this command may run, CAP at most; 0 once the budget is spent
        local s=$((deadline - SECONDS)) cap=${1:-100000}
        s=$((s < cap ? s : cap)); echo $((s > 5 ? s : 0))
    }
    bench() {  # bench CAP DIR NAME ARGS...: results in $RES/DIR, the table in $RES/DIR/NAME.txt and here
        local t; t=$(left "$1"); local dir=$RES/$2 name=$3; shift 3
        local key=$name; [ "$dir" = "$RES/." ] || key=${dir#"$RES"/}
        if [ -n "${GPU_ONLY:-}" ] && [[ " $GPU_ONLY " != *" $key "* ]]; then echo "$key: not run (GPU_ONLY)" >>"$RES/cut.txt"; return; fi
        [ "$t" -gt 0 ] || { echo "$name: not run, the stage budget is spent" | tee -a "$RES/cut.txt"; return; }
        mkdir -p "$dir"; echo "== bench $name (at most ${t}s)"
        local start=$SECONDS
        timeout "$t" python3 -m rllib_gpuenv.cli bench "$@" --plot --out "$dir" 2>>"$dir/$name.log" | tee "$dir/$name.txt" | tail -25
        [ "${PIPESTATUS[0]}" = 124 ] && echo "$name: cut at its cap of ${t}s" | tee -a "$RES/cut.txt"
        echo "$key $((SECONDS - start)) s" >>"$RES/timings.txt"
    }
    {
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "no nvidia-smi: no GPU here"
        python3 -c "import sys, torch, numba, ray, gymnasium; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'numba', numba.__version__, 'ray', ray.__version__, 'gymnasium', gymnasium.__version__)"
    } | tee "$RES/machine.txt"
    for stage in $stages; do
        case $stage in
        tests)  # six workers, test by test; setup.cfg's addopts are CI's (and name xdist options the image may lack)
            [ "$(left 200)" -gt 0 ] || { echo "tests: not run, the stage budget is spent" | tee -a "$RES/cut.txt"; continue; }
            start=$SECONDS
            timeout "$(left 200)" python3 -m pytest -o addopts= -v -n 6 -p no:cacheprovider -rs --durations=15 \
                tests/test_gpu.py tests/backends/test_cuda_compile.py tests/rllib/test_host_reads.py \
                tests/backends/test_backends_agree.py tests/backends/test_numba_cuda_sim.py 2>&1 | tee "$RES/tests.txt" | tail -40
            echo "tests $((SECONDS - start)) s" >>"$RES/timings.txt" ;;
        bench)
            bench 40 . block_size block-size --num-envs 65536,1048576,16777216
            bench 80 . scaling scaling --num-envs 1024..16777216 --only cuda
            # 32 envs: the main job's. 4,096 envs would bring in RLlib's stock runner (~9 s a call on a CPU)
            bench 120 . sampling sampling --num-envs 32,65536,1048576
            bench 90 . update update --device cuda --algos PPO,DQN,SAC --minibatch-sizes 128,512,1024,4096
            bench 30 . ops ops --device cuda --num-envs 1048576
            bench 40 . scaling_breakout scaling --env GPUBreakout-MinAtar --num-envs 1024..1048576 --only cuda
            bench 90 . breakdown breakdown --profile-build 25
            # DeviceDQN's iteration in parts: on the H200 a gradient step cost 1.5 ms with what
            # surrounds it, where the captured step alone took ~0.55 ms on the H100
            bench 60 breakdown_dqn breakdown breakdown --algo DeviceDQN ;;
        training)
            # utilisation.csv: the GPU's busy share and memory every 0.2 s while the stage trains
            nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 200 >"$RES/utilisation.csv" 2>&1 &
            sampler=$!
            bench 130 . training training --contenders device --budget 30
            bench 130 ppo_512envs training training --contenders device --budget 30 --device-config configs/gpu_cartpole_ppo_512envs.yaml
            bench 120 . training_dqn training --task cartpole-dqn --contenders device --budget 40
            # PureJaxRL: ~13 s of jit compile a seed on the H200 (2026-11-29), then its 20 s budget
            bench 110 training_purejaxrl training training --contenders purejaxrl --budget 20
            bench 110 training_purejaxrl_dqn training training --task cartpole-dqn --contenders purejaxrl --budget 20
            bench 120 . training_pendulum training --task pendulum-ppo --contenders device --budget 40
            bench 120 . training_sac training --task pendulum-sac --contenders device --budget 40
            sed 's/^    use_kl_loss: false.*/&\n    cuda_graphs: false/' configs/gpu_cartpole_ppo.yaml > "$RES/ppo_eager_step.yaml"
            grep -q '^    cuda_graphs: false' "$RES/ppo_eager_step.yaml" || echo "ppo_eager_step.yaml: cuda_graphs not set" >&2
            bench 120 ppo_eager_step training training --contenders device --budget 30 --device-config "$RES/ppo_eager_step.yaml"
            # DeviceSAC with its gradient step captured (cuda_graphs is off by its default until a GPU shows it pays)
            { cat configs/gpu_pendulum_sac.yaml; echo '    cuda_graphs: true'; } > "$RES/sac_captured.yaml"
            bench 120 sac_captured training training --task pendulum-sac --contenders device --budget 40 --device-config "$RES/sac_captured.yaml"
            kill "$sampler" 2>/dev/null; sampler= ;;
        learners)
            bench 120 . learners learners --device cuda --learners 1 --seeds 0,1,2 --budget 60 \
                --config-file configs/gpu_cartpole_ppo_512envs.yaml ;;
        *) echo "unknown stage $stage (tests, bench, training, learners)" >&2 ;;
        esac
    done
    timeout 20 python3 -m rllib_gpuenv.bench.targets "$RES" 2>/dev/null | tee "$RES/targets.txt"
    ;;
*)
    echo "usage: $0 pack|aside|run" >&2
    exit 2
    ;;
esac
