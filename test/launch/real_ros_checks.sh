#!/usr/bin/env bash
# The launch-level checks under a real ROS 2 (ros2 launch, launch_test) against a colcon install of
# this package, in one command:
#
#   test/launch/real_ros_checks.sh [RUNS]        RUNS (default 20) Ctrl-C's per launch and layout
#
#   ENV_SH    what to source for ROS 2 + the install (default /tmp/ros2_project_ws/env.sh, as written by a
#             real-toolset build; on a robot: a file sourcing /opt/ros/<distro>/setup.bash and install/setup.bash)
#   WS        the colcon workspace holding src/embodied_ros (default: the folder of ENV_SH)
#   LOGS      where the logs go (default /tmp/embodied_ros_real_checks)
#   ONLY      a subset of the checks: "launch_test", "launch" (default: both)
#   LAUNCHES  what to launch, LAUNCH_FILE:CONFIG items (default: pi05.launch.py, the default graph, then
#             graph.launch.py config:=NAME for every model family NAME with a shipped config/NAME.yaml)
#   LAYOUTS   a subset of "composed separate" (default: both)
#   LAUNCH_ARGS more NAME:=VALUE arguments for every `ros2 launch` (e.g. sigterm_timeout:=20)
#
# 1. launch_test of test/launch/test_latency_launch.py on the install as it is (run first, so it sees
#    the kernel cache the install built, not one a launch below filled), in each layout, started from
#    the package's source folder (as a developer runs it) and from another folder: passes, and its
#    time from start.
# 2. For every launch of LAUNCHES, layout:=composed and layout:=separate, RUNS times:
#    `ros2 launch ... robot:=synthetic`; graph_probe.py waits until every node is active and the
#    commands stream at the controller's rate, and sees the simulated arm's joint states change; then
#    SIGINT to `ros2 launch` (what Ctrl-C sends it); `ros2 launch` must exit 0 within 60 s, leave no
#    process behind, with no RCLError, "Failed to complete transition", "Unable to start transition",
#    traceback, SIGTERM escalation or "process has died" in its log. Each launch and layout has
#    its own ROS_DOMAIN_ID (from ROS_DOMAIN_ID, default 80, up).
# Prints one line per run and a summary; exit status 0 when every check passed.
set -uo pipefail
set -m  # background jobs as in a terminal: their own process group, SIGINT not ignored

