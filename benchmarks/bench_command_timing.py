"""The controller's command stream while inference runs, for every shipped config, in the default
(composed) layout, in variants side by side: the defaults, and each of the measures that keep the
stream on time undone in turn.

    python benchmarks/bench_command_timing.py [--duration 30] [--configs pi05,pi05_small,smolvla,...]
                                              [--variants default,stages_at_once,stage_nice_0,no_realtime,shared]
                                              [--repeats 15] [--cycles 3]
                                              [--workdir DIR] [--no-write]

Configs: every model family's shipped config/<family>.yaml on its shipped bundle, and pi05_small
(config/pi05.yaml with the test/data/pi05_small record converted to a bundle, with the tiny
checkpoint's tokenizer). Variants: default (the config as
shipped: the controller in a process of its own at SCHED_FIFO 50 where permitted, the stages'
model calls in turn, their threads at compute.stage_nice 5), stages_at_once (compute.stage_turns
false), stage_nice_0 (the stages at the graph's priority), no_realtime
(controller.realtime_priority 0) and shared (controller.own_process false: the controller in the
graph's process). For each config, every variant runs `embodied-ros up --composed` for
--duration seconds (each in a fresh process and ROS domain), one after the other, so they see the
same machine load, and that --cycles times. This process times each stage's call on its own
(median of --repeats chunks, `embodied_ros.pipeline.timing`, the calls `bench_pi05.py` times)
before the first cycle and after each, and gives each run's in-graph compute p50 as a ratio of
the mean of the alone times either side of its cycle: on a shared machine the same call's time
drifts by 20-50% within a minute, so one pair of alone timings around all the runs gave ratios
that moved by 0.3 from one run of the benchmark to the next. A row gives the median of its
cycles' ratios, each cycle's ratio and every alone time. It times the calls alone twice: back to
back (bench_pi05.py's way) and paced, one chunk per step period, as the graph calls them.

Period error is |interval - 20 ms| between consecutive commands: "tick" from the controller's
send stamps, "arrival" from when the monitor of `up` received them (stamped by the middleware).
A row's period errors are the worst of its cycles' (each a --duration run's p99). two_core_budget
judges each run by config/budgets/two-core.yaml, as the latency gate does (`replay/latency.py`):
tick and arrival p99, and each budgeted stage's compute p50 against ratio x its back-to-back time
alone (the mean either side) + the budget's allowance; "3/3" when every run holds, otherwise what
broke it in which run. The last line printed is one JSON object with every number.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from embodied_ros.bundle.families import known_families  # noqa: E402

CONFIGS = {**{family: (f"config/{family}.yaml", None) for family in known_families()},
           "pi05_small": ("config/pi05.yaml", "pi05_small")}
VARIANTS = {"default": {}, "stages_at_once": {"compute.stage_turns": "false"},
            "stage_nice_0": {"compute.stage_nice": "0"}, "no_realtime": {"controller.realtime_priority": "0"},
            "shared": {"controller.own_process": "false"}}
SMALL_RECORD = common.REPO_ROOT / "test" / "data" / "pi05_small"
TOKENIZER = common.REPO_ROOT / "test" / "data" / "pi05_tiny_checkpoint" / "checkpoint" / "tokenizer.model"
SECTION = "command_timing"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds each graph runs after start-up")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--repeats", type=int, default=15, help="chunks timed per stage outside the graph")
    parser.add_argument("--cycles", type=int, default=3, help="runs of each variant, the stages timed alone between")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench_command_timing",
                        help="where the runs' logs and reports go (default: bench_command_timing in the temp folder)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    args.configs = common.chosen(parser, "--configs", args.configs, CONFIGS)
    args.variants = common.chosen(parser, "--variants", args.variants, VARIANTS)
    if args.duration < 5 or args.repeats < 1 or args.cycles < 1:
        parser.error("--duration must be >= 5 s, --repeats and --cycles >= 1")
    return args


def small_bundle(workdir: Path) -> Path:
    """test/data/pi05_small as a bundle that can drive the graph (it needs a tokenizer), made once."""
    path = workdir / "pi05_small.gguf"
    if not path.is_file():
        workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", "bundle", "convert", str(SMALL_RECORD),
                        str(path), "--tokenizer", str(TOKENIZER), "--no-progress"], check=True)
    return path


def run_graph(config_path: Path, bundle: Path | None, overrides: dict[str, str], duration_s: float, domain_id: int,
              workdir: Path) -> dict:
    """One `embodied-ros up --composed` run; its JSON report."""
    report = Path(tempfile.mkstemp(prefix="up_", suffix=".json", dir=workdir)[1])
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", str(config_path), "--composed",
               "--duration", str(duration_s), "--summary-period", "10", "--domain-id", str(domain_id),
               "--report-json", str(report), *(arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}"))]
    if bundle is not None:
        command += ["--bundle", str(bundle)]
    finished = subprocess.run(command, capture_output=True, text=True, cwd=common.REPO_ROOT)
    if finished.returncode != 0 or not report.read_text():
        raise RuntimeError(f"{' '.join(command)} exited with {finished.returncode}:\n{finished.stdout[-3000:]}"
                           f"\n{finished.stderr[-3000:]}")
    return json.loads(report.read_text())


def standalone_stages(config_path: Path, bundle: Path | None, repeats: int) -> dict[str, dict[str, float]]:
    """Each stage's call timed alone: back to back (as bench_pi05.py) and one chunk per step period (as the graph)."""
    from embodied_ros.node_infra.config import load_config
    from embodied_ros.nodes.runtime_cache import acquire_runtime
    from embodied_ros.pipeline.timing import stage_times_ms

    config = load_config(config_path, {"bundle": str(bundle)} if bundle is not None else {})
    runtime = acquire_runtime(config)
    return {"back_to_back": stage_times_ms(runtime, repeats),
            "paced": stage_times_ms(runtime, repeats, period_s=config.schedule.step_period_s)}


