"""One bundle's chunk under two or more revisions of this runtime's code, each run in a process of its
own from a checkout of that revision, the revisions in a new random order each round.

    python benchmarks/revision_pairs.py BUNDLE REV REV [REV ...] [--record DIR] [--case 0] [--rounds 6]
                                        [--runs 2] [--threads 2] [--load BUSY/PERIOD] [--section NAME]

For changes that path_pairs.py cannot switch within one process: a kernel's code or its constants. A
REV is anything `git rev-parse` reads (a commit, a branch, HEAD~1), checked out once into a
temporary folder, or `WORKTREE` for the files as they are now. Each round starts one process per
revision, in a random order; each loads the bundle, runs the case twice untimed (a checkout's first
process compiles its kernels, cached beside its sources as always) and `--runs` times timed. The
first REV is the baseline: each row gives the median over rounds of the baseline's time over that
revision's, per stage and for the chunk (a round's time: the median of its timed runs). Rounds
compare processes a minute or so apart, on a machine whose speed moves by tens of percent within
minutes: take more rounds than path_pairs needs.

`--load 4/12` runs the revisions as the stages run in `embodied-ros up`: beside a process busy 4 ms of
every 12 (a third of a core, what the synthetic robot, the controller and the middleware take
there), with the revisions' processes at the stages' lower priority (compute.stage_nice).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import common
from path_pairs import print_section, ratio_rows

REPO = Path(__file__).resolve().parents[1]
WORKTREE = "WORKTREE"


def child(bundle_path: str, record: str | None, case: int, runs: int) -> None:
    """In the revision's process: the source tree it imports, then one JSON line per timed run, stage -> ms,
    and the action error."""
    import embodied_ros
    from embodied_ros.bundle import open_bundle
    from embodied_ros.bundle.families import family

    print(json.dumps({"source": str(Path(embodied_ros.__file__).resolve().parents[1])}), flush=True)
    bundle = open_bundle(bundle_path)
    chosen = family(bundle.architecture).bench_cases(bundle, record, "numba")[case]
    for _ in range(2):
        chosen.run()
    for _ in range(runs):
        seconds, error = chosen.run()
        print(json.dumps({**{k: 1e3 * v for k, v in seconds.items()}, "error": float(error)}), flush=True)


def checkout(rev: str, folder: Path) -> tuple[Path, str]:
    """(source tree, commit) of `rev`: the repository itself for WORKTREE, else a detached worktree."""
    if rev == WORKTREE:
        return REPO, "worktree"
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    tree = folder / commit[:12]
    if not tree.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)
    return tree, commit[:12]


def run_revision(tree: Path, args) -> list[dict]:
    """The timed runs of one process of the revision checked out at `tree`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[variable] = str(args.threads)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", args.bundle, "--case", str(args.case),
               "--runs", str(args.runs)] + (["--record", str(args.record)] if args.record else [])
    lower = (lambda: os.nice(common.STAGE_NICE)) if args.load else None
    done = subprocess.run(command, env=env, capture_output=True, text=True, preexec_fn=lower)
    if done.returncode != 0:
        raise SystemExit(f"revision_pairs: the run from {tree} failed:\n{done.stderr[-3000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if lines[0]["source"] != str(tree.resolve()):
        raise SystemExit(f"revision_pairs: the run meant for {tree} imported the runtime from {lines[0]['source']}")
    return lines[1:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("revs", nargs="*", help=f"git revisions, or {WORKTREE}; the first is the baseline")
    parser.add_argument("--record", type=Path, help="a record folder of the bundle's family (default: its own)")
    parser.add_argument("--case", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2, help="timed runs per process")
    parser.add_argument("--threads", type=int, default=2)
    common.add_load_argument(parser, "the revisions' processes")
    parser.add_argument("--section", help="write this BENCHMARKS.md section (default: print only)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.bundle, args.record, args.case, args.runs)
        return 0
    if len(args.revs) < 2 or len(set(args.revs)) != len(args.revs):
        parser.error("name two or more different revisions")
    args.bundle = str(Path(args.bundle).resolve())
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="revision_pairs_") as scratch:
        folder = Path(scratch)
        trees = {rev: checkout(rev, folder) for rev in args.revs}
        try:
            with common.load_beside(args.load):
                runs: dict[str, list[dict]] = {rev: [] for rev in args.revs}
                for round_index in range(args.rounds):
                    for rev in random.sample(args.revs, len(args.revs)):
                        timed = run_revision(trees[rev][0], args)
                        round_row = {key: float(np.median([run[key] for run in timed])) for key in timed[0]}
                        round_row["chunk"] = sum(v for k, v in round_row.items() if k != "error")
                        round_row["error"] = max(run["error"] for run in timed)
                        runs[rev].append(round_row)
                    print(f"round {round_index + 1}: " + ", ".join(f"{rev} {runs[rev][-1]['chunk']:.0f} ms"
                                                                 for rev in args.revs), flush=True)
        finally:
            for tree, _ in trees.values():
                if tree != REPO:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                                   capture_output=True)
    rows = ratio_rows(runs, {rev: f"`{rev}` ({trees[rev][1]})" for rev in runs}, "revision")
    print_section(args.section, "\n".join([
        f"`{Path(args.bundle).name}`, {args.record or 'its reference record'}, case {args.case}, {args.threads} "
        f"threads; {args.rounds} rounds, each starting one process per revision in a random order (two untimed "
        f"runs, then the median of {args.runs} timed); ratios are the median over rounds of the baseline's time "
        f"(the first row) over this revision's." + common.load_words(args.load, "the revisions' processes")
        + common.runtime_products_note(), "",
        common.markdown_table(rows)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
