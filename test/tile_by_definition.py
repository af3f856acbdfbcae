"""Runs kernels emitted for another CPU on this one, each instruction this CPU lacks replaced by its definition
in plain LLVM IR and the rest compiled as the kernel emits it. A register tile's inline assembly (AVX-VNNI's
`vpdpbusd` / `vpdpwssd`, in AT&T order: second source, first source, destination; its operands read from the
assembly string and constraints as the assembler would take them), called on arrays' addresses
(`compile_tile`); the AMX tile kernels' intrinsics, registered under the kernels' own symbols for numba's
loops to call (`register_amx_tiles_by_definition`)."""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Callable

from llvmlite import binding as llvm_binding
from llvmlite import ir

_LANES = 8  # int32 lanes of a 256-bit vector
# op -> (bits of an element, whether the first operand is signed); the second is signed for both
_DEFINED = {"vpdpbusd": (8, False), "vpdpwssd": (16, True)}


def _operands(asm: ir.InlineAsm) -> tuple[str, tuple[int, int, int]]:
    """(op, the call's argument indices of the first source, the second source and the accumulator)."""
    op, *operands = asm.asm.replace(",", " ").split()[1:]
    second, first, destination = (int(o.lstrip("$")) for o in operands)
    constraints = asm.constraint.split(",")
    outputs = sum(c.startswith("=") for c in constraints)
    inputs = constraints[outputs:]
    assert destination == 0 and outputs == 1 and inputs.count("0") == 1, asm.asm
    return op, (first - outputs, second - outputs, inputs.index("0"))


def _definition(module: ir.Module, op: str, order: tuple[int, int, int]) -> ir.Function:
    """acc + the sums of `32 / bits` neighbouring element products in each int32 lane, wrapping; its
    arguments in the call's order."""
    bits, first_signed = _DEFINED[op]
    per_lane = 32 // bits
    i32 = ir.IntType(32)
    ints, narrow, wide = (ir.VectorType(i32, _LANES), ir.VectorType(ir.IntType(bits), _LANES * per_lane),
                          ir.VectorType(i32, _LANES * per_lane))
    function = ir.Function(module, ir.FunctionType(ints, [ints] * 3), f"{op}_{''.join(map(str, order))}")
    function.linkage = "internal"
    builder = ir.IRBuilder(function.append_basic_block())
    first, second, total = (function.args[i] for i in order)
    first = (builder.sext if first_signed else builder.zext)(builder.bitcast(first, narrow), wide)
    products = builder.mul(first, builder.sext(builder.bitcast(second, narrow), wide))
    for k in range(per_lane):
        mask = ir.Constant(ir.VectorType(i32, _LANES), [per_lane * lane + k for lane in range(_LANES)])
        total = builder.add(total, builder.shuffle_vector(products, products, mask))
    builder.ret(total)
    return function


def compile_tile(emit: Callable[[ir.IRBuilder, list], None], arguments: list[ir.Type]) -> tuple[Callable, set[str]]:
    """emit(builder, args) writes a tile into a function of `arguments`; returns it callable through
    ctypes (i64 as c_uint64, i1 as c_bool) and the instructions replaced by their definitions."""
    module = ir.Module("tile")
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), arguments), "tile")
    builder = ir.IRBuilder(function.append_basic_block())
    emit(builder, list(function.args))
    builder.ret_void()
    replaced, definitions = set(), {}
    for block in function.blocks:
        for instruction in block.instructions:
            if isinstance(instruction, ir.CallInstr) and isinstance(instruction.callee, ir.InlineAsm):
                op, order = _operands(instruction.callee)
                if (op, order) not in definitions:
                    definitions[op, order] = _definition(module, op, order)
                instruction.replace_callee(definitions[op, order])
                replaced.add(op)
    llvm_binding.initialize_native_target()
    llvm_binding.initialize_native_asmprinter()
    parsed = llvm_binding.parse_assembly(str(module))
    parsed.verify()
    machine = llvm_binding.Target.from_default_triple().create_target_machine(
        cpu=llvm_binding.get_host_cpu_name(), features=llvm_binding.get_host_cpu_features().flatten(), opt=2)
    engine = llvm_binding.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    kinds = [ctypes.c_bool if isinstance(t, ir.IntType) and t.width == 1 else ctypes.c_uint64 for t in arguments]
    tile = ctypes.CFUNCTYPE(None, *kinds)(engine.get_function_address("tile"))
    tile.engine = engine  # the compiled code lives as long as the engine
    return tile, replaced


# The AMX intrinsics the tile kernels call, each replaced by a function of that name defined below, over a
# tile held as <256 x i32> (16 rows of 64 bytes) instead of the x86_amx register type.
_TILE_INTRINSICS = {"llvm.x86.tileloadd64.internal": "tile_load", "llvm.x86.tdpbf16ps.internal": "tile_dot_bf16",
                    "llvm.x86.tilestored64.internal": "tile_store", "llvm.x86.tilezero.internal": "tile_zero"}
_ROWS, _ROW_WORDS = 16, 16  # a full tile: 16 rows of 16 dwords


