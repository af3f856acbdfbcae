"""Files the package ships beside its Python code (config/, launch/, msg/, kernels/, bundles/): found in
the source checkout, else in the installed share directory (colcon / ament)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = "embodied_ros"
SOURCE_ROOT = Path(__file__).resolve().parents[1]


def is_source_checkout() -> bool:
    return (SOURCE_ROOT / "package.xml").is_file() and (SOURCE_ROOT / "config").is_dir()


def package_root() -> Path:
    """The source checkout's root, else share/embodied_ros of the install space."""
    if is_source_checkout():
        return SOURCE_ROOT
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory(PACKAGE))
    except Exception as error:  # ImportError, or ament_index's own lookup error
        raise FileNotFoundError(f"{PACKAGE}'s data files are neither in a source checkout ({SOURCE_ROOT}) nor "
                                f"installed (share/{PACKAGE} via the ament index): {error}") from error


def share_path(*parts: str) -> Path:
    """package_root() / parts, which must exist."""
    path = package_root().joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {PACKAGE} was installed without it")
    return path
