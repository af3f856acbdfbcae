"""benchmarks/path_pairs.py: two sides of a shipped bundle, run by run, and its refusal of an unknown setting."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "path_pairs.py"


def test_two_sides_each_run_the_bundles_reference_case_and_are_compared_per_round():
    bundle = ROOT / "bundles" / "pi05_tiny.gguf"
    result = subprocess.run([sys.executable, str(SCRIPT), str(bundle), f"{bundle}@share_rows=1", "--rounds", "3",
                             "--load", "2/10"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Beside the runs, a process busy 2 ms of every 10 ms; this one at nice 5." in result.stdout
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith("| `pi05_tiny.gguf")]
    assert [row[0].strip() for row in rows] == ["`pi05_tiny.gguf`", "`pi05_tiny.gguf@share_rows=1`"]
    header = [cell.strip() for cell in next(line for line in result.stdout.splitlines()
                                            if line.startswith("| side")).split("|")[1:-1]]
    baseline, other = ({name: cell.strip() for name, cell in zip(header, row)} for row in rows)
    assert float(baseline["chunk: baseline / this"]) == 1.0 and float(other["chunk: baseline / this"]) > 0
    assert other["rounds this is faster"].endswith("/3")
    for row in (baseline, other):  # the bundle's own reference case, through the same kernels either way
        assert float(row["max abs action error"]) < 1e-4


def test_a_load_busier_than_its_period_is_refused():
    result = subprocess.run([sys.executable, str(SCRIPT), "x.gguf", "--load", "12/4"], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2 and "--load: expected BUSY/PERIOD in ms with 0 < BUSY < PERIOD" in result.stderr


def test_an_unknown_setting_is_refused_by_name():
    result = subprocess.run([sys.executable, str(SCRIPT), "x.gguf@speed=2"], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode != 0 and "'speed=2': settings are share_rows=N, shares_per_thread=N" in result.stderr
