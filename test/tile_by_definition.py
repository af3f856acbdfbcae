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
_I32, _I64 = ir.IntType(32), ir.IntType(64)
_ROW = ir.VectorType(_I32, _ROW_WORDS)
_TILE = ir.VectorType(_I32, _ROWS * _ROW_WORDS)
# each AMX intrinsic the kernels call -> the function defined here in its place (loads and stores per shape)
_TILE_FUNCTIONS = {"tileloadd64": "tile_load", "tilestored64": "tile_store", "tilezero": "tile_zero",
            "tdpbf16ps": "tile_dot_bf16", "tdpbssd": "tile_dot_s8"}


def _row_of(builder: ir.IRBuilder, tile, r: int, words: int = _ROW_WORDS):
    mask = ir.Constant(ir.VectorType(_I32, words), list(range(r * _ROW_WORDS, r * _ROW_WORDS + words)))
    return builder.shuffle_vector(tile, tile, mask)


def _joined(builder: ir.IRBuilder, rows: list):
    while len(rows) > 1:
        width = rows[0].type.count
        mask = ir.Constant(ir.VectorType(_I32, 2 * width), list(range(2 * width)))
        rows = [builder.shuffle_vector(rows[i], rows[i + 1], mask) for i in range(0, len(rows), 2)]
    return rows[0]


