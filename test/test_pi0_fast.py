"""pi0-FAST (LeRobot PI0FastPolicy) against its PyTorch reference records: the generated ids and the
actions of a model-level record and of a LeRobot checkpoint run from raw inputs, the taps, the prefix
cache left as it was by decoding, the end-of-action token, LeRobot's detokenization of hand-made
sequences (valid and not), and which converter claims which save."""

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.bundle import families, open_bundle
from embodied_ros.heads.fast_tokens import FastTokenizer, dct_to_actions, greedy_tokens, idct_matrix
from embodied_ros.models.kit.flow_vla import physical_actions
from embodied_ros.models.pi0_fast import parity
from embodied_ros.models.pi0_fast.config import Pi0FastConfig
from embodied_ros.models.pi0_fast.convert import convert, detect, read_action_tokenizer, read_checkpoint
from embodied_ros.models.pi0_fast.model import Pi0FastModel
from embodied_ros.models.pi0_fast.runtime import Pi0FastChunk, load_runtime
from embodied_ros.models.pi0_fast.tokens import detokenize, padded_tokens, token_ids_of
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import ChunkContinuation, Observation
from embodied_ros.sequence.tokenizer import PromptTokenizer

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "test" / "data"
TINY, CHECKPOINT = DATA / "pi0_fast_tiny", DATA / "pi0_fast_tiny_checkpoint"
TOLERANCE = 1e-4


@lru_cache(maxsize=None)
def arrays(folder: Path) -> dict:
    with np.load(folder / "cases.npz") as cases:
        return {name: cases[name] for name in cases.files}


def notes(folder: Path) -> dict:
    return json.loads((folder / "cases.json").read_text())


@lru_cache(maxsize=None)
def model(backend: str = "numba") -> Pi0FastModel:
    checkpoint = read_checkpoint(TINY)
    return Pi0FastModel(checkpoint.config, checkpoint.weights, backend)


@lru_cache(maxsize=None)
def runtime(tmp_root: str):
    bundle = Path(tmp_root) / "pi0_fast_checkpoint.gguf"
    convert(CHECKPOINT / "checkpoint", bundle, "f32")
    return load_runtime(open_bundle(bundle))


@pytest.fixture(scope="module")
def checkpoint_runtime(tmp_path_factory):
    return runtime(str(tmp_path_factory.mktemp("pi0_fast")))


def case_keys(folder: Path) -> list[str]:
    return parity.case_keys(arrays(folder))


# ---- parity ------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_model_record_ids_equal_and_actions_within_tolerance(backend):
    cases = arrays(TINY)
    for key in case_keys(TINY):
        decoded = parity.model_case(model(backend), cases, key)
        expected = cases[f"{key}_generated_tokens"]
        np.testing.assert_array_equal(padded_tokens(decoded.tokens, len(expected)), expected, err_msg=key)
        error = np.abs(decoded.actions - cases[f"{key}_actions"]).max()
        assert error < TOLERANCE, f"{key}: max abs action error {error:.3g}"


def test_checkpoint_record_from_raw_inputs(checkpoint_runtime):
    """uint8 images of other sizes, physical state, task text -> LeRobot's prompt, its ids, the same
    generated ids, physical actions."""
    cases, recorded = arrays(CHECKPOINT), notes(CHECKPOINT)["cases"]
    for k, key in enumerate(case_keys(CHECKPOINT)):
        observation = parity.pipeline_observation(cases, recorded[k]["task"], key,
                                                  checkpoint_runtime.spec.camera_names, k)
        assert checkpoint_runtime.prompt(observation) == recorded[k]["prompt"]
        chunk = infer(checkpoint_runtime, observation)
        assert isinstance(chunk, Pi0FastChunk) and chunk.actions.shape == cases[f"{key}_actions"].shape
        np.testing.assert_array_equal(padded_tokens(chunk.tokens, len(cases[f"{key}_generated_tokens"])),
                                      cases[f"{key}_generated_tokens"], err_msg=key)
        error = np.abs(chunk.actions - cases[f"{key}_actions"]).max()
        assert error < TOLERANCE, f"{key}: max abs action error {error:.3g}"


