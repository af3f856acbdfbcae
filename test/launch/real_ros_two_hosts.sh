#!/usr/bin/env bash
# The split launch under a real ROS 2: `ros2 launch ... host:=inference respawn:=true` and
# `ros2 launch ... host:=robot robot:=synthetic` from the same config, RUNS times:
#
#   test/launch/real_ros_two_hosts.sh [RUNS]      RUNS default 3; ENV_SH, LOGS, ROS_DOMAIN_ID as real_ros_checks.sh
#
# Each run: graph_probe.py waits until every node of both launches is active and the commands
# stream; kill -9 of the inference launch's prefix process; launch must respawn it, the respawned
# node must start itself and the commands stream again (graph_probe.py once more); then SIGINT to
# both launches, which must exit 0 within 60 s with no process left. (Both launches run on this
# machine, over its DDS; test/test_two_hosts.py puts the two sides in network namespaces.)
set -uo pipefail
set -m

RUNS=${1:-3}
ENV_SH=${ENV_SH:-/tmp/ros2_project_ws/env.sh}
LOGS=${LOGS:-/tmp/embodied_ros_real_two_hosts}
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-40}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROBE="$HERE/graph_probe.py"
set +u; source "$ENV_SH"; set -u
rm -rf "$LOGS"; mkdir -p "$LOGS"
FAILED=0

start_launch() {  # log, arguments...: a `ros2 launch` in a process group of its own; its pid in LAUNCHED
  local log=$1; shift
  python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    ros2 launch embodied_ros pi05.launch.py "$@" > "$log" 2>&1 &
  LAUNCHED=$!
}

stop_launch() {  # pid: SIGINT; its exit status (or "hung", "left-running") in STOPPED
  local pid=$1 waited=0
  kill -INT "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL -- -"$pid"; wait "$pid" 2>/dev/null; STOPPED=hung; return; fi
  wait "$pid"; STOPPED=$?
  [ -z "$(pgrep -g "$pid")" ] || { kill -KILL -- -"$pid" 2>/dev/null; STOPPED=left-running; }
}

for run in $(seq 1 "$RUNS"); do
  start_launch "$LOGS/inference-$run.log" host:=inference respawn:=true; inference=$LAUNCHED
  start_launch "$LOGS/robot-$run.log" host:=robot robot:=synthetic; robot=$LAUNCHED
  first=$(timeout 200 python3 "$PROBE" --config pi05.yaml --layout separate 2>>"$LOGS/probe-$run.log"); first_rc=$?
  prefix_pid=$(pgrep -P "$inference" -f "embodied-ros-prefix" | head -1)  # a child of this launch
  killed=no; [ -n "$prefix_pid" ] && kill -KILL "$prefix_pid" && killed=yes
  sleep 2
  again=$(timeout 200 python3 "$PROBE" --config pi05.yaml --layout separate 2>>"$LOGS/probe-$run.log"); again_rc=$?
  respawned=$(pgrep -P "$inference" -f "embodied-ros-prefix" | grep -vx "$prefix_pid" | head -1)
  stop_launch "$inference"; inference_exit=$STOPPED; stop_launch "$robot"; robot_exit=$STOPPED
  verdict=pass
  if [ $first_rc != 0 ] || [ $killed != yes ] || [ -z "$respawned" ] || [ $again_rc != 0 ] \
     || [ "$inference_exit" != 0 ] || [ "$robot_exit" != 0 ]; then
    verdict=FAIL; FAILED=1
  fi
  echo "run $run: $verdict (streamed: $first; prefix $prefix_pid killed: $killed, respawned as ${respawned:-none}; after the respawn: $again;" \
       "exits: inference $inference_exit, robot $robot_exit; logs $LOGS)"
done
exit $FAILED
