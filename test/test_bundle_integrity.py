"""Damaged, truncated, forged, tampered and wrong-family bundles are refused with a clear error."""

import shutil
import struct

import gguf
import pytest
from bundle_toy import ARCH, write_toy_bundle

from embodied_ros.bundle import (BundleArchitectureError, BundleError, BundleFormatError, BundleIntegrityError,
                                 BundleTruncatedError, open_bundle)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return write_toy_bundle(tmp_path_factory.mktemp("integrity") / "toy.gguf")


@pytest.fixture
def copy(original, tmp_path):
    path = tmp_path / "copy.gguf"
    shutil.copyfile(original, path)
    return path


def _patch(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _flip(path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x5A]))


def _tensor_fields(path, name):
    """File offsets of a tensor's dims and data offset in its header entry."""
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    start = tensor.field.offset + 8 + len(name.encode())
    n_dims = len(tensor.shape)
    return {"dims": start + 4, "offset": start + 4 + 8 * n_dims + 4, "data": tensor.data_offset,
            "n_bytes": tensor.n_bytes}


def _value_offset(path, key):
    field = gguf.GGUFReader(path).get_field(key)
    return field.offset + 8 + len(key) + 4


def _refused(path, error_class, **kwargs):
    with pytest.raises(error_class) as info:
        open_bundle(path, **kwargs)
    assert str(path) in str(info.value)
    return str(info.value)


def test_the_original_opens(original):
    assert open_bundle(original, architecture=ARCH).architecture == ARCH


@pytest.mark.parametrize("fraction", [0.0, 0.002, 0.01, 0.05, 0.2, 0.5, 0.9, 0.999])
def test_truncated_anywhere(copy, fraction):
    size = copy.stat().st_size
    with open(copy, "r+b") as f:
        f.truncate(int(size * fraction))
    _refused(copy, BundleError)


def test_truncated_inside_tensor_data_names_the_tensor(copy):
    fields = _tensor_fields(copy, "layers.0.weight")
    with open(copy, "r+b") as f:
        f.truncate(fields["data"] + fields["n_bytes"] // 2)
    message = _refused(copy, BundleTruncatedError, verify_digest=False)
    assert "layers.0.weight" in message and "truncated" in message


def test_bad_magic(copy):
    _patch(copy, 0, b"GGML")
    assert "not a GGUF" in _refused(copy, BundleFormatError)


def test_other_gguf_version(copy):
    _patch(copy, 4, struct.pack("<I", 2))
    assert "version 2" in _refused(copy, BundleFormatError)


def test_not_a_bundle_at_all(tmp_path):
    text = tmp_path / "notes.gguf"
    text.write_text("just some text, long enough to hold a header of a few bytes")
    _refused(text, BundleFormatError)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    _refused(empty, BundleError)
    _refused(tmp_path / "missing.gguf", BundleFormatError)


def test_plain_gguf_without_bundle_keys(tmp_path):
    path = tmp_path / "plain.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    assert "not an embodied_ros bundle" in _refused(path, BundleFormatError)


def test_newer_format_version(copy):
    _patch(copy, _value_offset(copy, "embodied_ros.format_version"), struct.pack("<I", 2))
    assert "newer" in _refused(copy, BundleFormatError)


def test_wrong_architecture(original):
    message = _refused(original, BundleArchitectureError, architecture="pi05")
    assert ARCH in message and "pi05" in message


def test_tensor_data_changed(copy):
    _flip(copy, _tensor_fields(copy, "head.weight")["data"] + 5)
    assert "digest" in _refused(copy, BundleIntegrityError)


def test_metadata_value_changed(copy):
    _patch(copy, _value_offset(copy, "toyfamily.width"), struct.pack("<q", 1024))
    _refused(copy, BundleIntegrityError)
    assert open_bundle(copy, verify_digest=False).config["width"] == 1024  # only the digest can tell


def test_digest_itself_changed(copy):
    offset = _value_offset(copy, "embodied_ros.digest") + 8 + len("sha256:")
    _patch(copy, offset, b"f" * 8)
    _refused(copy, BundleIntegrityError)


@pytest.mark.parametrize("position", [30, 200, 600])
def test_any_header_byte_flip_is_refused(copy, position):
    _flip(copy, position)
    _refused(copy, BundleError)


def test_tensor_offset_past_the_end(copy):
    _patch(copy, _tensor_fields(copy, "plain.proj")["offset"], struct.pack("<Q", 1 << 40))
    assert "plain.proj" in _refused(copy, BundleTruncatedError, verify_digest=False)


def test_tensor_offset_overlapping_another(copy):
    _patch(copy, _tensor_fields(copy, "head.weight")["offset"], struct.pack("<Q", 0))
    assert "overlap" in _refused(copy, BundleFormatError, verify_digest=False)


def test_misaligned_tensor_offset(copy):
    _patch(copy, _tensor_fields(copy, "head.weight")["offset"], struct.pack("<Q", 3))
    assert "alignment" in _refused(copy, BundleFormatError, verify_digest=False)


def test_shape_larger_than_its_bytes(copy):
    _patch(copy, _tensor_fields(copy, "layers.0.bias")["dims"], struct.pack("<Q", 64 * 1000))
    _refused(copy, BundleFormatError, verify_digest=False)


def test_shape_not_fitting_the_block_size(copy):
    _patch(copy, _tensor_fields(copy, "layers.0.weight")["dims"], struct.pack("<Q", 500))
    assert "impossible shape" in _refused(copy, BundleFormatError, verify_digest=False)


def test_duplicate_tensor_name(copy):
    name_at = next(t for t in gguf.GGUFReader(copy).tensors if t.name == "extra.table").field.offset + 8
    _patch(copy, name_at, b"head.weight")  # same length as "extra.table"
    assert "twice" in _refused(copy, BundleFormatError, verify_digest=False)


def test_duplicate_key(copy):
    offset = gguf.GGUFReader(copy).get_field("embodied_ros.source").offset + 8
    _patch(copy, offset, b"embodied_ros.writer")  # same length as "embodied_ros.source"
    assert "twice" in _refused(copy, BundleFormatError, verify_digest=False)


def test_forged_counts_and_lengths_fail_fast(copy):
    _patch(copy, 16, struct.pack("<Q", 1 << 60))  # key count
    assert "cannot fit" in _refused(copy, BundleTruncatedError)


def test_forged_array_length_fails_fast(copy):
    field = gguf.GGUFReader(copy).get_field("toyfamily.cameras")
    length_at = field.offset + 8 + len("toyfamily.cameras") + 4 + 4
    _patch(copy, length_at, struct.pack("<Q", 1 << 40))
    _refused(copy, BundleTruncatedError)
