"""Converters read a checkpoint's weights as views of the mapped file, not as a copy of it in memory:
a released checkpoint is several GiB, and reading it whole doubled the conversion's peak (SmolVLA
at released size: 3.5 GiB for a 0.77 GiB bundle)."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.numpy

from embodied_ros.cli.main import main

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("record", ["pi05_tiny_checkpoint/checkpoint", "pi0_tiny_checkpoint/checkpoint",
                                    "pi0_fast_tiny_checkpoint/checkpoint", "smolvla_tiny_checkpoint/checkpoint",
                                    "bitvla_tiny_checkpoint/checkpoint", "hy_vla_tiny", "extra/hy_vla_bf16"])
def test_the_weights_file_is_mapped_not_read(record, tmp_path, monkeypatch):
    read_whole = []
    load_file = safetensors.numpy.load_file

    def recording_load_file(path, *args, **kwargs):
        read_whole.append(Path(path).name)
        return load_file(path, *args, **kwargs)

    monkeypatch.setattr(safetensors.numpy, "load_file", recording_load_file)
    bundle = tmp_path / "bundle.gguf"
    assert main(["bundle", "convert", str(DATA / record), str(bundle), "--no-progress"]) == 0
    assert bundle.stat().st_size > 0
    assert "model.safetensors" not in read_whole


def test_bf16_tensors_are_widened_only_when_read(tmp_path):
    import json
    import struct

    import numpy as np

    from embodied_ros.bundle.source import Widened, map_safetensors, release

    values = np.array([[1.0, -2.5, 3.140625], [0.0, 1e-3, -7e4]], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, bits.nbytes]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bits.tobytes())
    tensor = map_safetensors(path)["w"]
    assert isinstance(tensor, Widened) and tensor.shape == (2, 3) and tensor.dtype == np.float32
    widened = np.asarray(tensor)
    assert widened.dtype == np.float32 and np.array_equal(widened.view(np.uint32) >> 16, bits)
    assert (np.abs(widened - values) <= np.abs(values) * 2 ** -7).all() and widened[0, 2] == values[0, 2]
    release(tensor)
    header = json.dumps({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0")
    with pytest.raises(ValueError, match="F8_E4M3"):
        map_safetensors(path)
