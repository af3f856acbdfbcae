"""Runs a register tile emitted for another CPU on this one: each inline-assembly instruction in it (AVX-VNNI's
`vpdpbusd` / `vpdpwssd`, in AT&T order: second source, first source, destination) is replaced by its
definition in plain LLVM IR, its operands read from the assembly string and constraints as the assembler
would take them, and the rest of the tile, as the kernel emits it, is compiled for this CPU and called on
arrays' addresses."""

from __future__ import annotations

import ctypes
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
