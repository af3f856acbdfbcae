"""compute.stage_turns: the stages of one process make their model calls in turn (true, the
default) or at once (false)."""

import os
import threading
import time

import pytest

from embodied_ros.node_infra.config import load_config
from domains import next_domain
from fake_runtime import FakeRuntime

CALL_S = 0.06  # three stages of 60 ms a step of 100 ms: the next step's perception is due before the action ends


class _TimedRuntime(FakeRuntime):
    """Every model call takes CALL_S and records when it ran."""

    def __init__(self):
        super().__init__()
        self.intervals: list[tuple[float, float]] = []
        self.stages_run: list[str] = []  # in the order they ran
        self.lock = threading.Lock()

    def _timed(self, stage, call, *args):
        start = time.monotonic()
        time.sleep(CALL_S)  # lets go of the interpreter, as the kernels do
        result = call(*args)
        with self.lock:
            self.intervals.append((start, time.monotonic()))
            self.stages_run.append(stage)
        return result

    def encode(self, observation):
        return self._timed("perception", super().encode, observation)

    def build_prefix(self, embeddings, observation):
        return self._timed("prefix", super().build_prefix, embeddings, observation)

    def act(self, prefix, world, noise=None):
        return self._timed("action", super().act, prefix, world, noise)


def _overlaps(intervals) -> int:
    ordered = sorted(intervals)
    return sum(1 for (_, end), (start, _) in zip(ordered, ordered[1:]) if start < end)


@pytest.mark.parametrize("turns", [True, False], ids=["in turn", "at once"])
def test_model_calls_take_turns_only_when_told(turns):
    from embodied_ros.graph.up import run_up

    runtime = _TimedRuntime()
    config = load_config(None, {"schedule.step_period_s": 0.1, "compute.stage_turns": turns,
                                "stages.max_input_age_s": 5.0})
    run_up(config, duration_s=3.0, summary_period_s=3.0, domain_id=next_domain(), print_fn=lambda line: None,
           runtime=runtime)
    assert len(runtime.intervals) > 20
    overlaps = _overlaps(runtime.intervals)
    assert (overlaps == 0) if turns else (overlaps > 0), f"{overlaps} overlapping calls of {len(runtime.intervals)}"
    if turns:  # each prefix hands the turn to the action head, which goes before a waiting vision run
        ran = runtime.stages_run[:-3]  # the graph's stop may cut the last round short
        after_prefix = [ran[i + 1] for i, stage in enumerate(ran[:-1]) if stage == "prefix"]
        assert after_prefix and set(after_prefix) == {"action"}, runtime.stages_run


def _take_turns(turns, requests, holder_started, release, order):
    """Threads asking for turns at `requests` positions while a holder has the turn; their order."""
    def ask(position):
        with turns.turn(position):
            order.append(position)

    threads = []
    for position in requests:
        threads.append(threading.Thread(target=ask, args=(position,)))
        threads[-1].start()
        deadline = time.monotonic() + 2
        while position not in turns._waiting and time.monotonic() < deadline:
            time.sleep(0.001)
    release.set()
    for thread in threads:
        thread.join(timeout=5)


def test_calls_take_the_turn_in_the_order_they_asked():
    from embodied_ros.nodes.stage import ModelCallTurns
    turns, order = ModelCallTurns(), []
    release, started = threading.Event(), threading.Event()

    def hold():
        with turns.turn(4):  # the action head has the turn
            started.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    started.wait(5)
    _take_turns(turns, [1, 4, 2], started, release, order)
    holder.join(timeout=5)
    assert order == [1, 4, 2]


def test_a_re_solve_on_unchanged_input_gives_way_instead_of_waiting():
    from embodied_ros.nodes.stage import ModelCallTurns
    turns = ModelCallTurns()
    with turns.turn_if_free(-1) as taken:  # nobody else: it runs
        assert taken is turns and turns.turn_if_free(-1) is None  # busy: the next one gives way
    with turns.turn(2):
        assert turns.turn_if_free(-1) is None
    assert turns.turn_if_free(-1) is not None


def _hold_and_hand_down(turns, position, hand_down, release, started):
    def hold():
        with turns.turn(position) as held:
            started.set()
            release.wait(5)
            if hand_down:
                held.hand_down()

    holder = threading.Thread(target=hold)
    holder.start()
    started.wait(5)
    return holder


