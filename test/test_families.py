"""The contract every model family keeps, for each family found under embodied_ros/models (a new family
is checked here by existing; there is no list to edit): its entry points, its config overlay and
shipped bundle, the bundle's reference run, which records and checkpoints it claims, and the graph
streaming commands on it."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from embodied_ros.bundle import families, open_bundle
from embodied_ros.graph.launch_plan import launch_plan
from embodied_ros.node_infra.config import flatten, load_config
from domains import next_domain
from graph_bundles import ROOT

FAMILIES = families.known_families()
DATA = ROOT / "test" / "data"
RECORDS = sorted(folder for folder in [*DATA.iterdir(), *(DATA / "extra").iterdir()]  # model-level, end-to-end
                 if (folder / "config.json").is_file() or (folder / "checkpoint").is_dir())
CHECKPOINTS = sorted(path.parent for path in DATA.glob("*/checkpoint/config.json"))
DEFAULTS = flatten(dataclasses.asdict(load_config(None)))


def owner(folder: Path) -> str | None:
    """The family a record's or checkpoint's name starts with (the longest such name), if any."""
    name = folder.parent.name if folder.name == "checkpoint" else folder.name
    named = [family for family in FAMILIES if name.startswith(family + "_")]
    return max(named, key=len) if named else None


def shipped_config(family: str) -> Path:
    return ROOT / "config" / f"{family}.yaml"


def test_families_are_found():
    assert {"pi05", "pi0", "smolvla", "groot", "lingbot_va"} <= set(FAMILIES) and "kit" not in FAMILIES


@pytest.mark.parametrize("family", FAMILIES)
def test_family_exposes_the_entry_points(family):
    module = families.family(family)
    for hook in ("load_runtime", "spec_of", "verify_reference", "recognizes_fixture", "run_fixture_parity"):
        assert callable(getattr(module, hook, None)), f"{family} has no {hook}"
    converter = families.converter(family)
    assert callable(converter.detect) and callable(converter.convert)


@pytest.mark.parametrize("family", FAMILIES)
def test_config_names_only_what_differs_and_its_bundle_is_the_familys(family):
    path = shipped_config(family)
    named = flatten(yaml.safe_load(path.read_text()))
    loaded = flatten(dataclasses.asdict(load_config(path)))
    same = sorted(key for key in named if loaded[key] == DEFAULTS[key])
    assert not same, f"{path.name} repeats defaults: {same}"
    assert open_bundle(load_config(path).bundle, verify_digest=False).architecture == family
    assert load_config(family) == load_config(path)  # a shipped config by its name


def test_defaults_file_lists_every_setting_with_its_default():
    listed = flatten(yaml.safe_load((ROOT / "config" / "defaults.yaml").read_text()))
    assert set(listed) == set(DEFAULTS)
    assert load_config(ROOT / "config" / "defaults.yaml") == load_config(None)


@pytest.mark.parametrize("family", FAMILIES)
def test_shipped_bundle_reproduces_its_reference_run(family):
    bundle = open_bundle(load_config(shipped_config(family)).bundle, architecture=family)
    error, tolerance = families.verify_reference(bundle, "numba")
    assert error <= tolerance <= 1e-3, (error, tolerance)


@pytest.mark.parametrize("record", RECORDS, ids=lambda folder: folder.relative_to(DATA).as_posix())
def test_each_record_is_recognized_by_exactly_its_family(record):
    recognizing = [family for family in FAMILIES if families.family(family).recognizes_fixture(record)]
    assert len(recognizing) == 1 and recognizing[0] == (owner(record) or recognizing[0]), recognizing


@pytest.mark.parametrize("folder", RECORDS + CHECKPOINTS, ids=lambda folder: folder.relative_to(DATA).as_posix())
def test_no_other_family_detects_a_checkpoint_of_a_family(folder):
    detecting = [family for family in FAMILIES if families.converter(family).detect(folder)]
    assert set(detecting) <= {owner(folder) or (detecting or [None])[0]} and len(detecting) <= 1, detecting


@pytest.mark.parametrize("family", FAMILIES)
def test_graph_launch_takes_the_family_config_by_name(family):
    [container] = launch_plan(family)
    assert container.arguments == ("--config", str(shipped_config(family).resolve()))


@pytest.mark.parametrize("family", FAMILIES)
def test_up_streams_commands_on_the_shipped_config(tmp_path, family):
    config = load_config(shipped_config(family))
    report_path = tmp_path / "report.json"
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", family, "--duration", "4", "--composed",
               "--domain-id", str(next_domain()), "--report-json", str(report_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["exited"] == {}
    planned_hz = 1 / (config.schedule.step_period_s * config.schedule.action)
    action = report["stages"]["action"]
    assert action["runs"] >= 2 * planned_hz and 0.5 * planned_hz < action["rate_hz"] <= 1.1 * planned_hz, \
        result.stdout[-3000:]
    commands = report["commands"]
    assert commands["commands"] > 50 and 0.5 * config.controller.rate_hz < commands["rate_hz"] \
        < 1.5 * config.controller.rate_hz, result.stdout[-3000:]


WITHOUT_WORLD = [family for family in FAMILIES if not families.family(family).spec_of(
    open_bundle(load_config(shipped_config(family)).bundle)).has_world_model]  # with one: test_graph_lockstep_world


@pytest.mark.parametrize("family", WITHOUT_WORLD)
def test_the_shipped_config_in_lock_step_equals_direct_calls(family):
    """Every stage on every step, driven step by step: each chunk is `infer` on that step's observation
    with the graph's noise."""
    import numpy as np

    from embodied_ros.graph.lockstep import LockstepGraph
    from embodied_ros.pipeline.noise import stage_noise
    from embodied_ros.pipeline.stages import infer, load_runtime
    from embodied_ros.pipeline.types import Observation

    config = load_config(shipped_config(family), {"schedule.perception": 1})
    runtime = load_runtime(config.bundle)
    rng = np.random.default_rng(5)
    height, width = runtime.spec.image_size
    steps = [({camera: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for camera in runtime.spec.camera_names},
              rng.uniform(-0.5, 0.5, len(runtime.spec.state_names)).astype(np.float32)) for _ in range(3)]
    with LockstepGraph(config, runtime=runtime, domain_id=next_domain(), timeout_s=120) as graph:
        outputs = graph.run(steps, "pick up the red block")
    seed = config.stages.seed_for(runtime.spec)
    for output, (images, state) in zip(outputs, steps):
        assert output.chunk is not None, f"step {output.step}: {output.input_problem}"
        direct = infer(runtime, Observation(output.stamp_ns, images, state, "pick up the red block"),
                       stage_noise(seed, "action", output.step, runtime.spec.noise_shape))
        np.testing.assert_allclose(output.chunk.actions, direct.actions, atol=1e-5, rtol=0, err_msg=f"step {output.step}")
