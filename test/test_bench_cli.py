"""`embodied-ros bench`: stage timings, peak RSS and action error on a bundle's recorded cases."""

import re
from pathlib import Path

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
