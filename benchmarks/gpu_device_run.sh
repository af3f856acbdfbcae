#!/bin/bash
# The whole GPU check in one call (docs/cuda.md, "Running the device check"), every part bounded in time,
# each part's JSON written under $OUT as it finishes, a summary printed last:
#   - in the background from the start: LeRobot's policies under torch.compile, one child process per
#     family (gpu_chunks.py --compiled-child; compiling takes minutes, on the CPU mostly)
#   1. gpu_check.py --sections runtime_ops   the device runtime's operations against their numpy reference
#   2. gpu_chunks.py                         whole pi0.5 and SmolVLA chunks against LeRobot (float32, bf16
#                                            eager), the graph's runtime calls
#   3. with KERNEL_SET=1, after the compiled runs: gpu_check.py --sections kernel_set (the op-level backend)
#
#   OUT=<folder> [PY=python3] [COMPILE_S=220] [KERNEL_SET=0] [CHUNK_ARGS="..."] bash benchmarks/gpu_device_run.sh
#   PARTS="compiled" COMPILE_S=560 OUT=<folder> bash benchmarks/gpu_device_run.sh   # torch.compile alone
#
# PARTS (default "compiled runtime_ops chunks") chooses the parts that run.
# Wheels in $WHEELS (default .whl/: what the GPU machine's Python lacks: LeRobot, the packages it needs beyond
# the machine's, gguf) are installed into /tmp/site first and put on PYTHONPATH.
set -u
OUT=${OUT:?set OUT to the folder for the results}
PY=${PY:-python3}
COMPILE_S=${COMPILE_S:-220}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
LOG=$OUT/run.log
WHEELS=${WHEELS:-.whl}
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-8}

{ date -u; nvidia-smi; lscpu | head -20; "$PY" -c 'import sys, numpy, numba, cupy; print(sys.version); print("numpy", numpy.__version__, "numba", numba.__version__, "cupy", cupy.__version__, "CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion())'; } >"$OUT/env.txt" 2>&1

source benchmarks/parts.sh

SIZE_ARGS=${CHUNK_ARGS:-}
PARTS=${PARTS:-compiled runtime_ops chunks}
if wants compiled; then
  for family in pi05 smolvla; do
    part "compiled $family" "$COMPILE_S" "$PY" benchmarks/gpu_chunks.py --compiled-child "$family" \
      --compile-modes default $SIZE_ARGS --json-out "$OUT/compiled_$family.json" &
  done
fi
wants runtime_ops && part runtime_ops 90 "$PY" benchmarks/gpu_check.py --sections runtime_ops --out "$OUT/runtime_ops.json"
wants chunks && part chunks 240 "$PY" benchmarks/gpu_chunks.py --out "$OUT/chunks.json" --compile-modes "" $SIZE_ARGS
wait
if [ "${KERNEL_SET:-0}" = 1 ]; then
  part kernel_set 80 "$PY" benchmarks/gpu_check.py --sections kernel_set --repeats 5 --host-repeats 1 \
    --out "$OUT/kernel_set.json"
fi

"$PY" - "$OUT" <<'PYTHON'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(name):
    path = out / name
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}
for name in ("runtime_ops.json", "kernel_set.json"):
    for section in load(name).values():
        if isinstance(section, dict) and "cases" in section:
            failed = [c.get("case") for c in section["cases"] if not c.get("ok")]
            print(f"{name}: {len(section['cases']) - len(failed)}/{len(section['cases'])} ok", failed[:6],
                  section.get("error", "")[-300:])
for family in ("pi05", "smolvla"):
    compiled = load(f"compiled_{family}.json")
    if compiled:
        print(f"{family} compiled: p50 {compiled.get('p50_ms')} ms, first chunk {compiled.get('first_chunk_s')} s")
for family, r in load("chunks.json").get("families", {}).items():
    if "error" in r:
        print(family, "ERROR", r["error"][-800:])
        continue
    compiled = load(f"compiled_{family}.json")
    print(f"{family}: ours p50 {r['runtime']['p50_ms']} p99 {r['runtime']['p99_ms']} ms {r['runtime']['stages_p50_ms']}"
          f" | lerobot bf16 eager p50 {r['lerobot_bf16_eager']['p50_ms']} ms ({r['speedup_vs_eager']}x)"
          f" | compiled {compiled.get('p50_ms', compiled.get('error', 'none'))} ms, first {compiled.get('first_chunk_s')} s"
          f" | error {r['runtime_error']} vs lerobot bf16 {r['lerobot_bf16_error']} pass={r['accuracy_pass']}"
          f" | graph calls {r.get('graph_calls')}")
PYTHON
