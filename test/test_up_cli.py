"""`embodied-ros up` as users run it (a subprocess through the CLI) on the pi0.5 bundle: it runs for
the given time and reports stage rates, latencies and the 50 Hz command stream's period error."""

import json
import os
import subprocess
import sys

import pytest

from domains import next_domain
from graph_bundles import ROOT, pi05_bundle


@pytest.mark.parametrize("layout", ["composed", "separate"])
def test_up_runs_and_reports(tmp_path_factory, tmp_path, layout):
    bundle = pi05_bundle(tmp_path_factory)
    report_path = tmp_path / "report.json"
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", "--bundle", str(bundle), "--duration", "4",
               f"--{layout}", "--domain-id", str(next_domain()), "--report-json", str(report_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| cmd " in result.stdout  # the live summary
    assert "period error p50/p99" in result.stdout
    report = json.loads(report_path.read_text())
    assert report["layout"] == layout and report["exited"] == {}
    assert 0 < report["first_chunk_s"] < 60  # measured from starting the graph, which takes time in both layouts
    for stage in ("observation", "perception", "prefix", "action"):
        row = report["stages"][stage]
        assert row["runs"] > 0 and row["rate_hz"] > 0 and row["compute_ms_p50"] >= 0
    assert report["stages"]["observation"]["runs"] <= 4 * 10 + 3  # the 4 s run at 10 Hz, not the start-up
    commands = report["commands"]
    assert commands["commands"] > 50 and 25 < commands["rate_hz"] < 75
    assert 0 <= commands["tick_period_error_ms_p50"] <= commands["tick_period_error_ms_p99"]


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_stops_up_cleanly_with_its_report_even_started_with_sigint_ignored(tmp_path_factory, tmp_path, presses):
    """SIGINT ignored as a shell gives its background jobs: `kill -INT` must still stop `up`."""
    import signal
    import time

    bundle = pi05_bundle(tmp_path_factory)
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", "--bundle", str(bundle), "--duration", "0",
               "--domain-id", str(next_domain())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path,
                               env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 120
        lines = []
        while not any("| cmd " in line for line in lines) and time.monotonic() < deadline and process.poll() is None:
            lines.append(process.stdout.readline())  # runs until the first live summary line
        for press in range(presses):  # an impatient second press lands in the teardown
            time.sleep(0.02 * press)
            process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0
    assert "period error p50/p99" in out


@pytest.mark.parametrize("damage", ["not_a_bundle", "truncated", "missing"])
def test_up_refuses_a_bad_bundle_in_one_line(tmp_path_factory, tmp_path, damage):
    bundle = tmp_path / "bad.gguf"
    if damage == "not_a_bundle":
        bundle.write_text("model: pi05\n")
    elif damage == "truncated":
        bundle.write_bytes(pi05_bundle(tmp_path_factory).read_bytes()[:50_000])
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", "--bundle", str(bundle), "--duration", "1",
               "--domain-id", str(next_domain())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"embodied-ros up: {bundle}")
