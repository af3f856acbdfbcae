"""`embodied-ros record-synthetic` and `embodied-ros replay` as a user runs them."""

import os

from embodied_ros.cli.main import main


def test_record_synthetic_writes_a_bag_and_never_overwrites(tmp_path, capsys):
    out = tmp_path / "episode"
    assert main(["record-synthetic", str(out), "--duration", "0.5", "--storage", "sqlite3",
                 "--cameras", "front:24x32", "--commands", "array"]) == 0
    printed = capsys.readouterr().out
    assert "/camera/front/image_raw" in printed and "/forward_position_controller/commands" in printed
    assert any(p.suffix == ".db3" for p in out.iterdir())
    assert main(["record-synthetic", str(out)]) == 2
    assert "exists" in capsys.readouterr().err


def test_record_synthetic_rejects_bad_settings(tmp_path, capsys):
    assert main(["record-synthetic", str(tmp_path / "a"), "--duration", "-1"]) == 2
    assert "duration_s must be in (0, 3600]" in capsys.readouterr().err
    assert main(["record-synthetic", str(tmp_path / "b"), "--topic-map", "joints=/x"]) == 2
    assert "unknown key 'joints'" in capsys.readouterr().err


def test_replay_reports_a_missing_or_damaged_bag_before_loading_any_model(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nothing"), "--no-progress"]) == 2
    assert "no such bag" in capsys.readouterr().err
    bag = tmp_path / "bag"
    assert main(["record-synthetic", str(bag), "--duration", "0.5", "--cameras", "front:16x16"]) == 0
    (data,) = bag.glob("*.mcap")
    os.truncate(data, data.stat().st_size // 3)
    before = data.read_bytes()
    assert main(["replay", str(bag), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "damaged, truncated or still being recorded" in capsys.readouterr().err
    assert data.read_bytes() == before
    assert not (tmp_path / "out").exists()


def test_replay_rejects_bad_options(tmp_path, capsys):
    bag = tmp_path / "bag"
    assert main(["record-synthetic", str(bag), "--duration", "0.3", "--cameras", "front:16x16"]) == 0
    capsys.readouterr()
    assert main(["replay", str(bag), "--set", "schedule.step_period_s", "--no-progress"]) == 2
    assert "--set needs KEY=VALUE" in capsys.readouterr().err
    assert main(["replay", str(bag), "--set", "schedule.nonsense=1", "--no-progress"]) == 2
    assert "unknown config key" in capsys.readouterr().err
