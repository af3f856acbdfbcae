"""`embodied-ros eval metaworld` on one short episode with the shipped Meta-World bundle: the graph's
first chunk is the runtime's answer for the env's first observation and the episode's own noise,
and the report is written."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from embodied_ros.bundle import open_bundle
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.models.pi05.runtime import load_runtime
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation
from embodied_ros.sim.metaworld import CAMERA, MetaWorldTask
from domains import next_domain

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "bundles" / "pi05_metaworld.gguf"
SEED = 7


def test_one_episode_through_the_graph_uses_the_episode_noise_and_writes_the_report(tmp_path):
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "embodied_ros.cli.main", "eval", "metaworld", "--bundle", str(BUNDLE),
         "--tasks", "reach-v3", "--episodes", "1", "--seed", str(SEED), "--max-steps", "6", "--out", str(out)],
        capture_output=True, text=True, timeout=280, env={**__import__("os").environ, "ROS_DOMAIN_ID": str(next_domain())})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("success_rate=") and 0.0 <= float(last.split("=")[1]) <= 1.0
    records = json.loads((out / "records.json").read_text())
    assert [(r["task"], r["seed"]) for r in records] == [("reach-v3", SEED)]
    record = records[0]
    assert record["steps"] == len(record["actions"]) == len(record["rewards"]) and 1 <= record["steps"] <= 6
    page = (out / "index.html").read_text()
    assert "reach-v3" in page and "returns.png" in page and (out / "frame-reach-v3-0.png").is_file()

    runtime = load_runtime(open_bundle(BUNDLE, architecture="pi05"), "numba")
    env = MetaWorldTask("reach-v3")
    first = env.reset(SEED)
    expected = infer(runtime, Observation(stamp_ns=0, images={CAMERA: first.image}, state=first.state,
                                          instruction=env.text),
                     stage_noise(SEED, "action", 0, runtime.spec.noise_shape)).actions
    env.close()
    np.testing.assert_allclose(record["first_chunk"], expected, rtol=0, atol=1e-5)
    executed = np.asarray(record["actions"])[:5]  # the first five actions of the chunk, one per env step
    np.testing.assert_allclose(executed, expected[:len(executed)], rtol=0, atol=1e-5)


def test_a_missing_bundle_is_one_line():
    result = subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", "eval", "metaworld", "--bundle",
                             "/nonexistent.gguf", "--episodes", "1"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "does not exist" in result.stderr
