"""Real-time chunking in the flow solver against LeRobot 0.6.1's RTC records (test/data/pi05_rtc_tiny)."""

import dataclasses
import json

import numpy as np
import pytest

from embodied_ros.heads import flow, rtc
from embodied_ros.models.kit.records import rtc_case_leftover, rtc_case_settings
from embodied_ros.models.pi05 import RECORDS
from pi05_fixtures import RTC_SETS, RTC_TINY, record

TOLERANCE = 1e-4


def recorded_cases(folder):
    return json.loads((folder / "config.json").read_text())["cases"]


def guided_cases(folder):
    return [(k, case) for k, case in enumerate(recorded_cases(folder)) if case["guidance_applied"]]


def case_guidance(folder, k, case, outputs=None):
    config, _, cases = record(folder)
    leftover = rtc_case_leftover(case, cases, k, outputs or {})
    return rtc.chunk_guidance(rtc_case_settings(case), leftover, case["inference_delay"],
                              cases[f"case{k}_noise"].shape, config.num_inference_steps)


@pytest.mark.parametrize("folder", RTC_SETS, ids=[p.name for p in RTC_SETS])
def test_prefix_and_guidance_weights_equal_lerobot_bit_for_bit(folder):
    _, _, cases = record(folder)
    schedules = set()
    for k, case in guided_cases(folder):
        if case["kind"] == "chain":
            continue  # its leftover is this runtime's own output (test_parity_...)
        guidance = case_guidance(folder, k, case)
        if not cases[f"case{k}_prefix_weights"].any():
            assert guidance is None, f"case {k}: all-zero weights must leave the solve plain"
            continue
        schedule = case["rtc_config"]["prefix_attention_schedule"]
        # exp's expm1 may round differently by one unit with the CPU's vector kernels (in torch too)
        np.testing.assert_allclose(guidance.weights[:, 0], cases[f"case{k}_prefix_weights"], rtol=0,
                                   atol=6e-8 if schedule == "EXP" else 0, err_msg=f"case {k}")
        np.testing.assert_array_equal(guidance.step_weights, cases[f"case{k}_guidance_weights"], err_msg=f"case {k}")
        schedules.add(schedule)
    assert len(schedules) >= 3


@pytest.mark.parametrize("folder", RTC_SETS, ids=[p.name for p in RTC_SETS])
def test_guided_velocity_of_every_recorded_step_bit_for_bit(folder):
    """From LeRobot's own x, plain velocity and weights of each step, the guide gives LeRobot's guided velocity."""
    _, _, cases = record(folder)
    for k, case in guided_cases(folder):
        if case["kind"] == "chain" or not cases[f"case{k}_prefix_weights"].any():
            continue
        guidance = dataclasses.replace(case_guidance(folder, k, case), weights=cases[f"case{k}_prefix_weights"][:, None])
        xs, velocities, guided = (cases[f"case{k}_{name}"] for name in ("x_steps", "v_base_steps", "v_guided_steps"))
        for step in range(velocities.shape[0]):
            np.testing.assert_array_equal(guidance(xs[step], velocities[step], step), guided[step],
                                          err_msg=f"case {k} step {step}")


def test_clipping_and_inf_rules_of_the_guidance_weight():
    times = flow.step_times(10)
    unclipped = [rtc.guidance_weight(t, 1e9) for t in times]
    assert unclipped[0] == np.float32(1e9)  # tau = 0: c = inf is replaced by beta
    np.testing.assert_allclose(unclipped[1:], [9.111111, 4.25, 2.761905, 2.166667, 2.0, 2.166667, 2.761905, 4.25,
                                               9.111109], rtol=1e-6)
    clipped = [rtc.guidance_weight(t, 3.0) for t in times]
    assert sum(w == np.float32(3.0) for w in clipped) == 5


