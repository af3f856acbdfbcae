"""Finding the model family that converts a checkpoint or verifies a bundle (interface: bundle/__init__.py)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

from embodied_ros.bundle.reader import Bundle


def known_families() -> list[str]:
    """Names of the packages under embodied_ros.models that hold a runtime, i.e. the architectures this
    runtime knows (not the kit they share)."""
    import embodied_ros.models as models

    return sorted(info.name for info in pkgutil.iter_modules(models.__path__)
                  if info.ispkg and (Path(info.module_finder.path) / info.name / "runtime.py").is_file())


def family(architecture: str) -> ModuleType:
    return _import(f"embodied_ros.models.{architecture}", architecture)


def converter(architecture: str) -> ModuleType:
    return _import(f"embodied_ros.models.{architecture}.convert", architecture)


def detect_family(source: Path) -> str:
    """The one family whose `convert.detect(source)` is true; ValueError if none or several."""
    matches = []
    for name in known_families():
        try:
            module = converter(name)
        except ValueError:
            continue  # a family without a converter
        if module.detect(Path(source)):
            matches.append(name)
    if len(matches) != 1:
        problem = "no model family recognizes" if not matches else f"several families ({', '.join(matches)}) recognize"
        raise ValueError(f"{problem} {source} as a checkpoint; pass --arch (known: {', '.join(known_families())})")
    return matches[0]


def verify_reference(bundle: Bundle, backend: str) -> tuple[float, float]:
    """Run the bundle's reference record through its family: (max abs error, tolerance)."""
    if bundle.reference is None:
        raise ValueError(f"{bundle.path}: bundle has no reference record to verify")
    hook = getattr(family(bundle.architecture), "verify_reference", None)
    if hook is None:
        raise ValueError(f"{bundle.path}: model family {bundle.architecture!r} cannot verify reference records")
    error, tolerance = hook(bundle, backend)
    return float(error), float(tolerance)


def _import(module_name: str, architecture: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not module_name.startswith(error.name):
            raise  # the family exists but one of its own imports is missing
        raise ValueError(f"no model family {architecture!r} with {module_name.rsplit('.', 1)[-1]!r} "
                         f"(known: {', '.join(known_families())})") from None
