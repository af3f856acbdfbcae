"""kernels/cpu/shares.py: a parallel region's shares, each claimed by exactly one thread, a held-up
thread taking fewer."""
import time

import numba
import numpy as np
import pytest

from embodied_ros.kernels.cpu.shares import (SHARE_MIN_MACS, SHARES_PER_THREAD, claim, counter, share_bounds,
                                             share_count)


@numba.njit(parallel=True, nogil=True)  # not cached: numba reloads no object-mode block inside a parallel loop
def _claim_all(workers, shares, claimed, taken_by, slow_share, pause_s):  # pragma: no cover - compiled
    for worker in numba.prange(workers):
        share = claim(claimed)
        while share < shares:
            taken_by[share] = worker
            if share == slow_share:
                with numba.objmode():
                    time.sleep(pause_s)
            share = claim(claimed)


def test_share_count_is_one_per_thread_for_small_regions_and_more_for_large_ones():
    assert share_count(2, 96, SHARE_MIN_MACS) == 2  # one each: a share of little work stays whole
    assert share_count(2, 96, 5 * SHARE_MIN_MACS) == 5
    assert share_count(2, 96, 1 << 40) == 2 * SHARES_PER_THREAD
    assert share_count(2, 3, 1 << 40) == 3  # never more than the parts
    assert share_count(1, 0, 0) == 1


def test_share_bounds_cover_every_part_once():
    for shares, parts in ((8, 96), (8, 24), (7, 10), (3, 3)):
        covered = [p for s in range(shares) for p in range(*share_bounds(s, shares, parts))]
        assert covered == list(range(parts))


@pytest.mark.filterwarnings("ignore:Code running in object mode")  # the pause, on one thread
def test_each_share_is_claimed_once_and_a_held_up_thread_takes_fewer():
    workers = min(2, numba.get_num_threads())
    shares = 64
    claimed, taken_by = counter(), np.full(shares, -1, np.int64)
    _claim_all(workers, shares, claimed, taken_by, 0, 0.3)
    assert (taken_by >= 0).all()  # every share ran
    assert claimed[0] == shares + workers  # and each thread asked once more to learn that none was left
    if workers == 2:  # the thread that slept in share 0 left the other thread every other share
        slow = taken_by[0]
        assert (taken_by == slow).sum() == 1
