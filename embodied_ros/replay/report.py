"""The replay report: `metrics.json` and a self-contained `report.html` with the plots as embedded PNGs.

Plots: per-joint predicted vs recorded actions, error by chunk offset, per-stage latency
distributions, staleness over time, and the command period when commands were streamed.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from embodied_ros.replay.episode import JointSeries
from embodied_ros.replay.metrics import PredictedChunk

SCHEMA = "embodied_ros.replay/1"


@dataclass(frozen=True)
class ReportSeries:
    """The time series behind the plots (the metrics summarize them)."""

    start_ns: int  # time origin of the plots
    joint_names: tuple[str, ...]
    chunks: Sequence[PredictedChunk] = ()
    reference: JointSeries | None = None  # recorded commands
    commands: JointSeries | None = None  # commands the controller produced during replay
    stage_ms: Mapping[str, Sequence[float]] = field(default_factory=dict)  # stage -> compute times
    end_to_end_ms: Sequence[float] = ()  # realtime: input published -> chunk received
    step_wall_ms: Sequence[float] = ()  # lock-step: wall time of each whole step
    staleness: tuple[Sequence[int], Sequence[float]] = ((), ())  # (output stamps ns, staleness ms)
    stale_after_ms: float | None = None


def write_report(out_dir: str | Path, metrics: Mapping, series: ReportSeries) -> tuple[Path, Path]:
    """Write metrics.json and report.html into `out_dir`; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    document = {"schema": SCHEMA, **metrics}
    json_path = out / "metrics.json"
    json_path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
    html_path = out / "report.html"
    html_path.write_text(render_html(document, series))
    return json_path, html_path


def render_html(metrics: Mapping, series: ReportSeries) -> str:
    figures = [
        ("Predicted vs recorded actions", _plot_actions(series)),
        ("Error by chunk offset", _plot_offsets(metrics.get("actions", {}))),
        ("Latency per stage", _plot_latency(series)),
        ("Staleness over time", _plot_staleness(series)),
        ("Command period" + (" (lock-step: the controller's ticks on the step clock)"
                             if metrics.get("run", {}).get("mode") == "lockstep" else ""),
         _plot_command_period(series)),
    ]
    parts = [f"<h1>Replay report: {html.escape(str(metrics.get('bag', {}).get('path', '')))}</h1>",
             _notes_html(metrics), _summary_html(metrics)]
    for title, png in figures:
        if png is not None:
            parts.append(f"<h2>{html.escape(title)}</h2>\n<img alt=\"{html.escape(title)}\" "
                         f"src=\"data:image/png;base64,{png}\">")
    parts.append("<h2>metrics.json</h2>\n<pre>" + html.escape(json.dumps(metrics, indent=2)) + "</pre>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #bbb;padding:2px 8px;text-align:right}img{max-width:100%}"
             ".note{background:#fff3cd;padding:4px 8px}")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>embodied_ros replay report</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def _notes_html(metrics: Mapping) -> str:
    notes = metrics.get("bag", {}).get("notes", [])
    if not notes:
        return ""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"<div class=\"note\"><b>Partial result:</b><ul>{items}</ul></div>"


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _summary_html(metrics: Mapping) -> str:
    run = metrics.get("run", {})
    parts = [_table(["mode", "steps", "chunks", "wall s"],
                    [[run.get("mode"), run.get("steps"), run.get("chunks"), run.get("wall_s")]])]
    latency = metrics.get("latency", {})
    dists = {"end to end": latency.get("end_to_end_ms"), "whole step (wall)": latency.get("step_wall_ms"),
             **latency.get("stages_ms", {}), "staleness (input age)": metrics.get("staleness")}
    rows = [[name, d.get("count"), d.get("p50"), d.get("p95"), d.get("p99"), d.get("max")]
            for name, d in dists.items() if d and d.get("count")]
    parts.append("<h2>Latency (ms)</h2>" + _table(["", "n", "p50", "p95", "p99", "max"], rows))
    actions = metrics.get("actions", {})
    if actions.get("available"):
        rows = [[name, e["mse"], e["max_abs"]] for name, e in actions["per_joint"].items()]
        parts.append(f"<h2>Action error vs {html.escape(str(actions['reference']))} "
                     f"(MSE {actions['mse']:.4g}, {actions['compared_rows']} rows)</h2>"
                     + _table(["joint", "MSE", "max |error|"], rows))
    elif actions:
        parts.append(f"<p>No action error: {html.escape(str(actions.get('reason')))}</p>")
    frames = metrics.get("frames", {})
    if frames:
        parts.append("<h2>Frames</h2>" + _table(["camera", "recorded", "used", "not encoded (dropped)"],
                                                [[c, f["recorded"], f["used"], f["dropped"]] for c, f in frames.items()]))
    return "\n".join(parts)


