"""`embodied-ros bench`: stage timings, peak RSS and action error on a bundle's recorded cases."""

import re
from pathlib import Path

import pytest

from embodied_ros.cli.main import main

REPO = Path(__file__).resolve().parents[1]


def test_bench_reports_chunk_time_error_and_peak_rss(capsys):
    assert main(["bench", str(REPO / "bundles" / "pi05_tiny.gguf"), "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["perception", "prefix", "action"]
    cases = [re.fullmatch(r"(\w+): chunk median ([\d.]+) ms, max abs error (\S+)", line) for line in lines[3:-2]]
    assert cases and all(cases), lines[3:-2]
    assert all(float(case[2]) > 0 and float(case[3]) < 1e-4 for case in cases)
    last = re.fullmatch(r"chunk_ms=([\d.]+) max_abs_err=(\S+) peak_rss_mb=(\d+)", lines[-1])
    assert last, lines[-1]
    assert float(last[1]) > 0 and float(last[2]) < 1e-4 and int(last[3]) > 50


def test_bench_refuses_a_missing_record_in_one_line(capsys, tmp_path):
    code = main(["bench", str(REPO / "bundles" / "pi05_tiny.gguf"), "--record", str(tmp_path)])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and "not a pi0.5 record" in error


def _bundle(tmp_path, record: str, reference: bool = True) -> Path:
    """A tiny record's checkpoint converted with the record as its reference (LingBot-VA records its own)."""
    folder = REPO / "test" / "data" / record
    source = folder / "checkpoint" if (folder / "checkpoint").is_dir() else folder
    out = tmp_path / f"{record}.gguf"
    args = ["bundle", "convert", str(source), str(out), "--no-progress"] + (["--reference", str(folder)] if reference
                                                                           else [])
    assert main(args) == 0
    return out


def _last_line(out: str) -> tuple[float, float]:
    last = re.fullmatch(r"chunk_ms=([\d.]+) max_abs_err=(\S+) peak_rss_mb=(\d+)", out.strip().splitlines()[-1])
    assert last, out
    return float(last[1]), float(last[2])


@pytest.mark.parametrize("record, stages", [("pi0_tiny", ["perception", "prefix", "action"]),
                                            ("smolvla_tiny", ["perception", "prefix", "action"]),
                                            ("groot_tiny", ["prefix", "action"]),
                                            ("groot_pipeline_tiny", ["perception", "prefix", "action"]),
                                            ("pi0_fast_tiny", ["perception", "prefix", "action"]),
                                            ("bitvla_tiny", ["chunk"])])
def test_bench_runs_a_bundle_of_every_family_on_its_reference_record(capsys, tmp_path, record, stages):
    bundle = _bundle(tmp_path, record)
    capsys.readouterr()
    assert main(["bench", str(bundle), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines()[:len(stages)]] == stages
    chunk_ms, error = _last_line(out)
    assert chunk_ms > 0 and error < 1e-4


def test_bench_of_a_world_action_model_counts_the_chunks_of_its_episode(capsys, tmp_path):
    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.lingbot_va.lerobot_bundle import load_policy, run_episode

    bundle = _bundle(tmp_path, "lingbot_va_tiny", reference=False)
    capsys.readouterr()
    assert main(["bench", str(bundle), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    case = re.search(r"episode: chunk median ([\d.]+) ms \((\d+) chunks a run\)", out)
    assert case, out
    opened = open_bundle(bundle)
    policy = load_policy(opened, "numba")
    frames = {name[len("frames."):]: value for name, value in opened.reference.inputs.items()}
    run_episode(policy, frames, opened.reference.fields["task"])
    assert int(case[2]) == policy.episode.index and _last_line(out)[1] < 1e-4


def test_bench_reads_record_folders_of_flow_families_and_groot(capsys, tmp_path):
    for record in ("pi0_tiny", "groot_pipeline_tiny"):
        bundle = _bundle(tmp_path, record, reference=False)
        capsys.readouterr()
        assert main(["bench", str(bundle), "--record", str(REPO / "test" / "data" / record), "--repeats", "1"]) == 0
        assert _last_line(capsys.readouterr().out)[1] < 1e-4


def test_bench_of_a_family_without_record_folders_refuses_one_in_one_line(capsys, tmp_path):
    bundle = _bundle(tmp_path, "bitvla_tiny")
    capsys.readouterr()
    assert main(["bench", str(bundle), "--record", str(REPO / "test" / "data" / "bitvla_tiny")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "own reference record" in error
