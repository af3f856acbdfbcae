"""BitVLA (ternary BitLinear SigLIP + BitNet b1.58 LM + OpenVLA-OFT's parallel-decoding L1 head) against
records made by BitVLA's own PyTorch code (reference/bitvla/gen_records.py): parity of both
arithmetics, the ternary bundle type and its integer product, the converter, the stage contract."""

import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest

from embodied_ros.backbone.bitnet import bit_linear
from embodied_ros.bundle import BundleWriter, families, open_bundle
from embodied_ros.cli.main import main
from embodied_ros.kernels import registry
from embodied_ros.kernels.cpu import ternary_gemm as tg
from embodied_ros.kernels.quant import QuantTensor, dequantize
from embodied_ros.kernels.registry import KernelSet
from embodied_ros.models.bitvla import RECORDS, convert, images, weights
from embodied_ros.models.bitvla.runtime import load_runtime
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import ChunkContinuation, Observation

DATA = Path(__file__).parent / "data"
MODEL = DATA / "bitvla_tiny"
PIPELINE = DATA / "bitvla_tiny_checkpoint"
ASIDE = DATA / "extra" / "bitvla_fp_vision_one_cam"  # other shapes (test/data/extra/specs)
RECORDS_ALL = [MODEL, PIPELINE, ASIDE]


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("bitvla") / "bitvla_tiny.gguf"
    convert.convert(MODEL, path, reference=MODEL)
    return path


@pytest.fixture(scope="module")
def cases():
    with np.load(MODEL / "cases.npz") as loaded:
        return dict(loaded)


# ---- parity ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("record", RECORDS_ALL, ids=lambda p: p.name)
def test_parity_float_and_integer_products_within_1e4(record):
    results = RECORDS.run_fixture_parity(record, "f32", "numba")
    assert len(results) >= 2
    for result in results:
        integer = float(result.detail.split("max_abs_err=")[1].split(";")[0])
        assert result.passed and result.max_abs_error < 1e-4 and integer < 1e-4, result


