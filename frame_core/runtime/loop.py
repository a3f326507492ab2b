"""The steps of a scan over one compiled body, as one generated Python function (``Executable.scan_steps``).

A scan kernel that calls its body's runner once per step pays, per step, the
runner's call, its argument list, its ``try`` and its result list, and then
copies each per-step output into its row of the stacked result. Here the
body's instructions are written inline into the loop instead:

- the body's planned buffers are its own, planned once for every iteration;
- a per-step output made by a kernel that takes an ``out`` array is written by
  that kernel straight into its row of the stacked result (``out`` is the
  row), so nothing is copied; other per-step outputs are copied into their row;
- the rows a step reads and writes are walked with the step number, by ``zip`` over slices of the
  stacked arrays (each row's view made in C rather than by a subscript per step);
- when every new carry is the one output of a kernel that takes ``out`` and none is stacked, each is
  written into one of two arrays of the loop's own by turns (the step reads the other) and copied out
  once after the loop, so nothing is allocated per step; any other kind of carry (an input passed on,
  a view, a stacked one) could alias those arrays across steps, and then no carry uses them;
- a per-step output that is a carry *entering* the step (what a saving body
  returns as the trajectory) while that carry's new value is itself stacked is
  not copied per step: after the loop its rows are the other stack's, shifted
  by one, and the initial carry (one block copy);
- every kernel result gets a cheap check per step, by identity when the
  kernel was given an ``out`` array (it must return it), otherwise by class,
  dtype and shape and by identity against the call's inputs and the node's
  other outputs. A result that fails it goes to the executable's full
  result check, so a kernel that goes wrong at a later step is named
  (``KernelError``, its op and pack), where it would otherwise surface as a
  wrong dtype in a later kernel or be cast silently into a row. A result that
  passes the full check is used (copied into its row if it is not the row).

The caller runs the body's first step through the checked runner
(``Executable.unchecked``) and the rest here; an executable compiled with
``checks`` (``FRAME_CHECKS=1``) is not run here at all (its caller keeps the
checked runner for every step). Results are the runner's bit for bit: the
same kernels on the same values, only fewer copies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compiler.fused import FUSED_OP

if TYPE_CHECKING:
    from .executable import Executable

__all__ = ["scan_steps"]

_FILENAME = "<frame scan steps>"


def _trajectory(stack: np.ndarray, follows: np.ndarray, order: range, entry: np.ndarray) -> None:
    """Rows ``order`` of ``stack`` = the carry entering each step: ``entry`` first, then the rows of ``follows``
    (the carry each step left) one step behind, as one block copy. ``order`` steps by +1 or -1."""
    if not len(order):
        return
    first, last = order[0], order[-1]
    stack[first] = entry
    if order.step > 0:
        stack[first + 1:last + 1] = follows[first:last]
    else:
        stack[last:first] = follows[last + 1:first + 1]


def _span(order: range) -> slice:
    """The rows ``order`` visits (a range of step +1 or -1), as a slice: iterating a stacked array's slice makes
    each row's view in C, where indexing it by ``_i`` goes through Python's subscript every step."""
    if order.step < 0 and order.stop < 0:
        return slice(order.start, None, -1)
    return slice(order.start, order.stop, order.step)


def scan_steps(exe: "Executable", n_carry: int, n_scanned: int) -> Callable[..., tuple]:
    """``steps(order, *carries, *scanned, *invariants, *stacked) -> carries`` for the body ``exe`` (see the module
    docstring): runs the body once per ``i`` in ``order`` (a range of step +1 or -1) on the carries, row ``i`` of
    each scanned input and the invariants; the body's first ``n_carry`` outputs are the next carries, the others
    are written into row ``i`` of ``stacked``. Returns the final carries (they may be rows of ``stacked``)."""
    prog = exe.program
    ins_list = exe.instructions
    names = prog.input_names
    out_names = prog.output_names
    nc, nx = n_carry, n_scanned
    carry_out, y_out = out_names[:nc], out_names[nc:]
    ns: dict[str, Any] = {"_nd": np.ndarray, "_trajectory": _trajectory, "_span": _span}
    ns.update(prog.constants)
    # the first stacked position of each value: its kernel writes it there
    row_of: dict[str, int] = {}
    for j, name in enumerate(y_out):
        row_of.setdefault(name, j)
    # a stacked carry entering the step, whose new value is stacked too: filled after the loop
    deferred: dict[int, tuple[int, int]] = {}  # stacked position -> (carry, stacked position of its new value)
    for j, name in enumerate(y_out):
        if name in names[:nc] and row_of.get(name) == j:
            c = names.index(name)
            if carry_out[c] in row_of and carry_out[c] not in names:
                deferred[j] = (c, row_of[carry_out[c]])
                del row_of[name]
    # when every new carry is the one output of a kernel that takes ``out`` (and is not stacked), each is written
    # into one of two arrays of the loop's own by turns (the step reads the other one) and copied out once after
    # the loop; with any other carry (an input passed on, a view) one could alias another's array: none are
    made = {ins.outputs[0]: ins for ins in ins_list if len(ins.outputs) == 1 and ins.out_buffer is None
            and ins.schema is not None and "accepts_out" in ins.schema.traits}
    turns = {name for name in carry_out if name in made and name not in y_out and carry_out.count(name) == 1}
    if len(turns) != len(carry_out):
        turns = set()
    written: set[int] = set()  # stacked positions a kernel writes into
    scanned = [f"_s{k}" for k in range(nc, nc + nx)]
    params = [*names[:nc], *scanned, *names[nc + nx:], *(f"_y{j}" for j in range(len(y_out)))]
    lines = [f"def steps(_order, {', '.join([*params, ''])}):"]
    lines += [f"    _e{c} = {names[c]}" for c in sorted({c for c, _ in deferred.values()})]
    lines += ["    _rows = _span(_order)", "    try:", ""]
    header = len(lines) - 1  # the loop's line, written last: it walks the rows it reads and writes with _i
    walked = [(names[k], f"_s{k}") for k in range(nc, nc + nx)]  # (name in the step, stacked array)
    line_map: dict[int, int] = {}
    owned: dict[str, str] = {}  # a carry written by turns -> its two arrays
    for k, ins in enumerate(ins_list):
        schema = ins.schema
        takes_out = ins.out_buffer is not None or (schema is not None and "accepts_out" in schema.traits)
        multi = len(ins.outputs) > 1
        buffers = prog.buffers.get(ins.out_buffer) if ins.out_buffer else None
        outs: list[str | None] = []  # what each output must be (an expression), or None: checked by type
        for m, name in enumerate(ins.outputs):
            at = row_of.get(name)
            # several outputs take a tuple of out arrays where the planner gives one (a fused chain's)
            if takes_out and at is not None and (not multi or ins.op == FUSED_OP or ins.out_buffer is not None):
                outs.append(f"_o{k}_{m}")
                written.add(at)
                if ins.node.outputs[m].type.rank == 0:  # a 0-d view, not the scalar iterating would give
                    lines.append(f"            _o{k}_{m} = _y{at}[_i, ...]")
                else:
                    walked.append((f"_o{k}_{m}", f"_y{at}"))
            elif name in turns:
                shape, dtype = ins.node.outputs[m].type.shape, ins.node.outputs[m].type.dtype.np
                ns[f"_two{k}"] = (np.empty(shape, dtype), np.empty(shape, dtype))
                outs.append(f"_c{k}_{m}")
                lines.append(f"            _c{k}_{m} = _two{k}[_i & 1]")
                owned[name] = f"_two{k}"
            elif buffers is not None and (buffers[m] if multi else buffers) is not None:
                ns[f"b{k}_{m}"] = buffers[m] if multi else buffers
                outs.append(f"b{k}_{m}")
            else:
                outs.append(None)
                ns[f"_d{k}_{m}"] = np.dtype(ins.node.outputs[m].type.dtype.np)
                ns[f"_h{k}_{m}"] = ins.node.outputs[m].type.shape
        args = list(ins.inputs)
        given = any(o is not None for o in outs)
        if given:
            args.append(f"({', '.join(o or 'None' for o in outs)},)" if multi else outs[0])
        ns[f"k{k}"] = ins.kernel
        result = f"_t{k}" if multi else ins.outputs[0]
        lines.append(f"            {result} = k{k}({', '.join(args)})")
        line_map[len(lines)] = k
        got = [f"_t{k}[{m}]" for m in range(len(outs))] if multi else [result]
        # given an out array, the result must be it; else an exact ndarray of the type, none of the inputs
        # and none of the other outputs (a view of an input is left to FRAME_CHECKS: views of fresh arrays
        # are legitimate results, and telling them apart per step is the full check's cost)
        tests = [f"{g} is not {o}" if o is not None else
                 " or ".join([f"{g}.__class__ is not _nd or {g}.dtype is not _d{k}_{m} or {g}.shape != _h{k}_{m}",
                              *(f"{g} is {a}" for a in dict.fromkeys(ins.inputs)),
                              *(f"{g} is {got[e]}" for e in range(m) if outs[e] is None)])
                 for m, (g, o) in enumerate(zip(got, outs))]
        if multi:
            tests.insert(0, f"{result}.__class__ is not tuple or len({result}) != {len(outs)}")
        ns[f"_fix{k}"] = _fixer(exe, k, outs)
        call = "".join(f"{a}, " for a in args)  # a tuple also for a kernel of no inputs (a constant maker)
        lines.append(f"            if {' or '.join(tests)}: {result} = _fix{k}({result}, ({call}))")
        if multi:
            lines.append(f"            {', '.join(ins.outputs)}, = {result}")
        if ins.frees:
            lines.append(f"            del {', '.join(ins.frees)}")
    for j, name in enumerate(y_out):
        if j not in written and j not in deferred:
            lines.append(f"            _y{j}[_i] = {name}")
    if nc == 1:
        lines.append(f"            {names[0]} = {carry_out[0]}")
    elif nc:
        lines.append(f"            {', '.join(names[:nc])}, = {', '.join(carry_out)},")
    if not ins_list and not nc and not y_out:
        lines.append("            pass")
    lines[header] = (f"        for _i, {', '.join(n for n, _ in walked)} in zip(_order, "
                     f"{', '.join(f'{a}[_rows]' for _, a in walked)}):" if walked else "        for _i in _order:")
    lines.append("    except (Exception, SystemExit) as exc:")
    lines.append("        _fail(exc)")
    for j, (c, f) in deferred.items():
        lines.append(f"    _trajectory(_y{j}, _y{f}, _order, _e{c})")
    finals = []
    for c, name in enumerate(names[:nc]):
        two = owned.get(carry_out[c])
        finals.append(f"{name}.copy() if {name} is {two}[0] or {name} is {two}[1] else {name}" if two else name)
    lines.append(f"    return ({', '.join([*finals, ''])})")
    source = "\n".join(lines) + "\n"

    def fail(exc: BaseException) -> None:
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == _FILENAME:  # this loop's frame (deeper ones: a kernel's own)
                k = line_map.get(tb.tb_lineno)
                if k is not None:
                    exe._kernel_failed_at(exc, k)
                break
            tb = tb.tb_next
        raise exc
    ns["_fail"] = fail
    exec(compile(source, _FILENAME, "exec"), ns)
    steps = ns["steps"]
    steps.source = source
    return steps


def _fixer(exe: "Executable", k: int, outs: list[str | None]) -> Callable[[Any, tuple], Any]:
    """The slow path of instruction ``k``'s per-step check: the executable's full result check (a
    ``KernelError`` naming the op and its pack), then a sound result that is not the row it was given is copied
    into that row (and the row used)."""
    rows = [o is not None and o.startswith("_o") for o in outs]
    multi = len(outs) > 1

    def fix(result: Any, args: tuple) -> Any:
        problem = exe._result_problem(k, result, args)
        if problem is not None:
            exe._bad_result(k, problem)
        n = len(exe.program.rows[k][1].inputs)
        given: Any = args[n] if len(args) > n else None  # the out array(s): given whenever a row is
        values = list(result) if multi else [result]
        for m, is_row in enumerate(rows):
            if is_row:
                row = given[m] if multi else given
                if values[m] is not row:
                    row[...] = values[m]
                    values[m] = row
        return tuple(values) if multi else values[0]
    return fix
