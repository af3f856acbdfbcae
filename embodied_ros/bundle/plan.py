"""Quantization plans: which stored type each weight gets.

Text form: comma-separated `group=type` pairs, e.g. "vision=f32,lm=q8_0,expert=q4_k"; `default=type`
(or a bare type, "q4_k") covers the groups not named; without a default they stay f32. Types: f32,
f16, bf16, q8_0, q4_k. A weight's group is given by the family's converter (by default the weight
name up to its first dot, see layout.group_of).

Rules, in order:
1. tensors with fewer than 2 dimensions (norm weights, biases, scalars) are always f32;
2. otherwise the plan's type for the tensor's group (else the default, else f32);
3. a block type whose block does not divide the last (input) dimension falls back: q4_k -> q8_0
   (needs a multiple of 32) -> f16. The fallback is reported in `Choice.reason`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embodied_ros.bundle.quantize import STORED_TYPES
from embodied_ros.kernels.quant import QUANT_TYPES

DEFAULT_GROUP = "default"
_FALLBACK = {"q4_k": "q8_0", "q8_0": "f16"}


@dataclass(frozen=True)
class Choice:
    qtype: str
    reason: str  # "" when the plan's type was used as written


@dataclass(frozen=True)
class QuantPlan:
    types: dict[str, str] = field(default_factory=dict)  # group -> stored type; "default" for the rest

    def __post_init__(self) -> None:
        for group, qtype in self.types.items():
            if qtype not in STORED_TYPES:
                raise ValueError(f"quantization plan: group {group!r} has unknown type {qtype!r}; "
                                 f"expected one of {', '.join(STORED_TYPES)}")
            if not group:
                raise ValueError("quantization plan: empty group name")

    @classmethod
    def parse(cls, text: str | None) -> "QuantPlan":
        """"vision=f32,lm=q8_0,expert=q4_k" or "q4_k" (= default=q4_k); None or "" means all f32."""
        types: dict[str, str] = {}
        for item in (text or "").split(","):
            item = item.strip()
            if not item:
                continue
            group, sep, qtype = item.partition("=")
            group, qtype = (group.strip(), qtype.strip().lower()) if sep else (DEFAULT_GROUP, group.strip().lower())
            if group in types:
                raise ValueError(f"quantization plan {text!r}: group {group!r} is given twice")
            types[group] = qtype
        return cls(types)

    def __str__(self) -> str:
        return ",".join(f"{group}={qtype}" for group, qtype in self.types.items()) or "default=f32"

    def choose(self, group: str, shape: tuple[int, ...]) -> Choice:
        if len(shape) < 2:
            return Choice("f32", "fewer than 2 dimensions" if self.type_for(group) != "f32" else "")
        wanted = qtype = self.type_for(group)
        while qtype in QUANT_TYPES and shape[-1] % QUANT_TYPES[qtype].block_size:
            qtype = _FALLBACK[qtype]
        reason = "" if qtype == wanted else (
            f"last dimension {shape[-1]} is not a multiple of {QUANT_TYPES[wanted].block_size}")
        return Choice(qtype, reason)

    def type_for(self, group: str) -> str:
        return self.types.get(group, self.types.get(DEFAULT_GROUP, "f32"))

    def check_groups(self, groups: set[str]) -> None:
        """Refuse a plan naming groups that no weight has (a typo would silently keep f32)."""
        unknown = sorted(set(self.types) - groups - {DEFAULT_GROUP})
        if unknown:
            raise ValueError(f"quantization plan names group(s) {', '.join(unknown)} but the weights' groups "
                             f"are: {', '.join(sorted(groups)) or '(none)'}")
