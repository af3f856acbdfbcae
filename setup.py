"""pip installation of the embodied_ros Python package (fresh machines; see README "How the package builds").

Metadata and entry points live in setup.cfg. The data files mirror what CMakeLists.txt installs for
colcon, so `ament_index_python` finds the package either way.
"""

from pathlib import Path

from setuptools import setup

PACKAGE = "embodied_ros"


def share_files(folder: str) -> list[tuple[str, list[str]]]:
    """(install dir, files) pairs that keep the folder's layout under share/embodied_ros/."""
    pairs = []
    for directory in sorted({path.parent for path in Path(folder).rglob("*") if path.is_file()}):
        files = sorted(str(path) for path in directory.iterdir() if path.is_file())
        pairs.append((f"share/{PACKAGE}/{directory}", files))
    return pairs


setup(
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        *share_files("launch"),
        *share_files("config"),
        *share_files("bundles"),
        *share_files("kernels"),
        *share_files("msg"),
    ],
)
