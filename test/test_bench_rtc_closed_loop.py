"""benchmarks/bench_rtc_closed_loop.py's boundary measures: where the command's source changes, and
the steps and jerk measured there and elsewhere."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmark imports its neighbour common.py
spec = importlib.util.spec_from_file_location("bench_rtc_closed_loop", BENCHMARKS / "bench_rtc_closed_loop.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_graph_switches_are_the_landings_and_held_runs_switch_where_they_start_and_end():
    assert bench.landing_steps(20, 5, 3) == [8, 13, 18]
    assert bench.switch_set({"steps": 20, "held_steps": []}, 5, 3) == {8, 13, 18}
    assert bench.switch_set({"steps": 20, "held_steps": [5, 6, 7, 13, 14, 15]}, 5, 0) == {5, 8, 13, 16}


def test_boundary_metrics_separate_switch_steps_from_the_rest_and_measure_jerk():
    actions = np.zeros((12, 4))
    actions[5:8] = 1.0  # a plateau between the steps 5 and 8: jumps of 1 there, 0 elsewhere
    record = {"steps": 12, "held_steps": [5, 6, 7], "actions": actions.tolist()}
    metrics = bench.boundary_metrics([record], plan_every=5, graph_delay=0)
    assert metrics["switch_step_mean"] == metrics["switch_step_max"] == 1.0
    assert metrics["within_step_mean"] == 0.0
    second = np.diff(actions, n=2, axis=0)
    assert metrics["jerk_rms"] == pytest.approx(float(np.sqrt(np.mean(second ** 2))), abs=1e-4)
    assert bench.boundary_metrics([], 5, 0)["switch_step_mean"] is None


def test_every_mode_runs_the_same_delay_its_own_way():
    modes = bench.modes(3)
    assert list(modes) == ["sync", "sync_delay", "async", "async_rtc"]
    assert modes["sync"] == ({}, 0) and modes["sync_delay"] == ({}, 3)
    assert modes["async"] == ({"schedule.lockstep_action_delay": 3}, 0)
    assert modes["async_rtc"][0]["rtc.enabled"] is True and modes["async_rtc"][1] == 0
