"""`bundle convert --set/--tokenizer`: what a LeRobot save does not carry can be given on the command line."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_ros.bundle import open_bundle

CHECKPOINT = Path(__file__).parent / "data" / "pi05_tiny_checkpoint" / "checkpoint"


def convert(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", "bundle", "convert", "--no-progress", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def bare_save(tmp_path) -> Path:
    """The tiny checkpoint as LeRobot saves it: no tokenizer file, no cases.json with head counts."""
    folder = tmp_path / "save"
    shutil.copytree(CHECKPOINT, folder)
    (folder / "tokenizer.model").unlink()
    return folder


def test_settings_fill_what_the_save_lacks(bare_save, tmp_path):
    output = tmp_path / "policy.gguf"
    names = "[" + ",".join(f"joint{i}" for i in range(8)) + "]"
    result = convert(str(bare_save), str(output), "--set", "vision.num_heads=4", "--set", f"state_names={names}",
                     "--set", "action_period_s=0.05", "--tokenizer", str(CHECKPOINT / "tokenizer.model"))
    assert result.returncode == 0, result.stderr
    bundle = open_bundle(output)
    assert bundle.config["vision"]["num_heads"] == 4
    assert list(bundle.robot.state_names) == [f"joint{i}" for i in range(8)]
    assert bundle.robot.action_period_s == 0.05
    assert bundle.tokenizer_model == (CHECKPOINT / "tokenizer.model").read_bytes()


def test_missing_head_count_names_the_setting(bare_save, tmp_path):
    result = convert(str(bare_save), str(tmp_path / "x.gguf"))
    assert result.returncode == 1
    assert "vision.num_heads" in result.stderr and not (tmp_path / "x.gguf").exists()


@pytest.mark.parametrize("args,message", [
    (["--set", "vision.numheads=4"], "unknown pi0.5 conversion setting(s) ['vision.numheads']"),
    (["--set", "vision.num_heads"], "--set expects KEY=VALUE"),
    (["--set", "vision.num_heads=4", "--tokenizer", "/nonexistent/tokenizer.model"], "does not exist"),
])
def test_bad_settings_are_refused(bare_save, tmp_path, args, message):
    result = convert(str(bare_save), str(tmp_path / "x.gguf"), *args)
    assert result.returncode == 1
    assert message in result.stderr


def test_sources_without_settings_refuse_them(tmp_path):
    block = Path(__file__).parent / "data" / "wan_block_tiny"  # lingbot_va takes settings for LeRobot checkpoints only
    result = convert(str(block), str(tmp_path / "w.gguf"), "--set", "a=1")
    assert result.returncode == 1 and "--set settings apply to lerobot lingbot_va checkpoints only" in result.stderr
    assert not (tmp_path / "w.gguf").exists()


@pytest.mark.parametrize("record", ["pi05_tiny", "pi0_tiny", "smolvla_tiny"])
def test_a_reference_record_takes_the_robot_settings_and_refuses_dimensions(tmp_path, record):
    folder = Path(__file__).parent / "data" / record
    out = tmp_path / "r.gguf"
    result = convert(str(folder), str(out), "--set", "action_period_s=0.1")
    assert result.returncode == 0, result.stderr
    assert open_bundle(out).robot.action_period_s == pytest.approx(0.1)
    result = convert(str(folder), str(tmp_path / "x.gguf"), "--set", "lm.num_heads=3")
    assert result.returncode == 1 and "applies to LeRobot saves only" in result.stderr
    assert result.stderr.count("\n") == 1
