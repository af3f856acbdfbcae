#!/bin/bash
# The HY-VLA PyTorch reference (github.com/Tencent-Hunyuan/Hy-Embodied-0.5-VLA) in a virtual environment
# of its own: CPU torch, the transformers and timm its requirements pin, torchvision's Python files (timm
# imports them; its compiled operators are not used), and this folder's flash-attn stand-in. Nothing comes
# from the Hugging Face hub.
#
#   bash install.sh VENV
set -euo pipefail
VENV=${1:?usage: install.sh VENV}
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3.11}
"$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q "torch==2.13.0"                                 # a CPU build
"$PIP" install -q "torch==2.13.0" "transformers==4.57.1" "numpy>=1.26,<2.3" "safetensors>=0.4" "scipy>=1.11" \
  "Pillow>=10" "huggingface-hub<1" "tokenizers>=0.22,<0.23" pyyaml
"$PIP" install -q --no-deps "timm==1.0.21"
SITE=$("$VENV/bin/python" -c "import site; print(site.getsitepackages()[0])")
bash "$HERE/../real_torchvision.sh" "$SITE" "$VENV/bin/python"
cp -r "$HERE/flash_attn" "$SITE/"
HF_HUB_OFFLINE=1 "$VENV/bin/python" -c "import torch, transformers, timm, flash_attn; \
print('ok torch', torch.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__)"
