"""Every module under embodied_ros/models imports on its own in a fresh interpreter, whatever is
imported first (a shared module importing a family package would meet that package half-initialized),
and `embodied-ros parity` finds its families as an installed user runs it."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import embodied_ros.models as models

REPO = Path(__file__).resolve().parent.parent
MODULES = sorted(info.name for info in pkgutil.iter_modules(models.__path__))


@pytest.mark.parametrize("name", MODULES)
def test_each_models_module_imports_first(name):
    result = subprocess.run([sys.executable, "-c", f"import embodied_ros.models.{name}"], capture_output=True,
                            text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_parity_command_in_a_fresh_process():
    result = subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", "parity", "test/data/pi0_tiny",
                             "--backend", "numpy"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1].startswith("max_abs_err=")
