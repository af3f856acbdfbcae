"""A human-readable description of a bundle (`embodied-ros bundle inspect`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from embodied_ros.bundle import layout
from embodied_ros.bundle.reader import Bundle

MIB = 1024 * 1024
_TYPE_ORDER = ("f32", "f16", "bf16", "q8_0", "q4_k")


def describe(bundle: Bundle, digest_checked: bool, list_tensors: bool = False) -> str:
    size = bundle.path.stat().st_size
    lines = [
        f"bundle      {bundle.path} ({_size(size)})",
        f"arch        {bundle.architecture} (format {bundle.format_version}, "
        f"written by {bundle.value(layout.KEY_WRITER, 'unknown')})",
        f"digest      {bundle.digest} ({'verified' if digest_checked else 'not checked'})",
        f"quant plan  {bundle.quant_plan or '-'}",
    ]
    if bundle.source:
        lines.append(f"source      {bundle.source}")
    lines += _section("config", bundle.config) + _section("solver", bundle.solver)
    lines.append("robot       " + _robot(bundle))
    lines += _weights(bundle)
    lines.append("stats       " + ("; ".join(f"{quantity}: {', '.join(values)}" for quantity, values
                                            in bundle.stats.items()) or "none"))
    tokenizer = bundle.tokenizer_model
    lines.append("tokenizer   " + (f"{bundle.tokenizer_kind}, {_size(len(tokenizer))}" if tokenizer else "none"))
    lines.append("reference   " + _reference(bundle))
    if list_tensors:
        lines.append("tensors:")
        for name in bundle.tensor_names:
            info = bundle.tensor_info(name)
            lines.append(f"  {name:<56} {info.qtype:<5} {str(list(info.shape)):<18} {info.nbytes / 1024:10.1f} KiB")
    return "\n".join(lines)


def _size(nbytes: int) -> str:
    return f"{nbytes / MIB:.2f} MiB" if nbytes >= MIB else f"{nbytes / 1024:.1f} KiB"


def _section(title: str, values: dict[str, Any]) -> list[str]:
    flat = _flatten(values)
    if not flat:
        return [f"{title:<11} none"]
    return [f"{title}:"] + [f"  {key} = {_short(value)}" for key, value in flat.items()]


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def _short(value: Any, limit: int = 8) -> str:
    if isinstance(value, list) and len(value) > limit:
        return f"[{', '.join(map(repr, value[:limit]))}, ... ({len(value)} items)]"
    return repr(value)


def _robot(bundle: Bundle) -> str:
    robot = bundle.robot
    if robot is None:
        return "none"
    return (f"{len(robot.state_names)} state joints, {len(robot.action_names)} action columns, "
            f"action period {robot.action_period_s:g} s")


def _weights(bundle: Bundle) -> list[str]:
    by_type: Counter[str] = Counter()
    bytes_by_type: Counter[str] = Counter()
    by_group: dict[str, Counter[str]] = defaultdict(Counter)
    for name in bundle.weight_names:
        info = bundle.tensor_info(name)
        by_type[info.qtype] += 1
        bytes_by_type[info.qtype] += info.nbytes
        by_group[bundle.weight_groups[name]][info.qtype] += info.nbytes
    total = sum(bytes_by_type.values())
    types = sorted(by_type, key=lambda t: _TYPE_ORDER.index(t) if t in _TYPE_ORDER else len(_TYPE_ORDER))
    lines = [f"weights     {sum(by_type.values())} tensors, {_size(total)}: "
             + ", ".join(f"{t} {by_type[t]} ({_size(bytes_by_type[t])})" for t in types)]
    lines.append("weight bytes by group:")
    for group in sorted(by_group):
        sizes = by_group[group]
        detail = ", ".join(f"{t} {_size(sizes[t])}" for t in types if sizes[t])
        lines.append(f"  {group:<14} {_size(sum(sizes.values())):>11}  ({detail})")
    return lines


def _reference(bundle: Bundle) -> str:
    record = bundle.reference
    if record is None:
        return "none"
    fields = f", fields: {', '.join(record.fields)}" if record.fields else ""
    return (f"{len(record.inputs)} inputs, {len(record.noise)} noise, {len(record.expected)} expected, "
            f"tolerance {record.tolerance:g}{fields}")
