"""Each stage timed alone (the reference for the graph's stage compute times)."""

import threading
import time

import pytest

from embodied_ros.pipeline.timing import on_stage_thread, sample_observation, stage_times_ms
from fake_runtime import FakeRuntime


class _SlowAct(FakeRuntime):
    def act(self, prefix, world, noise=None):
        time.sleep(0.02)
        return super().act(prefix, world, noise)


def test_every_stage_is_timed_on_the_models_inputs():
    runtime = _SlowAct(has_world_model=True)
    times = stage_times_ms(runtime, repeats=3)
    assert set(times) == {"perception", "prefix", "world", "action"}
    assert times["action"] >= 20.0 > times["perception"]
    assert [stage for stage, _ in runtime.calls[:4]] == ["perception", "prefix", "world", "action"]
    assert len(runtime.calls) == 12


def test_a_model_without_a_world_model_has_no_world_time():
    runtime = FakeRuntime()
    assert set(stage_times_ms(runtime, repeats=1)) == {"perception", "prefix", "action"}
    observation = sample_observation(runtime)
    assert set(observation.images) == set(runtime.spec.camera_names)
    assert observation.images["front"].shape == (*runtime.spec.image_size, 3)
    assert observation.state.shape == (len(runtime.spec.state_names),)


def test_a_failing_stage_raises_on_the_callers_thread():
    import pytest

    class _Broken(FakeRuntime):
        def encode(self, observation):
            raise RuntimeError("no such camera")

    with pytest.raises(RuntimeError, match="no such camera"):
        stage_times_ms(_Broken(), repeats=1)


def test_paced_chunks_start_one_period_apart_and_time_only_the_calls():
    runtime = _SlowAct()
    started = time.perf_counter()
    times = stage_times_ms(runtime, repeats=4, period_s=0.1)
    elapsed = time.perf_counter() - started
    assert 0.3 <= elapsed < 1.0  # three periods between four chunks (plus the last chunk), not back to back
    assert 20.0 <= times["action"] < 100.0  # the pause is not part of any stage's time


class _FillingEpisode(FakeRuntime):
    """A world predictor whose runs cost more until its episode holds two of them (as a KV pool fills)."""

    class Episode(list):
        runs_until_steady = 2

    def world_episode(self):
        return self.Episode()

    def predict_world(self, prefix, noise=None, episode=None):
        episode.append(prefix.stamp_ns)
        time.sleep(0.002 if len(episode) <= 2 else 0.02)
        return super().predict_world(prefix, noise, episode)


def test_a_world_episode_is_timed_past_the_runs_that_fill_it():
    runtime = _FillingEpisode(has_world_model=True)
    times = stage_times_ms(runtime, repeats=3)
    assert times["world"] >= 20.0  # the two cheap first runs are not among the timed ones
    assert [stage for stage, _ in runtime.calls].count("world") == 5
    assert [stage for stage, _ in runtime.calls].count("action") == 3


def test_work_on_a_stage_thread_returns_its_result_or_raises_its_error_here():
    assert on_stage_thread(lambda: threading.current_thread() is not threading.main_thread()) is True
    with pytest.raises(ZeroDivisionError):
        on_stage_thread(lambda: 1 / 0)
