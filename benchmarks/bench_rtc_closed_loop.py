"""Real-time chunking in the closed loop: Meta-World episodes through the lock-step node graph with an
added inference delay, in four modes side by side on the same episodes (seeds, goals, goal motion, noise).

    python benchmarks/bench_rtc_closed_loop.py [--bundle bundles/pi05_metaworld.gguf] [--delay 3]
                                               [--goal-speed 0.001] [--episodes 50] [--seed 0]
                                               [--tasks reach-v3 button-press-topdown-v3]
                                               [--workdir DIR] [--no-write]
                                               [--reuse WORKDIR ...]

  sync        no delay: each chunk is executed from the step it was solved on (the reference)
  sync_delay  synchronous execution with the delay, as a robot whose loop waits for the policy: after
              each observation a chunk is solved on, the arm holds for `--delay` env steps while the
              world goes on, then the chunk runs from its first row (sim/metaworld_eval.py,
              blocking_delay); the first chunk lands at once, as in every mode
  async       each chunk lands `--delay` steps after the observation it was solved on
              (schedule.lockstep_action_delay) while the controller runs the executing one; the new
              chunk takes over at the landing, rows by their instants
  async_rtc   the same, each chunk solved with real-time chunking toward what the controller will
              still execute of the executing one (rtc.enabled; the delay it guides with is measured)

config/metaworld.yaml plans every 5 steps with chunks of 10 actions, so a delay of 3 steps is 30%
of the chunk horizon. `--goal-speed` moves the goal (reach's goal point, the button's box) at that
many metres a step (sim/metaworld.py), so that a late reaction costs something. Reported per mode
and task: successes, mean steps to success, the command step at chunk switches (max-abs over the
action's values of a[t] - a[t-1] at each step t where a new chunk takes over; in sync_delay where a
hold starts and where it ends) against the step within chunks, and the jerk (RMS of the command's
second difference: the commands are end-effector velocities). Time is simulated, so nothing depends
on this machine's speed; one process per task and mode (Meta-World wants one environment per
process), one at a time. `--reuse` reports on the episodes earlier runs left in their workdirs
(runs on other seeds, pooled) instead of running any.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

CONFIG = common.REPO_ROOT / "config" / "metaworld.yaml"
SECTION = "rtc_closed_loop"


def modes(delay: int) -> dict[str, tuple[dict, int]]:
    """{mode: (graph config overrides, blocking delay in env steps)}."""
    return {"sync": ({}, 0),
            "sync_delay": ({}, delay),
            "async": ({"schedule.lockstep_action_delay": delay}, 0),
            "async_rtc": ({"schedule.lockstep_action_delay": delay, "rtc.enabled": True, "rtc.delay": "measured"}, 0)}


def landing_steps(steps: int, plan_every: int, delay: int) -> list[int]:
    """Steps at which a new chunk takes over in the graph: the first at 0, then each plan's step + the delay."""
    return [k + delay for k in range(plan_every, steps, plan_every) if k + delay < steps]


def switch_set(record: dict, plan_every: int, graph_delay: int) -> set[int]:
    """The steps t at which the command's source changes: a chunk landing, or a hold starting or ending."""
    held = set(record.get("held_steps", ()))
    if held:
        return {t for t in range(1, record["steps"]) if (t in held) != (t - 1 in held)}
    return set(landing_steps(record["steps"], plan_every, graph_delay))


def boundary_metrics(records: list[dict], plan_every: int, graph_delay: int) -> dict[str, float | None]:
    at_switch, within, jerks = [], [], []
    for record in records:
        actions = np.asarray(record["actions"], dtype=np.float64)
        if len(actions) < 3:
            continue
        steps = np.max(np.abs(np.diff(actions, axis=0)), axis=1)  # steps[t - 1] = |a[t] - a[t-1]|
        switches = switch_set(record, plan_every, graph_delay)
        for t in range(1, len(actions)):
            (at_switch if t in switches else within).append(float(steps[t - 1]))
        jerks.append(float(np.sqrt(np.mean(np.diff(actions, n=2, axis=0) ** 2))))

    def stat(values, function):
        return round(float(function(values)), 4) if values else None

    return {"switch_step_mean": stat(at_switch, np.mean),
            "switch_step_p95": stat(at_switch, lambda v: np.percentile(v, 95)),
            "switch_step_max": stat(at_switch, np.max), "within_step_mean": stat(within, np.mean),
            "jerk_rms": stat(jerks, np.mean)}