@pytest.mark.parametrize("hand_down", [True, False], ids=["handed down", "not handed down"])
def test_a_handed_down_turn_goes_to_the_stage_fed_even_if_it_asks_after_the_release(hand_down):
    from embodied_ros.nodes.stage import ModelCallTurns
    turns, order = ModelCallTurns(handover_s=0.5), []
    release, started = threading.Event(), threading.Event()
    holder = _hold_and_hand_down(turns, 2, hand_down, release, started)  # the prefix computes

    def ask(position):
        with turns.turn(position):
            order.append(position)

    vision = threading.Thread(target=ask, args=(1,))  # waits for the turn since before the release
    vision.start()
    while 1 not in turns._waiting:
        time.sleep(0.001)
    release.set()
    holder.join(timeout=5)
    time.sleep(0.05)  # the prefix's output on its way to the action head
    action = threading.Thread(target=ask, args=(4,))
    action.start()
    for thread in (vision, action):
        thread.join(timeout=5)
    assert order == ([4, 1] if hand_down else [1, 4])


def test_a_hand_over_nobody_takes_lapses_and_the_waiting_call_goes():
    from embodied_ros.nodes.stage import ModelCallTurns
    turns = ModelCallTurns(handover_s=0.2)
    with turns.turn(2) as held:
        held.hand_down()
    assert turns.turn_if_free(-1) is None  # the hand-over still runs: a re-solve gives way
    started = time.monotonic()
    with turns.turn(1):  # upstream of the hand-over: it waits it out
        waited = time.monotonic() - started
    assert 0.1 < waited < 2.0
    free = turns.turn_if_free(-1)
    assert free is not None
    with free:
        pass


@pytest.mark.parametrize("overrides, threads", [
    ({}, len(os.sched_getaffinity(0))),  # composed, in turn: one call at a time gets every core
    ({"layout": "separate"}, 1),  # a process per stage: they compute at once
    ({"compute.stage_turns": False}, 1),
    ({"schedule.mode": "lockstep"}, 1),  # the same chunks as the separate layout's, bit for bit
    ({"compute.blas_threads": 3, "layout": "separate"}, 3),
])
def test_blas_threads_follow_whether_model_calls_can_run_at_once(overrides, threads):
    from embodied_ros.nodes.runtime_cache import blas_threads
    assert blas_threads(load_config(None, overrides)) == threads


class _SlowVisionRuntime(_TimedRuntime):
    """A vision tower ten times slower than the other calls, as a released-size model's on two cores."""

    def encode(self, observation):
        time.sleep(9 * CALL_S)
        return super().encode(observation)


def test_a_stage_that_waited_for_the_turn_computes_on_what_came_meanwhile():
    # the prefix waits for its turn through each vision run, its node's executor held: the vision
    # output it reads must be the one that run just made, not the run before's (then 1.2 s old)
    from embodied_ros.graph.up import run_up

    runtime = _SlowVisionRuntime()
    config = load_config(None, {"schedule.step_period_s": 0.1, "schedule.perception": 1,
                                "stages.max_input_age_s": 1.0})
    run_up(config, duration_s=4.0, summary_period_s=4.0, domain_id=next_domain(), print_fn=lambda line: None,
           runtime=runtime)
    ran = runtime.stages_run
    assert ran.count("prefix") >= 2, ran  # it ran on each vision output, so never found it too old
    after_vision = [ran[i + 1] for i in range(ran.index("prefix") - 1, len(ran) - 1) if ran[i] == "perception"]
    assert set(after_vision) == {"prefix"}, ran


def test_a_run_refused_for_missing_input_does_not_delay_the_run_on_its_arrival():
    """The prefix's timer found no vision output yet just before the first one came: that refusal is
    no run, so the arrival starts the prefix at once (counted as one, it kept the prefix from asking
    within the hand-over, and the vision tower took the turn again: the first chunk of a released-size
    SmolVLA came a whole vision run late, 17.8 s after start instead of 8.4-10.8, in half the starts)."""
    from types import SimpleNamespace

    from embodied_ros.node_infra.schedule import FreeRunTrigger
    from embodied_ros.nodes.stage import StageNode

    ms = 1_000_000
    now = [0]
    ran, skipped = [], []
    node = StageNode.__new__(StageNode)  # its scheduling alone, without a ROS node
    node.trigger = FreeRunTrigger(100 * ms, {"perception": 100 * ms}, slack_ns=50 * ms)
    node.upstreams, node.runs_on_unchanged_input, node._timer = ("perception",), False, None
    node.latest, node.used_versions = {"observation": (1, SimpleNamespace(stamp_ns=0))}, {}
    node.max_age_ns, node.drive = 5000 * ms, SimpleNamespace(too_old=lambda age, limit: age > limit)
    node.now_ns = lambda: now[0]
    node._skip = lambda step, now_ns, reason, error: skipped.append(reason)
    node._in_turn = lambda run, fresh=True: ran.append(now[0])

    node._on_timer()
    assert skipped == ["no perception output yet"] and ran == []
    now[0] = 12 * ms
    node._newest_upstream("perception", SimpleNamespace(header=SimpleNamespace(stamp=_stamp(now[0]))),
                          SimpleNamespace(stamp_ns=now[0]))
    assert ran == [12 * ms]


def _stamp(ns: int):
    from builtin_interfaces.msg import Time
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
