"""benchmarks/common.py: the timer, FLOP counts, BENCHMARKS.md sections and the reference call."""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

COMMON_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "common.py"
spec = importlib.util.spec_from_file_location("benchmarks_common", COMMON_PATH)
common = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = common  # dataclasses look their module up there
spec.loader.exec_module(common)


def test_time_repeats_runs_setup_untimed_before_every_call():
    calls = []
    timing = common.time_repeats(lambda: calls.append("fn"), repeats=3, warmup=2,
                                 setup=lambda: calls.append("setup"))
    assert calls == ["setup", "fn"] * 5
    assert len(timing.runs_ms) == 3 and timing.median_ms >= 0
    assert sorted(timing.as_dict()) == ["median_ms", "runs_ms"]
    with pytest.raises(ValueError, match="repeats=0"):
        common.time_repeats(lambda: None, repeats=0)


def test_median_is_the_middle_run():
    assert common.Timing([5.0, 1.0, 3.0]).median_ms == 3.0
    assert common.gflops_per_s(2e9, 1000.0) == pytest.approx(2.0)


def test_layer_flops_match_counted_matrix_products():
    tokens, width, mlp = 7, 12, 20
    # SigLIP: q, k, v, out (4 D x D), scores and weighted sum (2 T x T x D), fc1 + fc2 (2 D x M)
    assert common.flops_siglip_layer(tokens, width, mlp) == 2 * (4 * 7 * 144 + 2 * 49 * 12 + 2 * 7 * 12 * 20)
    # Gemma with 2 heads x 3 and 1 KV head over 11 cached keys: q and o (D x 6), k and v (D x 3)
    gemma = common.flops_gemma_layer(tokens, width, num_heads=2, num_kv_heads=1, head_dim=3, mlp_dim=mlp, kv_len=11)
    assert gemma == 2 * (7 * (2 * 12 * 6 + 2 * 12 * 3) + 2 * 7 * 11 * 6 + 3 * 7 * 12 * 20)
    with_norms = common.flops_gemma_layer(tokens, width, 2, 1, 3, mlp, kv_len=11, adarms=True)
    assert with_norms - gemma == 2 * 2 * 3 * 12 * 12
    wan = common.flops_wan_block(tokens=5, text_tokens=3, dim=4, ffn_dim=6)
    assert wan == 2 * ((4 * 5 * 16 + 2 * 25 * 4) + (2 * 5 * 16 + 2 * 3 * 16 + 2 * 5 * 3 * 4) + 2 * 5 * 4 * 6)


def test_pi05_chunk_flops_add_up_over_stages():
    config = json.loads((Path(__file__).parent / "data" / "extra" / "pi05_one_cam_odd" / "config.json").read_text())
    flops = common.flops_pi05_chunk(config)
    assert flops["total"] == pytest.approx(flops["vision"] + flops["prefix"]
                                           + config["num_inference_steps"] * flops["expert_step"])
    lm = config["language_model"]
    one_layer = common.flops_gemma_layer(config["prefix_len"], lm["width"], lm["num_heads"], lm["num_kv_heads"],
                                         lm["head_dim"], lm["mlp_dim"])
    assert flops["prefix"] == lm["depth"] * one_layer


def test_write_section_replaces_only_its_own_section(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    common.write_section(path, "pi05_small", "| a |\n|---|\n| 1 |", command="python bench.py --x")
    common.write_section(path, "wan_block", "wan table")
    common.write_section(path, "pi05_small", "| a |\n|---|\n| 2 |", command="python bench.py --y")
    text = path.read_text()
    assert text.startswith("# Benchmarks\n")
    assert text.count("<!-- begin pi05_small -->") == 1 and "| 1 |" not in text and "| 2 |" in text
    assert "Command: `python bench.py --y`" in text and "--x" not in text
    assert text.index("pi05_small") < text.index("wan table"), "a replaced section keeps its place"
    with pytest.raises(ValueError, match="section name"):
        common.write_section(path, "bad name", "x")


def test_markdown_table_formats_cells():
    table = common.markdown_table([{"stage": "prefix", "ms": 12.34567, "note": None},
                                   {"stage": "a|b", "ms": 3, "note": "x"}])
    assert table.splitlines() == ["| stage | ms | note |", "|---|---|---|",
                                  "| prefix | 12.35 |  |", "| a\\|b | 3 | x |"]
    with pytest.raises(ValueError):
        common.markdown_table([])


def test_machine_description_and_matmul_rate():
    info = common.machine_description()
    assert info["usable_cpus"] >= 1 and len(info["loadavg_1_5_15"]) == 3
    assert info["numpy"] == np.__version__
    assert info["cpu_model"] in common.machine_line(info)
    if info["blas"].get("kernels"):  # numpy's OpenBLAS names the kernel set it picked for this CPU
        assert f"({info['blas']['kernels']} kernels" in common.machine_line(info)
    rate = common.numpy_matmul_gflops(32, 48, 16, repeats=2)
    assert rate["flops"] == 2 * 32 * 48 * 16 and rate["gflops_per_s"] > 0
    rss_now = common.current_rss_mb()
    assert common.peak_rss_mb() >= rss_now > 0


def test_missing_reference_interpreter_is_reported(monkeypatch):
    monkeypatch.setenv(common.REFERENCE_PYTHON_ENV, "/nonexistent/ref/bin/python")
    with pytest.raises(common.ReferenceUnavailable, match="/nonexistent/ref/bin/python"):
        common.run_torch_reference("siglip_layer")


def test_reference_runs_without_the_runtimes_process_settings(monkeypatch):
    import embodied_ros.kernels  # noqa: F401  (sets OMP_WAIT_POLICY for the runtime's own threads)
    monkeypatch.setitem(common._ENVIRONMENT_AT_START, "OMP_WAIT_POLICY", None)
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    env = common.reference_environment()
    assert "OMP_WAIT_POLICY" not in env and env["OPENBLAS_NUM_THREADS"] == "2" and env["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setitem(common._ENVIRONMENT_AT_START, "OMP_WAIT_POLICY", "active")  # the caller's own choice
    assert common.reference_environment()["OMP_WAIT_POLICY"] == "active"