def run_mode(name: str, overrides: dict, blocking_delay: int, args, domain_id: int) -> dict[str, list[dict]]:
    """Every task's episodes in this mode, one task at a time; {task: records}."""
    seeds = [str(s) for s in range(args.seed, args.seed + args.episodes)]
    results = {}
    for task in args.tasks:
        out = args.workdir / f"{name}-{task}.json"
        with open(args.workdir / f"{name}-{task}.log", "w") as log:
            command = [sys.executable, "-m", "embodied_ros.sim.metaworld_eval", "--config", str(CONFIG),
                       "--overrides", json.dumps({"bundle": str(args.bundle), **overrides}), "--task", task,
                       "--seeds", *seeds, "--max-steps", str(args.max_steps), "--domain-id", str(domain_id),
                       "--goal-speed", str(args.goal_speed), "--blocking-delay", str(blocking_delay),
                       "--json", str(out)]
            if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=common.REPO_ROOT).returncode != 0:
                raise RuntimeError(f"{name} {task}: failed; see {log.name}")
        results[task] = json.loads(out.read_text())
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=common.REPO_ROOT / "bundles" / "pi05_metaworld.gguf")
    parser.add_argument("--delay", type=int, default=3, help="added inference delay, steps (default 3)")
    parser.add_argument("--tasks", nargs="+", default=["reach-v3", "button-press-topdown-v3"])
    parser.add_argument("--goal-speed", type=float, default=0.001,
                        help="moving goal, metres per env step (default 0.001; 0: the goal stands still)")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0, help="first episode seed")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--modes", nargs="+", choices=list(modes(0)), default=list(modes(0)))
    common.add_workdir_argument(parser, "bench_rtc_closed_loop", "where the episodes and their logs are written")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    parser.add_argument("--reuse", type=Path, nargs="+", default=[],
                        help="pool the episodes these earlier runs' workdirs hold instead of running new ones")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    from embodied_ros.node_infra.config import load_config

    plan_every = load_config(CONFIG).schedule.period_of("action")
    machine = common.machine_description()
    print(f"machine: {common.machine_line(machine)}", flush=True)
    rows = []
    for index, (name, (overrides, blocking_delay)) in enumerate(modes(args.delay).items()):
        if name not in args.modes:
            continue
        if args.reuse:
            results = {task: [record for folder in args.reuse
                              for record in json.loads((folder / f"{name}-{task}.json").read_text())]
                       for task in args.tasks}
        else:
            results = run_mode(name, overrides, blocking_delay, args, 120 + index)
        graph_delay = overrides.get("schedule.lockstep_action_delay", 0)
        for task, records in results.items():
            won = [r for r in records if r["success"]]
            rows.append({"mode": name, "delay_steps": max(graph_delay, blocking_delay), "task": task,
                         "successes": f"{len(won)}/{len(records)}",
                         "success_rate": round(len(won) / len(records), 3),
                         "steps_to_success": round(float(np.mean([r["steps"] for r in won])), 1) if won else None,
                         **boundary_metrics(records, plan_every, graph_delay)})
            print(json.dumps(rows[-1]), flush=True)
    table = common.markdown_table(rows)
    print(table)
    if not args.no_write:
        seeds = sorted({record["seed"] for record in records})
        note = (f"Seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} per task), the same goals, goal motion "
                f"({args.goal_speed} m a step) and flow noise in every mode; {args.max_steps}-step cap (held steps "
                f"count); plan every {plan_every} steps, chunks of 10 actions. switch_step: max-abs change of the "
                "command at the steps where a new chunk takes over (sync_delay: where a hold starts or ends); "
                "within_step: the same between other consecutive steps; jerk_rms: RMS of the command's second "
                "difference, per episode, averaged.")
        common.write_section(common.BENCHMARKS_MD, SECTION, table + "\n\n" + note, command=common.command_line(),
                             machine=common.machine_line(machine))
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
