"""Thread priorities: the stages' compute thread runs below the graph's other threads (compute.stage_nice);
the controller's thread asks for SCHED_FIFO where permitted (controller.realtime_priority)."""

import os
import threading

from embodied_ros.node_infra.priority import lower_this_thread, normal_scheduling, realtime_scheduling


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


def test_realtime_scheduling_takes_effect_or_says_why_and_leaves_the_thread_as_it_was():
    seen = {}

    def controller_thread():
        me = threading.get_native_id()
        refused = realtime_scheduling(20)
        seen["refused"], seen["policy"] = refused, os.sched_getscheduler(me)
        seen["priority"] = os.sched_getparam(me).sched_priority
        normal_scheduling()
        seen["after"] = os.sched_getscheduler(me)

    thread = threading.Thread(target=controller_thread)
    thread.start()
    thread.join()
    if seen["refused"]:  # an ordinary user without an rtprio limit
        assert "not permitted" in seen["refused"].lower() and seen["policy"] == os.SCHED_OTHER
    else:
        assert (seen["policy"], seen["priority"]) == (os.SCHED_FIFO, 20)
    assert seen["after"] == os.SCHED_OTHER
    assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER  # only that thread changed
