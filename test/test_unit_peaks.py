"""benchmarks/unit_peaks.py: every unit's loop is valid IR, and the units this CPU has run and count."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "unit_peaks.py"
spec = importlib.util.spec_from_file_location("benchmarks_unit_peaks", PATH)
unit_peaks = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = unit_peaks  # dataclasses look their module up there
spec.loader.exec_module(unit_peaks)


@pytest.mark.parametrize("unit", unit_peaks.UNITS, ids=lambda unit: unit.name)
def test_every_units_loop_parses(unit):
    from llvmlite import binding as llvm
    module = llvm.parse_assembly(unit_peaks._vector_ir(unit))
    module.verify()
    assert unit.update.count("%out{i} =") == 1  # one accumulator update a step


def test_the_units_this_cpu_has_run_at_a_positive_rate():
    available = [unit for unit in unit_peaks.UNITS if unit_peaks.available(unit)]
    assert available, "every x86-64 CPU the project supports has FMA"
    for unit in available:
        function, _engine = unit_peaks._compiled(unit_peaks._vector_ir(unit))
        steps_per_s = unit_peaks._rates(function, unit_peaks.ACCUMULATORS, 10_000)
        assert len(steps_per_s) == 1 and 1e6 < steps_per_s[0] < 1e12, unit.name


def test_several_cores_are_measured_at_once():
    """Each thread runs and times its own loop, the runs started together (no multiple of one core)."""
    function, _engine = unit_peaks._compiled(unit_peaks._vector_ir(unit_peaks.UNITS[0]))
    rates = unit_peaks._rates(function, unit_peaks.ACCUMULATORS, 10_000, threads=3)
    assert len(rates) == 3 and all(1e6 < rate < 1e12 for rate in rates)


def test_sharing_states_the_windows_and_their_spread():
    sentence = unit_peaks.sharing(2, windows=7)
    median, lowest = (float(re.search(rf"{word} ([0-9.]+)x", sentence).group(1)) for word in ("median", "lowest"))
    assert "in 7 windows" in sentence and 0 < lowest <= median


@pytest.mark.parametrize("unit", [u for u in unit_peaks.UNITS if "AVX-VNNI" in u.name], ids=lambda unit: unit.name)
def test_the_avx_vnni_units_are_their_instruction_on_such_a_cpu(unit):
    """Compiled for Alder Lake whatever this CPU is: one `vpdpbusd` / `vpdpwssd` per accumulator a round."""
    from llvmlite import binding as llvm
    llvm.initialize_native_asmparser()
    module = llvm.parse_assembly(unit_peaks._vector_ir(unit))
    assembly = llvm.Target.from_default_triple().create_target_machine(cpu="alderlake", opt=2).emit_assembly(module)
    assert assembly.count(unit.instructions.split()[0]) == unit_peaks.ACCUMULATORS
    assert "vpmaddwd" not in assembly
