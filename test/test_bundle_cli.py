"""`embodied-ros bundle convert|inspect|verify` on the toy family: output and exit status."""

import shutil

import gguf
import pytest
from bundle_toy import ARCH, install_family, write_toy_bundle

from embodied_ros.cli.main import main


@pytest.fixture
def family(monkeypatch):
    install_family(monkeypatch)


@pytest.fixture(scope="module")
def toy_path(tmp_path_factory):
    return write_toy_bundle(tmp_path_factory.mktemp("cli") / "toy.gguf")


def _run(capsys, *argv):
    status = main(["bundle", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


def test_inspect_summarizes_everything(capsys, toy_path):
    status, out, _ = _run(capsys, "inspect", toy_path)
    assert status == 0
    lines = out.splitlines()
    assert f"arch        {ARCH} (format 1, written by embodied_ros" in out
    assert "(verified)" in next(line for line in lines if line.startswith("digest"))
    assert "  hidden.sizes = [512, 64]" in lines and "  cameras = ['wrist', 'top']" in lines
    assert "  num_inference_steps = 10" in lines
    assert "robot       3 state joints, 6 action columns, action period 0.02 s" in lines
    weights = next(line for line in lines if line.startswith("weights"))
    assert weights.startswith("weights     6 tensors") and "q4_k 1" in weights and "q8_0 1" in weights
    assert "f32 2" in weights and "bf16 1" in weights and "f16 1" in weights
    layers = next(line for line in lines if line.strip().startswith("layers "))
    assert "q4_k 18.0 KiB" in layers and "f32 0.2 KiB" in layers  # 64x512 at 4.5 bits; 64 biases
    assert "stats       state: q01, q99; action: mean, std" in lines
    assert "tokenizer   sentencepiece, 1.0 KiB" in lines
    assert "reference   4 inputs, 1 noise, 1 expected, tolerance 0.0001, fields: task, empty" in lines


def test_inspect_lists_tensors_and_skips_digest(capsys, toy_path):
    status, out, _ = _run(capsys, "inspect", toy_path, "--tensors", "--no-digest")
    assert status == 0 and "(not checked)" in out
    assert any(line.split()[:3] == ["layers.0.weight", "q4_k", "[64,"] for line in out.splitlines())


def test_inspect_unreadable(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00")
    status, _, err = _run(capsys, "inspect", bad)
    assert status == 2 and str(bad) in err


def test_verify_passes(capsys, family, toy_path):
    status, out, _ = _run(capsys, "verify", toy_path)
    assert status == 0 and "PASS reference record" in out


def test_verify_with_the_numpy_backend(capsys, family, toy_path):
    assert _run(capsys, "verify", toy_path, "--backend", "numpy")[0] == 0


def test_verify_fails_when_the_reference_is_missed(capsys, family, tmp_path):
    path = write_toy_bundle(tmp_path / "off.gguf", expected_shift=0.01)
    status, out, _ = _run(capsys, "verify", path)
    assert status == 1 and "FAIL reference record" in out


def test_verify_fails_on_changed_weights(capsys, family, toy_path, tmp_path):
    path = tmp_path / "changed.gguf"
    shutil.copyfile(toy_path, path)
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == "head.weight")
    with open(path, "r+b") as f:
        f.seek(tensor.data_offset + 3)
        f.write(b"\x7f")
    status, _, err = _run(capsys, "verify", path)
    assert status == 1 and "digest" in err


def test_verify_without_a_reference_record(capsys, family, tmp_path):
    path = write_toy_bundle(tmp_path / "noref.gguf", reference=False)
    status, _, err = _run(capsys, "verify", path)
    assert status == 1 and "no reference record" in err
    assert _run(capsys, "verify", path, "--integrity-only")[0] == 0


def test_verify_unreadable_and_unknown_family(capsys, tmp_path):
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(write_toy_bundle(tmp_path / "full.gguf").read_bytes()[:5000])
    assert _run(capsys, "verify", truncated)[0] == 2
    stranger = write_toy_bundle(tmp_path / "stranger.gguf", architecture="nosuchfamily")
    status, _, err = _run(capsys, "verify", stranger)
    assert status == 2 and "nosuchfamily" in err


def test_convert_through_the_family_converter(capsys, family, tmp_path):
    source = tmp_path / "weights.toy"
    source.write_text("toy checkpoint")
    output = tmp_path / "out.gguf"
    status, out, _ = _run(capsys, "convert", source, output, "--quant", "q8_0", "--arch", ARCH,
                          "--reference", tmp_path, "--no-progress")
    assert status == 0 and f"wrote {output}: {ARCH}" in out and "plan default=q8_0" in out
    assert _run(capsys, "verify", output)[0] == 0


def test_convert_errors(capsys, family, tmp_path):
    source = tmp_path / "unknown.bin"
    source.write_text("?")
    status, _, err = _run(capsys, "convert", source, tmp_path / "x.gguf")
    assert status == 1 and "no model family recognizes" in err and "--arch" in err
    status, _, err = _run(capsys, "convert", source, tmp_path / "x.gguf", "--arch", ARCH, "--quant", "lm=q9")
    assert status == 1 and "unknown type" in err
