"""The stages' compute thread runs below the graph's other threads (compute.stage_nice)."""

import os
import threading

from embodied_ros.node_infra.priority import lower_this_thread


def _nice_in_new_thread(*steps):
    seen = []

    def body():
        for nice in steps:
            lower_this_thread(nice)
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return seen[0]


def test_a_stage_thread_lowers_itself_once_and_leaves_the_others():
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert _nice_in_new_thread(3) == min(19, base + 3)
    assert _nice_in_new_thread(3, 3, 3) == min(19, base + 3)  # once per thread, not once per run
    assert _nice_in_new_thread(0) == base
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base


def test_the_kernels_threads_a_stage_starts_inherit_its_priority():
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = []

    def stage():
        lower_this_thread(4)
        worker = threading.Thread(target=lambda: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        worker.start()
        worker.join()

    thread = threading.Thread(target=stage)
    thread.start()
    thread.join()
    assert seen == [min(19, base + 4)]