@pytest.mark.parametrize("folder", [TINY, CHECKPOINT], ids=["model", "checkpoint"])
def test_parity_hook_passes_every_case(folder):
    results = parity.run_fixture_parity(folder)
    assert len(results) == len(case_keys(folder)) and all(r.passed for r in results), results


def test_taps_of_case0():
    """Image embeddings, the prefix keys and values of the first and last layer, the first logits."""
    cases, m = arrays(TINY), model("numpy")
    images = cases["case0_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases["case0_image_masks"]
    tokens = m.image_tokens(images, mask)
    np.testing.assert_allclose(tokens.reshape(-1, tokens.shape[-1]), cases["case0_image_embeddings"], atol=1e-5)
    prefix = m.build_prefix(tokens, mask, cases["case0_tokens"], cases["case0_token_mask"])
    rows = cases["case0_prefix_pad_mask"]
    for layer, name in ((0, "layer0"), (m.config.lm.depth - 1, "layerLAST")):
        for part in ("k", "v"):
            ours = (prefix.cache.keys if part == "k" else prefix.cache.values)[layer]
            np.testing.assert_allclose(ours, cases[f"case0_prefix_{part}_{name}"][rows], atol=2e-4, rtol=1e-5)
    logits = m.logits(prefix.last_hidden[None])[0]
    np.testing.assert_allclose(logits, cases["case0_first_logits"], atol=1e-4)
    assert logits.argmax() == cases["case0_generated_tokens"][0]


def test_masked_prefix_decodes_as_the_compacted_one():
    cases, m = arrays(TINY), model("numba")
    key = next(k for k in case_keys(TINY) if not cases[f"{k}_image_masks"].all())  # a case with a missing camera
    images = cases[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases[f"{key}_image_masks"]
    masked = m.build_prefix(m.image_tokens(images, mask), mask, cases[f"{key}_tokens"], cases[f"{key}_token_mask"],
                            compact=False)
    assert not masked.cache.valid.all()
    decoded = m.decode(masked)
    np.testing.assert_array_equal(padded_tokens(decoded.tokens, m.config.max_decoding_steps),
                                  cases[f"{key}_generated_tokens"])


# ---- the prefix cache and the end-of-action token ---------------------------------------------------

def test_decoding_leaves_the_prefix_cache_as_it_was(checkpoint_runtime):
    cases, recorded = arrays(CHECKPOINT), notes(CHECKPOINT)["cases"]
    observation = parity.pipeline_observation(cases, recorded[0]["task"], "case0", checkpoint_runtime.spec.camera_names)
    prefix = checkpoint_runtime.build_prefix(checkpoint_runtime.encode(observation), observation)
    before = {name: np.array(value, copy=True) for name, value in prefix.tensors.items()}
    first, second = checkpoint_runtime.act(prefix, None), checkpoint_runtime.act(prefix, None)
    for name, value in before.items():
        np.testing.assert_array_equal(prefix.tensors[name], value, err_msg=name)
    np.testing.assert_array_equal(first.actions, second.actions)
    np.testing.assert_array_equal(first.tokens, second.tokens)
    np.testing.assert_array_equal(first.actions, cases["case0_actions"])


def test_a_stopped_and_an_unstopped_case_in_each_record():
    for folder in (TINY, CHECKPOINT):
        cases, stop = arrays(folder), token_ids(folder).end_of_action
        steps = [cases[f"{key}_generated_tokens"] for key in case_keys(folder)]
        stopped = [ids for ids in steps if stop in ids]
        assert stopped and len(stopped) < len(steps), folder.name
        for ids in stopped:  # LeRobot stops at "|": zeros after it
            index = list(ids).index(stop)
            assert index < len(ids) - 1 and not ids[index + 1:].any()


def test_decoding_stops_at_end_of_action_and_at_max_steps():
    cases, m = arrays(TINY), model("numba")
    stop = m.config.token_ids.end_of_action
    for key in case_keys(TINY):
        images = cases[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
        mask = cases[f"{key}_image_masks"]
        prefix = m.build_prefix(m.image_tokens(images, mask), mask, cases[f"{key}_tokens"], cases[f"{key}_token_mask"])
        decoded = m.decode(prefix)
        expected = cases[f"{key}_generated_tokens"]
        if stop in expected:
            assert decoded.stopped and decoded.tokens[-1] == stop and stop not in decoded.tokens[:-1]
            assert len(decoded.tokens) == list(expected).index(stop) + 1
        else:
            assert not decoded.stopped and len(decoded.tokens) == m.config.max_decoding_steps
            assert "no end-of-action token" in decoded.problem
        short = m.generate(prefix, max_steps=3)
        np.testing.assert_array_equal(short, expected[: len(short)])
        assert len(short) == min(3, len(decoded.tokens))


def test_greedy_tokens_stop_rule():
    logits = np.eye(5, dtype=np.float32)
    calls = []

    def next_logits(token, index):
        calls.append((token, index))
        return logits[(token + 1) % 5]

    np.testing.assert_array_equal(greedy_tokens(logits[3], next_logits, 3, 10), [3])
    assert calls == []
    np.testing.assert_array_equal(greedy_tokens(logits[0], next_logits, 3, 10), [0, 1, 2, 3])
    assert calls == [(0, 0), (1, 1), (2, 2)]
    np.testing.assert_array_equal(greedy_tokens(logits[0], next_logits, 7, 6), [0, 1, 2, 3, 4, 0])
    tie = np.array([1.0, 2.0, 2.0], np.float32)
    assert greedy_tokens(tie, next_logits, 1, 1)[0] == 1  # the first of equal maxima, as torch.argmax


# ---- detokenization --------------------------------------------------------------------------------

def token_ids(folder: Path):
    tokenizer_file = (folder / "checkpoint" if (folder / "checkpoint").is_dir() else folder) / "tokenizer.model"
    return token_ids_of(PromptTokenizer(tokenizer_file.read_bytes(), 8))


def test_token_ids_are_lerobots():
    ids, recorded = token_ids(TINY), notes(TINY)["special_ids"]
    assert (ids.bos, ids.end_of_action, list(ids.action_prefix), ids.vocab_size) == (
        recorded["bos"], recorded["end_of_action"], recorded["action_prefix"], recorded["paligemma_vocab_size"])
    assert ids.action_check == ids.action_prefix[:2]  # "Action: " is the pieces "Action", ":", then a space


@pytest.mark.parametrize("validate", [False, True], ids=["unchecked", "checked"])
def test_detokenizer_on_hand_made_sequences(validate):
    """LeRobot's detokenize_actions on made-up ids: prefix, no prefix, no "|", "|" first, the prefix in the
    middle, an incomplete prefix, an id past the FAST vocabulary, one below it (undecodable), too many
    tokens; with the "Action:" check LeRobot raises where we fall back to zeros."""
    cases, config = arrays(TINY), model().config
    config = Pi0FastConfig.from_dict({**config.to_dict(), "validate_action_token_prefix": validate})
    label = "checked" if validate else "unchecked"
    vectors = notes(TINY)["detokenizer_vectors"]
    assert {vector[label] for vector in vectors} == ({"actions", "raises"} if validate else {"actions"})
    for vector in vectors:
        ids = cases[f"detok{vector['index']}_ids"]
        stop = config.token_ids.end_of_action
        generated = ids[: list(ids).index(stop) + 1] if stop in ids else ids
        decoded = detokenize(generated, config)
        if vector[label] == "raises":
            assert decoded.fallback and "Action:" in decoded.problem and not decoded.actions.any(), vector["what"]
        else:
            expected = cases[f"detok{vector['index']}_actions_{label}"]
            np.testing.assert_allclose(decoded.actions, expected, atol=1e-6, err_msg=vector["what"])
            assert decoded.fallback == (not expected.any()), vector["what"]


def test_byte_level_decoding_matches_the_tokenizers_library():
    """A FAST tokenizer whose characters need two UTF-8 bytes: every id, and random sequences (which
    split characters, so the lossy UTF-8 reading matters), against what LeRobot's tokenizer decoded."""
    wide = read_action_tokenizer(TINY / "wide_action_tokenizer")
    recorded = notes(TINY)["wide_bpe_vectors"]
    assert wide.min_token == recorded["min_token"] and wide.vocab_size == recorded["vocab_size"]
    assert any(0xFFFD in points for points in recorded["code_points"])  # some sequences were invalid UTF-8
    for ids, points in zip(recorded["ids"], recorded["code_points"]):
        assert [ord(c) for c in wide.text(np.array(ids, np.int64))] == points, ids
    assert wide.text(np.array([3, -1])) is None


def test_tokenizers_library_agrees_on_every_single_id():
    tokenizers = pytest.importorskip("tokenizers")
    folder = TINY / "wide_action_tokenizer"
    library = tokenizers.Tokenizer.from_str((folder / "tokenizer.json").read_text())
    wide = read_action_tokenizer(folder)
    for index in range(wide.vocab_size + 3):
        assert wide.text(np.array([index])) == library.decode([index]), index


def test_coefficients_are_cut_or_zero_padded():
    table = FastTokenizer(10.0, -2, tuple(bytes([i]).hex() for i in range(8)))
    coefficients, count = table.coefficients(np.array([5, 6, 7]), 2, 2)
    np.testing.assert_array_equal(coefficients, [[3, 4], [5, 0]])
    assert count == 3
    coefficients, count = table.coefficients(np.arange(8), 1, 3)
    np.testing.assert_array_equal(coefficients, [[-2, -1, 0]])
    assert count == 8
    assert table.coefficients(np.array([1, -3]), 1, 3)[0] is None


def test_inverse_dct_inverts_the_orthonormal_dct():
    horizon = 7
    n, k = np.arange(horizon)[None, :], np.arange(horizon)[:, None]
    forward = np.sqrt(2.0 / horizon) * np.cos(np.pi * k * (2 * n + 1) / (2 * horizon))
    forward[0] /= np.sqrt(2.0)
    np.testing.assert_allclose(idct_matrix(horizon) @ forward, np.eye(horizon), atol=1e-12)
    chunk = np.random.default_rng(0).standard_normal((horizon, 3))
    np.testing.assert_allclose(dct_to_actions(forward @ chunk * 10.0, 10.0), chunk.astype(np.float32), atol=1e-6)


# ---- contract and converter ------------------------------------------------------------------------

def test_spec_takes_no_noise_and_no_continuation(checkpoint_runtime):
    spec = checkpoint_runtime.spec
    assert spec.noise_shape == (0,) and not spec.real_time_chunking and not spec.has_world_model
    assert spec.chunk_size == 10 and len(spec.action_names) == 7
    observation = Observation(0, {name: np.zeros((32, 32, 3), np.uint8) for name in spec.camera_names},
                              np.zeros(len(spec.state_names), np.float32), "wave")
    prefix = checkpoint_runtime.build_prefix(checkpoint_runtime.encode(observation), observation)
    with pytest.raises(ValueError, match="real-time chunking"):
        checkpoint_runtime.act(prefix, None, np.zeros(0, np.float32), ChunkContinuation(None, 0, None))


def test_undecodable_tokens_give_zeros_and_say_so(checkpoint_runtime):
    """A sequence starting with an id above the FAST range: LeRobot's zeros, de-normalized to the mean."""
    config = checkpoint_runtime.config
    decoded = detokenize(np.array([config.token_ids.vocab_size - 1, config.token_ids.end_of_action]), config)
    assert decoded.fallback and decoded.stopped and not decoded.actions.any() and "outside" in decoded.problem
    mean = checkpoint_runtime.action_stats.denormalize(np.zeros((1, config.action_dim), np.float32))
    np.testing.assert_allclose(physical_actions(decoded.actions, None, config, checkpoint_runtime.action_stats),
                               np.repeat(mean, config.chunk_size, axis=0))


def test_converter_detects_only_pi0_fast_saves():
    assert detect(TINY) and detect(CHECKPOINT / "checkpoint")
    assert not detect(CHECKPOINT) and not detect(DATA / "pi0_tiny_checkpoint" / "checkpoint")
    assert not detect(DATA / "pi05_tiny_checkpoint" / "checkpoint") and not detect(DATA / "pi0_tiny")
    for folder in (TINY, CHECKPOINT / "checkpoint"):
        claimed = [name for name in families.known_families() if families.converter(name).detect(folder)]
        assert claimed == ["pi0_fast"], (folder, claimed)
    for folder in (TINY, CHECKPOINT):
        assert [name for name in families.known_families() if families.family(name).recognizes_fixture(folder)] \
            == ["pi0_fast"]


def test_converter_needs_both_tokenizers(tmp_path):
    source = tmp_path / "save"
    source.mkdir()
    for name in ("config.json", "model.safetensors"):
        (source / name).write_bytes((CHECKPOINT / "checkpoint" / name).read_bytes())
    with pytest.raises(ValueError, match="PaliGemma tokenizer"):
        read_checkpoint(source)
    (source / "tokenizer.model").write_bytes((CHECKPOINT / "checkpoint" / "tokenizer.model").read_bytes())
    with pytest.raises(ValueError, match="FAST action tokenizer"):
        read_checkpoint(source)
    heads = {"vision.num_heads": 4, "lm.num_heads": 8, "lm.head_dim": 16}  # cases.json's model_dims, not copied
    checkpoint = read_checkpoint(source, {"action_tokenizer": str(CHECKPOINT / "checkpoint" / "action_tokenizer"),
                                          **heads})
    assert checkpoint.config.action_tokenizer.vocab_size == notes(TINY)["fast_tokenizer"]["vocab_size"]


def test_a_save_with_empty_cameras_lists_each_camera_once(tmp_path):
    """LeRobot writes an empty camera into input_features and counts it in empty_cameras as well."""
    import shutil

    source = tmp_path / "checkpoint"
    shutil.copytree(CHECKPOINT / "checkpoint", source)
    raw = json.loads((source / "config.json").read_text())
    raw["input_features"]["observation.images.empty_camera_0"] = {"type": "VISUAL", "shape": [3, 56, 56]}
    raw["empty_cameras"] = 1
    (source / "config.json").write_text(json.dumps(raw))
    config = read_checkpoint(source, reference=CHECKPOINT).config
    assert config.camera_names == ("base_0_rgb", "wrist_0_rgb", "empty_camera_0")


def test_a_sampling_save_converts_only_when_greedy_decoding_is_accepted(tmp_path):
    import shutil

    source = tmp_path / "checkpoint"
    shutil.copytree(CHECKPOINT / "checkpoint", source)
    raw = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**raw, "temperature": 0.7}))
    with pytest.raises(ValueError, match="temperature=0"):
        read_checkpoint(source, reference=CHECKPOINT)
    assert read_checkpoint(source, {"temperature": 0}, reference=CHECKPOINT).config.max_decoding_steps == 40


def test_config_round_trips_through_bundle_sections():
    config = model().config
    assert Pi0FastConfig.from_bundle_sections(*config.bundle_sections()) == config


def test_shipped_bundle_reruns_its_reference():
    bundle = open_bundle(ROOT / "bundles" / "pi0_fast_tiny.gguf", architecture="pi0_fast")
    error, tolerance = families.verify_reference(bundle, "numba")
    assert error <= tolerance == TOLERANCE