def budget_verdict(reports: list[dict], alone: list[dict], budget) -> str:
    """Each run against the budget: "n/n" when all hold, else the checks each failing run broke."""
    broken = []
    for run, (report, before, after) in enumerate(zip(reports, alone, alone[1:]), start=1):
        commands, problems = report["commands"], []
        if commands["tick_period_error_ms_p99"] > budget.command_period_error.p99_ms:
            problems.append(f"tick p99 {commands['tick_period_error_ms_p99']:.2f} ms")
        if budget.arrival_error_p99_ms is not None and \
                commands["arrival_period_error_ms_p99"] > budget.arrival_error_p99_ms:
            problems.append(f"arrival p99 {commands['arrival_period_error_ms_p99']:.2f} ms")
        for stage in budget.stage_ratio:
            in_graph = report["stages"].get(stage, {}).get("compute_ms_p50")
            if stage not in before["back_to_back"] or in_graph is None:
                continue
            bound = budget.stage_bound_ms(stage, (before["back_to_back"][stage] + after["back_to_back"][stage]) / 2)
            if in_graph > bound:
                problems.append(f"{stage} {in_graph:.2f} > {bound:.2f} ms")
        if problems:
            broken.append(f"run {run}: " + ", ".join(problems))
    return f"{len(reports)}/{len(reports)}" if not broken else "; ".join(broken)


