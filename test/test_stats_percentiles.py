"""The one percentile function every report uses: numpy's default (linear) percentiles, NaNs left out."""
import math

import numpy as np

from embodied_ros.node_infra.stats import PeriodStats, percentiles


def test_percentiles_match_numpys_linear_percentiles():
    rng = np.random.default_rng(3)
    for _ in range(300):
        values = rng.uniform(-1, 1, int(rng.integers(1, 60))) * 10.0 ** int(rng.integers(-3, 5))
        qs = (0, 1, 37.5, 50, 95, 99, 100)
        assert np.allclose(percentiles(values, qs), np.percentile(values, qs), rtol=1e-12, atol=0)


def test_percentiles_leave_out_non_finite_values_and_are_nan_when_nothing_is_left():
    assert percentiles([1.0, float("nan"), 3.0, float("inf")], (50,)) == [2.0]
    assert all(math.isnan(v) for v in percentiles([float("nan")]))
    assert all(math.isnan(v) for v in percentiles([]))


def test_period_stats_report_the_error_from_the_period():
    stats = PeriodStats(0.02)
    for stamp_ms in (0, 20, 40, 63, 80):
        stats.tick(stamp_ms * 1_000_000)
    summary = stats.summary()  # errors 0, 0, 3, 3 ms
    assert summary["period_error_ms_p50"] == 1.5
    assert abs(summary["period_error_ms_p99"] - 3.0) < 1e-9
