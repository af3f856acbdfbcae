"""What goes into a bundle comes back out: every tensor type, the metadata, memory-mapped."""

import gguf
import numpy as np
import pytest
from bundle_toy import ARCH, CONFIG, toy_weights, write_toy_bundle

from embodied_ros.bundle import BundleWriter, QuantTensor, ReferenceRecord, open_bundle, quantize
from embodied_ros.kernels.quant import dequantize


@pytest.fixture(scope="module")
def toy_path(tmp_path_factory):
    return write_toy_bundle(tmp_path_factory.mktemp("bundle") / "toy.gguf")


@pytest.fixture(scope="module")
def toy(toy_path):
    return open_bundle(toy_path, architecture=ARCH)


def _memmap_backed(array: np.ndarray) -> bool:
    while array is not None:
        if isinstance(array, np.memmap):
            return True
        array = array.base
    return False


def test_metadata_round_trip(toy):
    assert toy.architecture == ARCH and toy.format_version == 1
    assert toy.config == CONFIG
    assert toy.solver == {"method": "euler", "num_inference_steps": 10}
    assert toy.robot.state_names == ("j1", "j2", "j3") and toy.robot.action_period_s == 0.02
    assert toy.quant_plan == "layers=q4_k,head=q8_0,extra=bf16,half=f16"
    assert toy.source == "toy weights, seed 0"
    assert toy.tokenizer_model == bytes(range(256)) * 4 and toy.tokenizer_kind == "sentencepiece"
    np.testing.assert_array_equal(toy.stats["state"]["q01"], np.full(3, -1.0, np.float32))
    assert set(toy.stats["action"]) == {"mean", "std"}
    assert toy.digest.startswith("sha256:") and len(toy.digest) == 71


def test_stored_types_follow_the_plan(toy):
    types = {name: toy.tensor_info(name).qtype for name in toy.weight_names}
    assert types == {"layers.0.weight": "q4_k", "layers.0.bias": "f32", "head.weight": "q8_0",
                     "extra.table": "bf16", "half.proj": "f16", "plain.proj": "f32"}
    assert toy.weight_groups["layers.0.weight"] == "layers"


@pytest.mark.parametrize("qtype,tolerance", [("f32", 0.0), ("f16", 1e-3), ("bf16", 1e-2), ("q8_0", 2e-2),
                                             ("q4_k", 0.12)])
def test_every_weight_type_round_trips(tmp_path, qtype, tolerance):
    weight = np.random.default_rng(2).standard_normal((3, 512)).astype(np.float32)
    writer = BundleWriter(ARCH)
    writer.add_weight("w.x", weight, qtype=qtype)
    bundle = open_bundle(writer.write(tmp_path / "one.gguf"))
    raw = bundle.raw("w.x")
    assert bundle.tensor_info("w.x").qtype == qtype and bundle.tensor_info("w.x").shape == (3, 512)
    stored = quantize(weight, qtype)
    if isinstance(stored, QuantTensor):
        np.testing.assert_array_equal(raw.data, stored.data)  # bytes as encoded
    else:
        np.testing.assert_array_equal(raw, stored)
    loaded = bundle.weight("w.x")
    values = dequantize(loaded) if isinstance(loaded, QuantTensor) else loaded.astype(np.float32)
    if isinstance(loaded, np.ndarray):
        assert loaded.dtype == (np.float16 if qtype == "f16" else np.float32)  # as stored, never upcast
    assert np.abs(values - weight).max() <= tolerance * np.abs(weight).max()


def test_gguf_reader_reads_every_weight(toy_path, toy):
    reader = gguf.GGUFReader(toy_path)
    by_name = {t.name: t for t in reader.tensors}
    for name in toy.weight_names:
        tensor = by_name[name]
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        stored = toy.raw(name)
        expected = dequantize(stored) if isinstance(stored, QuantTensor) else stored.astype(np.float32)
        np.testing.assert_array_equal(values.reshape(expected.shape), expected)


