"""The core layers (sequence builders, backbones, heads, kernels, the stage contract, the device runtime,
the model families) import no ROS and nothing of the node graph: they run, and are tested, without
either. Checked in a fresh interpreter, from what importing every one of their modules loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORE = ("sequence", "backbone", "heads", "kernels", "pipeline", "gpu", "models")
NEEDS_A_GPU = ("embodied_ros.kernels.cuda.driver", "embodied_ros.kernels.cuda.launch")  # import CuPy, by design


def core_modules() -> list[str]:
    package = REPO / "embodied_ros"
    return sorted(".".join(("embodied_ros", *path.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
                  for layer in CORE for path in (package / layer).rglob("*.py")
                  if ".".join(("embodied_ros", *path.relative_to(package).with_suffix("").parts)) not in NEEDS_A_GPU)


def test_core_layers_import_no_ros_and_no_graph():
    code = ("import importlib, sys\n"
            f"for name in {core_modules()!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted({m.split('.')[0] if not m.startswith('embodied_ros.') else '.'.join(m.split('.')[:2])\n"
            "              for m in sys.modules if m.startswith(('rclpy', 'rosidl', 'embodied_ros.node_infra', "
            "'embodied_ros.nodes', 'embodied_ros.graph', 'embodied_ros.msg'))}))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]", f"core layers load {result.stdout.strip()}"


def test_model_math_layers_read_no_bundle_files():
    """Sequence builders, backbones, heads and kernels take arrays: reading a bundle is the families' job."""
    package = REPO / "embodied_ros"
    importing = [str(path.relative_to(REPO)) for layer in ("sequence", "backbone", "heads", "kernels")
                 for path in (package / layer).rglob("*.py")
                 if "from embodied_ros.bundle" in path.read_text() or "import embodied_ros.bundle" in path.read_text()]
    assert importing == [], f"these modules import the bundle package: {importing}"
