"""Weights resident once in the type they compute in, and loads refused in one line when they
cannot fit."""

from pathlib import Path

import numpy as np
import pytest

from embodied_ros.bundle import BundleWriter, open_bundle
from embodied_ros.bundle import memory
from embodied_ros.bundle.memory import BundleMemoryError, available_memory, check_fits
from embodied_ros.bundle.families import known_families
from embodied_ros.node_infra.config import load_config
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels import linear as linear_module
from embodied_ros.kernels.cpu.bf16_gemm import Bf16Weight
from embodied_ros.kernels.cpu.gemm import PackedWeight
from embodied_ros.kernels.cpu import int16_gemm
from embodied_ros.kernels.cpu.int16_gemm import I16Weight
from embodied_ros.kernels.cpu.int8_gemm import Q8Weight
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.backbone.paligemma import prepare_weights
from embodied_ros.models.pi05.weights import is_linear_weight

REPO = Path(__file__).resolve().parents[1]


def _fake_machine(tmp_path: Path, mem_available_kb: int, cgroup_limit: int | None = None) -> tuple[Path, Path]:
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    cgroup.mkdir()
    (proc / "meminfo").write_text(f"MemTotal: 24000000 kB\nMemAvailable: {mem_available_kb} kB\n")
    (proc / "self" / "cgroup").write_text("0::/job\n")
    if cgroup_limit is not None:
        (cgroup / "job").mkdir()
        (cgroup / "job" / "memory.max").write_text(f"{cgroup_limit}\n")
        (cgroup / "job" / "memory.current").write_text(f"{cgroup_limit // 4}\n")
    return proc, cgroup


def test_available_memory_is_the_smaller_of_meminfo_and_the_cgroup(tmp_path):
    proc, cgroup = _fake_machine(tmp_path, 8 << 20, cgroup_limit=4 << 30)
    assert available_memory(proc, cgroup) == (3 << 30, "cgroup limit")
    proc, cgroup = _fake_machine(tmp_path / "b", 2 << 20)
    assert available_memory(proc, cgroup) == (2 << 30, "MemAvailable")


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_cgroups_reclaimable_page_cache_counts_as_available(tmp_path, version):
    """A bundle read before stays in the cgroup's page cache, inside its usage: an 8 GiB cgroup holding
    3.5 GiB of it (3 GiB inactive) has 7.5 GiB room, not 4.5 GiB."""
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 24000000 kB\nMemAvailable: 20000000 kB\n")
    if version == "v2":
        (proc / "self" / "cgroup").write_text("0::/job\n")
        (cgroup / "job").mkdir(parents=True)
        files = {"memory.max": 8 << 30, "memory.current": 7 << 29}
        stat, key = cgroup / "job" / "memory.stat", "inactive_file"
        folder = cgroup / "job"
    else:
        (proc / "self" / "cgroup").write_text("4:memory:/job\n0::/\n")
        folder = cgroup / "memory" / "job"
        folder.mkdir(parents=True)
        files = {"memory.limit_in_bytes": 8 << 30, "memory.usage_in_bytes": 7 << 29}
        stat, key = folder / "memory.stat", "total_inactive_file"
    for name, value in files.items():
        (folder / name).write_text(f"{value}\n")
    stat.write_text(f"cache 3758096384\n{key} {3 << 30}\nactive_file 536870912\n")
    assert available_memory(proc, cgroup) == (15 << 29, "cgroup limit")


