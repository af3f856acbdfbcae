"""`embodied-ros parity` on pi0.5 records: output format and exit status."""

import shutil

import numpy as np

from embodied_ros.cli.main import main
from pi05_fixtures import CHECKPOINT, TINY


def test_parity_passes_and_ends_with_max_abs_err(capsys):
    assert main(["parity", str(TINY)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["case0", "case1", "case2"]
    assert lines[-1].startswith("max_abs_err=") and float(lines[-1].split("=")[1]) < 1e-4


def test_parity_of_the_pipeline_record(capsys):
    assert main(["parity", str(CHECKPOINT), "--backend", "numpy"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("max_abs_err=")


def test_parity_fails_when_the_record_disagrees(tmp_path, capsys):
    folder = tmp_path / "tampered"
    shutil.copytree(TINY, folder)
    with np.load(folder / "cases.npz") as cases:
        arrays = {name: cases[name] for name in cases.files}
    arrays["case1_actions"] = arrays["case1_actions"] + np.float32(2e-4)
    np.savez(folder / "cases.npz", **arrays)
    assert main(["parity", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "FAILED: case1" in out and float(out.strip().splitlines()[-1].split("=")[1]) > 1e-4


def test_parity_with_quantized_weights_uses_that_types_tolerance(capsys):
    assert main(["parity", str(TINY), "--quant", "q8_0"]) == 0
    out = capsys.readouterr().out
    assert "tolerance 0.1 (q8_0)" in out and float(out.strip().splitlines()[-1].split("=")[1]) > 1e-4


def test_parity_refuses_a_folder_it_does_not_know(tmp_path, capsys):
    assert main(["parity", str(tmp_path)]) == 2
    assert "no model family recognizes" in capsys.readouterr().err
