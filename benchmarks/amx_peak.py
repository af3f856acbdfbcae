"""The bf16 peak of the AMX tiles on one core, measured: `tdpbf16ps` back to back on four accumulator
tiles whose operands never leave the tile registers (no loads), so only the unit's rate counts.

    python benchmarks/amx_peak.py

One `tdpbf16ps` is 16 x 16 x 32 multiply-adds; its rate times that is the peak the benchmarks state
their products against (the clock is the one the core runs the tiles at, shown as "effective GHz":
the rate x 16 cycles, the instruction's issue interval). Needs a CPU with AMX tiles.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import time

_CONFIG = "c\"\\01" + "\\00" * 15 + "@\\00" * 6 + "\\00" * 20 + "\\10" * 6 + "\\00" * 10 + "\""
_IR = r"""
target triple = "x86_64-unknown-linux-gnu"
@config = private constant [64 x i8] CONFIG, align 64
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tilerelease()
declare void @llvm.x86.tilezero(i8 immarg)
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
define void @embodied_ros_amx_peak(i64 %n) #0 {
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
""".replace("CONFIG", _CONFIG)
MACS_PER_INSTRUCTION = 16 * 16 * 32


@functools.cache
def tile_peak_tflops() -> float | None:
    """bf16 TFLOP/s of one core's tiles (best of 3 runs of 0.1-0.2 s), None without them."""
    from llvmlite import binding as llvm

    from embodied_ros.kernels.cpu.amx_gemm import tile_units_available
    if not tile_units_available():  # also asks the kernel for the tile state
        return None
    module = llvm.parse_assembly(_IR)
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    spin = ctypes.CFUNCTYPE(None, ctypes.c_int64)(engine.get_function_address("embodied_ros_amx_peak"))
    n = 5_000_000
    spin(1000)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        spin(n)
        best = min(best, time.perf_counter() - start)
    tile_peak_tflops.engine = engine  # the function's code lives as long as its engine
    return 4 * n * MACS_PER_INSTRUCTION * 2 / best / 1e12


def describe(threads: int) -> str:
    """One sentence: the measured peak per core and for `threads` cores."""
    peak = tile_peak_tflops()
    if peak is None:
        return "This CPU has no AMX tiles."
    ghz = peak * 1e12 / (2 * MACS_PER_INSTRUCTION) * 16 / 1e9
    return (f"The tiles' bf16 peak, measured on one core (tdpbf16ps back to back, operands in the tiles): "
            f"{peak:.2f} TFLOP/s ({ghz:.2f} GHz effective at 1024 multiply-adds a cycle), {threads * peak:.2f} "
            f"on {threads} cores.")


if __name__ == "__main__":
    print(describe(2))
    sys.exit(0 if tile_peak_tflops() else 1)
