"""Package metadata agrees with itself: package.xml, setup.cfg/setup.py, CMakeLists.txt, requirements."""

import configparser
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from catkin_pkg.package import parse_package
from packaging.requirements import Requirement

import embodied_ros

ROOT = Path(__file__).resolve().parents[1]

# pip distribution -> rosdep key, for the runtime dependencies a ROS installation can provide itself.
# The others are installed from PyPI on every machine (README, "With a ROS 2 installation").
ROSDEP_KEYS = {"numpy": "python3-numpy", "pyyaml": "python3-yaml"}


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def install_requires() -> list[Requirement]:
    lines = setup_cfg()["options"]["install_requires"].strip().splitlines()
    return [Requirement(line.strip()) for line in lines if line.strip()]


def console_scripts() -> dict[str, str]:
    lines = setup_cfg()["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=", 1)) for line in lines if line.strip())


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"{path.name}: {line} is not pinned"
            found[requirement.name.lower()] = specifier.version
    return found


def test_package_xml_is_valid_format_3_and_versions_agree():
    package = parse_package(ROOT / "package.xml")
    assert package.package_format == 3
    assert package.name == "embodied_ros"
    assert package.version == embodied_ros.__version__
    assert setup_cfg()["metadata"]["version"] == "attr: embodied_ros.__version__"
    changelog = (ROOT / "CHANGELOG.rst").read_text()
    assert re.search(rf"^{re.escape(package.version)} \(\d{{4}}-\d\d-\d\d\)$", changelog, re.M), \
        "CHANGELOG.rst has no entry for the package version"


def test_python_dependencies_are_declared_pinned_and_consistent():
    pinned = pins(ROOT / "requirements" / "python.txt")
    locked = pins(ROOT / "requirements" / "lock.txt")
    exec_depends = {dep.name for dep in parse_package(ROOT / "package.xml").exec_depends}
    for requirement in install_requires():
        name = requirement.name.lower()
        assert name in pinned, f"{name} is required by setup.cfg but not pinned in requirements/python.txt"
        assert requirement.specifier.contains(pinned[name]), f"pinned {name}=={pinned[name]} violates {requirement}"
        assert locked.get(name) == pinned[name], f"requirements/lock.txt disagrees on {name}"
        if name in ROSDEP_KEYS:
            assert ROSDEP_KEYS[name] in exec_depends, f"package.xml lacks <exec_depend>{ROSDEP_KEYS[name]}"
    for path in ("ros-wheels.txt", "dev.txt"):
        for name, version in pins(ROOT / "requirements" / path).items():
            assert locked.get(name) == version, f"requirements/lock.txt disagrees on {name}"


def test_messages_built_are_the_messages_declared():
    declared = sorted(re.findall(r'"msg/(\w+)\.msg"', (ROOT / "CMakeLists.txt").read_text()))
    on_disk = sorted(path.stem for path in (ROOT / "msg").glob("*.msg"))
    assert declared == on_disk
    import embodied_ros.msg as generated
    for name in on_disk:
        assert hasattr(generated, name), f"embodied_ros.msg.{name} was not generated"


def test_console_scripts_resolve_and_both_builds_install_them():
    scripts = console_scripts()
    assert "embodied-ros" in scripts
    for name, target in scripts.items():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), f"{name} -> {target}"
    # CMake reads the same list (cmake/console_scripts.cmake), so colcon installs the same launchers.
    assert 'embodied_ros_install_console_scripts("${CMAKE_CURRENT_SOURCE_DIR}/setup.cfg")' in \
        (ROOT / "CMakeLists.txt").read_text()


def test_data_folders_are_installed_by_both_builds():
    setup_py = (ROOT / "setup.py").read_text()
    cmake = (ROOT / "CMakeLists.txt").read_text()
    for folder in ("launch", "config", "bundles", "kernels"):
        assert any((ROOT / folder).iterdir()), f"{folder}/ is empty"
        assert f'share_files("{folder}")' in setup_py
        assert re.search(rf"install\(DIRECTORY[^)]*\b{folder}\b[^)]*DESTINATION share/\$\{{PROJECT_NAME\}}", cmake)
    assert (ROOT / "resource" / "embodied_ros").exists()


def test_setup_py_data_files_cover_every_shared_file():
    result = subprocess.run(
        [sys.executable, "-c", "import setuptools, runpy, sys; "
         "captured = {}; setuptools.setup = lambda **kw: captured.update(kw); "
         "runpy.run_path('setup.py'); print(repr(captured['data_files']))"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    installed = {file for _, files in eval(result.stdout) for file in files}
    for folder in ("launch", "config", "bundles", "kernels", "msg"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                assert str(path.relative_to(ROOT)) in installed, f"{path} is not installed by setup.py"


@pytest.mark.parametrize("argument", ["--help", "--version"])
def test_cli_answers(argument):
    result = subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", argument],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "embodied-ros" in result.stdout
