"""Files the graph ships beside the Python package: configs and the Fast DDS profile."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from embodied_ros.share import share_path


def default_config() -> Path:
    return share_path("config", "pi05.yaml")


def config_file(config: str | Path) -> Path:
    """A graph config's file: a path, or the name of a shipped config ("smolvla" for config/smolvla.yaml)."""
    path = Path(config)
    if path.exists() or len(path.parts) != 1 or path.suffix:
        return path
    try:
        return share_path("config", f"{path.name}.yaml")
    except FileNotFoundError:
        shipped = sorted(p.stem for p in share_path("config").glob("*.yaml") if p.stem != "defaults")
        raise ValueError(f"{config}: no such config file, nor a shipped config name "
                         f"(shipped: {', '.join(shipped)})") from None


def fastdds_profile() -> Path:
    return share_path("config", "fastdds_shm_loopback.xml")


def dds_environment() -> dict[str, str]:
    """Environment for multi-process graphs: Fast DDS shared memory (64 MB segments) + UDP on loopback
    only, and a malloc that does not return large message buffers to the OS after every message."""
    return {
        "FASTDDS_DEFAULT_PROFILES_FILE": str(fastdds_profile()),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT",
        "MALLOC_MMAP_THRESHOLD_": "67108864",
        "MALLOC_TRIM_THRESHOLD_": "268435456",
    }


@contextlib.contextmanager
def using_dds_environment():
    """Within the block, new ROS contexts and their nodes use `dds_environment()`; the process
    environment is restored afterwards (child processes get it explicitly)."""
    saved = {name: os.environ.get(name) for name in dds_environment()}
    os.environ.update(dds_environment())
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def family_config(architecture: str) -> Path | None:
    """The config shipped for a model family (config/<architecture>.yaml), or None if none ships."""
    try:
        return share_path("config", f"{architecture}.yaml")
    except FileNotFoundError:
        return None
