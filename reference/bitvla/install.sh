#!/bin/bash
# The BitVLA PyTorch reference: its own transformers fork (4.51.0.dev0, with the BitNet LM and the
# BitLinear SigLIP) on CPU torch, in a virtual environment of its own. Nothing comes from the
# Hugging Face hub.
#
#   bash install.sh VENV BITVLA_SOURCE        (or BITVLA_SOURCE=... bash install.sh VENV)
#
# VENV: the virtual environment to create; BITVLA_SOURCE: a checkout of github.com/ustcwhy/BitVLA
# (its transformers/ and openvla-oft/ folders are read; gen_records.py needs the same path).
set -euo pipefail
VENV=${1:?usage: install.sh VENV BITVLA_SOURCE}
SOURCE=${2:-${BITVLA_SOURCE:?give the BitVLA checkout as the second argument or BITVLA_SOURCE}}
test -f "$SOURCE/transformers/setup.py" -a -d "$SOURCE/openvla-oft/bitvla" \
  || { echo "$SOURCE is not a BitVLA checkout (needs transformers/ and openvla-oft/)" >&2; exit 2; }
PYTHON=${PYTHON:-python3.11}
"$PYTHON" -m venv "$VENV"
. "$VENV/bin/activate"
pip install -q "torch==2.13.0"                                   # a CPU build
# the fork's own pins (transformers/setup.py): tokenizers 0.21.x, huggingface-hub < 1
pip install -q "torch==2.13.0" "tokenizers>=0.21,<0.22" "huggingface-hub>=0.26,<1" "numpy>=1.26,<2.3" \
  "safetensors>=0.4.3" "Pillow>=10.0.1" "jinja2>=3.1" filelock packaging pyyaml regex requests tqdm
pip install -q --no-deps "$SOURCE/transformers"                  # the fork itself, 4.51.0.dev0
# OFT's evaluation helpers resize and center-crop camera images with TensorFlow (gen_records.py runs them)
pip install -q "torch==2.13.0" "tensorflow-cpu==2.21.0" "numpy>=1.26,<2.3"
HF_HUB_OFFLINE=1 USE_TF=0 python -c "import torch, transformers, tensorflow; \
from transformers.models.llava.modeling_bitnet import BitLinear; \
print('ok torch', torch.__version__, 'transformers', transformers.__version__, 'tensorflow', tensorflow.__version__)"
