"""Schedule arithmetic, lock-step readiness and the config's validation."""

import numpy as np
import pytest

from embodied_ros.node_infra.config import GraphConfig, from_flat, load_config, to_parameters
from embodied_ros.node_infra.schedule import SKIPPED, LockstepGate, StepClock, runs_on, source_step
from fake_runtime import FakeRuntime


def test_step_clock_maps_steps_to_stamps_and_back():
    clock = StepClock(start_ns=1_000, period_ns=100)
    assert clock.stamp_of(3) == 1_300
    assert clock.step_of(1_300) == 3
    assert clock.step_of(1_350) is None and clock.step_of(900) is None


def test_stage_reads_the_newest_upstream_output_at_or_before_its_step():
    assert [k for k in range(12) if runs_on(k, 3)] == [0, 3, 6, 9]
    assert [source_step(k, 2) for k in range(6)] == [0, 0, 2, 2, 4, 4]


def test_gate_waits_for_exactly_the_scheduled_upstream_outputs():
    gate = LockstepGate(period=3, upstream_periods={"prefix": 2})
    for step in range(4):
        gate.on_step(step)
    assert gate.next_ready() is None  # step 0 owes prefix@0
    gate.on_upstream("prefix", 0, "p0")
    assert gate.next_ready() == (0, {"prefix": "p0"})
    gate.on_upstream("prefix", 2, "p2")
    assert gate.next_ready() == (3, {"prefix": "p2"})  # step 3 reads prefix@2
    assert gate.next_ready() is None


def test_gate_falls_back_to_the_newest_earlier_output_after_a_skip():
    gate = LockstepGate(period=1, upstream_periods={"prefix": 1})
    gate.on_step(0)
    gate.on_step(1)
    gate.on_step(1)  # repeated clock messages are ignored
    gate.on_upstream("prefix", 0, "p0")
    gate.on_upstream("prefix", 1, SKIPPED)
    assert gate.next_ready() == (0, {"prefix": "p0"})
    assert gate.next_ready() == (1, {"prefix": "p0"})
    assert gate.next_ready() is None


def test_gate_gives_none_when_nothing_was_ever_produced():
    gate = LockstepGate(period=1, upstream_periods={"observation": 1})
    gate.on_step(0)
    gate.on_upstream("observation", 0, SKIPPED)
    assert gate.next_ready() == (0, {"observation": None})


def test_config_round_trips_through_ros_parameters():
    config = from_flat({"schedule.perception": 2, "schedule.world": 3, "controller.joints": ["a", "b"],
                        "controller.max_velocity": [1, 2]})
    assert config.controller.max_velocity == (1.0, 2.0)
    assert from_flat(to_parameters(config)) == config


def test_config_errors_name_the_key_and_value(tmp_path):
    with pytest.raises(ValueError, match=r"schedule.prefix must be a whole number of steps >= 1, got 0"):
        from_flat({"schedule.prefix": 0})
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['schedule.perceptoin'\]"):
        from_flat({"schedule.perceptoin": 2})
    with pytest.raises(ValueError, match=r"schedule.step_period_s must be a number, got 'fast'"):
        from_flat({"schedule.step_period_s": "fast"})
    with pytest.raises(ValueError, match=r"controller.position_lower has 1 values for 2 joints"):
        from_flat({"controller.joints": ["a", "b"], "controller.position_lower": [0.0]})
    with pytest.raises(ValueError, match=r"rtc.schedule must be one of zeros, ones, linear, exp, got 'cosine'"):
        from_flat({"rtc.schedule": "cosine"})
    with pytest.raises(ValueError, match=r"rtc.delay must be measured or fixed, got 'guess'"):
        from_flat({"rtc.delay": "guess"})
    with pytest.raises(ValueError, match=r"controller.trajectory_points must be >= 1, got 0"):
        from_flat({"controller.trajectory_points": 0})
    with pytest.raises(ValueError, match=r"stages.noise_seed must be >= 0, or -1 for the bundle's, got -2"):
        from_flat({"stages.noise_seed": -2})


def test_one_noise_seed_the_bundle_s_unless_the_graph_sets_one():
    spec = FakeRuntime().spec
    assert from_flat({}).stages.seed_for(spec) == spec.noise_seed == 23
    assert from_flat({"stages.noise_seed": 4}).stages.seed_for(spec) == 4


def test_config_file_resolves_the_bundle_next_to_it(tmp_path):
    path = tmp_path / "robot.yaml"
    path.write_text("bundle: bundles/tiny\nschedule:\n  perception: 2\n")
    config = load_config(path, {"schedule.prefix": 2})
    assert config.bundle == str(tmp_path / "bundles" / "tiny")
    assert (config.schedule.perception, config.schedule.prefix) == (2, 2)
    assert GraphConfig().by_reference and not load_config(None, {"layout": "separate"}).by_reference


def test_every_setting_is_documented():
    from embodied_ros.node_infra.config import parameter_fields

    undocumented = [name for name, spec in parameter_fields() if not spec.metadata.get("doc")]
    assert not undocumented, f"settings without documentation: {undocumented}"



