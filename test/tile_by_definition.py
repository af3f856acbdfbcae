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


# A tile is held as <256 x i32>: 16 rows of 16 dwords (64 bytes), zero past the rows and bytes it was loaded
# with, so the products need not know their shapes: zeros add nothing.
_ROWS, _ROW_WORDS = 16, 16
_TILE_OPS = ("tileloadd64", "tilestored64", "tilezero", "tdpbf16ps", "tdpbssd")


def _tile_definitions(shapes: set[tuple[int, int]], products: set[str]) -> ir.Module:
    """tile_load_R_C / tile_store_R_C for each (rows, bytes a row) in `shapes`, tile_zero, and the
    products: tdpbf16ps (C[m, n] += A[m, p].lo * B[p, n].lo + A[m, p].hi * B[p, n].hi over the dword pairs p
    of a row, each bf16 widened to float32 exactly) and tdpbssd (C[m, n] += the four signed byte products of
    A[m, p] and B[p, n], summed in int32), those of `products` only."""
    module = ir.Module("tile_definitions")
    i16, i32, i64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
    ptr = ir.PointerType(ir.IntType(8))
    tile, row = ir.VectorType(i32, _ROWS * _ROW_WORDS), ir.VectorType(i32, _ROW_WORDS)
    zero_row = ir.Constant(row, None)

    def define(name, result, arguments):
        function = ir.Function(module, ir.FunctionType(result, arguments), name)
        return function, ir.IRBuilder(function.append_basic_block())

    def row_of(builder, value, r, words=_ROW_WORDS):
        mask = ir.Constant(ir.VectorType(i32, words), list(range(r * _ROW_WORDS, r * _ROW_WORDS + words)))
        return builder.shuffle_vector(value, value, mask)

    def joined(builder, rows):
        while len(rows) > 1:
            width = rows[0].type.count
            mask = ir.Constant(ir.VectorType(i32, 2 * width), list(range(2 * width)))
            rows = [builder.shuffle_vector(rows[i], rows[i + 1], mask) for i in range(0, len(rows), 2)]
        return rows[0]

    def address(builder, base, stride, r):
        return builder.gep(base, [builder.mul(stride, ir.Constant(i64, r))])

    def splat(builder, value, vector_type):
        first = builder.insert_element(ir.Constant(vector_type, None), value, ir.Constant(i32, 0))
        return builder.shuffle_vector(first, ir.Constant(vector_type, None),
                                      ir.Constant(ir.VectorType(i32, vector_type.count), [0] * vector_type.count))

    for rows, colbytes in sorted(shapes):
        words = colbytes // 4
        narrow = ir.VectorType(i32, words)
        widen = ir.Constant(row, [i if i < words else words for i in range(_ROW_WORDS)])  # past `words`: zero

        load, builder = define(f"tile_load_{rows}_{colbytes}", tile, [i16, i16, ptr, i64])
        base, stride = load.args[2:]
        loaded = []
        for r in range(_ROWS):
            if r < rows:
                value = builder.load(builder.bitcast(address(builder, base, stride, r), narrow.as_pointer()), align=1)
                if words < _ROW_WORDS:
                    value = builder.shuffle_vector(value, ir.Constant(narrow, None), widen)
                loaded.append(value)
            else:
                loaded.append(zero_row)
        builder.ret(joined(builder, loaded))

        store, builder = define(f"tile_store_{rows}_{colbytes}", ir.VoidType(), [i16, i16, ptr, i64, tile])
        base, stride, value = store.args[2:]
        for r in range(rows):
            builder.store(row_of(builder, value, r, words),
                          builder.bitcast(address(builder, base, stride, r), narrow.as_pointer()), align=1)
        builder.ret_void()

    zero, builder = define("tile_zero", tile, [i16, i16])
    builder.ret(ir.Constant(tile, None))

    if "tdpbf16ps" in products:
        _define_dot_bf16(*define("tile_dot_bf16", tile, [i16, i16, i16, tile, tile, tile]), row_of, joined, splat)
    if "tdpbssd" in products:
        _define_dot_s8(*define("tile_dot_s8", tile, [i16, i16, i16, tile, tile, tile]), row_of, joined, splat)
    return module


def _define_dot_bf16(dot, builder, row_of, joined, splat) -> None:
    i32, f32 = ir.IntType(32), ir.FloatType()
    row, float_row = ir.VectorType(i32, _ROW_WORDS), ir.VectorType(f32, _ROW_WORDS)
    acc, a, b = dot.args[3:]
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
            halves = (builder.shl(word, ir.Constant(i32, 16)), builder.and_(word, ir.Constant(i32, 0xFFFF0000)))
            for half, b_half in zip(halves, (b_low[p], b_high[p])):
                total = builder.fadd(total, builder.fmul(splat(builder, builder.bitcast(half, f32), float_row), b_half))
        results.append(builder.bitcast(total, row))
    builder.ret(joined(builder, results))


