"""benchmarks/bench_stream_start.py's measure of a stream's start: the worst period error in its first second."""
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmark imports its neighbour common.py
spec = importlib.util.spec_from_file_location("bench_stream_start", BENCHMARKS / "bench_stream_start.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

MS = 1_000_000


def test_the_first_seconds_worst_error_and_the_whole_streams():
    stamps = [0, 20 * MS, 58 * MS] + [58 * MS + 20 * MS * k for k in range(1, 60)]  # one late tick, at 58 ms
    stamps[-1] += 5 * MS  # and one 5 ms late at the end, past the first second
    first_second, worst = bench.stream_errors(stamps, 20 * MS)
    assert first_second == 18.0 and worst == 18.0
    first_second, worst = bench.stream_errors([0, 20 * MS] + [20 * MS * k + 7 * MS for k in range(2, 80)], 20 * MS)
    assert first_second == 7.0 and worst == 7.0
    assert bench.stream_errors([5], 20 * MS) == (0.0, 0.0)


def test_late_errors_outside_the_first_second_count_only_for_the_whole_stream():
    stamps = [20 * MS * k for k in range(70)]
    stamps[-1] += 9 * MS
    assert bench.stream_errors(stamps, 20 * MS) == (0.0, 9.0)