def test_weights_are_views_of_the_file(toy):
    for name in toy.weight_names:
        raw = toy.raw(name)
        array = raw.data if isinstance(raw, QuantTensor) else raw
        assert _memmap_backed(array), name
        assert not array.flags.writeable, name
    assert _memmap_backed(toy.weight("plain.proj"))  # F32 is handed out without a copy
    assert isinstance(toy.weight("layers.0.weight"), QuantTensor)


def test_half_precision_weights_stay_16_bit_and_mapped(toy):
    half = toy.weight("half.proj")
    assert half.dtype == np.float16 and _memmap_backed(half)  # no float32 shadow of an F16 weight
    np.testing.assert_array_equal(half, toy.raw("half.proj"))
    assert toy.weight_bytes == sum(toy.tensor_info(name).nbytes for name in toy.weight_names)


def test_reference_record_round_trip(toy):
    record = toy.reference
    assert record.tolerance == 1e-4
    assert record.fields == {"task": "stack the cups", "empty": ""}
    assert record.inputs["mask"].dtype == np.bool_ and record.inputs["mask"].tolist() == [True, False, True]
    np.testing.assert_array_equal(record.inputs["image"], np.arange(12, dtype=np.uint8).reshape(3, 4))
    assert record.inputs["t"].shape == () and record.inputs["t"] == np.float32(0.25)
    assert record.noise["case0"].dtype == np.float64 and record.noise["case0"].shape == (2, 3)
    assert record.expected["y"].shape == (3, 6)


def test_statistics_of_dotted_quantities(tmp_path):
    writer = BundleWriter(ARCH)
    writer.set_stats({"observation.state": {"q01": np.zeros(2)}})
    stats = open_bundle(writer.write(tmp_path / "s.gguf")).stats
    assert list(stats) == ["observation.state"] and list(stats["observation.state"]) == ["q01"]
    with pytest.raises(ValueError, match="without dots"):
        writer.set_stats({"state": {"q.01": np.zeros(2)}})


def test_without_optional_parts(tmp_path):
    writer = BundleWriter("bare")
    writer.add_weight("w.x", np.ones((2, 2), np.float32))
    bundle = open_bundle(writer.write(tmp_path / "bare.gguf"))
    assert bundle.config == {} and bundle.solver == {} and bundle.stats == {}
    assert bundle.robot is None and bundle.tokenizer_model is None and bundle.reference is None


def test_writer_refuses_bad_input(tmp_path):
    writer = BundleWriter(ARCH)
    with pytest.raises(ValueError, match="reserved"):
        writer.add_weight("stats.x", np.ones(2, np.float32))
    with pytest.raises(ValueError, match="float array"):
        writer.add_weight("w.ints", np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match="multiple"):
        writer.add_weight("w.odd", np.ones((2, 100), np.float32), qtype="q4_k")
    with pytest.raises(ValueError, match="vision.x"):
        writer.set_config({"vision": {"x": None}})
    with pytest.raises(ValueError, match="one type"):
        writer.set_config({"mixed": [1, "a"]})
    with pytest.raises(ValueError, match="lowercase identifier"):
        BundleWriter("Pi 0.5")
    with pytest.raises(ValueError, match="dtype"):
        writer.set_reference(ReferenceRecord(inputs={"c": np.ones(2, np.complex64)},
                                             expected={"y": np.ones(2)}, tolerance=0.1))
    with pytest.raises(ValueError, match="tolerance"):
        ReferenceRecord(inputs={}, expected={"y": np.ones(2)}, tolerance=float("nan"))


def test_a_failed_write_leaves_no_file(tmp_path):
    writer = BundleWriter(ARCH, "typo=q8_0")
    writer.add_weight("w.x", np.ones((2, 32), np.float32))
    with pytest.raises(ValueError, match="typo"):
        writer.write(tmp_path / "x.gguf")
    assert list(tmp_path.iterdir()) == []


def test_weights_keep_their_values(toy):
    weights = toy_weights()
    np.testing.assert_array_equal(toy.weight("plain.proj"), weights["plain.proj"])
    np.testing.assert_array_equal(toy.weight("layers.0.bias"), weights["layers.0.bias"])
