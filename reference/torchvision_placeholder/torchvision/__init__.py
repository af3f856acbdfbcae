"""Import-only placeholder for torchvision in the PyTorch reference environment.

LeRobot 0.6.1 imports torchvision at module level, but none of the reference records' inference
paths calls it, and the PyPI torchvision wheel needs the CUDA build of torch (the environment has the
CPU build). This package makes `import torchvision` and `from torchvision.<anything> import <Name>`
succeed: every submodule is a placeholder module and every name in it a placeholder class, which can
be subclassed, subscripted and used in annotations but raises when instantiated. (The GR00T pipeline
record needs the real torchvision's resize: see reference/real_torchvision.sh.)
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+placeholder"


class _Unavailable(type):
    """Metaclass of the placeholder classes: attributes are further placeholder classes."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder_class(f"{cls.__name__}.{name}")


class _Placeholder(metaclass=_Unavailable):
    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"torchvision is a placeholder in this environment: {type(self).__name__} is not "
                           "available (install the real torchvision to use it)")

    def __class_getitem__(cls, item):
        return cls


def _placeholder_class(name: str) -> type:
    return _Unavailable(name, (_Placeholder,), {})


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        submodule = sys.modules.get(f"{self.__name__}.{name}")
        return submodule if submodule is not None else _placeholder_class(name)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every `torchvision.<...>` import with a placeholder package."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


if not any(isinstance(finder, _Submodules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Submodules())


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _placeholder_class(name)
