#!/usr/bin/env bash
# GPU check for the CUDA path (issue 7), on a fresh NVIDIA machine with python3 >= 3.11:
#   bench/gpu_check.sh OUTDIR
# 1. makes a venv and installs kernelcast with the cuda and test extras (pycuda builds from
#    source: it needs nvcc/cuda.h and libcuda; see docs/gpu.md),
# 2. records nvidia-smi,
# 3. runs the GPU tests (pytest -m gpu) and the router benchmark on the CUDA tasks (budget 8),
# 4. writes OUTDIR/summary.md. The whole script stops itself after KC_DEADLINE_S (480 s).
#
# Knobs (environment):
#   KC_DEADLINE_S  total seconds for everything (default 480)
#   KC_VENV        venv folder (default .venv-gpu); an existing one is reused
#   KC_SYSTEM_SITE=1  create the venv with --system-site-packages (reuse preinstalled numpy, torch...)
#   KC_WHEELHOUSE  folder of wheels for a machine without a package index (pip --no-index --find-links)
#   KC_TASKS       CUDA tasks for the router benchmark (default: the five built-in ones)
#   CUDA_HOME      CUDA toolkit root (default: from nvcc on PATH, else /usr/local/cuda)
set -uo pipefail

OUT=${1:?usage: bench/gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
START=$(date +%s)
DEADLINE=$((START + ${KC_DEADLINE_S:-480}))
VENV=${KC_VENV:-.venv-gpu}
TASKS=${KC_TASKS:-gemm_cuda,softmax_cuda,reduce_rows_cuda,transpose_cuda,layernorm_cuda}
STATUS_INSTALL="not run"; STATUS_TESTS="not run"; STATUS_BENCH="not run"

left() { echo $((DEADLINE - $(date +%s))); }
# run_step NAME MAX_SECONDS LOG CMD...: bounded by both its own limit and the overall deadline
run_step() {
    local name=$1 max=$2 log=$3; shift 3
    local budget; budget=$(left)
    (( budget > max )) && budget=$max
    if (( budget < 10 )); then
        echo "skipped: $name (deadline reached)" | tee -a "$log"; return 124
    fi
    echo "== $name (limit ${budget}s)" | tee -a "$log"
    timeout --kill-after=10 "$budget" "$@" 2>&1 | tee -a "$log"
    return "${PIPESTATUS[0]}"
}

# ---- toolkit paths (pycuda's build looks for cuda.h and links -lcuda) ----------------
if [ -z "${CUDA_HOME:-}" ]; then
    if command -v nvcc >/dev/null 2>&1; then
        CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    else
        CUDA_HOME=/usr/local/cuda
    fi
    # nvcc may be a wrapper script outside the toolkit (e.g. /usr/local/bin/nvcc)
    [ ! -f "$CUDA_HOME/include/cuda.h" ] && [ -f /usr/local/cuda/include/cuda.h ] && CUDA_HOME=/usr/local/cuda
fi
export CUDA_HOME PATH="$CUDA_HOME/bin:$PATH"
export CPATH="$CUDA_HOME/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$CUDA_HOME/lib64:$CUDA_HOME/lib64/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
export PYTHONUNBUFFERED=1

# ---- device ----------------------------------------------------------------------
{
    echo "# nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi failed: no NVIDIA driver?"
    echo; echo "# nvcc"; nvcc --version 2>&1 || echo "nvcc not found (CUDA_HOME=$CUDA_HOME)"
} | tee "$OUT/nvidia-smi.txt"

# ---- install ----------------------------------------------------------------------
PY="$VENV/bin/python"
export PY VENV
kc_install() {
    if [ ! -x "$PY" ]; then
        python3 -m venv ${KC_SYSTEM_SITE:+--system-site-packages} "$VENV" || return 1
    fi
    local pipargs=(-q)
    [ -n "${KC_WHEELHOUSE:-}" ] && pipargs+=(--no-index --find-links "$KC_WHEELHOUSE")
    "$PY" -m pip install "${pipargs[@]}" -e ".[cuda,test]"
}
export -f kc_install
if run_step install 300 "$OUT/install.log" bash -c kc_install; then
    STATUS_INSTALL="ok"
else
    STATUS_INSTALL="failed (see install.log)"
fi

# ---- GPU tests -----------------------------------------------------------------------
if [ "$STATUS_INSTALL" = "ok" ]; then
    run_step "pytest -m gpu" 240 "$OUT/pytest-gpu.log" "$PY" -m pytest -m gpu -q -s -rs -p no:cacheprovider tests
    rc=$?
    line=$(grep -E "(passed|failed|skipped|error)" "$OUT/pytest-gpu.log" | tail -1)
    STATUS_TESTS="exit $rc: ${line:-no summary line}"
    "$PY" - > "$OUT/devices.json" 2>>"$OUT/pytest-gpu.log" <<'EOF'
import json
from kernelcast.tools.hardware.backends.cuda import list_devices
print(json.dumps([s.model_dump() for s in list_devices()], indent=2))
EOF
fi

# ---- router benchmark: selective vs topk vs measure-all on the CUDA tasks ---------------
if [ "$STATUS_INSTALL" != "ok" ]; then
    STATUS_BENCH="skipped: install failed"
elif [ ! -f bench/router_bench.py ]; then
    STATUS_BENCH="skipped: bench/router_bench.py does not exist yet"
else
    run_step "router_bench" 600 "$OUT/router_bench.log" \
        "$PY" bench/router_bench.py --backend cuda --tasks "$TASKS" --budget 8 --out "$OUT"
    rc=$?
    STATUS_BENCH="exit $rc$([ $rc -eq 124 ] && echo ' (stopped at the deadline)')"
fi

# ---- summary ---------------------------------------------------------------------
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
{
    echo "# kernelcast GPU check"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- GPU: ${GPU:-none found}"
    echo "- CUDA_HOME: $CUDA_HOME"
    echo "- install (pip install -e .[cuda,test]): $STATUS_INSTALL"
    echo "- pytest -m gpu: $STATUS_TESTS"
    echo "- router benchmark ($TASKS, budget 8): $STATUS_BENCH"
    echo "- wall time: $(( $(date +%s) - START )) s of ${KC_DEADLINE_S:-480} s"
    echo
    echo "Files: $(cd "$OUT" && ls | grep -v '^summary.md$' | tr '\n' ' ')"
    if [ -f "$OUT/pytest-gpu.log" ]; then
        echo; echo "## GPU test timings"; echo; echo '```'
        grep -E "us, default point|SKIPPED|FAILED|Error" "$OUT/pytest-gpu.log" | head -40
        echo '```'
    fi
} > "$OUT/summary.md"
cat "$OUT/summary.md"
[ "$STATUS_INSTALL" = "ok" ] && [[ "$STATUS_TESTS" == "exit 0:"* ]]