def _png(figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never opens a window
    import matplotlib.pyplot as plt

    return plt


def _seconds(stamps_ns, start_ns: int) -> np.ndarray:
    return (np.asarray(stamps_ns, dtype=np.float64) - start_ns) / 1e9


def _plot_actions(series: ReportSeries) -> str | None:
    if not series.chunks or not series.joint_names:
        return None
    plt = _pyplot()
    n = len(series.joint_names)
    cols = min(n, 3)
    rows = -(-n // cols)
    figure, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.4 * rows), squeeze=False, sharex=True)
    for j, name in enumerate(series.joint_names):
        ax = axes[j // cols][j % cols]
        for k, chunk in enumerate(series.chunks):
            times = chunk.observation_ns + (np.arange(chunk.actions.shape[0]) + 1) * chunk.action_period_s * 1e9
            ax.plot(_seconds(times, series.start_ns), chunk.actions[:, j], color="tab:blue", alpha=0.35, lw=0.8,
                    label="predicted chunks" if k == 0 else None)
        for source, style in ((series.commands, dict(color="tab:orange", lw=0.8, alpha=0.8, label="streamed")),
                              (series.reference, dict(color="black", lw=1.4, label="recorded"))):
            column = _column(source, name, j, n)
            if column is not None:
                ax.plot(_seconds(source.stamps_ns, series.start_ns), source.positions[:, column], **style)
        ax.set_title(name, fontsize=9)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].legend(fontsize=7)
    figure.supxlabel("time since bag start (s)", fontsize=9)
    return _png(figure)


def _column(source: JointSeries | None, name: str, j: int, n: int) -> int | None:
    if source is None:
        return None
    if source.names:
        return source.names.index(name) if name in source.names else None
    return j if source.positions.shape[1] == n else None


def _plot_offsets(actions: Mapping) -> str | None:
    if not actions.get("available"):
        return None
    plt = _pyplot()
    mse = [np.nan if v is None else v for v in actions["per_offset"]["mse"]]
    worst = [np.nan if v is None else v for v in actions["per_offset"]["max_abs"]]
    figure, ax = plt.subplots(figsize=(7, 2.8))
    offsets = np.arange(1, len(mse) + 1)
    ax.plot(offsets, mse, marker="o", label="MSE")
    ax.plot(offsets, worst, marker="s", label="max |error|")
    ax.set_xlabel("chunk row (actions after the observation)")
    ax.legend(fontsize=8)
    return _png(figure)


def _plot_latency(series: ReportSeries) -> str | None:
    samples = {name: np.asarray(v, float) for name, v in series.stage_ms.items() if len(v)}
    for label, values in (("end to end", series.end_to_end_ms), ("whole step (wall)", series.step_wall_ms)):
        if len(values):
            samples[label] = np.asarray(values, float)
    if not samples:
        return None
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(7, 0.6 + 0.5 * len(samples)))
    ax.boxplot(list(samples.values()), orientation="horizontal", tick_labels=list(samples), whis=(1, 99))
    ax.set_xlabel("ms (whiskers: p1-p99)")
    return _png(figure)


def _plot_staleness(series: ReportSeries) -> str | None:
    stamps, staleness = series.staleness
    if not len(stamps):
        return None
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(7, 2.8))
    ax.plot(_seconds(stamps, series.start_ns), staleness, marker=".", lw=0.8)
    if series.stale_after_ms is not None:
        ax.axhline(series.stale_after_ms, color="tab:red", ls="--", label="stale limit")
        ax.legend(fontsize=8)
    ax.set_xlabel("time since bag start (s)")
    ax.set_ylabel("observation age (ms)")
    return _png(figure)


def _plot_command_period(series: ReportSeries) -> str | None:
    if series.commands is None or len(series.commands.stamps_ns) < 3:
        return None
    plt = _pyplot()
    stamps = series.commands.stamps_ns
    figure, ax = plt.subplots(figsize=(7, 2.4))
    ax.plot(_seconds(stamps[1:], series.start_ns), np.diff(stamps) / 1e6, lw=0.8)
    ax.set_xlabel("time since bag start (s)")
    ax.set_ylabel("period (ms)")
    return _png(figure)
