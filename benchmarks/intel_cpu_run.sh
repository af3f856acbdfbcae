#!/bin/bash
# Issue 34's measurements on an Intel Xeon with AMX, in one call, every part bounded in time, its output
# in $OUT/run.log, the BENCHMARKS.md sections written as each part finishes:
#   as an AVX2-only client CPU (benchmarks/avx2_only.py: AVX-512 and AMX hidden, AVX-VNNI kept):
#     check            what the kernels choose there
#     tests            the int16 and int8 tiles on AVX-VNNI against their numpy references (they run nowhere else)
#     peaks            unit_peaks.py: the AVX-VNNI units' peaks against float32 FMA
#     int16            int16_products.py: int16 products against float32 ones through OpenBLAS
#     smolvla_avx2     record_types.py on released-size SmolVLA: this runtime's F32, BF16, Q8_0 against
#                      PyTorch float32 and bfloat16 under the same limits (the criterion: >= 1.5x its
#                      fastest dtype at no worse action error than its bfloat16)
#   as itself (AMX):
#     tests_amx        the tile kernels (BF16 products, attention, feed-forward; Q8_0 on tdpbssd) on the real tiles
#     gemma_layer      pi05_matrix_units.py: one Gemma-2B layer over 968 tokens (>= 40% of the tiles' peak)
#     gemma_no_tiles   the same with EMBODIED_ROS_AMX=0 (BF16 on vdpbf16ps, Q8_0 on vpdpbusd): what the tiles buy
#     smolvla_amx      record_types.py on released-size SmolVLA against LeRobot's deployed precision and bfloat16
#     pi05_amx         record_types.py on full-size pi0.5 against LeRobot's bfloat16 and float32
#
#   OUT=<folder> [PY=.venv/bin/python] [PARTS="check tests ..."] [RECORDS=<folder>] bash benchmarks/intel_cpu_run.sh
#
# The released-size records are made in $RECORDS (default $OUT/records) by the reference environment
# ($EMBODIED_ROS_REF_PYTHON, reference/install.sh) when missing: SmolVLA's in a few minutes, pi0.5's in
# 5-8 minutes with 21 GB at its peak (run nothing beside it).
set -u
OUT=${OUT:?set OUT to the folder for the results}
PY=${PY:-.venv/bin/python}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
LOG=$OUT/run.log
RECORDS=${RECORDS:-$OUT/records}
PARTS=${PARTS:-check tests peaks int16 smolvla_avx2 tests_amx gemma_layer gemma_no_tiles smolvla_amx pi05_amx}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
{ date -u; lscpu | head -20; grep -m1 -o 'amx[a-z_0-9]*\|avx_vnni\|avx512_bf16' /proc/cpuinfo | sort -u; } >"$OUT/env.txt" 2>&1

source benchmarks/parts.sh
CLIENT=("$PY" benchmarks/avx2_only.py --)  # what follows runs as on an AVX2-only client CPU
record() {  # record NAME SPEC: the reference record of a released-size spec, made when missing
  if [ ! -f "$RECORDS/$1/cases.npz" ]; then
    mkdir -p "$RECORDS"
    (cd reference && "${EMBODIED_ROS_REF_PYTHON:?set EMBODIED_ROS_REF_PYTHON (reference/install.sh)}" \
      "gen_${1%_full}.py" "$2" "$RECORDS/$1") >>"$LOG" 2>&1
  fi
  echo "$RECORDS/$1"
}

wants check && part check 120 "$PY" benchmarks/avx2_only.py --check
wants tests && part tests 900 "${CLIENT[@]}" "$PY" -m pytest -q test/test_int16_products.py test/test_int8_units.py \
  test/test_kernels.py test/test_avx2_only.py
wants peaks && part peaks 300 "${CLIENT[@]}" "$PY" benchmarks/unit_peaks.py --section unit_peaks_intel_avx2_only
wants int16 && part int16 600 "${CLIENT[@]}" "$PY" benchmarks/int16_products.py --section int16_products_intel_avx_vnni
if wants smolvla_avx2 || wants smolvla_amx; then
  SMOLVLA=$(record smolvla_full ../benchmarks/specs/smolvla_full.json)
fi
wants smolvla_avx2 && part smolvla_avx2 2400 "${CLIENT[@]}" "$PY" benchmarks/record_types.py --record "$SMOLVLA" \
  --types f32,bf16,q8_0 --torch-dtypes f32,bf16 --repeats 3 --workdir "$OUT/smolvla_avx2_types" \
  --section smolvla_full_types_intel_avx2_only
wants tests_amx && part tests_amx 600 "$PY" -m pytest -q test/test_bf16_units.py test/test_int8_units.py
wants gemma_layer && part gemma_layer 900 "$PY" benchmarks/pi05_matrix_units.py --repeats 3 --rounds 2 \
  --section pi05_matrix_units_intel_amx
wants gemma_no_tiles && part gemma_no_tiles 900 env EMBODIED_ROS_AMX=0 "$PY" benchmarks/pi05_matrix_units.py \
  --repeats 3 --rounds 2 --section pi05_matrix_units_intel_no_tiles
wants smolvla_amx && part smolvla_amx 1800 "$PY" benchmarks/record_types.py --record "$SMOLVLA" \
  --types bf16,q8_0 --torch-dtypes deployed,bf16,f32 --repeats 3 --workdir "$OUT/smolvla_amx_types" \
  --section smolvla_full_types_intel_amx
if wants pi05_amx; then
  PI05=$(record pi05_full ../benchmarks/specs/pi05_full.json)
  part pi05_amx 2400 "$PY" benchmarks/record_types.py --record "$PI05" --types bf16,q8_0 --torch-dtypes bf16,f32 \
    --repeats 3 --workdir "$OUT/pi05_amx_types" --section pi05_full_types_intel_amx
fi
grep -h "fastest\|faster on case 0" "$LOG" | tail -8