def row_of(name: str, variant: str, reports: list[dict], alone: list[dict]) -> dict:
    """One config and variant over its cycles: reports[i] ran between alone[i] and alone[i + 1]."""
    from embodied_ros.replay.latency import load_budget

    commands = [report["commands"] for report in reports]
    row = {"config": name, "variant": variant, "commands": sum(int(c["commands"]) for c in commands),
           "rate_hz": round(float(np.median([c["rate_hz"] for c in commands])), 2)}
    for source in ("tick", "arrival"):
        for q in ("p50", "p99"):
            row[f"{source}_err_{q}_ms"] = round(max(c[f"{source}_period_error_ms_{q}"] for c in commands), 3)
    for stage in alone[0]["back_to_back"]:
        in_graph = [report["stages"].get(stage, {}).get("compute_ms_p50", float("nan")) for report in reports]
        row[f"{stage}_ms"] = round(float(np.median(in_graph)), 2)
        for pacing, label in (("back_to_back", ""), ("paced", "_paced")):
            times = [timing[pacing][stage] for timing in alone]
            ratios = [graph / ((before + after) / 2) for graph, before, after in zip(in_graph, times, times[1:])]
            row[f"{stage}{label}_alone_ms"] = "/".join(f"{t:.2f}" for t in times)
            row[f"{stage}{label}_ratios"] = "/".join(f"{r:.2f}" for r in ratios)
            row[f"{stage}{label}_ratio"] = round(float(np.median(ratios)), 3)
    row["holds"] = sum(sum(report["hold_reasons"].values()) for report in reports)
    row["two_core_budget"] = budget_verdict(reports, alone, load_budget("two-core"))
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    machine = common.machine_description()
    print(f"machine: {common.machine_line(machine)}", flush=True)
    print(f"cpu flags: {common.cpu_features()}", flush=True)
    domain_id = 100 + os.getpid() % 100  # away from other graphs on this machine
    rows = []
    for name in args.configs:
        config_file, bundle_kind = CONFIGS[name]
        config_path = common.REPO_ROOT / config_file
        bundle = small_bundle(args.workdir) if bundle_kind == "pi05_small" else None
        alone = [standalone_stages(config_path, bundle, args.repeats)]
        reports: dict[str, list[dict]] = {variant: [] for variant in args.variants}
        for _ in range(args.cycles):
            for variant in args.variants:
                reports[variant].append(run_graph(config_path, bundle, VARIANTS[variant], args.duration, domain_id,
                                                  args.workdir))
                domain_id += 1
            alone.append(standalone_stages(config_path, bundle, args.repeats))
        for variant, runs in reports.items():
            rows.append(row_of(name, variant, runs, alone))
            print(json.dumps(rows[-1]), flush=True)
    columns = ["config", "variant", "commands", "rate_hz", "tick_err_p50_ms", "tick_err_p99_ms",
               "arrival_err_p50_ms", "arrival_err_p99_ms", "action_ms", "action_alone_ms", "action_ratios",
               "action_ratio", "action_paced_ratios", "action_paced_ratio", "world_ms", "world_alone_ms",
               "world_ratio", "world_paced_ratio", "holds", "two_core_budget"]
    table = common.markdown_table(rows, columns)
    print(table)
    if not args.no_write:
        common.write_section(common.BENCHMARKS_MD, SECTION, table + "\n\n" + NOTE, command=common.command_line(),
                             machine=common.machine_line(machine))
    print(json.dumps({"machine": machine["cpu_model"], "duration_s": args.duration, "cycles": args.cycles,
                      "rows": rows}))
    return 0


NOTE = ("Each config's graph ran --cycles times for --duration seconds, its stages timed alone before the "
        "first run and after each. Period error: |interval - 20 ms| between consecutive commands, from the "
        "controller's send stamps (tick) and from their reception by `up`'s monitor (arrival), over a run after "
        "start-up; a row gives the worst of its runs. action_ms: the action stage's compute p50 inside the graph "
        "(median over the runs); action_alone_ms: the same call timed alone in one thread (median of the repeats), "
        "back to back as bench_pi05.py times it, before the first run and after each; action_ratios: each run's "
        "in-graph time / the mean of the alone times either side of it; action_ratio: their median. "
        "action_paced_ratios: the same against the call timed one chunk per step period "
        "(schedule.step_period_s) with the core idle in between, as the graph runs it: after each pause the "
        "caches (and in a VM the core's clock) are cold, which small models feel most. world_*: the same for "
        "the world stage (world-action models; their episode timed past the runs that fill its KV pool). "
        "two_core_budget: each run against config/budgets/two-core.yaml (tick p99 <= 2 ms, arrival p99 <= 3 ms, "
        "action and world in the graph <= 1.3 x alone + 1 ms), as the latency gate judges it. "
        "Variants: default (the shipped "
        "config: controller.own_process true, controller.realtime_priority 50, compute.stage_turns true, "
        "compute.stage_nice 5); each other variant undoes one of these: stages_at_once (stage_turns false), "
        "stage_nice_0, no_realtime (realtime_priority 0), shared (own_process false). "
        "The machine line gives the load average at the start: on a machine shared with other jobs the "
        "absolute numbers say little, the rows side by side still compare the variants.")


if __name__ == "__main__":
    sys.exit(main())
