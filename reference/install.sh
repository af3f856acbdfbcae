#!/bin/bash
# Builds the PyTorch reference environment (docs/reference.md, "Building the environment") in VENV_DIR:
# Python 3.11, torch 2.13.0 (CPU build), lerobot 0.6.1 with its run-time dependencies, the Python 3.11
# rewrites of five LeRobot modules, an import-only torchvision placeholder, diffusers 0.42.1 and
# dm-tree (GR00T N1.7). About 75 s on two cores with the wheels at hand. Nothing is fetched from the
# Hugging Face hub, by this script or by the generators.
#
#   bash reference/install.sh VENV_DIR
#
# Environment:
#   PYTHON311                 the Python 3.11 interpreter to build the venv from (default: python3.11)
#   EMBODIED_ROS_TORCH_INDEX  an extra pip index holding the CPU build of torch 2.13.0, for example
#                             https://download.pytorch.org/whl/cpu (default: none, pip's configuration)
set -euo pipefail
if [ $# -ne 1 ]; then sed -n '2,15p' "$0"; exit 2; fi
VENV=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TORCH="torch==2.13.0"  # repeated in every pip call that could otherwise replace it

"${PYTHON311:-python3.11}" -m venv "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q)
if [ -n "${EMBODIED_ROS_TORCH_INDEX:-}" ]; then PIP+=(--extra-index-url "$EMBODIED_ROS_TORCH_INDEX"); fi

# 1. torch first, CPU build
"${PIP[@]}" "$TORCH"
# 2. lerobot without its declared requirements: the wheel asks for Python >= 3.12 and torch < 2.12,
#    neither of which its inference code needs (pip will report them unmet: expected)
"${PIP[@]}" --no-deps --ignore-requires-python lerobot==0.6.1
# 3. lerobot's run-time dependencies, torch pinned in the same command
"${PIP[@]}" "$TORCH" "transformers>=5.4,<5.6" "numpy>=2.0,<2.3" opencv-python-headless Pillow einops \
  "draccus>=0.11.6,<0.12" "huggingface-hub>=1.6,<2" requests "gymnasium>=1.1.1,<2" safetensors packaging \
  termcolor tqdm scipy sentencepiece
# 4. Python 3.11 forms of the five modules with 3.12 type-parameter syntax, then byte-compile lerobot
"$PY" "$HERE/py311_fixes.py"
# 5. torchvision as an import-only placeholder (the PyPI wheel needs the CUDA torch build)
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -rf "$SITE/torchvision"
cp -r "$HERE/torchvision_placeholder/torchvision" "$SITE/torchvision"
# 6. diffusers (Wan blocks, LingBot-VA's VAE) and dm-tree (GR00T N1.7's input handling), torch pinned
"${PIP[@]}" "$TORCH" diffusers==0.42.1 dm-tree==0.1.10
# 7. check
HF_HUB_OFFLINE=1 "$PY" -c "
from lerobot.policies.pi05.modeling_pi05 import PI05Policy
from diffusers.models.transformers.transformer_wan import WanTransformerBlock
import lerobot.policies.groot.groot_n1_7, lerobot.policies.lingbot_va, tree
import diffusers, lerobot, torch, transformers
print('reference environment ready: lerobot', lerobot.__version__, 'transformers', transformers.__version__,
      'torch', torch.__version__, 'diffusers', diffusers.__version__)"
