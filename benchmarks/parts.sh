# Sourced by the one-call device and CPU runs (gpu_device_run.sh, intel_cpu_run.sh); they set LOG and PARTS.
part() {  # part NAME SECONDS COMMAND...: run, bounded, output appended to the log
  local name=$1 seconds=$2; shift 2
  local start=$SECONDS
  echo "==== $name (at most ${seconds}s)" >>"$LOG"
  timeout --kill-after=10 "$seconds" "$@" >>"$LOG" 2>&1
  echo "==== $name: exit $? after $((SECONDS - start))s" | tee -a "$LOG"
}
wants() { [[ " $PARTS " == *" $1 "* ]]; }  # wants NAME: whether PARTS names that part