RUNS=${1:-20}
ENV_SH=${ENV_SH:-/tmp/ros2_project_ws/env.sh}
WS=${WS:-$(dirname "$ENV_SH")}
LOGS=${LOGS:-/tmp/embodied_ros_real_checks}
ONLY=${ONLY:-launch_test launch}
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${LAUNCHES:-}" ]; then
  LAUNCHES="pi05.launch.py:pi05"
  for family in "$SOURCE"/embodied_ros/models/*/runtime.py; do
    family=$(basename "$(dirname "$family")")
    [ -f "$SOURCE/config/$family.yaml" ] && LAUNCHES="$LAUNCHES graph.launch.py:$family"
  done
fi
LAYOUTS=${LAYOUTS:-composed separate}
LAUNCH_ARGS=${LAUNCH_ARGS:-}
DOMAIN_BASE=${ROS_DOMAIN_ID:-80}  # one domain per launch file and layout: a straggler of one cannot answer for another
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROBE="$HERE/graph_probe.py"
LAUNCH_TEST_LIMIT_S=30
SHUTDOWN_LIMIT_S=60
# a node that needed launch's SIGTERM (or died of it) did not shut down on Ctrl-C
BAD_LINES="RCLError|Failed to complete transition|Unable to start transition|Traceback|escalating to 'SIG|process has died"

[ -f "$ENV_SH" ] || { echo "real_ros_checks: no $ENV_SH (set ENV_SH to the file that sources ROS 2 and the install)" >&2; exit 2; }
set +u; source "$ENV_SH"; set -u
command -v ros2 >/dev/null || { echo "real_ros_checks: no ros2 after sourcing $ENV_SH" >&2; exit 2; }
rm -rf "$LOGS"; mkdir -p "$LOGS"
FAILED=0
SUMMARY=()

if [[ " $ONLY " == *" launch_test "* ]]; then
  source_folder="$WS/src/embodied_ros"
  test_file="$source_folder/test/launch/test_latency_launch.py"
  for layout in $LAYOUTS; do
    for where in source other; do  # started in the package's source folder, or in another one
      folder=$source_folder; [ $where = other ] && folder=$LOGS
      log="$LOGS/launch_test-$layout-$where.log"
      start_ns=$(date +%s%N)
      (cd "$folder" && EMBODIED_ROS_LAYOUT=$layout ROS_DOMAIN_ID=$DOMAIN_BASE timeout 300 launch_test "$test_file") \
        > "$log" 2>&1
      rc=$?
      took_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
      verdict=pass
      if [ $rc != 0 ]; then verdict="FAIL (exit $rc)"; FAILED=1
      elif [ $took_ms -gt $((LAUNCH_TEST_LIMIT_S * 1000)) ]; then verdict="FAIL (over ${LAUNCH_TEST_LIMIT_S} s)"; FAILED=1; fi
      line="launch_test test_latency_launch.py $layout, started in the $where folder: $verdict in $((took_ms / 1000)).$(( took_ms % 1000 / 100 )) s (log $log)"
      echo "$line"; SUMMARY+=("$line")
    done
  done
fi

if [[ " $ONLY " == *" launch "* ]]; then
  domain=$DOMAIN_BASE
  for launch in $LAUNCHES; do
    launch_file=${launch%%:*}; config=${launch#*:}
    config_argument=config:=$config; [ "$launch_file" = pi05.launch.py ] && config_argument=""  # its default
    for layout in $LAYOUTS; do
      domain=$((domain + 1)); export ROS_DOMAIN_ID=$domain
      passed=0; problems=()
      for run in $(seq 1 "$RUNS"); do
        log="$LOGS/$launch_file-$config-$layout-$run.log"
        # SIGINT back to its default first: a shell started in the background hands its children SIGINT ignored
        python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
          ros2 launch embodied_ros "$launch_file" $config_argument layout:=$layout robot:=synthetic $LAUNCH_ARGS > "$log" 2>&1 &
        launch_pid=$!
        probed=$(timeout 180 python3 "$PROBE" --config $config.yaml --layout $layout 2>>"$log.probe")
        probe_rc=$?
        kill -INT $launch_pid 2>/dev/null
        waited=0
        while kill -0 $launch_pid 2>/dev/null && [ $waited -lt $((SHUTDOWN_LIMIT_S * 10)) ]; do
          sleep 0.1; waited=$((waited + 1))
        done
        if kill -0 $launch_pid 2>/dev/null; then
          kill -KILL -- -$launch_pid; wait $launch_pid 2>/dev/null; exit_code="hung"  # its process group: launch and its nodes
        else
          wait $launch_pid; exit_code=$?
        fi
        problem=""
        left=$(pgrep -g $launch_pid | tr '\n' ' ')
        if [ -n "$left" ]; then problem="processes left running: $left"; kill -KILL -- -$launch_pid 2>/dev/null; fi
        bad=$(grep -E "$BAD_LINES" "$log")
        [ $probe_rc = 0 ] || problem="$problem${problem:+; }probe: ${probed:-exit $probe_rc}"
        [ "$exit_code" = 0 ] || problem="$problem${problem:+; }ros2 launch exit $exit_code"
        [ -z "$bad" ] || problem="$problem${problem:+; }log: $(grep -oE "$BAD_LINES" "$log" | sort | uniq -c | sed 's/^ *//' | paste -sd ',')"
        if [ -z "$problem" ]; then
          passed=$((passed + 1)); echo "$launch_file${config_argument:+ $config_argument} $layout run $run: pass $probed"
        else
          problems+=("run $run: $problem"); echo "$launch_file${config_argument:+ $config_argument} $layout run $run: FAIL $problem (log $log) $probed"
        fi
      done
      line="$launch_file${config_argument:+ $config_argument} layout:=$layout robot:=synthetic: $passed of $RUNS passed"
      [ $passed = "$RUNS" ] || FAILED=1
      SUMMARY+=("$line"); for p in "${problems[@]}"; do SUMMARY+=("    $p"); done
    done
  done
fi

echo "== real ROS 2 checks ($(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores)"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
