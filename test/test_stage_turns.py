"""compute.stage_turns: the stages of one process make their model calls in turn (true, the
default) or at once (false)."""

import threading
import time

import pytest

from embodied_ros.node_infra.config import load_config
from fake_runtime import FakeRuntime
from graph_harness import next_domain

CALL_S = 0.06  # three stages of 60 ms a step of 100 ms: the next step's perception is due before the action ends


class _TimedRuntime(FakeRuntime):
    """Every model call takes CALL_S and records when it ran."""

    def __init__(self):
        super().__init__()
        self.intervals: list[tuple[float, float]] = []
        self.lock = threading.Lock()

    def _timed(self, call, *args):
        start = time.monotonic()
        time.sleep(CALL_S)  # lets go of the interpreter, as the kernels do
        result = call(*args)
        with self.lock:
            self.intervals.append((start, time.monotonic()))
        return result

    def encode(self, observation):
        return self._timed(super().encode, observation)

    def build_prefix(self, embeddings, observation):
        return self._timed(super().build_prefix, embeddings, observation)

    def act(self, prefix, world, noise=None):
        return self._timed(super().act, prefix, world, noise)


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


def test_the_stage_furthest_down_the_pipeline_goes_first_but_never_twice_while_others_wait():
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
    # 4 just ran (the holder): the prefix (2) goes before the action head's next call, then 4, then 1
    assert order == [2, 4, 1]


def test_a_re_solve_on_unchanged_input_gives_way_instead_of_waiting():
    from embodied_ros.nodes.stage import ModelCallTurns
    turns = ModelCallTurns()
    with turns.turn_if_free(-1) as taken:  # nobody else: it runs
        assert taken is turns and turns.turn_if_free(-1) is None  # busy: the next one gives way
    with turns.turn(2):
        assert turns.turn_if_free(-1) is None
    assert turns.turn_if_free(-1) is not None
