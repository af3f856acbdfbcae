"""Converters read a checkpoint's weights as views of the mapped file, not as a copy of it in memory:
a released checkpoint is several GiB, and reading it whole doubled the conversion's peak (SmolVLA
at released size: 3.5 GiB for a 0.77 GiB bundle)."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.numpy

from embodied_ros.cli.main import main

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("record", ["pi05_tiny_checkpoint", "pi0_tiny_checkpoint", "pi0_fast_tiny_checkpoint",
                                    "smolvla_tiny_checkpoint", "bitvla_tiny_checkpoint"])
def test_the_weights_file_is_mapped_not_read(record, tmp_path, monkeypatch):
    read_whole = []
    load_file = safetensors.numpy.load_file

    def recording_load_file(path, *args, **kwargs):
        read_whole.append(Path(path).name)
        return load_file(path, *args, **kwargs)

    monkeypatch.setattr(safetensors.numpy, "load_file", recording_load_file)
    bundle = tmp_path / "bundle.gguf"
    assert main(["bundle", "convert", str(DATA / record / "checkpoint"), str(bundle), "--no-progress"]) == 0
    assert bundle.stat().st_size > 0
    assert "model.safetensors" not in read_whole
