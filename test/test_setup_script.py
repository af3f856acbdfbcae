"""setup.sh: a second run changes nothing, and a machine it cannot serve gets a clear message."""

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What the machine checks of setup.sh call, besides the tools a test replaces.
TOOLS = ("bash", "uname", "sed", "sort", "head", "cut", "cat", "date", "dirname", "nproc", "cc", "c++", "cmake")


def run_setup(script_dir: Path, path: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script_dir / "setup.sh")], capture_output=True, text=True, timeout=300,
                          env={"PATH": path, "HOME": os.environ.get("HOME", "/root"), **env})


def fake_tool(folder: Path, name: str, script: str) -> None:
    """Replace a tool of the sandbox PATH; the link to the real one is removed, never written through."""
    tool = folder / name
    tool.unlink(missing_ok=True)
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def sandbox(tmp_path):
    """A copy of setup.sh in an empty folder and a PATH of real tools that tests can replace."""
    (tmp_path / "repo").mkdir()
    shutil.copy2(ROOT / "setup.sh", tmp_path / "repo" / "setup.sh")
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in TOOLS:
        (tools / name).symlink_to(shutil.which(name))
    (tools / "python3").symlink_to(sys._base_executable)  # a real interpreter, not a version-manager shim
    return tmp_path / "repo", tools


def test_second_run_changes_nothing():
    first = subprocess.run(["./setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr  # up to date, or brought up to date after an edit
    stamps = ROOT / ".venv" / ".embodied_ros"
    generated = ROOT / "embodied_ros" / "msg" / "__init__.py"
    before = {path: path.stat().st_mtime_ns for path in [*stamps.iterdir(), generated]}
    result = subprocess.run(["./setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("up to date") == 5, result.stdout
    assert {path: path.stat().st_mtime_ns for path in before} == before


def test_unsupported_python(sandbox):
    repo, tools = sandbox
    fake_tool(tools, "python3", 'echo 3.9')
    result = run_setup(repo, str(tools))
    assert result.returncode == 1
    assert "Python 3.9 is not supported" in result.stderr and "3.10-3.14" in result.stderr
    assert not (repo / ".venv").exists()


def test_missing_cmake(sandbox):
    repo, tools = sandbox
    (tools / "cmake").unlink()
    result = run_setup(repo, str(tools))
    assert result.returncode == 1
    assert "cmake is needed" in result.stderr
    assert not (repo / ".venv").exists()


def test_old_cmake(sandbox):
    repo, tools = sandbox
    fake_tool(tools, "cmake", 'echo "cmake version 3.16.3"')
    result = run_setup(repo, str(tools))
    assert result.returncode == 1
    assert "cmake 3.16.3 is too old" in result.stderr


def test_not_x86_64(sandbox):
    repo, tools = sandbox
    fake_tool(tools, "uname", 'case "$1" in -m) echo aarch64;; *) echo Linux;; esac')
    result = run_setup(repo, str(tools))
    assert result.returncode == 1
    assert "x86-64 only (this machine is aarch64)" in result.stderr
    assert "colcon" in result.stderr  # says what to do instead


def test_no_compiler(sandbox):
    repo, tools = sandbox
    (tools / "c++").unlink()
    result = run_setup(repo, str(tools))
    assert result.returncode == 1
    assert "C and C++ compiler" in result.stderr


def test_installing_the_dependencies_prints_a_count_not_every_package(sandbox):
    """pip's "Collecting ..." lines, one per package (about 150), go to build/pip.log only."""
    repo, tools = sandbox
    for name in ("mkdir", "sha256sum", "wc", "grep", "tail", "tee"):
        (tools / name).symlink_to(shutil.which(name))
    (repo / "requirements").mkdir()
    for name in ("dev", "lock", "python", "ros-wheels"):
        (repo / "requirements" / f"{name}.txt").write_text("")
    venv_python = repo / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    collecting = "; ".join(f"echo 'Collecting package{i}==1.0'" for i in range(40))
    fake_tool(venv_python.parent, "python", f"""case "$*" in
  *"pip install"*" -r "*) {collecting}; echo 'Successfully installed package0-1.0 package1-1.0 package2-1.0';;
  *"pip install"*) ;;
  *) exec {sys._base_executable} "$@";;
esac""")
    result = run_setup(repo, str(tools))
    step = result.stdout.partition("[setup 3/")[2].partition("[setup 4/")[0]
    assert "3 packages installed" in step, result.stdout + result.stderr
    assert "Collecting" not in result.stdout
    assert (repo / "build" / "pip.log").read_text().count("Collecting") == 40