def _splat(builder: ir.IRBuilder, value, vector_type: ir.VectorType):
    first = builder.insert_element(ir.Constant(vector_type, None), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(first, ir.Constant(vector_type, None),
                                  ir.Constant(ir.VectorType(_I32, vector_type.count), [0] * vector_type.count))


def _define(module: ir.Module, name: str, result: ir.Type, arguments: list[ir.Type]):
    function = ir.Function(module, ir.FunctionType(result, arguments), name)
    return function, ir.IRBuilder(function.append_basic_block())


def _define_load_and_store(module: ir.Module, rows: int, colbytes: int) -> None:
    """tile_load_R_C and tile_store_R_C: `rows` rows of `colbytes` bytes, `stride` bytes apart."""
    i16, ptr = ir.IntType(16), ir.PointerType(ir.IntType(8))
    words = colbytes // 4
    narrow = ir.VectorType(_I32, words)
    widen = ir.Constant(_ROW, [i if i < words else words for i in range(_ROW_WORDS)])  # past `words`: zero

    def address(builder, base, stride, r):
        return builder.bitcast(builder.gep(base, [builder.mul(stride, ir.Constant(_I64, r))]), narrow.as_pointer())

    load, builder = _define(module, f"tile_load_{rows}_{colbytes}", _TILE, [i16, i16, ptr, _I64])
    base, stride = load.args[2:]
    loaded = []
    for r in range(_ROWS):
        if r < rows:
            value = builder.load(address(builder, base, stride, r), align=1)
            if words < _ROW_WORDS:
                value = builder.shuffle_vector(value, ir.Constant(narrow, None), widen)
            loaded.append(value)
        else:
            loaded.append(ir.Constant(_ROW, None))
    builder.ret(_joined(builder, loaded))

    store, builder = _define(module, f"tile_store_{rows}_{colbytes}", ir.VoidType(), [i16, i16, ptr, _I64, _TILE])
    base, stride, value = store.args[2:]
    for r in range(rows):
        builder.store(_row_of(builder, value, r, words), address(builder, base, stride, r), align=1)
    builder.ret_void()


def _define_dot_bf16(module: ir.Module) -> None:
    """C[m, n] += A[m, p].lo * B[p, n].lo + A[m, p].hi * B[p, n].hi over the dword pairs p of a row, each
    bf16 widened to float32 exactly."""
    i16, f32 = ir.IntType(16), ir.FloatType()
    float_row = ir.VectorType(f32, _ROW_WORDS)
    dot, builder = _define(module, "tile_dot_bf16", _TILE, [i16, i16, i16, _TILE, _TILE, _TILE])
    acc, a, b = dot.args[3:]
    b_low, b_high = [], []
    for p in range(_ROWS):
        b_row = _row_of(builder, b, p)
        b_low.append(builder.bitcast(builder.shl(b_row, ir.Constant(_ROW, [16] * _ROW_WORDS)), float_row))
        b_high.append(builder.bitcast(builder.and_(b_row, ir.Constant(_ROW, [0xFFFF0000] * _ROW_WORDS)), float_row))
    results = []
    for m in range(_ROWS):
        total = builder.bitcast(_row_of(builder, acc, m), float_row)
        for p in range(_ROWS):
            word = builder.extract_element(a, ir.Constant(_I32, m * _ROW_WORDS + p))
            halves = (builder.shl(word, ir.Constant(_I32, 16)), builder.and_(word, ir.Constant(_I32, 0xFFFF0000)))
            for half, b_half in zip(halves, (b_low[p], b_high[p])):
                a_half = _splat(builder, builder.bitcast(half, f32), float_row)
                total = builder.fadd(total, builder.fmul(a_half, b_half))
        results.append(builder.bitcast(total, _ROW))
    builder.ret(_joined(builder, results))


def _define_dot_s8(module: ir.Module) -> None:
    """C[m, n] += the four signed byte products of A[m, p] and B[p, n] over the dwords p of a row, in int32."""
    i16 = ir.IntType(16)
    dot, builder = _define(module, "tile_dot_s8", _TILE, [i16, i16, i16, _TILE, _TILE, _TILE])
    acc, a, b = dot.args[3:]
    bytes_, wide = ir.VectorType(ir.IntType(8), 4 * _ROW_WORDS), ir.VectorType(_I32, 4 * _ROW_WORDS)
    b_rows = [builder.sext(builder.bitcast(_row_of(builder, b, p), bytes_), wide) for p in range(_ROWS)]
    quads = [ir.Constant(_ROW, [4 * n + j for n in range(_ROW_WORDS)]) for j in range(4)]
    results = []
    for m in range(_ROWS):
        total = _row_of(builder, acc, m)
        for p in range(_ROWS):
            word = builder.extract_element(a, ir.Constant(_I32, m * _ROW_WORDS + p))
            products = builder.mul(builder.sext(builder.bitcast(_splat(builder, word, _ROW), bytes_), wide), b_rows[p])
            for j in range(4):
                total = builder.add(total, builder.shuffle_vector(products, products, quads[j]))
        results.append(total)
    builder.ret(_joined(builder, results))


def _tile_definitions(shapes: set[tuple[int, int]], products: set[str]) -> str:
    """The functions that stand in for the intrinsics: loads and stores of the (rows, bytes a row) in `shapes`,
    tile_zero, and the products named in `products`; the IR of their definitions alone (no module header)."""
    module = ir.Module("tile_definitions")
    for rows, colbytes in sorted(shapes):
        _define_load_and_store(module, rows, colbytes)
    zero, builder = _define(module, "tile_zero", _TILE, [ir.IntType(16), ir.IntType(16)])
    builder.ret(ir.Constant(_TILE, None))
    for op, define in (("tdpbf16ps", _define_dot_bf16), ("tdpbssd", _define_dot_s8)):
        if op in products:
            define(module)
    text = str(module).replace("i8*", "ptr")
    return "\n".join(line for line in text.splitlines() if not line.startswith(("; ModuleID", "target ")))


@functools.cache  # once a process: the symbols stay registered
def register_amx_tiles_by_definition(kernel_ir: str, symbols: tuple[str, ...]) -> None:
    """Compiles tile kernels' IR (amx_gemm's, amx_q8's) for this CPU with each AMX intrinsic replaced by its
    definition, and registers their symbols (amx_gemm.compile_tile_code, as the tiles' own code is), so numba's
    loops that call them run here as they would on the tiles."""
    shapes, products = set(), set()

    def replaced(match: re.Match) -> str:
        op, rows, colbytes = match.group(1), int(match.group(2)), int(match.group(3))
        assert rows <= _ROWS and colbytes <= 4 * _ROW_WORDS and colbytes % 4 == 0, match.group(0)
        name = _TILE_FUNCTIONS[op]
        if op in ("tileloadd64", "tilestored64"):
            shapes.add((rows, colbytes))
            name = f"{name}_{rows}_{colbytes}"
        else:
            products.add(op)
        return f"@{name}(i16 {rows}, i16 {colbytes}"

    from embodied_ros.kernels.cpu.amx_gemm import compile_tile_code
    text = "\n".join(line for line in kernel_ir.splitlines() if not re.match(r"declare .*@llvm\.x86\.", line))
    text = re.sub(rf"@llvm\.x86\.({'|'.join(_TILE_FUNCTIONS)})\.internal\(i16 (\d+), i16 (\d+)", replaced,
                  text.replace("x86_amx", "<256 x i32>"))
    leftover = set(re.findall(r"@llvm\.x86\.[\w.]+", text))
    assert not leftover, f"intrinsics without a definition here: {leftover}"
    text = re.sub(r'"target-features"="[^"]*"', "", text)
    compile_tile_code(text + "\n" + _tile_definitions(shapes, products), symbols)


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