def test_free_running_stage_runs_on_arrival_at_most_once_per_period():
    from embodied_ros.node_infra.schedule import FreeRunTrigger

    # perception every 2 steps of 100 ns, observations every step
    trigger = FreeRunTrigger(period_ns=200, upstream_periods_ns={"observation": 100}, slack_ns=50)
    assert trigger.arrived("observation", 0)
    trigger.ran(0)
    assert not trigger.arrived("observation", 100)  # step 1: not its step
    assert trigger.arrived("observation", 180)  # step 2, a little early: inputs jitter


def test_free_running_stage_waits_for_a_slower_upstream_due_on_the_same_step():
    from embodied_ros.node_infra.schedule import FreeRunTrigger

    # the prefix (every step) reads observations (every step) and embeddings (every 2 steps)
    trigger = FreeRunTrigger(period_ns=100, upstream_periods_ns={"observation": 100, "perception": 200},
                             slack_ns=50)
    assert trigger.arrived("perception", 10)  # step 0: embeddings of observation 0 arrive
    trigger.ran(10)
    assert trigger.arrived("observation", 125)  # step 1 (late): no embeddings due, run at once
    trigger.ran(125)
    assert not trigger.arrived("observation", 200)  # step 2: embeddings are due: wait for them
    assert trigger.arrived("perception", 212)


def test_a_re_solving_stage_runs_at_once_on_new_input_and_on_its_timer_in_between():
    from embodied_ros.node_infra.schedule import FreeRunTrigger

    # the action head (every step) over a prefix made every 2 steps
    trigger = FreeRunTrigger(period_ns=100, upstream_periods_ns={"prefix": 200}, slack_ns=50, resolves=True)
    assert trigger.timer_period_ns == 100  # re-solves every step
    assert trigger.arrived("prefix", 10)
    trigger.ran(10)
    assert trigger.timer_fired(110)  # step 1: no prefix due, re-solve on the old one
    trigger.ran(110)
    assert not trigger.timer_fired(200)  # step 2: the new prefix is due, leave the run to it
    assert trigger.arrived("prefix", 212)  # the new prefix is used at once, not a step later
    trigger.ran(212)
    assert trigger.timer_fired(312)
    assert FreeRunTrigger(200, {"observation": 100}, slack_ns=50).timer_period_ns == 300


def _simulate(trigger, arrivals, end_ns):
    """Run times of a stage node driven by `trigger`: (time, upstream) arrivals in time order, and its
    timer, restarted by every run (as `nodes/stage.py` does)."""
    runs, next_fire, pending = [], trigger.timer_period_ns, list(arrivals)
    while True:
        if pending and pending[0][0] <= next_fire:
            now, name = pending.pop(0)
            run = trigger.arrived(name, now)
        elif next_fire < end_ns:
            now, run = next_fire, trigger.timer_fired(next_fire)
            next_fire += trigger.timer_period_ns
        else:
            return runs
        if run:
            trigger.ran(now)
            runs.append(now)
            next_fire = now + trigger.timer_period_ns


def test_action_head_runs_every_step_over_a_prefix_and_prediction_made_every_third_step():
    from embodied_ros.node_infra.schedule import FreeRunTrigger

    # step 100, a prefix and a prediction every 3 steps (the prediction 8 after its prefix)
    trigger = FreeRunTrigger(period_ns=100, upstream_periods_ns={"prefix": 300, "world": 300}, slack_ns=50,
                             resolves=True)
    arrivals = sorted([(300 * k + 12, "prefix") for k in range(40)] + [(300 * k + 20, "world") for k in range(40)])
    runs = _simulate(trigger, arrivals, end_ns=12_000)
    steady = [t for t in runs if 1_000 <= t < 11_000]
    assert len(steady) == 100, runs  # one run per step: 10 Hz with steps of 0.1 s
    assert all(300 * k + 20 in runs for k in range(40))  # each new prediction is used when it arrives
    assert all(300 * k + 12 not in runs for k in range(1, 40))  # a new prefix waits for its prediction
    assert min(b - a for a, b in zip(steady, steady[1:])) >= 80


def test_action_head_follows_a_jittery_prefix_made_every_step_without_extra_runs():
    from embodied_ros.node_infra.schedule import FreeRunTrigger

    trigger = FreeRunTrigger(period_ns=100, upstream_periods_ns={"prefix": 100}, slack_ns=50, resolves=True)
    jitter = np.random.default_rng(0).uniform(-30, 30, 60)
    arrivals = [(int(100 * k + 40 + jitter[k]), "prefix") for k in range(60)]
    runs = _simulate(trigger, arrivals, end_ns=6_000)
    assert runs == [t for t, _ in arrivals]  # every prefix at once, and no timed re-solve in between


def test_action_head_keeps_re_solving_every_step_when_its_upstream_falls_silent():
    from embodied_ros.node_infra.schedule import FreeRunTrigger

    trigger = FreeRunTrigger(period_ns=100, upstream_periods_ns={"prefix": 100}, slack_ns=50, resolves=True)
    runs = _simulate(trigger, [(100 * k + 40, "prefix") for k in range(10)], end_ns=3_000)
    assert len([t for t in runs if 1_100 <= t < 3_000]) >= 18
