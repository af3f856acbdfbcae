"""The repository builds as a ROS 2 package with colcon (ROS from the wheels in the venv), and the
install space it produces holds the messages, the Python package, the executables, the data and
the CPU kernels compiled into numba's cache."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)


def checkout_files() -> list[str]:
    """Tracked and untracked-but-not-ignored files: what a fresh clone (plus local work) holds."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (ROOT / name).is_file()]


def test_colcon_build_and_install_space(tmp_path):
    source = tmp_path / "src" / "embodied_ros"
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    env = dict(os.environ, PATH=f"{VENV / 'bin'}:{os.environ['PATH']}",
               AMENT_PREFIX_PATH=str(VENV), CMAKE_PREFIX_PATH=str(VENV))
    build = subprocess.run(
        [str(VENV / "bin" / "colcon"), "build", "--event-handlers", "console_direct-",
         "--cmake-args", "-DBUILD_TESTING=OFF"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]

    prefix = tmp_path / "install" / "embodied_ros"
    check = (
        "import embodied_ros, embodied_ros.cli.main\n"
        "from embodied_ros.msg import ActionChunk, StageOutput, StageTiming, Tensor\n"
        "from rclpy.serialization import serialize_message, deserialize_message\n"
        "chunk = ActionChunk(horizon=2, action_dim=1, actions=[1.0, 2.0])\n"
        "assert list(deserialize_message(serialize_message(chunk), ActionChunk).actions) == [1.0, 2.0]\n"
        "from embodied_ros.share import is_source_checkout, share_path\n"
        "from embodied_ros.node_infra.paths import default_config\n"
        "assert not is_source_checkout() and default_config() == share_path('config', 'pi05.yaml')\n"
        "print(embodied_ros.__file__)\n"
        "print(share_path('config').parent)\n"
    )
    # A fresh shell that sources the install space, as a user would; run in an empty folder so neither
    # the source tree nor stray modules can be imported by accident.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        ["bash", "-c", f"source {tmp_path}/install/setup.bash && cd {elsewhere} && python3 -c \"$CHECK\" "
                       f"&& {prefix}/lib/embodied_ros/embodied-ros --version"],
        env={**env, "CHECK": check, "PYTHONPATH": "", "AMENT_PREFIX_PATH": str(VENV)},
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    module_file, share_dir, version = result.stdout.strip().splitlines()[-3:]
    assert module_file.startswith(str(prefix)), "embodied_ros was imported from outside the install space"
    assert share_dir == str(prefix / "share" / "embodied_ros")
    assert "embodied-ros" in version
    for folder in ("launch", "config", "bundles", "kernels", "msg"):
        for path in (ROOT / folder).iterdir():
            if path.is_file():
                assert (prefix / "share" / "embodied_ros" / folder / path.name).is_file(), f"{folder}/{path.name}"

    # the install compiled the kernels: a fresh process that runs them and warms up the shipped bundles
    # loads every one from numba's cache
    cached = (
        "import sys\n"
        "from numba.core.dispatcher import Dispatcher\n"
        "from embodied_ros.nodes.runtime_cache import compile_kernel_cache\n"
        "from embodied_ros.share import share_path\n"
        "compile_kernel_cache(sorted(share_path('bundles').glob('*.gguf')))\n"
        "kernels = {id(v): v for name, module in list(sys.modules.items()) if name.startswith('embodied_ros.')\n"
        "           for v in vars(module).values() if isinstance(v, Dispatcher)}.values()\n"
        "print(sum(sum(k.stats.cache_hits.values()) for k in kernels), sum(sum(k.stats.cache_misses.values()) for k in kernels))\n"
    )
    result = subprocess.run(
        ["bash", "-c", f"source {tmp_path}/install/setup.bash && cd {elsewhere} && python3 -c \"$CHECK\""],
        env={**env, "CHECK": cached, "PYTHONPATH": "", "AMENT_PREFIX_PATH": str(VENV)},
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    hits, misses = map(int, result.stdout.split()[-2:])
    assert hits > 0 and misses == 0, f"{misses} kernels compiled at start-up, {hits} loaded from the cache"
