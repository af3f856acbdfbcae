"""The peak multiply-add rate of each arithmetic unit this CPU has, measured on one core and on every
usable core at once.

    python benchmarks/unit_peaks.py [--threads N] [--section NAME]

Each unit's instruction (or the sequence that stands for one where the CPU lacks it) runs back to
back on 12 independent accumulators whose operands stay in registers (no loads), so only the
unit's issue rate counts; its rate times the multiply-adds of one step is the peak the benchmarks
state their products against. AMX's `tdpbf16ps` runs on four accumulator tiles instead; its rate x
16 cycles, the instruction's issue interval, is shown as the clock the core ran the tiles at.
The peak of several cores is measured with each running the loop at the same time, not taken as a
multiple of one core's: a virtual machine's CPUs may be two threads of one core, sharing its units.
The table says which unit a product should use on this CPU and how far a kernel is from it: on an
AVX2-only AMD EPYC (Zen 3), for example, the int8 sequence that stands in for `vpdpbusd`
(`vpmaddubsw`, `vpmaddwd` by ones, `vpaddd`) adds 1.9x float32 FMA's products a cycle and the int16
pair (`vpmaddwd`, `vpaddd`) 1.55x.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ACCUMULATORS = 12
TILE_MACS = 16 * 16 * 32  # one tdpbf16ps


@dataclass(frozen=True)
class Unit:
    name: str
    instructions: str
    needs: tuple[str, ...]  # llvmlite's names of the CPU features it needs, all of them
    macs: int  # multiply-adds of one accumulator update
    vector: str  # the accumulator's LLVM type
    operand: str  # the LLVM type of the second multiplied operand (held in a register)
    update: str  # IR lines; the first multiplied operand is the accumulator's bits, so nothing hoists
    declare: str


_ONES16 = "<" + ", ".join(["i16 1"] * 16) + ">"
# Each update reads %acc{i} and %b and defines %out{i} (and its temporaries, suffixed {i}).
UNITS = (
    Unit("float32 FMA, 256-bit", "vfmadd231ps ymm", ("fma",), 8, "<8 x float>", "<8 x float>",
         "%out{i} = call <8 x float> @llvm.fma.v8f32(<8 x float> %acc{i}, <8 x float> %b, <8 x float> %acc{i})",
         "declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)"),
    Unit("float32 FMA, 512-bit", "vfmadd231ps zmm", ("avx512f",), 16, "<16 x float>", "<16 x float>",
         "%out{i} = call <16 x float> @llvm.fma.v16f32(<16 x float> %acc{i}, <16 x float> %b, <16 x float> %acc{i})",
         "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)"),
    Unit("bf16 pairs (AVX512-BF16)", "vdpbf16ps zmm", ("avx512bf16",), 32, "<16 x float>", "<32 x bfloat>",
         "%a{i} = bitcast <16 x float> %acc{i} to <32 x bfloat>\n"
         "%out{i} = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc{i}, <32 x bfloat> %a{i}, "
         "<32 x bfloat> %b)",
         "declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)"),
    Unit("int8 quads (AVX512-VNNI)", "vpdpbusd zmm", ("avx512f", "avx512vnni"), 64, "<16 x i32>", "<16 x i32>",
         "%out{i} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> %acc{i}, <16 x i32> %acc{i}, "
         "<16 x i32> %b)",
         "declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)"),
    Unit("int8 quads (AVX-VNNI)", "vpdpbusd ymm", ("avxvnni",), 32, "<8 x i32>", "<8 x i32>",
         "%out{i} = call <8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32> %acc{i}, <8 x i32> %acc{i}, <8 x i32> %b)",
         "declare <8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32>, <8 x i32>, <8 x i32>)"),
    Unit("int8 quads (AVX2)", "vpmaddubsw + vpmaddwd by ones + vpaddd, ymm", ("avx2",), 32, "<8 x i32>",
         "<32 x i8>",
         "%a{i} = bitcast <8 x i32> %acc{i} to <32 x i8>\n"
         "%pairs{i} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %a{i}, <32 x i8> %b)\n"
         "%quads{i} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %pairs{i}, <16 x i16> " + _ONES16 + ")\n"
         "%out{i} = add <8 x i32> %acc{i}, %quads{i}",
         "declare <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8>, <32 x i8>)\n"
         "declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)"),
    # as inline assembly, as the int16 tile writes it (in the tile LLVM's tuning for Alder Lake split the intrinsic)
    Unit("int16 pairs (AVX-VNNI)", "vpdpwssd ymm", ("avxvnni",), 16, "<8 x i32>", "<8 x i32>",
         '%out{i} = call <8 x i32> asm "{vex} vpdpwssd $2, $1, $0", "=x,x,x,0"(<8 x i32> %acc{i}, <8 x i32> %b, '
         '<8 x i32> %acc{i})', ""),
    Unit("int16 pairs (AVX2)", "vpmaddwd + vpaddd, ymm", ("avx2",), 16, "<8 x i32>", "<16 x i16>",
         "%a{i} = bitcast <8 x i32> %acc{i} to <16 x i16>\n"
         "%pairs{i} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %a{i}, <16 x i16> %b)\n"
         "%out{i} = add <8 x i32> %acc{i}, %pairs{i}",
         "declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)"),
)


def _vector_ir(unit: Unit) -> str:
    """`void peak(ptr operands, i64 n)`: n rounds of 12 updates; the sums are stored to operands."""
    entry = [f"  %b = load {unit.operand}, ptr %operands, align 64"]
    loop = []
    for i in range(ACCUMULATORS):
        loop.append(f"  %acc{i} = phi {unit.vector} [zeroinitializer, %entry], [%out{i}, %loop]")
    loop += [f"  {line}" for i in range(ACCUMULATORS) for line in unit.update.replace("{i}", str(i)).splitlines()]
    total = "%out0"
    done = []
    for i in range(1, ACCUMULATORS):
        op = "fadd" if "float" in unit.vector else "add"
        done.append(f"  %sum{i} = {op} {unit.vector} {total}, %out{i}")
        total = f"%sum{i}"
    done.append(f"  store {unit.vector} {total}, ptr %operands, align 64")
    return "\n".join([
        'target triple = "x86_64-unknown-linux-gnu"', unit.declare,
        "define void @peak(ptr %operands, i64 %n) {", "entry:", *entry, "  br label %loop", "loop:",
        "  %i = phi i64 [0, %entry], [%next, %loop]", *loop, "  %next = add i64 %i, 1",
        "  %more = icmp ult i64 %next, %n", "  br i1 %more, label %loop, label %done", "done:", *done,
        "  ret void", "}"])


_TILE_CONFIG = "c\"\\01" + "\\00" * 15 + "@\\00" * 6 + "\\00" * 20 + "\\10" * 6 + "\\00" * 10 + "\""
_TILE_IR = r"""
target triple = "x86_64-unknown-linux-gnu"
@config = private constant [64 x i8] CONFIG, align 64
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tilerelease()
declare void @llvm.x86.tilezero(i8 immarg)
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
define void @peak(ptr %operands, i64 %n) #0 {
entry:
  call void @llvm.x86.ldtilecfg(ptr @config)
  call void @llvm.x86.tilezero(i8 0)
  call void @llvm.x86.tilezero(i8 1)
  call void @llvm.x86.tilezero(i8 2)
  call void @llvm.x86.tilezero(i8 3)
  call void @llvm.x86.tilezero(i8 4)
  call void @llvm.x86.tilezero(i8 5)
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  call void @llvm.x86.tdpbf16ps(i8 0, i8 4, i8 5)
  call void @llvm.x86.tdpbf16ps(i8 1, i8 4, i8 5)
  call void @llvm.x86.tdpbf16ps(i8 2, i8 4, i8 5)
  call void @llvm.x86.tdpbf16ps(i8 3, i8 4, i8 5)
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  call void @llvm.x86.tilerelease()
  ret void
}
attributes #0 = { nounwind "target-features"="+amx-tile,+amx-bf16" }
""".replace("CONFIG", _TILE_CONFIG)


def _compiled(ir_text: str):
    """The function `peak` of ir_text for this CPU, with the engine that holds its code."""
    from llvmlite import binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()  # for the units written as inline assembly
    module = llvm.parse_assembly(ir_text)
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("peak")), engine


def _rates(function, steps_per_round: int, rounds: int, threads: int = 1) -> list[float]:
    """Steps per second of each of `threads` threads running the function at the same time (ctypes lets
    the GIL go for the call), each its best of 3 runs, the runs started together."""
    start_together = threading.Barrier(threads)
    rates = [0.0] * threads

    def run(thread: int) -> None:
        operands = (ctypes.c_uint8 * 128 * 2)()
        address = (ctypes.addressof(operands) + 63) // 64 * 64
        ctypes.memset(address, 1, 64)
        function(address, 1000)
        best = float("inf")
        for _ in range(3):
            start_together.wait()
            start = time.perf_counter()
            function(address, rounds)
            best = min(best, time.perf_counter() - start)
        rates[thread] = steps_per_round * rounds / best

    others = [threading.Thread(target=run, args=(thread,)) for thread in range(1, threads)]
    for other in others:
        other.start()
    run(0)
    for other in others:
        other.join()
    return rates


def available(unit: Unit) -> bool:
    """True where the CPU has every feature the unit needs."""
    from llvmlite import binding as llvm
    features = llvm.get_host_cpu_features()
    return all(features.get(name, False) for name in unit.needs)


def sharing(threads: int, windows: int = 300) -> str:
    """One sentence: how often `threads` cores running float32 FMA at once got `threads` times one core's
    rate, over `windows` short windows (each thread's best of 3 runs of about 2 ms)."""
    function, _engine = _compiled(_vector_ir(UNITS[0]))
    rounds = 1_000_000  # about 2 ms a run at 50 multiply-adds a ns
    one = max(sum(_rates(function, ACCUMULATORS, rounds)) for _ in range(5))
    ratios = sorted(sum(_rates(function, ACCUMULATORS, rounds, threads)) / one for _ in range(windows))
    full = sum(ratio >= 0.9 * threads for ratio in ratios) / windows
    return (f"{threads} cores running float32 FMA at once, in {windows} windows of a few ms each: at least "
            f"{0.9 * threads:.1f}x one core's rate in {100 * full:.0f}% of them, median {ratios[windows // 2]:.2f}x, "
            f"lowest {ratios[0]:.2f}x (under {threads}x, the CPUs were sharing one core's units or time).")


def measure(threads: int) -> list[dict]:
    """One row per unit this CPU has: multiply-adds per ns on one core and on `threads` cores at once,
    and one core's vs float32 FMA's."""
    rows = []
    at_once = f"multiply-adds per ns, {threads} cores at once"
    for unit in UNITS:
        if not available(unit):
            continue
        function, _engine = _compiled(_vector_ir(unit))
        one, many = (sum(_rates(function, ACCUMULATORS, 10_000_000, n)) * unit.macs / 1e9 for n in (1, threads))
        rows.append({"unit": unit.name, "instructions": unit.instructions, "multiply-adds a step": unit.macs,
                     "multiply-adds per ns, one core": one, at_once: many})
    if tile_peak_tflops() is not None:
        rows.append({"unit": "bf16 tiles (AMX)", "instructions": "tdpbf16ps", "multiply-adds a step": TILE_MACS,
                     "multiply-adds per ns, one core": tile_peak_tflops() * 1e3 / 2,
                     at_once: tile_peak_tflops(threads) * 1e3 / 2})
    fma = next((row["multiply-adds per ns, one core"] for row in rows if row["unit"] == UNITS[0].name), None)
    for row in rows:
        row["vs float32 FMA, 256-bit"] = fma and row["multiply-adds per ns, one core"] / fma
    return rows


@functools.cache
def tile_peak_tflops(threads: int = 1) -> float | None:
    """bf16 TFLOP/s of the tiles of `threads` cores at once (each its best of 3 runs), None without them."""
    from embodied_ros.kernels.cpu.amx_gemm import tile_units_available
    if not tile_units_available():  # also asks the kernel for the process's tile state
        return None
    function, engine = _compiled(_TILE_IR)
    _ENGINES.append(engine)  # the function's code lives as long as its engine
    return sum(_rates(function, 4, 5_000_000, threads)) * TILE_MACS * 2 / 1e12


_ENGINES = []


def describe(threads: int) -> str:
    """One sentence: the tiles' peak measured on one core and on `threads` cores at once."""
    one = tile_peak_tflops()
    if one is None:
        return "This CPU has no AMX tiles."
    ghz = one * 1e12 / (2 * TILE_MACS) * 16 / 1e9
    many = tile_peak_tflops(threads)
    return (f"The tiles' bf16 peak (tdpbf16ps back to back, operands in the tiles), measured: {one:.2f} TFLOP/s "
            f"on one core ({ghz:.2f} GHz effective at 1024 multiply-adds a cycle), {many:.2f} on {threads} cores "
            f"at once ({many / one:.2f}x one core's).")


def main(argv=None) -> int:
    import common
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="cores measured at once (default: every usable one)")
    parser.add_argument("--section", default=None, help="write the table as this BENCHMARKS.md section")
    args = parser.parse_args(argv)
    body = common.markdown_table(measure(args.threads))
    if args.threads > 1:
        body += "\n\n" + sharing(args.threads)
    print(body)
    if args.section:
        command = f"python benchmarks/unit_peaks.py --threads {args.threads} --section {args.section}"
        common.write_section(Path(__file__).resolve().parent.parent / "BENCHMARKS.md", args.section, body,
                             command=command,
                             machine=common.machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
