"""benchmarks/bench_command_timing.py's verdict: each run judged by a latency budget as the gate judges it."""
import importlib.util
import sys
from pathlib import Path

from embodied_ros.replay.latency import load_budget

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmark imports its neighbour common.py
spec = importlib.util.spec_from_file_location("bench_command_timing", BENCHMARKS / "bench_command_timing.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def _report(tick_p99: float, arrival_p99: float, action_ms: float, world_ms: float | None = None) -> dict:
    stages = {"action": {"compute_ms_p50": action_ms}}
    if world_ms is not None:
        stages["world"] = {"compute_ms_p50": world_ms}
    return {"commands": {"tick_period_error_ms_p99": tick_p99, "arrival_period_error_ms_p99": arrival_p99},
            "stages": stages}


def _alone(action_ms: float, world_ms: float | None = None) -> dict:
    back_to_back = {"action": action_ms} | ({"world": world_ms} if world_ms is not None else {})
    return {"back_to_back": back_to_back, "paced": back_to_back}


def test_every_run_within_the_two_core_budget_reads_n_of_n():
    budget = load_budget("two-core")  # 1.3 x alone + 1 ms, tick p99 2 ms, arrival p99 3 ms
    alone = [_alone(1.2), _alone(1.4), _alone(1.3)]
    runs = [_report(0.8, 2.5, 2.6), _report(1.9, 2.9, 2.7)]  # 2.6 <= 1.3 x 1.3 + 1; 2.7 <= 1.3 x 1.35 + 1
    assert bench.budget_verdict(runs, alone, budget) == "2/2"


def test_a_run_over_budget_names_the_run_and_what_broke():
    budget = load_budget("two-core")
    alone = [_alone(0.03, 40.0), _alone(0.03, 40.0), _alone(0.03, 42.0)]
    runs = [_report(0.5, 1.0, 0.2, 50.0), _report(8.6, 8.9, 0.2, 56.0)]
    verdict = bench.budget_verdict(runs, alone, budget)
    assert verdict == "run 2: tick p99 8.60 ms, arrival p99 8.90 ms, world 56.00 > 54.30 ms"


def test_after_pause_times_each_call_after_each_pause_not_the_pause():
    import time

    from fake_runtime import FakeRuntime

    spec_pause = importlib.util.spec_from_file_location("bench_after_pause", BENCHMARKS / "bench_after_pause.py")
    after_pause = importlib.util.module_from_spec(spec_pause)
    spec_pause.loader.exec_module(after_pause)

    class _SlowAct(FakeRuntime):
        def act(self, prefix, world, noise=None):
            time.sleep(0.003)
            return super().act(prefix, world, noise)

    medians = after_pause.time_after_pauses(_SlowAct(), repeats=3)
    assert set(medians) == {"perception", "action"}
    assert all(set(row) == set(after_pause.PAUSES) for row in medians.values())
    assert all(3.0 <= ms < 20.0 for ms in medians["action"].values())  # the 90 ms pauses are not in it
    assert max(medians["perception"].values()) < 3.0
