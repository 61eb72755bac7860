#!/usr/bin/env bash
# One entry point for people and CI. Creates ./.venv on first use (again when setup.cfg
# changes), then runs what was asked:
#   ./run.sh train [rllib-gpuenv train options]   PPO on GPUCartPole-v1, default device
#   ./run.sh test  [pytest options]               the test suite
#   ./run.sh <any rllib-gpuenv subcommand>        e.g. ./run.sh bench throughput
set -euo pipefail
cd "$(dirname "$0")"
VENV="${RLLIB_GPUENV_VENV:-.venv}"
PY="${PYTHON:-python3}"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

setup() {
  local start=$SECONDS
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  local stamp="$VENV/.rllib_gpuenv-$(cat setup.cfg run.sh | sha1sum | cut -c1-12)"
  [ -f "$stamp" ] && return 0
  local pip=("$VENV/bin/python" -m pip install -q)
  "${pip[@]}" --upgrade pip >/dev/null
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    if has_gpu; then
      echo "[setup] GPU found: installing torch with CUDA" >&2
      "${pip[@]}" torch
    else
      # No GPU: never the multi-GB CUDA build. PyTorch's CPU wheels (found on this disk
      # where a machine keeps them, else on PyTorch's CPU index).
      echo "[setup] no GPU: installing the CPU build of torch" >&2
      "${pip[@]}" --retries 0 "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu \
        || "${pip[@]}" torch --index-url https://download.pytorch.org/whl/cpu
    fi
  fi
  # numba's CUDA target. With a GPU: with the CUDA libraries of torch's CUDA major version.
  # Without: numba-cuda and NVRTC still compile the kernels to PTX with the CUDA toolkit's NVVM
  # where a machine has one (tests/test_cuda_compile.py), the check the CUDA simulator cannot make.
  if has_gpu; then
    "${pip[@]}" "numba-cuda[cu$("$VENV/bin/python" -c 'import torch; print((torch.version.cuda or "13").split(".")[0])')]"
  else
    "${pip[@]}" numba-cuda "nvidia-cuda-nvrtc==13.*"
  fi
  echo "[setup] installing rllib_gpuenv with its test, benchmark, video and tensorboard extras" >&2
  "${pip[@]}" -e ".[test,bench,video,tensorboard]"
  rm -f "$VENV"/.rllib_gpuenv-*
  touch "$stamp"
  setup_seconds=$((SECONDS - start))
  echo "[setup] done in ${setup_seconds} s" >&2
}

cmd="${1:-train}"
[ $# -gt 0 ] && shift
setup_seconds=
setup
case "$cmd" in
  test) exec "$VENV/bin/python" -m pytest "$@" ;;
  *)
    # The command runs in this process (exec), and the main job's start-up line counts from the
    # process's start: it names the setup's seconds apart from its imports.
    [ -n "$setup_seconds" ] && export RLLIB_GPUENV_SETUP_S=$setup_seconds
    exec "$VENV/bin/rllib-gpuenv" "$cmd" "$@" ;;
esac