def test_schedules_closed_forms_and_edge_cases():
    np.testing.assert_allclose(rtc.prefix_weights("linear", 2, 5, 10), [1, 1, .75, .5, .25, 0, 0, 0, 0, 0], atol=1e-7)
    np.testing.assert_array_equal(rtc.prefix_weights("zeros", 2, 5, 10), [1, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(rtc.prefix_weights("ones", 2, 5, 10), [1, 1, 1, 1, 1, 0, 0, 0, 0, 0])
    for schedule in ("zeros", "linear", "exp"):  # delay past the horizon: every guided row frozen
        np.testing.assert_array_equal(rtc.prefix_weights(schedule, 7, 4, 8), [1, 1, 1, 1, 0, 0, 0, 0])
    assert not rtc.prefix_weights("ones", 3, 0, 6).any()
    lin = (5 - np.arange(2, 5)) / 4.0
    np.testing.assert_allclose(rtc.prefix_weights("exp", 2, 5, 10)[2:5], lin * np.expm1(lin) / (np.e - 1), atol=1e-7)


def test_no_op_cases_give_no_guidance():
    settings = rtc.RtcSettings("linear", 10.0, 5)
    leftover = np.ones((6, 3), np.float32)
    assert rtc.chunk_guidance(None, leftover, 2, (8, 4), 10) is None  # RTC off
    assert rtc.chunk_guidance(settings, None, 2, (8, 4), 10) is None  # first chunk: nothing to continue
    assert rtc.chunk_guidance(rtc.RtcSettings("zeros", 10.0, 5), leftover, 0, (8, 4), 10) is None
    assert rtc.chunk_guidance(settings, leftover[:0], 2, (8, 4), 10) is None  # empty leftover: h_eff = 0


def test_works_for_any_velocity_function():
    """Row-independent toy flow: rows with weight 0 follow plain sampling bit for bit, rows with
    weight 1 land near the leftover."""
    rng = np.random.default_rng(3)
    noise = rng.standard_normal((8, 4)).astype(np.float32)
    data = rng.standard_normal((8, 4)).astype(np.float32)
    leftover = rng.standard_normal((6, 3)).astype(np.float32)

    def velocity(x, step):
        return noise - data + np.float32(0.1) * x  # straight flow plus a state-dependent term

    plain = flow.euler_solve(velocity, noise, 10)
    guidance = rtc.chunk_guidance(rtc.RtcSettings("linear", 10.0, 6), leftover, 3, noise.shape, 10)
    guided = flow.euler_solve(velocity, noise, 10, guidance=guidance)
    np.testing.assert_array_equal(guided[6:], plain[6:])
    assert np.abs(guided[:3, :3] - leftover[:3]).max() < 0.5 * np.abs(plain[:3, :3] - leftover[:3]).max()
    np.testing.assert_allclose(guided[:3, 3:], 0.0, atol=0.5 * np.abs(plain[:3, 3:]).max())  # padding pulls to 0


@pytest.mark.parametrize("leftover, delay, problem", [
    (np.zeros((9, 3)), 2, "rows <= 8"), (np.zeros((4, 5)), 2, "columns <= 4"),
    (np.full((4, 3), np.nan), 2, "non-finite"), (np.zeros((4, 3)), -1, "delay"), (np.zeros((4, 3)), 1.5, "delay"),
])
def test_bad_leftover_or_delay_is_a_one_line_error(leftover, delay, problem):
    with pytest.raises(ValueError, match=problem):
        rtc.chunk_guidance(rtc.RtcSettings(), leftover, delay, (8, 4), 10)


@pytest.mark.parametrize("settings", [dict(schedule="cosine"), dict(max_guidance_weight=0.0),
                                      dict(execution_horizon=-1)])
def test_bad_settings_are_refused(settings):
    with pytest.raises(ValueError, match="RTC"):
        rtc.RtcSettings(**settings)


@pytest.mark.parametrize("folder", RTC_SETS, ids=[p.name for p in RTC_SETS])
def test_parity_command_path_within_tolerance_and_no_ops_bitwise(folder):
    """Every case through a converted bundle; the no-op cases are also compared with this runtime's
    plain sampling bit for bit (a difference is reported as an infinite error); the chain replays
    its own outputs as leftovers."""
    results = RECORDS.run_fixture_parity(folder)
    assert len(results) == len(recorded_cases(folder))
    for result in results:
        assert result.max_abs_error < TOLERANCE, f"{result.name}: {result.max_abs_error:.3g} {result.detail}"
    assert any(case["kind"] == "chain" for case in recorded_cases(folder))
    assert any(case["expect"] == "plain" for case in recorded_cases(folder))


def test_rtc_record_is_refused_as_a_bundle_reference():

    with pytest.raises(ValueError, match="real-time chunking"):
        RECORDS.reference_record(RTC_TINY, 1e-4)