def test_parity_command_and_numpy_backend(capsys):
    assert main(["parity", str(PIPELINE), "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "within tolerance 0.0001 (f32)" in out and "integer products" in out
    assert float(out.strip().splitlines()[-1].split("=")[1]) < 1e-4


def test_taps_image_features_hidden_states_and_one_bitlinear(bundle_path, cases):
    runtime = load_runtime(open_bundle(bundle_path), "numba", "float")
    model = runtime.model
    features = model.image_features(cases["case0_pixel_values"])
    assert np.abs(features - cases["case0_image_features"]).max() < 1e-4
    hidden = model.action_hidden(cases["case0_image_features"], cases["case0_input_ids"], cases["case0_proprio"])
    assert np.abs(hidden - cases["case0_action_hidden"]).max() < 1e-4
    # layer 0's q_proj: the bundle's ternary weight and scale are the reference's, and so is the product
    q, scale = weights.ternary_of(open_bundle(bundle_path).weights(), "lm.blk.0.attn_q.weight", 64)
    assert np.array_equal(q, cases["case0_bitlinear_lm_q_weight_ternary"])
    assert scale == cases["case0_bitlinear_lm_q_weight_scale"][0]
    x = cases["case0_bitlinear_lm_q_input"]
    assert np.abs(tg.fake_quantize_tokens(x) - cases["case0_bitlinear_lm_q_input_fake_quant"]).max() < 1e-6
    for products in ("float", "integer"):
        layer = load_runtime(open_bundle(bundle_path), "numba", products).model.lm_layers[0]
        y = bit_linear(KernelSet("numba"), x, layer["attn_qkv.weight"])[:, :64]
        assert np.abs(y - cases["case0_bitlinear_lm_q_output"]).max() < 1e-5, products


def test_camera_pixels_reproduce_the_evaluation_image_path():
    """uint8 camera -> TF center crop -> Pillow bicubic -> [-1, 1] -> bf16, bit for bit."""
    with np.load(PIPELINE / "cases.npz") as recorded:
        for index, name in enumerate(("full_image", "wrist_image")):
            pixels = images.model_pixels(recorded[f"case0_{name}_uint8"], 32, 224, True, True)
            assert np.array_equal(pixels, recorded["case0_pixel_values"][index])
        without_crop = images.model_pixels(recorded["case0_full_image_uint8"], 32, 224, False, True)
        assert not np.array_equal(without_crop, recorded["case0_pixel_values"][0])


# ---- the ternary type and its product ------------------------------------------------------------------

def test_ternary_pack_unpack_round_trip():
    rng = np.random.default_rng(0)
    for out, width in ((5, 16), (70, 100), (64, 2560), (33, 7)):
        q, scale = tg.ternarize(rng.standard_normal((out, width)).astype(np.float32))
        assert set(np.unique(q)) <= {-1, 0, 1}
        packed = tg.pack_ternary(q, scale)
        assert packed.packed.nbytes * 4 <= -(-out // 32) * 32 * -(-width // 16) * 16  # 2 bits a weight
        assert np.array_equal(packed.ternary(), q)
        assert np.array_equal(packed.dense(), (q.astype(np.float32) / scale).astype(np.float32))
    # TQ2_0 blocks: our encoder, our decoder and gguf's own decoder agree
    q, scale = tg.ternarize(rng.standard_normal((6, 512)).astype(np.float32))
    data = tg.tq2_0_encode(q, 1.0 / scale)
    assert np.array_equal(tg.tq2_0_codes(data, 512), q)
    ours = dequantize(QuantTensor("tq2_0", (6, 512), data))
    theirs = gguf.quants.dequantize(data, gguf.GGMLQuantizationType.TQ2_0)
    assert np.array_equal(ours, theirs.reshape(6, 512))
    assert np.allclose(ours, q / scale, rtol=1e-3)  # the block's f16 d is 1 / s_w rounded


def test_ternarize_is_the_references_rule():
    weight = np.array([[0.2, -0.05, 0.9, -0.4], [0.0, 0.1, -0.3, 0.6]], np.float32)
    q, scale = tg.ternarize(weight)
    mean = np.abs(weight).mean()
    assert scale == np.float32(1.0) / np.float32(mean)
    assert q.tolist() == np.clip(np.round(weight * scale), -1, 1).astype(int).tolist()
    q_zero, scale_zero = tg.ternarize(np.zeros((2, 3), np.float32))  # mean floored at 1e-5
    assert scale_zero == np.float32(1e5) and not q_zero.any()


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_integer_product_is_the_fake_quant_product_up_to_float_rounding(backend):
    ks = KernelSet(backend)
    rng = np.random.default_rng(1)
    for rows, width, out in ((1, 64, 32), (37, 100, 70), (130, 2560, 96)):
        x = rng.standard_normal((rows, width)).astype(np.float32) * 3
        q, scale = tg.ternarize(rng.standard_normal((out, width)).astype(np.float32))
        weight = tg.pack_ternary(q, scale)
        bias = rng.standard_normal(out).astype(np.float32)
        integer = ks.linear_ternary(x, weight, bias)
        fake = tg.fake_quantize_tokens(x) @ weight.dense().T + bias
        exact = (tg.quantize_tokens(x)[0].astype(np.float64) @ q.T.astype(np.float64)
                 / tg.quantize_tokens(x)[1][:, None].astype(np.float64) / np.float64(scale) + bias)
        assert np.abs(integer - exact).max() <= 1e-5 * np.abs(exact).max()
        assert np.abs(integer - fake).max() <= 1e-5 * np.abs(exact).max()
        wrong = tg.pack_ternary(np.where(np.arange(q.size).reshape(q.shape) == 3, -q - (q == 0), q), scale)
        assert not np.allclose(ks.linear_ternary(x, wrong, bias), integer)  # one changed weight shows


def test_numba_kernel_matches_its_numpy_reference_on_the_registered_examples():
    reference = registry.reference_of("linear_ternary")
    kernel = registry.implementations("linear_ternary")["numba"]
    for args in reference.examples(np.random.default_rng(2)):
        assert np.allclose(kernel(*args), reference.fn(*args), rtol=reference.rtol, atol=reference.atol)


def test_ternary_layer_is_under_a_quarter_of_bf16_in_the_bundle(tmp_path):
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((512, 2560)).astype(np.float32)
    ternary = weights.ternary_tensors("lm.blk.0.ffn_up.weight", weight)
    writer = BundleWriter("bitvla")
    writer.add_weights(ternary)
    writer.add_weight("lm.blk.0.ffn_gate.weight", weight, qtype="bf16")
    writer.write(tmp_path / "sizes.gguf")
    bundle = open_bundle(tmp_path / "sizes.gguf")
    ternary_bytes = sum(bundle.tensor_info(name).nbytes for name in ternary)
    bf16_bytes = bundle.tensor_info("lm.blk.0.ffn_gate.weight").nbytes
    assert bundle.tensor_info("lm.blk.0.ffn_up.weight").qtype == "tq2_0"
    assert ternary_bytes <= 0.25 * bf16_bytes and ternary_bytes == 512 * 10 * 66 + 4
    q, scale = weights.ternary_of(bundle.weights(), "lm.blk.0.ffn_up.weight", 2560)
    assert np.array_equal(q, tg.ternarize(weight)[0]) and scale == tg.ternarize(weight)[1]


# ---- converter ---------------------------------------------------------------------------------------

def test_detect_claims_bitvla_saves_only(tmp_path):
    assert convert.detect(MODEL) and convert.detect(PIPELINE / "checkpoint") and convert.detect(ASIDE)
    assert families.detect_family(PIPELINE / "checkpoint") == "bitvla"
    assert not convert.detect(PIPELINE)  # the record folder, not a checkpoint
    for other in ("pi0_tiny_checkpoint/checkpoint", "smolvla_tiny_checkpoint/checkpoint", "groot_tiny", "pi05_tiny"):
        if (DATA / other).exists():
            assert not convert.detect(DATA / other), other
    llava = tmp_path / "llava"
    shutil.copytree(MODEL, llava)
    config = json.loads((llava / "config.json").read_text())
    config["model_type"] = "llava"
    (llava / "config.json").write_text(json.dumps(config))
    assert not convert.detect(llava)


def test_converter_stores_bitlinears_ternary_and_refuses_what_it_cannot_reproduce(bundle_path, tmp_path):
    bundle = open_bundle(bundle_path)
    types = {name: bundle.tensor_info(name).qtype for name in bundle.weight_names}
    assert types["lm.blk.1.ffn_down.weight"] == "tq2_0" and types["vision.blk.0.fc1.weight"] == "tq2_0"
    assert types["connector.fc1.weight"] == "f32" and types["lm.blk.1.ffn_down.scale"] == "f32"
    assert not any(name.startswith("vision.blk.2") for name in types)
    aside = open_bundle(_converted(ASIDE, tmp_path / "aside.gguf"))
    assert aside.tensor_info("vision.blk.0.fc1.weight").qtype == "f32"  # a full-precision tower stays so
    assert not any(name.startswith("vision.blk.2.") for name in aside.weight_names)  # feature layer -2 of 3
    broken = tmp_path / "broken"
    shutil.copytree(MODEL, broken)
    processor = json.loads((broken / "preprocessor_config.json").read_text())
    processor["resample"] = 2
    (broken / "preprocessor_config.json").write_text(json.dumps(processor))
    with pytest.raises(ValueError, match="image processor"):
        convert.read_checkpoint(broken)
    with pytest.raises(ValueError, match="unknown bitvla conversion setting"):
        convert.read_checkpoint(MODEL, {"chunk": 3})


def _converted(folder: Path, path: Path) -> Path:
    convert.convert(folder, path, reference=folder)
    return path


def test_torch_files_are_read_without_torch():
    state = weights.load_torch_state_dict(next(MODEL.glob("action_head--*_checkpoint.pt")))
    assert state["module.model.fc2.weight"].shape == (3, 64) and state["module.model.fc1.weight"].dtype == np.float32


# ---- the stage contract --------------------------------------------------------------------------------

def test_stages_on_the_shipped_bundle_and_a_missing_camera():
    runtime = load_runtime(open_bundle(Path(__file__).parents[1] / "bundles" / "bitvla_tiny.gguf"))
    assert not runtime.spec.real_time_chunking and runtime.spec.image_size == (224, 224)
    with np.load(PIPELINE / "cases.npz") as recorded:
        tasks = json.loads((PIPELINE / "cases.json").read_text())["cases"]
        observation = RECORDS.observation(recorded, tasks[1]["task"], "case1", runtime.spec.camera_names)
        assert list(observation.images) == ["full_image"]  # the wrist camera is missing in case 1
        embeddings = runtime.encode(observation)
        prefix = runtime.build_prefix(embeddings, observation)
        chunk = runtime.act(prefix, None, np.zeros(runtime.spec.noise_shape, np.float32))
        assert np.abs(chunk.actions - recorded["case1_actions"]).max() < 1e-4
        assert np.array_equal(prefix.tensors["tokens"], recorded["case1_tokens"])
        assert np.array_equal(infer(runtime, observation).actions, chunk.actions)  # noise is not read
        with pytest.raises(ValueError, match="real-time chunking"):
            runtime.act(prefix, None, None, ChunkContinuation(None, 0, None))
        with pytest.raises(ValueError, match="no camera"):
            runtime.encode(Observation(0, {}, observation.state, "x"))


def test_an_embedding_table_in_q8_0_is_read_row_by_row(tmp_path):
    """The released vocabulary is 128256 x 2560: in Q8_0 the ternary bundle is under a quarter of bf16."""
    path = tmp_path / "embedding_q8_0.gguf"
    convert.convert(PIPELINE / "checkpoint", path, "embedding=q8_0")
    bundle = open_bundle(path)
    assert bundle.tensor_info("lm.token_embd").qtype == "q8_0"
    assert bundle.tensor_info("connector.fc1.weight").qtype == "f32"
    runtime = load_runtime(bundle)
    with np.load(PIPELINE / "cases.npz") as recorded:
        task = json.loads((PIPELINE / "cases.json").read_text())["cases"][0]["task"]
        observation = RECORDS.observation(recorded, task, "case0", runtime.spec.camera_names)
        expected = recorded["case0_actions"]
    error = np.abs(infer(runtime, observation).actions - expected).max()
    assert 0 < error < 0.05 * np.abs(expected).max(), error
