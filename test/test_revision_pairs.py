"""benchmarks/revision_pairs.py: a shipped bundle under two revisions of the code, each in processes of its
own from its own checkout, and its refusal of a single revision."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "revision_pairs.py"


def test_the_worktree_and_a_commit_each_run_the_bundles_reference_case_per_round():
    bundle = ROOT / "bundles" / "pi05_tiny.gguf"
    result = subprocess.run([sys.executable, str(SCRIPT), str(bundle), "WORKTREE", "HEAD", "--rounds", "2",
                             "--runs", "1", "--load", "2/10"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Beside the runs, a process busy 2 ms of every 10 ms; the revisions' processes at nice 5." in result.stdout
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("round ")] == ["round 1", "round 2"]
    header = [cell.strip() for cell in next(line for line in lines if line.startswith("| revision")).split("|")[1:-1]]
    rows = [dict(zip(header, (cell.strip() for cell in line.split("|")[1:-1])))
            for line in lines if line.startswith("| `")]
    assert [row["revision"].split()[0] for row in rows] == ["`WORKTREE`", "`HEAD`"]
    assert float(rows[0]["chunk: baseline / this"]) == 1.0 and float(rows[1]["chunk: baseline / this"]) > 0
    assert rows[1]["rounds this is faster"].endswith("/2")
    for row in rows:  # each side ran the bundle's own reference case
        assert float(row["max abs action error"]) < 1e-4
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    assert "revision_pairs_" not in worktrees  # the checkout is removed afterwards


def test_one_revision_is_refused():
    result = subprocess.run([sys.executable, str(SCRIPT), "x.gguf", "HEAD"], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode != 0 and "name two or more different revisions" in result.stderr
