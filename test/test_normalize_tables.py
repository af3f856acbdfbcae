"""MEAN_STD statistics as a table, one row per step of an action chunk (HY-VLA's norm_stats)."""

import numpy as np
import pytest

from embodied_ros.sequence.normalize import MeanStdStats, normalizer_of


def test_rows_of_actions_read_the_first_rows_of_the_table():
    mean = np.arange(12, dtype=np.float32).reshape(4, 3)
    std = np.full((4, 3), 2.0, np.float32)
    stats = normalizer_of({"mean": mean, "std": std})
    assert isinstance(stats, MeanStdStats) and stats.dim == 3
    actions = np.ones((2, 3), np.float32)
    assert np.array_equal(stats.denormalize(actions), actions * 2 + mean[:2])
    assert np.allclose(stats.normalize(stats.denormalize(actions)), actions)
    with pytest.raises(ValueError, match="rows <= 4"):
        stats.denormalize(np.ones((5, 3), np.float32))
    with pytest.raises(ValueError, match="per-row"):
        stats.normalize(np.ones(3, np.float32))  # a single vector has no row to read
    with pytest.raises(ValueError, match="one shape"):
        MeanStdStats(mean, std[:3])