def _define_dot_s8(dot, builder, row_of, joined, splat) -> None:
    i8, i32 = ir.IntType(8), ir.IntType(32)
    row = ir.VectorType(i32, _ROW_WORDS)
    acc, a, b = dot.args[3:]
    bytes_, wide = ir.VectorType(i8, 4 * _ROW_WORDS), ir.VectorType(i32, 4 * _ROW_WORDS)
    b_rows = [builder.sext(builder.bitcast(row_of(builder, b, p), bytes_), wide) for p in range(_ROWS)]
    quads = [ir.Constant(row, [4 * n + j for n in range(_ROW_WORDS)]) for j in range(4)]
    results = []
    for m in range(_ROWS):
        total = row_of(builder, acc, m)
        for p in range(_ROWS):
            word = builder.extract_element(a, ir.Constant(i32, m * _ROW_WORDS + p))
            a_bytes = builder.sext(builder.bitcast(splat(builder, word, row), bytes_), wide)
            products = builder.mul(a_bytes, b_rows[p])
            for j in range(4):
                total = builder.add(total, builder.shuffle_vector(products, products, quads[j]))
        results.append(total)
    builder.ret(joined(builder, results))


@functools.cache  # once a process: the symbols stay registered, and the engine holding their code is kept
def register_amx_tiles_by_definition(kernel_ir: str, symbols: tuple[str, ...]) -> object:
    """Compiles tile kernels' IR (amx_gemm's, amx_q8's) for this CPU with each AMX intrinsic replaced by its
    definition, and registers their symbols, so numba's loops that call them run here as they would on the
    tiles. Returns the engine holding the code."""
    shapes, products = set(), set()

    def replaced(match: re.Match) -> str:
        op, rows, colbytes = match.group(1), int(match.group(2)), int(match.group(3))
        assert rows <= _ROWS and colbytes <= 4 * _ROW_WORDS and colbytes % 4 == 0, match.group(0)
        if op in ("tileloadd64", "tilestored64"):
            shapes.add((rows, colbytes))
            name = f"{'tile_load' if op == 'tileloadd64' else 'tile_store'}_{rows}_{colbytes}"
        else:
            products.add(op)
            name = {"tilezero": "tile_zero", "tdpbf16ps": "tile_dot_bf16", "tdpbssd": "tile_dot_s8"}[op]
        return f"@{name}(i16 {rows}, i16 {colbytes}"

    text = kernel_ir.replace("x86_amx", "<256 x i32>")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("declare <256 x i32>")
                     and not re.match(r"declare void @llvm\.x86\.", line))
    text = re.sub(rf"@llvm\.x86\.({'|'.join(_TILE_OPS)})\.internal\(i16 (\d+), i16 (\d+)", replaced, text)
    leftover = set(re.findall(r"@llvm\.x86\.[\w.]+", text))
    assert not leftover, f"intrinsics without a definition here: {leftover}"
    text = re.sub(r'"target-features"="[^"]*"', "", text)
    definitions = _tile_definitions(shapes, products)
    declarations = "\n".join(f"declare {f.ftype.return_type} @{f.name}({', '.join(str(t) for t in f.ftype.args)})"
                             for f in definitions.functions)
    llvm_binding.initialize_native_target()
    llvm_binding.initialize_native_asmprinter()
    kernels = llvm_binding.parse_assembly(text + "\n" + declarations.replace("i8*", "ptr"))
    parsed = llvm_binding.parse_assembly(str(definitions))
    parsed.triple = kernels.triple
    kernels.link_in(parsed)
    kernels.verify()
    machine = llvm_binding.Target.from_default_triple().create_target_machine(
        cpu=llvm_binding.get_host_cpu_name(), features=llvm_binding.get_host_cpu_features().flatten(), opt=2)
    engine = llvm_binding.create_mcjit_compiler(kernels, machine)
    engine.finalize_object()
    for symbol in symbols:
        llvm_binding.add_symbol(symbol, engine.get_function_address(symbol))
    return engine


def tile_instructions_for_sapphire_rapids(kernel_ir: str) -> tuple[dict[str, int], dict[str, int]]:
    """(tile instructions in the kernels' assembly for a Sapphire Rapids, tile intrinsic calls in their IR), by
    mnemonic: equal counts mean LLVM configured every tile shape and spilled no tile."""
    calls = re.findall(r"call \S+ @llvm\.x86\.(\w+?)(?:64)?\.internal", kernel_ir)
    llvm_binding.initialize_native_target()
    llvm_binding.initialize_native_asmprinter()
    machine = llvm_binding.Target.from_default_triple().create_target_machine(
        cpu="sapphirerapids", features="+amx-tile,+amx-int8,+amx-bf16,+avx512f", opt=3)
    assembly = machine.emit_assembly(llvm_binding.parse_assembly(kernel_ir))
    emitted = re.findall(r"^\s+(t(?:ileloadd|ilestored|ilezero|dpbf16ps|dpbssd))\b", assembly, re.M)
    return ({op: emitted.count(op) for op in set(emitted)}, {op: calls.count(op) for op in set(calls)})
