"""Loading the pi0.5 reference records of test/data for the test_pi05_* tests."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from embodied_ros.models.pi05.config import Pi05Config
from embodied_ros.models.pi05.model import Pi05Model
from embodied_ros.models.pi05.weights import from_lerobot

DATA = Path(__file__).resolve().parent / "data"
TINY, SMALL, CHECKPOINT = DATA / "pi05_tiny", DATA / "pi05_small", DATA / "pi05_tiny_checkpoint"
RTC_TINY = DATA / "pi05_rtc_tiny"


def _is_rtc_record(folder: Path) -> bool:
    return "rtc" in json.loads((folder / "config.json").read_text())


_EXTRA = sorted(p for p in (DATA / "extra").glob("pi05_*") if (p / "cases.npz").is_file())
EXTRA_SETS = [p for p in _EXTRA if not _is_rtc_record(p)]  # plain sampling records
RTC_SETS = [RTC_TINY] + [p for p in _EXTRA if _is_rtc_record(p)]  # real-time chunking records


@lru_cache(maxsize=None)
def record(folder: Path) -> tuple[Pi05Config, dict, dict]:
    """(config, runtime-named weights, cases) of a model record."""
    config = Pi05Config.from_fixture_json(json.loads((folder / "config.json").read_text()))
    with np.load(folder / "cases.npz") as cases:
        arrays = {name: cases[name] for name in cases.files}
    return config, from_lerobot(load_file(str(folder / "model.safetensors"))), arrays


@lru_cache(maxsize=None)
def model(folder: Path, backend: str = "numba") -> Pi05Model:
    config, weights, _ = record(folder)
    return Pi05Model(config, weights, backend)


def case_count(cases: dict) -> int:
    return sum(1 for name in cases if name.endswith("_noise"))


def run_case(m: Pi05Model, cases: dict, k: int, compact: bool = True) -> np.ndarray:
    """Model-space actions [chunk, action_dim] of recorded case k."""
    images = cases[f"case{k}_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases[f"case{k}_image_masks"]
    tokens = m.image_tokens(images, mask if compact else None)
    cache = m.build_prefix(tokens, mask, cases[f"case{k}_tokens"], cases[f"case{k}_token_mask"], compact=compact)
    return m.sample_actions(cache, cases[f"case{k}_noise"])[:, : cases[f"case{k}_actions"].shape[1]]


def max_case_error(m: Pi05Model, cases: dict, compact: bool = True) -> float:
    return max(float(np.abs(run_case(m, cases, k, compact) - cases[f"case{k}_actions"]).max())
               for k in range(case_count(cases)))