def test_bench_refuses_a_bundle_that_cannot_fit_in_one_line(monkeypatch, capsys):
    from embodied_ros.cli.main import main

    monkeypatch.setattr(memory, "available_memory", lambda *args: (64 << 20, "cgroup limit"))
    assert main(["bench", str(REPO / "bundles" / "pi05_tiny.gguf"), "--repeats", "1"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "needs" in error and "0.1 GiB are available (cgroup limit)" in error


def test_a_load_that_cannot_fit_is_refused_in_one_line(tmp_path):
    proc, cgroup = _fake_machine(tmp_path, 1 << 20)  # 1 GiB available
    with pytest.raises(BundleMemoryError) as refused:
        check_fits(9 << 30, "policy.gguf", proc, cgroup)
    message = str(refused.value)
    assert "\n" not in message and "needs 9.0 GiB" in message and "1.0 GiB are available (MemAvailable)" in message
    check_fits(512 << 20, "policy.gguf", proc, cgroup)  # fits: no error


@pytest.mark.parametrize("family", known_families())
def test_a_load_checks_memory_before_building(monkeypatch, family):
    from embodied_ros.pipeline.stages import load_runtime

    bundle = Path(load_config(family).bundle)
    monkeypatch.setattr(memory, "available_memory", lambda *args: (64 << 20, "MemAvailable"))
    with pytest.raises(BundleMemoryError, match=rf"{bundle.name}: .* with .* needs .* GiB of memory, 0.1 GiB"):
        load_runtime(bundle)


def _one_of_each(tmp_path: Path) -> dict:
    rng = np.random.default_rng(3)
    writer = BundleWriter("toy")
    for qtype in ("f32", "f16", "bf16", "q8_0"):
        writer.add_weight(f"expert.blk.0.ffn_down.{qtype}.weight", rng.standard_normal((40, 64)).astype(np.float32),
                          qtype=qtype)
    bundle = open_bundle(writer.write(tmp_path / "types.gguf"))
    return {name.replace(".weight", "").rsplit(".", 1)[-1] + ".weight": bundle.weight(name)
            for name in bundle.weight_names} | {"bundle": bundle}


def test_sixteen_bit_weights_stay_sixteen_bit_when_prepared(tmp_path, monkeypatch):
    weights = _one_of_each(tmp_path)
    bundle = weights.pop("bundle")
    assert weights["f16.weight"].dtype == np.float16 and isinstance(weights["bf16.weight"], QuantTensor)
    named = {f"expert.blk.0.ffn_down.{k}": v for k, v in weights.items()}
    prepared = prepare_weights(named, is_linear_weight, pack=True)
    for name, weight in prepared.items():
        stored = bundle.tensor_info(name).nbytes
        if isinstance(weight, (PackedWeight, Bf16Weight)):
            resident = weight.panels.nbytes
        elif isinstance(weight, I16Weight):  # + a float32 scale per output feature; k padded to whole blocks
            resident = weight.quants.nbytes * 64 / (weight.quants.shape[1] * int16_gemm.BLOCK)
        else:
            resident = weight.nbytes
        per_block = 40 / 34 if name.endswith("q8_0.weight") else 1  # int8 panels: 32 q + scale + sum per block
        assert resident <= stored * per_block * 64 / 40, name  # + the last panel's padding; no float32 shadow
    if linear_module.INT8_PRODUCTS:
        assert isinstance(prepared["expert.blk.0.ffn_down.q8_0.weight"], Q8Weight)
    if linear_module.BF16_PRODUCTS:
        assert prepared["expert.blk.0.ffn_down.f16.weight"].dtype == np.float16  # F16 precision kept
        assert isinstance(prepared["expert.blk.0.ffn_down.bf16.weight"], Bf16Weight)
    if linear_module.INT16_PRODUCTS:
        assert prepared["expert.blk.0.ffn_down.f16.weight"].dtype == np.float16
        assert isinstance(prepared["expert.blk.0.ffn_down.bf16.weight"], I16Weight)
    monkeypatch.setattr(linear_module, "BF16_PRODUCTS", False)  # the fallback: decoded as packed, still 16-bit
    monkeypatch.setattr(linear_module, "INT16_PRODUCTS", False)
    monkeypatch.setattr(linear_module, "INT8_PRODUCTS", False)
    fallback = prepare_weights(named, is_linear_weight, pack=True)
    assert isinstance(fallback["expert.blk.0.ffn_down.q8_0.weight"], QuantTensor)
    assert fallback["expert.blk.0.ffn_down.f16.weight"].dtype == np.float16
    assert isinstance(fallback["expert.blk.0.ffn_down.bf16.weight"], QuantTensor)


@pytest.mark.parametrize("units", [False] + [True] * ((linear_module.BF16_PRODUCTS or linear_module.INT16_PRODUCTS)
                                                     and linear_module.INT8_PRODUCTS))
def test_reduced_precision_products_match_float32_with_and_without_the_units(tmp_path, monkeypatch, units):
    """With the CPU's bf16 (or int16) / int8 units where it has them, and the fallback forced (today's paths)."""
    sixteen_bit = Bf16Weight if linear_module.BF16_PRODUCTS else I16Weight
    monkeypatch.setattr(linear_module, "BF16_PRODUCTS", units and linear_module.BF16_PRODUCTS)
    monkeypatch.setattr(linear_module, "INT16_PRODUCTS", units and linear_module.INT16_PRODUCTS)
    monkeypatch.setattr(linear_module, "INT8_PRODUCTS", units)
    weights = _one_of_each(tmp_path)
    weights.pop("bundle")
    ks = KernelSet("numba")
    x = np.random.default_rng(4).standard_normal((50, 64), dtype=np.float32)
    for qtype, packed_type in (("f16", None), ("bf16", sixteen_bit), ("q8_0", Q8Weight)):
        stored = weights[f"{qtype}.weight"]
        values = stored.dequantize() if isinstance(stored, QuantTensor) else stored.astype(np.float32)
        prepared = linear_module.pack_for_products(stored)
        on_units = units and packed_type is not None
        assert on_units == (packed_type is not None and isinstance(prepared, packed_type)), qtype
        y = ks.linear(x, prepared)
        expected = x @ values.T
        tolerance = 3e-2 if on_units else 1e-4  # x rounded to bf16 / quantized per block on the units
        assert np.abs(y - expected).max() <= tolerance * np.abs(expected).max(), qtype


def test_conversion_reads_the_checkpoint_lazily():
    """Tensors are views of the safetensors file and stacked projections are made when written, so a
    conversion holds about one tensor at a time."""
    from safetensors.numpy import load_file

    from embodied_ros.bundle.source import Stacked, map_safetensors
    from embodied_ros.models.pi05.weights import from_lerobot

    path = REPO / "test" / "data" / "pi05_tiny" / "model.safetensors"
    mapped, loaded = map_safetensors(path), load_file(str(path))
    assert mapped.keys() == loaded.keys()
    for name, tensor in mapped.items():
        assert isinstance(tensor.base, np.memmap) or isinstance(tensor, np.memmap), name
        np.testing.assert_array_equal(tensor, loaded[name])
    weights = from_lerobot(mapped)
    stacked = weights["lm.blk.0.attn_qkv.weight"]
    assert isinstance(stacked, Stacked)
    np.testing.assert_array_equal(np.asarray(stacked), np.asarray(from_lerobot(loaded)["lm.blk.0.attn_qkv.weight"]))


@pytest.mark.parametrize("qtype", ["bf16", "q8_0", "q4_k"])
def test_large_tensors_are_encoded_a_slice_of_rows_at_a_time(monkeypatch, qtype):
    from embodied_ros.bundle import quantize, writer

    weights = np.random.default_rng(5).standard_normal((37, 512)).astype(np.float32)
    monkeypatch.setattr(writer, "ENCODE_CHUNK_VALUES", 5 * 512)  # 8 slices
    sliced = writer._encoded(writer._Entry("w", weights, qtype))
    np.testing.assert_array_equal(sliced, quantize(weights, qtype).data)  # the same bytes as in one piece
