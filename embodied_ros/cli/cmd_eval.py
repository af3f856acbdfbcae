"""`embodied-ros eval metaworld [--bundle B] [--tasks T ...] [--episodes N] [--seed S] [--out DIR]`.

Runs episodes of Meta-World tasks through the lock-step node graph (config/metaworld.yaml unless
--config), one process per task, in parallel, each in its own DDS domain (ROS_DOMAIN_ID, +1, ...);
seeds S .. S+N-1 for every task; writes DIR/index.html (success table, returns, actions, frames) and
DIR/records.json; prints each task's success, then last
`success_rate=<v>` over all episodes. With --reference DIR2 (records.json of the PyTorch reference run,
tools/metaworld_eval_torch.py) it also prints the largest first-chunk action difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "closed-loop evaluation in a simulator (metaworld): per-task success through the node graph"
DEFAULT_TASKS = ("reach-v3", "button-press-topdown-v3")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", choices=("metaworld",), help="the simulator suite")
    parser.add_argument("--bundle", help="model bundle (default: the config's)")
    parser.add_argument("--config", help="graph config (default: config/metaworld.yaml)")
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="Meta-World task names")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per task (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="first episode seed (default 0)")
    parser.add_argument("--max-steps", type=int, default=200, help="step limit of an episode (default 200)")
    parser.add_argument("--out", type=Path, default=Path("metaworld_eval"), help="report folder")
    parser.add_argument("--reference", type=Path, help="a reference run's report folder to compare with")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")


def run(args) -> int:
    import json
    import os
    import subprocess
    import tempfile

    import yaml

    from embodied_ros.share import child_environment, module_command, share_path
    from embodied_ros.sim.metaworld import missing_simulator
    from embodied_ros.sim.metaworld_eval import compare_first_chunks, success_rate, write_report

    reason = missing_simulator()
    if reason:
        print(f"eval metaworld: {reason}", file=sys.stderr)
        return 2
    if args.episodes < 1 or args.max_steps < 1:
        print("eval metaworld: --episodes and --max-steps must be at least 1", file=sys.stderr)
        return 2
    config = args.config or str(share_path("config", "metaworld.yaml"))
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"eval metaworld: --set needs KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        overrides[key] = yaml.safe_load(value)
    if args.bundle:
        if not Path(args.bundle).is_file():
            print(f"eval metaworld: bundle {args.bundle} does not exist", file=sys.stderr)
            return 2
        overrides["bundle"] = str(Path(args.bundle).resolve())
    seeds = [str(args.seed + e) for e in range(args.episodes)]
    records = []
    base_domain = int(os.environ.get("ROS_DOMAIN_ID") or 0)
    with tempfile.TemporaryDirectory() as scratch:
        runs = []
        for index, task in enumerate(args.tasks):  # the tasks in parallel, each in its own DDS domain
            result = Path(scratch) / f"{task}.json"
            command = module_command("embodied_ros.sim.metaworld_eval", "--config", config,
                                     "--overrides", json.dumps(overrides), "--task", task, "--seeds", *seeds,
                                     "--max-steps", str(args.max_steps), "--json", str(result),
                                     "--domain-id", str((base_domain + index) % 232))
            runs.append((task, result, subprocess.Popen(command, env=child_environment(os.environ))))
        failed = [task for task, result, process in runs if process.wait() != 0 or not result.is_file()]
        if failed:
            print(f"eval metaworld: the episodes of {', '.join(failed)} failed (see above)", file=sys.stderr)
            return 1
        for task, result, _ in runs:
            mine = json.loads(result.read_text())
            records += mine
            print(f"{task}: {sum(r['success'] for r in mine)}/{len(mine)} successes", flush=True)
    notes = [f"bundle {overrides.get('bundle', 'of ' + config)}, seeds {args.seed}..{args.seed + args.episodes - 1}, "
             f"at most {args.max_steps} steps an episode, through the lock-step node graph"]
    if args.reference:
        reference = json.loads((args.reference / "records.json").read_text())
        gap = compare_first_chunks(records, reference)
        notes.append(f"largest first-chunk action difference to {args.reference}: {gap:.3g}")
        print(f"first_chunk_max_abs_diff={gap:.3g}")
    page = write_report(args.out, records, "Meta-World closed loop", notes)
    print(f"report: {page}")
    print(f"success_rate={success_rate(records):.4f}")
    return 0
