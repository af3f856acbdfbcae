"""Files the package ships beside its Python code (config/, launch/, msg/, kernels/, bundles/): found in
the source checkout, else in the installed share directory (colcon / ament). And the child processes
of the package's own modules, which import the package found the same way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

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


# `python -m MODULE ARGUMENTS` without the working folder first on sys.path (what `python -P` does,
# which Python 3.10 lacks). A SIGINT that lands before the module runs or while it still imports (its
# parent stopping a graph that has not finished starting; one held by `start_child` comes when this
# code unblocks it) ends it at once with status 0: nothing has started that could be stopped, and a
# KeyboardInterrupt's traceback from inside some import would read as a crash. Anywhere else SIGINT
# is Python's KeyboardInterrupt, until the module sets its own handler.
_RUN_MODULE = """import os, runpy, signal, sys
if sys.path[0] == "":
    del sys.path[0]
started = False
def interrupted(number, frame):
    importing = False
    while frame is not None:
        importing = importing or frame.f_code.co_filename == "<frozen importlib._bootstrap>"
        frame = frame.f_back
    if importing or not started:
        os._exit(0)
    raise KeyboardInterrupt
signal.signal(signal.SIGINT, interrupted)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
started = True
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)"""


def module_command(module: str, *arguments: str) -> list[str]:
    """The command line that runs one of the package's modules as a child process, in this
    interpreter, importing the package from where an installed one is found (the environment of
    `child_environment`), whatever the working folder: `python -m` would look there first, and in a
    colcon workspace's source folder it would find the source tree's package, without the
    messages the build generated."""
    return [sys.executable, "-c", _RUN_MODULE, module, *arguments]


def start_child(command: Sequence[str], **popen_arguments) -> subprocess.Popen:
    """subprocess.Popen(command); a `module_command` in it (after a prefix such as `ip netns exec NS`)
    starts with SIGINT held until its first line takes it: one that came while the interpreter
    started ended the child with "Fatal Python error: init_import_site"."""
    if _RUN_MODULE not in command:
        return subprocess.Popen(command, **popen_arguments)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # this thread's, which the child inherits
    try:
        return subprocess.Popen(command, **popen_arguments)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def child_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` for a `module_command` child: when this process runs the package from a source
    checkout, that checkout goes first on PYTHONPATH, so the child imports it too."""
    child = dict(environment)
    if is_source_checkout():
        child["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_ROOT), child.get("PYTHONPATH")]))
    return child