def _tile_definitions() -> ir.Module:
    """A full tile's load, store and zero, and tdpbf16ps: C[m, n] += A[m, p].lo * B[p, n].lo + A[m, p].hi *
    B[p, n].hi over the 16 dword pairs p of a row, each bf16 widened to float32 exactly."""
    module = ir.Module("tile_definitions")
    i16, i32, i64, f32 = ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType()
    ptr = ir.PointerType(ir.IntType(8))
    tile, row, float_row = ir.VectorType(i32, _ROWS * _ROW_WORDS), ir.VectorType(i32, _ROW_WORDS), ir.VectorType(f32, _ROW_WORDS)

    def define(name, result, arguments):
        function = ir.Function(module, ir.FunctionType(result, arguments), name)
        return function, ir.IRBuilder(function.append_basic_block())

    def row_of(builder, value, r):
        return builder.shuffle_vector(value, value, ir.Constant(row, list(range(r * _ROW_WORDS, (r + 1) * _ROW_WORDS))))

    def joined(builder, rows):
        while len(rows) > 1:
            width = rows[0].type.count
            mask = ir.Constant(ir.VectorType(i32, 2 * width), list(range(2 * width)))
            rows = [builder.shuffle_vector(rows[i], rows[i + 1], mask) for i in range(0, len(rows), 2)]
        return rows[0]

    def address(builder, base, stride, r):
        return builder.gep(base, [builder.mul(stride, ir.Constant(i64, r))])

    load, builder = define("tile_load", tile, [i16, i16, ptr, i64])
    base, stride = load.args[2:]
    rows = []
    for r in range(_ROWS):
        pointer = builder.bitcast(address(builder, base, stride, r), row.as_pointer())
        rows.append(builder.load(pointer, align=1))
    builder.ret(joined(builder, rows))

    store, builder = define("tile_store", ir.VoidType(), [i16, i16, ptr, i64, tile])
    base, stride, value = store.args[2:]
    for r in range(_ROWS):
        builder.store(row_of(builder, value, r), builder.bitcast(address(builder, base, stride, r), row.as_pointer()),
                      align=1)
    builder.ret_void()

    zero, builder = define("tile_zero", tile, [i16, i16])
    builder.ret(ir.Constant(tile, None))

    dot, builder = define("tile_dot_bf16", tile, [i16, i16, i16, tile, tile, tile])
    acc, a, b = dot.args[3:]
    high_half = ir.Constant(i32, 0xFFFF0000)
    sixteen = ir.Constant(i32, 16)
    b_low, b_high = [], []
    for p in range(_ROWS):
        b_row = row_of(builder, b, p)
        b_low.append(builder.bitcast(builder.shl(b_row, ir.Constant(row, [16] * _ROW_WORDS)), float_row))
        b_high.append(builder.bitcast(builder.and_(b_row, ir.Constant(row, [0xFFFF0000] * _ROW_WORDS)), float_row))
    results = []
    for m in range(_ROWS):
        total = builder.bitcast(row_of(builder, acc, m), float_row)
        for p in range(_ROWS):
            word = builder.extract_element(a, ir.Constant(i32, m * _ROW_WORDS + p))
            for half, b_half in ((builder.shl(word, sixteen), b_low[p]), (builder.and_(word, high_half), b_high[p])):
                value = builder.bitcast(half, f32)
                splat = builder.shuffle_vector(builder.insert_element(ir.Constant(float_row, None), value, ir.Constant(i32, 0)),
                                               ir.Constant(float_row, None), ir.Constant(row, [0] * _ROW_WORDS))
                total = builder.fadd(total, builder.fmul(splat, b_half))
        results.append(builder.bitcast(total, row))
    builder.ret(joined(builder, results))
    return module


@functools.cache  # once a process: the symbols stay registered, and the engine holding their code is kept
def register_amx_tiles_by_definition(kernel_ir: str, symbols: tuple[str, ...]) -> object:
    """Compiles the tile kernels' IR (amx_gemm's) for this CPU with each AMX intrinsic replaced by its
    definition, and registers their symbols, so numba's loops that call them run here as they would on the
    tiles. Only full tiles (16 rows of 64 bytes, as the kernels configure every one) are defined. Returns the
    engine holding the code."""
    text = kernel_ir.replace("x86_amx", "<256 x i32>")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("declare "))
    shapes = set(re.findall(r"@llvm\.x86\.\w+\.internal\((i16 \d+, i16 \d+)", text))
    assert shapes <= {"i16 16, i16 64"}, f"tiles other than 16 x 64 bytes: {shapes}"
    for intrinsic, name in _TILE_INTRINSICS.items():
        text = text.replace(f"@{intrinsic}(", f"@{name}(")
    leftover = set(re.findall(r"@llvm\.x86\.[\w.]+", text))
    assert not leftover, f"intrinsics without a definition here: {leftover}"
    text = re.sub(r'"target-features"="[^"]*"', "", text)
    declarations = "\n".join(f"declare {line}" for line in (
        "<256 x i32> @tile_load(i16, i16, ptr, i64)", "void @tile_store(i16, i16, ptr, i64, <256 x i32>)",
        "<256 x i32> @tile_zero(i16, i16)", "<256 x i32> @tile_dot_bf16(i16, i16, i16, <256 x i32>, <256 x i32>, <256 x i32>)"))
    llvm_binding.initialize_native_target()
    llvm_binding.initialize_native_asmprinter()
    kernels = llvm_binding.parse_assembly(text + "\n" + declarations)
    definitions = llvm_binding.parse_assembly(str(_tile_definitions()))
    definitions.triple = kernels.triple
    kernels.link_in(definitions)
    kernels.verify()
    machine = llvm_binding.Target.from_default_triple().create_target_machine(
        cpu=llvm_binding.get_host_cpu_name(), features=llvm_binding.get_host_cpu_features().flatten(), opt=2)
    engine = llvm_binding.create_mcjit_compiler(kernels, machine)
    engine.finalize_object()
    for symbol in symbols:
        llvm_binding.add_symbol(symbol, engine.get_function_address(symbol))
    return engine
