#!/bin/bash
# Unpacks the real torchvision 0.28.0 (Python files only) into DIR, for gen_groot_pipeline.py:
# LeRobot's GR00T view transform and the Qwen image processor resize torch tensors with it, while the
# reference environment's own `torchvision` is an import-only placeholder. The wheel's compiled
# operators do not load against the CPU torch build and `resize` does not use them, so the module
# that registers them (_meta_registrations.py) is emptied.
#
#   bash real_torchvision.sh DIR [PYTHON]      then: PYTHONPATH=DIR PYTHON gen_groot_pipeline.py OUT_DIR
#
# PYTHON: the reference environment's interpreter (default: python3.11 on PATH), used for pip.
set -euo pipefail
if [ $# -lt 1 ]; then sed -n '2,10p' "$0"; exit 2; fi
DIR=$1
PY=${2:-python3.11}
mkdir -p "$DIR"
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
"$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$WHEELS" torchvision==0.28.0
"$PY" -m zipfile -e "$WHEELS"/torchvision-0.28.0-*.whl "$DIR"
: > "$DIR/torchvision/_meta_registrations.py"
"$PY" -c "import sys; sys.path.insert(0, '$DIR'); import torchvision, torchvision.transforms.v2.functional; print('torchvision', torchvision.__version__, 'in $DIR')"
