"""How numba's OpenMP threads wait: the package's default per CPU, node processes that share the
cores with other node processes sleep at once, and a user's setting always wins."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = ("import json, os; from embodied_ros.kernels.cpu import jit; {call}"
         "print(json.dumps({{k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT', jit.DEFAULT_MARK)}}))")


def _run(env: dict, call: str = "") -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "EMBODIED_ROS_OMP_WAIT_DEFAULT")}
    result = subprocess.run([sys.executable, "-c", PROBE.format(call=call)], cwd=ROOT, env={**clean, **env},
                            capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_default_is_marked_and_a_node_process_inheriting_it_sleeps_at_once():
    from embodied_ros.kernels.cpu.jit import vector_units_available

    default = _run({})
    assert default["EMBODIED_ROS_OMP_WAIT_DEFAULT"] == "1"
    if vector_units_available():
        assert (default["GOMP_SPINCOUNT"], default["OMP_WAIT_POLICY"]) == ("10000", None)
    else:
        assert (default["GOMP_SPINCOUNT"], default["OMP_WAIT_POLICY"]) == (None, "passive")
    inherited = {k: v for k, v in default.items() if v is not None}  # what a graph's child process gets
    node = _run(inherited, "jit.share_cores_with_other_processes(); ")
    assert (node["OMP_WAIT_POLICY"], node["GOMP_SPINCOUNT"]) == ("passive", None)


def test_a_users_setting_wins():
    assert _run({"GOMP_SPINCOUNT": "5"}, "jit.share_cores_with_other_processes(); ")["GOMP_SPINCOUNT"] == "5"
    assert _run({"OMP_WAIT_POLICY": "active"})["OMP_WAIT_POLICY"] == "active"
