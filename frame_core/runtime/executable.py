"""``Executable``: a compiled graph you can run on numpy arrays.

The program's instruction list is turned once into straight-line Python (one
line per kernel call, locals for registers, ``del`` after a value's last
use), so a run does no dictionary lookups, no dispatch and no re-validation
beyond a type check of each input: the per-step cost is the kernels' own.
Python compiles such code at about 10-20 us a line, so programs longer than
``CODEGEN_LIMIT`` instructions run in a prebound loop instead (a few tenths
of a microsecond more per instruction, no compile cost). ``profile`` runs the
same instructions one by one under a timer.

A run reuses the planned buffers, so one ``Executable`` runs one call at a
time (a lock serialises concurrent calls).

Kernel results are checked (SPEC §7, issue 8): the first run of every
executable goes through the loop with each kernel's outputs checked against
the inferred types (an ndarray, never a numpy scalar or ``None``, of exactly
the dtype and shape shape inference gave), and a ``KernelError`` names the
node, the op and its pack otherwise; later runs use the unchecked program.
With ``checks`` (``FRAME_CHECKS=1``) every run is checked.

``unchecked()`` gives the same straight-line code without the input checks
and without the lock, for a caller that owns the executable and guarantees
both: a control-flow kernel running its body once per iteration (the body is
compiled once per kernel, by ``compile_subgraph``). Its first call checks the
kernels' results too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from .._args import positive_int
from ..errors import DataError, InputError, KernelError
from ..ir.dtypes import COMPLEX_HINT
from ..ir.graph import Graph
from ..ir.types import TensorType
from ..compiler.passes.lower import Program
from ..compiler.passes.memory import MemoryPlan

__all__ = ["Executable", "ProfileReport"]

_FILENAME = "<frame executable>"
_type = attrgetter("type")
#: Longest program turned into straight-line code; longer ones run in a loop.
CODEGEN_LIMIT = 4000


def _c_copy(value: Any) -> np.ndarray:
    return np.array(value, order="C")


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    return type(value).__name__


class Executable:
    """A compiled graph. ``run(inputs) -> outputs`` (lists of numpy arrays)."""

    def __init__(self, graph: Graph, program: Program, plan: MemoryPlan, backend: str, log: list[tuple[str, str]],
                 *, checks: bool = False) -> None:
        self.graph = graph
        self.checks = checks
        self.program = program
        self.plan = plan
        self.backend = backend
        self.log = log
        self.input_types: list[TensorType] = list(program.input_types)
        self.output_types: list[TensorType] = [v.type for v in graph.outputs]
        self.output_names: list[str | None] = graph.output_names  # compile() gives the source graph's
        self.input_roles: dict[int, str] = {}  # compile() gives the source graph's seed inputs (a VJP's cotangents)
        self._lock = threading.Lock()
        self._unchecked: dict[bool, Any] = {}
        self._made_steps: tuple[list[tuple[Any, ...]], list[Any]] | None = None
        self.source: str | None
        if len(program.rows) <= CODEGEN_LIMIT:
            self.source, self._fast = self._generate()
        else:
            self.source, self._fast = None, self._interpreter()
        self._fn: Any = self._first_run  # checks every kernel's results, then hands over to _fast

    # -- code generation ----------------------------------------------------------
    def _generate(self, checked: bool = True, copy_outputs: bool = True) -> tuple[str, Any]:
        prog = self.program
        ns: dict[str, Any] = {"_nd": np.ndarray, "_coerce": self._coerce, "_count": self._bad_count,
                              "_array": np.array, "_asarray": np.asarray, "_as_list": self._as_list}
        ns.update(prog.constants)
        ns.update(prog.buffers)
        n = len(prog.input_names)
        lines = ["def run(inputs):"]
        if checked:
            lines += ["    if inputs.__class__ is not list and inputs.__class__ is not tuple: inputs = _as_list(inputs)",
                      f"    if len(inputs) != {n}: _count(inputs)"]
        if n:
            lines.append(f"    {', '.join(prog.input_names)}{',' if n == 1 else ''} = inputs")
        for i, (name, t) in enumerate(zip(prog.input_names, prog.input_types)):
            if not checked:
                break
            ns[f"_d{i}"] = t.dtype.np
            ns[f"_s{i}"] = t.shape
            lines.append(f"    if {name}.__class__ is not _nd or {name}.dtype != _d{i} or {name}.shape != _s{i}: "
                         f"{name} = _coerce({i}, {name})")
        lines.append("    try:")
        line_map: dict[int, int] = {}
        for k, ins in enumerate(prog.instructions):
            ns[f"k{k}"] = ins.kernel
            args = list(ins.inputs)
            if ins.out_buffer:
                args.append(ins.out_buffer)
            lhs = ", ".join(ins.outputs)
            lines.append(f"        {lhs} = k{k}({', '.join(args)})")
            line_map[len(lines)] = k
            if ins.frees:
                lines.append(f"        del {', '.join(ins.frees)}")
        if not prog.instructions:
            lines.append("        pass")
        lines.append("    except (Exception, SystemExit) as exc:")  # a kernel's exit() too: a KernelError
        lines.append("        _fail(exc)")
        outs = []
        for name, copy, t in zip(prog.output_names, prog.output_copies, self.output_types):
            copy = copy and copy_outputs
            if t.rank == 0:  # ufuncs return numpy scalars for 0-d arrays; run() returns arrays
                outs.append(f"_array({name})" if copy else f"_asarray({name})")
            else:
                outs.append(f"{name}.copy()" if copy else name)
        lines.append(f"    return [{', '.join(outs)}]")
        source = "\n".join(lines) + "\n"
        ns["_fail"] = lambda exc: self._kernel_failed(exc, line_map)
        exec(compile(source, _FILENAME, "exec"), ns)
        return source, ns["run"]

    def _steps(self) -> tuple[list[tuple[Any, ...]], list[Any]]:
        """The program over a list of registers: steps ``(kernel, arguments, output slot(s), single output?,
        slots freed after)`` and the register template (inputs first, constants and buffers preloaded). The
        arguments are one slot (an int) or a function of the registers giving the arguments' tuple (an
        ``itemgetter``: no list is built per call). Used by the loop interpreter and the profiler; made once (the
        compile makes them for a long program, with the collector paused: made again at the first run, a step
        per call cost a full collection walking the whole program), and only read afterwards."""
        made = self._made_steps
        if made is None:
            prog = self.program
            steps = [row[4] for row in prog.rows]  # lowering made each step as the loop takes it
            template: list[Any] = [None] * prog.n_slots
            for k, array in prog.presets:
                template[k] = array
            made = self._made_steps = (steps, template)
        return made

    def _first_run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """A run with every kernel's results checked; once one succeeds, later runs skip the checks."""
        checked = self._interpreter(check=True)
        outputs = checked(inputs)
        self._fn = checked if self.checks else self._fast
        return outputs

    def _result_problem(self, k: int, result: Any, args: Sequence[Any] = ()) -> str | None:
        """What is wrong with instruction ``k``'s result, or ``None``: one ndarray per output, of its inferred type,
        sharing memory with none of its arguments ``args`` (but its ``out`` buffer, and input 0 for a ``view`` op)."""
        row = self.program.rows[k]  # (node index, node, kernel, schema, step, out buffer, frees)
        want = [v.type for v in row[1].outputs]  # the node (the named instructions are not made)
        got = [result] if len(want) == 1 else result
        if len(want) != 1 and (not isinstance(result, (tuple, list)) or len(result) != len(want)):
            return f"returned {_describe(result)}, expected a tuple of {len(want)} arrays ({', '.join(map(str, want))})"
        for j, (t, array) in enumerate(zip(want, got)):
            label = f"output {j}" if len(want) > 1 else "its output"
            if isinstance(array, np.ndarray) and array.dtype == t.dtype.np and array.shape == t.shape:
                alias = _alias(row, j, array, args, got[:j])
                if alias is not None:
                    return f"returned as {label} {alias}"
                continue
            what = ("a numpy scalar " + str(array.dtype) if isinstance(array, np.generic)
                    else f"an array {_describe(array)}" if isinstance(array, np.ndarray) else _describe(array))
            return f"returned {what} for {label}, but shape inference says {t}"
        return None

    def _interpreter(self, check: bool = False, copy_outputs: bool = True) -> Any:
        prog = self.program
        steps, template = self._steps()
        # a C-ordered copy (as the generated code's .copy(): a broadcast view must not come back with 0 strides);
        # np.asarray turns the numpy scalar a ufunc returns for 0-d arrays into an array
        results = [(k, _c_copy if copy and copy_outputs else np.asarray if t.rank == 0 else None)
                   for k, copy, t in zip(prog.output_slots, prog.output_copies, self.output_types)]
        n = len(prog.input_names)
        types = [(t.dtype.np, t.shape) for t in prog.input_types]
        coerce, fail, count, as_list = self._coerce, self._kernel_failed_at, self._bad_count, self._as_list
        result_problem, bad_result = self._result_problem, self._bad_result
        rows = prog.rows
        # (checked runs) which calls are checked in full, and the outputs each kernel must return
        checks = _check_plan(rows, everything=self.checks) if check else []  # (read only when checking)
        nd, buffered_check = np.ndarray, _Buffered

        def run(inputs: Sequence[Any]) -> list[np.ndarray]:
            if inputs.__class__ is not list and inputs.__class__ is not tuple:
                inputs = as_list(inputs)
            if len(inputs) != n:
                count(inputs)
            regs = template.copy()
            for i, (value, (dtype, shape)) in enumerate(zip(inputs, types)):
                if value.__class__ is not np.ndarray or value.dtype != dtype or value.shape != shape:
                    value = coerce(i, value)
                regs[i] = value
            k = 0
            problem = None
            try:
                if check:
                    for k, ((kernel, args, out, single, frees), plain) in enumerate(zip(steps, checks)):
                        arrays = (regs[args],) if args.__class__ is int else args(regs)
                        if plain is None:
                            before = _snapshot(rows[k], arrays)
                            result = kernel(*arrays)
                            problem = result_problem(k, result, arrays) or _written(rows[k], arrays, before)
                        else:
                            result = kernel(*arrays)
                            if plain.__class__ is buffered_check:  # (most calls) its out buffer, of the wanted type
                                if result is not arrays[-1] or result.__class__ is not nd or \
                                        result.dtype is not plain[0] or result.shape != plain[1]:
                                    if not _plainly_sound(result, arrays, (plain,), True):
                                        problem = result_problem(k, result, arrays)
                            elif not _plainly_sound(result, arrays, *plain):
                                problem = result_problem(k, result, arrays)
                        if problem is not None:
                            break
                        if single:
                            regs[out] = result
                        else:
                            for o, r in zip(out, result):
                                regs[o] = r
                        for f in frees:
                            regs[f] = None
                else:
                    for k, (kernel, args, out, single, frees) in enumerate(steps):
                        result = kernel(regs[args]) if args.__class__ is int else kernel(*args(regs))
                        if single:
                            regs[out] = result
                        else:
                            for o, r in zip(out, result):
                                regs[o] = r
                        for f in frees:
                            regs[f] = None
            except (Exception, SystemExit) as exc:
                fail(exc, k)
            if problem is not None:
                bad_result(k, problem)
            return [regs[o] if convert is None else convert(regs[o]) for o, convert in results]
        return run

    # -- running -------------------------------------------------------------------
    def run(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
        """Run on ``inputs`` (one array per graph input, in order, or a dict by input name); return one array
        per output. An input may also be another library's array: an object with ``__dlpack__`` (a torch tensor,
        read without a copy) or ``__array__``, checked like an ndarray.

        Raises ``InputError`` naming the input, expected and actual type on a
        wrong count, dtype or shape, and ``KernelError`` naming the node if a
        kernel fails.
        """
        with self._lock:
            return self._fn(inputs)

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        return self.run(inputs)

    def unchecked(self, copy_outputs: bool = True) -> Any:
        """``run`` without input checks and without the lock: ``fn(list of arrays) -> list of arrays``.

        For a caller that owns this executable (nobody else runs it) and passes
        exactly the input types; a control-flow kernel calls its body's runner
        once per iteration. Kernel failures are still named (``KernelError``).
        With ``copy_outputs=False`` an output may be one of the inputs, a
        constant of the graph (read-only) or another output: for a caller that
        only reads the results (and copies what it hands on).
        """
        if not isinstance(copy_outputs, bool):
            raise InputError(f"unchecked(copy_outputs=) is True or False, got {type(copy_outputs).__name__}")
        fn = self._unchecked.get(copy_outputs)
        if fn is None:
            fast = self._generate(False, copy_outputs)[1] if self.source is not None else self._fast
            fn = self._unchecked[copy_outputs] = (self._interpreter(True, copy_outputs) if self.checks
                                                  else _FirstRunChecked(self, fast, copy_outputs))
        return fn

    def scan_steps(self, n_carry: int, n_scanned: int) -> Any:
        """The steps of a scan over this executable as its body, in one generated function (a control-flow
        kernel's fast path; ``frame_core.runtime.loop``): ``steps(order, *carries, *scanned, *invariants,
        *stacked) -> final carries``. Row ``i`` of each scanned input is the body's input for step ``i`` of
        ``order`` (a range of step 1 or -1); outputs after the first ``n_carry`` are written into row ``i`` of
        ``stacked``, by their kernels where they take an ``out`` array. Every kernel result gets a cheap check
        per step (the full check, naming the kernel, when it fails it). Unchecked otherwise, like
        ``unchecked()``: for the executable's owner, after a checked first step; ``None`` for an executable
        compiled with ``checks`` (run every step through ``unchecked()``) or too long for generated code."""
        if self.checks or self.source is None:
            return None
        from .loop import scan_steps

        return scan_steps(self, n_carry, n_scanned)

    def _as_list(self, inputs: Any) -> list[Any]:
        """Any other sequence of arrays as a list, a mapping by input name in input order; an array or a
        non-sequence is refused (not unpacked row by row)."""
        if isinstance(inputs, Mapping):
            return self._by_name(inputs)
        if isinstance(inputs, (np.ndarray, np.generic)) or not hasattr(inputs, "__iter__") or isinstance(inputs, (str, bytes)):
            raise InputError(f"run() takes a list of {len(self.input_types)} arrays (one per graph input), got "
                             f"{_describe(inputs)}; wrap a single array in a list: run([x])")
        return list(inputs)

    def _by_name(self, inputs: Mapping[Any, Any]) -> list[Any]:
        names = [v.name for v in self.graph.inputs]
        if any(n is None for n in names) or len(set(names)) != len(names):
            raise InputError(f"run() takes a dict only when every input has a name of its own; this graph's inputs "
                             f"are {names}: pass a list of {len(names)} arrays in input order")
        missing = [n for n in names if n not in inputs]
        extra = [k for k in inputs if k not in names]
        if missing or extra:
            raise InputError(f"run() got a dict with keys {list(inputs)[:20]}, but the inputs are {names}"
                             + (f"; missing: {missing}" if missing else "") + (f"; unknown: {extra[:20]}" if extra else ""))
        return [inputs[n] for n in names]

    def _bad_count(self, inputs: Sequence[Any]) -> None:
        expected = ", ".join(str(t) for t in self.input_types)
        raise InputError(f"run() expected {len(self.input_types)} inputs ({expected}), got {len(inputs)}")

    def _input_label(self, i: int) -> str:
        name = self.graph.inputs[i].name
        role = self.input_roles.get(i)
        return f"input {i}" + (f" ({name!r})" if name else "") + (f", {role}," if role else "")

    def _coerce(self, i: int, value: Any) -> np.ndarray:
        t = self.input_types[i]
        if isinstance(value, (bool, int, float, np.generic)) and not isinstance(value, np.ndarray) and t.shape == ():
            scalar = self._scalar(i, value)
            if scalar is not None:
                return scalar
        if isinstance(value, np.ndarray):
            if isinstance(value, np.ma.MaskedArray):  # kernels would drop the mask in some ops and keep it in others
                raise InputError(f"{self._input_label(i)} is a masked array; frame has no masked values: pass "
                                 "x.filled(value) for the masked elements, or np.asarray(x) for the data as it is")
            if value.dtype != t.dtype.np:
                if value.dtype.kind == "c":  # astype would drop the imaginary part without a word
                    raise InputError(f"{self._input_label(i)} must have dtype {t.dtype.name} ({t}), got "
                                     f"{_describe(value)}; {COMPLEX_HINT}")
                raise InputError(f"{self._input_label(i)} must have dtype {t.dtype.name} ({t}), got {_describe(value)}; "
                                 f"convert it with array.astype(np.{t.dtype.np.name})")
            if value.shape != t.shape:
                raise InputError(f"{self._input_label(i)} must have shape {list(t.shape)} ({t}), got {_describe(value)}")
            return value.view(np.ndarray)  # a subclass (np.matrix, a memmap): kernels and results see plain arrays
        array = self._foreign_array(i, value)
        if array is not None:  # a torch tensor, a JAX or CuPy array...: checked as the ndarray it shares memory with
            try:
                return self._coerce(i, array)
            except InputError as exc:
                raise InputError(f"{exc} (it is a {type(value).__module__}.{type(value).__qualname__}, read as a numpy "
                                 "array)") from None
        raise InputError(f"{self._input_label(i)} must be a numpy array of type {t}, got {_describe(value)} (arrays of "
                         "other libraries are taken too: objects with __dlpack__ or __array__)")

    def _foreign_array(self, i: int, value: Any) -> np.ndarray | None:
        """Another library's array as an ndarray, without a copy where it allows one: through DLPack
        (``np.from_dlpack``: a torch tensor, a JAX array), else numpy's ``__array__`` protocol. ``None`` for an
        object that speaks neither (a list, a traced Tensor)."""
        if getattr(value, "_frame_traced_tensor", False) or isinstance(value, (str, bytes, list, tuple)):
            return None
        label = self._input_label(i)
        if hasattr(value, "__dlpack__"):
            try:
                return np.from_dlpack(value)
            except (BufferError, RuntimeError, TypeError, ValueError) as exc:
                if not hasattr(value, "__array__"):
                    raise InputError(f"{label} is a {type(value).__module__}.{type(value).__name__} that numpy cannot "
                                     f"read through DLPack ({type(exc).__name__}: {exc}); frame runs on the CPU: pass "
                                     "a CPU array (torch: t.detach().cpu()) of a dtype numpy knows") from None
        if hasattr(value, "__array__"):
            try:
                array = np.asarray(value)
            except Exception as exc:  # noqa: BLE001 - the other library's own refusal, reported as the input's
                raise InputError(f"{label}: {type(value).__name__}.__array__ failed ({type(exc).__name__}: {exc}); "
                                 "pass a numpy array (torch: t.detach().cpu().numpy())") from None
            return array if isinstance(array, np.ndarray) and array.dtype.kind != "O" else None
        return None

    def _scalar(self, i: int, value: Any) -> np.ndarray | None:
        """A number of a fitting kind for a rank-0 input as an array of its dtype, None for a wrong kind.

        A value the dtype cannot hold is an ``InputError``: numpy would wrap an integer around (``np.int64(2**40)``
        into int32 is 0), raise ``OverflowError`` (a Python int) or round a finite float to infinity.
        """
        t = self.input_types[i]
        target = t.dtype.np
        integral = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
        if integral and t.dtype.is_int:
            info = np.iinfo(target)
            if not info.min <= int(value) <= info.max:
                raise InputError(f"{self._input_label(i)} is the number {int(value)}, which does not fit in "
                                 f"{t.dtype.name} (valid {info.min}..{info.max}); pass a value in range, or declare "
                                 "the input with a wider dtype")
            return np.asarray(value, target)
        if integral and t.dtype.is_float:
            if abs(int(value)) >= 2**1024:  # float() itself overflows
                raise self._beyond_range(i, value)
            value = value if abs(int(value)) < 2**63 else float(value)  # np.asarray would make an object array
        elif not integral:
            kind = np.asarray(value).dtype.kind  # bfloat16's numpy kind is "V", so ask the DType, not numpy
            if not (kind == "f" and t.dtype.is_float or kind == "b" and target.kind == "b"):
                return None
        else:
            return None
        with np.errstate(over="ignore"):
            array = np.asarray(value, target)
        if t.dtype.is_float and np.isinf(array.astype(np.float32)) and not np.isinf(value):
            raise self._beyond_range(i, value)
        return array

    def _beyond_range(self, i: int, value: Any) -> InputError:
        t = self.input_types[i]
        finfo = np.finfo(t.dtype.np) if t.dtype.np.kind == "f" else __import__("ml_dtypes").finfo(t.dtype.np)
        text = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:12]}... ({len(repr(value))} digits)"
        return InputError(f"{self._input_label(i)} is the number {text}, which is beyond the range of "
                          f"{t.dtype.name} (largest finite value {float(finfo.max):g}); pass a value in range, or "
                          "declare the input with a wider dtype")

    def _kernel_failed(self, exc: BaseException, line_map: dict[int, int]) -> None:
        tb = exc.__traceback__
        k = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == _FILENAME:  # the first is this run's frame; deeper ones
                k = line_map.get(tb.tb_lineno)  # belong to executables a kernel runs
                break
            tb = tb.tb_next
        if k is None:
            raise exc
        self._kernel_failed_at(exc, k)

    def _kernel_failed_at(self, exc: BaseException, k: int) -> None:
        ins = self.program.instructions[k]
        if isinstance(exc, DataError):  # the caller's data, not a broken kernel: keep the kernel's own words
            raise DataError(f"node {ins.index} ({ins.text}): {exc}") from exc
        schema = ins.schema  # name the pack whose code failed: the user reports it there
        pack = f" (op {ins.op!r} of pack {schema.pack}, {schema.distribution})" if schema is not None and schema.pack else ""
        raise KernelError(f"the {self.backend} kernel of node {ins.index} ({ins.text}) failed: "
                          f"{type(exc).__name__}: {exc}{pack}") from exc

    def _bad_result(self, k: int, problem: str) -> None:
        ins = self.program.instructions[k]
        schema = ins.schema
        pack = f"{schema.pack}, {schema.distribution}" if schema is not None and schema.pack else "?"
        where = f"the {self.backend} kernel of op {ins.op!r} (pack {pack}) at node {ins.index} ({ins.text})"
        recorded = [v.type for v in ins.node.outputs]
        try:  # a graph that records other types than inference gives is the graph's fault, not the kernel's
            inferred = schema.infer([v.type for v in ins.node.inputs], schema.normalize_attrs(ins.node.attrs))
        except Exception:  # noqa: BLE001 - only deciding whom to blame
            inferred = recorded
        if list(inferred) != recorded:
            raise KernelError(
                f"{where} {problem}: the graph records [{', '.join(map(str, recorded))}] where shape inference gives "
                f"[{', '.join(map(str, inferred))}], so the graph is inconsistent (built by hand, or broken by a "
                "compile pass: compile with checks=True, or FRAME_CHECKS=1, to find the stage; verify() finds it "
                "in a hand-built graph)")
        raise KernelError(
            f"{where} {problem}; kernels must return new ndarrays (or their out buffer) of exactly the inferred dtype "
            f"and shape, never an input or a view of one, and never write their inputs (a bug in pack "
            f"{pack}: its conformance tests, frame_core.testing.conformance_tests, check this; FRAME_CHECKS=1 "
            "checks every run)")

    # -- inspection ----------------------------------------------------------------
    @property
    def instructions(self) -> list[Any]:
        return self.program.instructions

    @property
    def peak_bytes(self) -> int:
        """Peak bytes of intermediates under the memory plan (arena plus live unplanned values)."""
        return self.plan.peak_bytes

    @property
    def memory(self) -> dict[str, int]:
        return self.plan.summary()

    def profile(self, inputs: Sequence[Any], repeat: int = 10) -> "ProfileReport":
        """Run ``repeat`` times with a timer around every instruction; return per-node medians.

        ``repeat`` is a positive int (``InputError`` otherwise: a median of no run is no number).
        """
        if not isinstance(repeat, (int, np.integer)) or isinstance(repeat, (bool, np.bool_)) or not 1 <= repeat <= 10**6:
            raise InputError(f"profile() needs repeat, the number of timed runs, as an int of 1 or more (at most 1,000,000); got "
                             f"{repeat!r} ({type(repeat).__name__})")
        repeat = int(repeat)
        with self._lock:  # it writes into the planned buffers, as run() does
            self._fn(inputs)  # validates inputs, warms caches
            inputs = [self._coerce(i, v) for i, v in enumerate(inputs)]  # Python scalars -> arrays, as run() does
            return self._profile(inputs, repeat)

    def _profile(self, inputs: list[np.ndarray], repeat: int) -> "ProfileReport":
        steps, template = self._steps()
        samples = [[0.0] * repeat for _ in steps]
        perf = time.perf_counter
        for r in range(repeat):
            regs = template.copy()
            regs[: len(inputs)] = inputs
            for k, (kernel, args, out, single, _frees) in enumerate(steps):
                arrays = (regs[args],) if args.__class__ is int else args(regs)
                t0 = perf()
                result = kernel(*arrays)
                samples[k][r] = perf() - t0
                if single:
                    regs[out] = result
                else:
                    for o, x in zip(out, result):
                        regs[o] = x
        rows = [(ins, float(np.median(s))) for ins, s in zip(self.program.instructions, samples)]
        return ProfileReport(rows, repeat)

    def __repr__(self) -> str:
        return (f"<Executable {self.graph.name!r} on {self.backend}: {len(self.program.rows)} instructions, "
                f"peak {self.plan.peak_bytes} B>")


#: Inputs up to this size are copied whole before a checked kernel call; larger ones by a strided sample of about
#: this many bytes, so the first run never holds a second copy of a large input (a kernel writing in place
#: writes every element, and the sample sees it).
_SNAPSHOT_BYTES = 1 << 22


def _sample(x: np.ndarray) -> np.ndarray:
    if x.nbytes <= _SNAPSHOT_BYTES:
        return x.copy()
    return x.flat[:: -(-x.nbytes // _SNAPSHOT_BYTES)]  # a copy of every k-th element, in C


def _snapshot(row: tuple, args: Sequence[Any]) -> list[Any]:
    """What a checked kernel call must leave as it is: a copy (or a sample) of each input but those sharing memory
    with its ``out`` buffer (an elementwise op may be given a dying input's), for :func:`_written` after the call."""
    n = len(row[1].inputs)
    out = args[n] if row[5] is not None and len(args) > n else None
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, np.ndarray)]
    return [_sample(x) if isinstance(x, np.ndarray) and not any(np.may_share_memory(x, o) for o in outs) else None
            for x in args[:n]]


def _written(row: tuple, args: Sequence[Any], before: list[Any]) -> str | None:
    """Which input a kernel wrote into, or ``None``: a silent wrong answer for every later reader of it (and a
    change to the caller's own array when it is a graph input)."""
    for i, (x, copy) in enumerate(zip(args, before)):
        if copy is None:
            continue
        now = x if x.nbytes <= _SNAPSHOT_BYTES else _sample(x)
        if now.tobytes() != copy.tobytes():  # bytes: a NaN written back unchanged is unchanged
            return f"wrote into its input {i}"
    return None


def _alias(row: tuple, j: int, array: np.ndarray, args: Sequence[Any], earlier: Sequence[Any]) -> str | None:
    """How output ``j`` of a program row ``(node index, node, kernel, schema, step, out buffer, frees)`` shares
    memory it must not, or ``None``. A kernel writes its result into a new array or its ``out`` buffer (which may
    be an input's, for an elementwise op written in place); only an op with the ``view`` trait may return a view
    of its first input. Anything else is a silent wrong answer in waiting: the memory planner reuses the input's
    buffer while the output still lives."""
    node, schema, buffer = row[1], row[3], row[5]
    n = len(node.inputs)
    if buffer is not None:
        out = args[n] if len(args) > n else None
        out = out[j] if isinstance(out, tuple) else out
        if isinstance(out, np.ndarray) and np.may_share_memory(array, out):
            return None
    view = schema is not None and "view" in schema.traits
    for i, x in enumerate(args[:n]):
        if isinstance(x, np.ndarray) and np.may_share_memory(array, x) and not (view and i == 0):
            return (f"an array sharing memory with its input {i} (that input or a view of it), though "
                    f"{'a view op may return a view of input 0 only' if view else 'the op has no view trait'}")
    for i, other in enumerate(earlier):
        if isinstance(other, np.ndarray) and np.may_share_memory(array, other):
            return f"an array sharing memory with its output {i} (each output needs memory of its own)"
    return None


def _check_plan(rows: Sequence[tuple], everything: bool) -> list[Any]:
    """How each call of a checked run is checked: ``None`` in full; for a call of one output given an ``out``
    buffer, ``_Buffered((dtype, shape))``; else ``(outputs wanted, buffered?)``, the arguments of
    ``_plainly_sound`` after the result and the call's arguments.

    Kernels are built once per signature (op, input types, attributes: ``lower``), so a kernel object stands
    for its signature. The first call of each kernel (with and without an ``out`` buffer) is checked in full:
    the result's types, its memory against every input (``np.may_share_memory``) and the inputs' bytes before
    and after (no write into an input). Every other call checks its result's dtype and shape and, by object
    identity, that it shares no memory (``_plainly_sound``); a result that does not plainly pass gets the full
    result check. With ``everything`` (``FRAME_CHECKS``) every call is checked in full. The outputs wanted are
    each kernel's outputs' ``(dtype, shape)`` (a kernel's output types follow from its signature; a node
    recording other types than the kernel's first node is checked in full).
    """
    if everything:
        return [None] * len(rows)
    checks: list[Any] = []
    append = checks.append
    # id of a kernel -> [the output type(s) its first node records, its plain check (unbuffered, buffered), or
    # None before its first call of that kind] (every kernel lives as long as the program: ids stay unique)
    kernels: dict[int, list[Any]] = {}
    for row in rows:
        outs = row[1].outputs
        types = outs[0].type if len(outs) == 1 else tuple(map(_type, outs))  # (one type: no tuple per row)
        known = kernels.get(id(row[2]))
        if known is None:
            known = kernels[id(row[2])] = [types, None, None]
        elif types is not known[0] and types != known[0]:  # a graph recording other types for one signature
            append(None)  # checked in full against its own
            continue
        buffered = row[5] is not None
        plain = known[1 + buffered]
        if plain is None:  # the first call of its kind: in full
            want = tuple([(np.dtype(v.type.dtype.np), v.type.shape) for v in outs])
            known[1 + buffered] = _Buffered(want[0]) if buffered and len(want) == 1 else (want, buffered)
        append(plain)
    return checks


class _Buffered(tuple):
    """A check plan's entry ``(dtype, shape)`` for a call of one output given an ``out`` buffer: its result is
    plainly right when it is that buffer (the call's last argument), an exact ndarray of the dtype (``is``) and
    shape (``_plainly_sound``'s answer for it, tested inline in the checked loop without a call)."""

    __slots__ = ()


def _plainly_sound(result: Any, args: Sequence[Any], want: tuple, buffered: bool) -> bool:
    """Whether ``result`` is plainly right without a full check: an exact ndarray of each wanted dtype and shape
    that is the call's ``out`` buffer (the last argument when ``buffered``) or owns its memory (``base`` is
    ``None``, and it is none of the inputs, nor the owner an input views). An input whose memory belongs to a
    non-array object, or to an array that does not own it, is not plain. False sends the result to the full
    check (``_result_problem``), which decides; so this only ever accepts what the full check accepts."""
    if len(want) == 1:  # (most calls) the loop below for one output, without its tuples and slices
        ((dtype, shape),) = want
        if result.__class__ is not np.ndarray or result.dtype is not dtype or result.shape != shape:
            return False
        if buffered:
            out = args[-1]
            if result is out or (out.__class__ is tuple and result is out[0]):
                return True
            inputs = args[:-1]
        else:
            inputs = args
        if result.base is not None:
            return False
        for x in inputs:
            if x is result or x.__class__ is not np.ndarray:
                return False
            base = x.base
            if base is not None and (base is result or base.__class__ is not np.ndarray or base.base is not None):
                return False
        return True
    if result.__class__ is tuple and len(result) == len(want):
        got: Any = result
    else:
        return False
    out = args[-1] if buffered else None
    inputs = args[:-1] if buffered else args
    for j, (dtype, shape) in enumerate(want):
        array = got[j]
        if array.__class__ is not np.ndarray or array.dtype is not dtype or array.shape != shape:
            return False
        if out is not None and (array is out or (out.__class__ is tuple and array is out[j])):
            continue
        if array.base is not None:
            return False
        for x in inputs:
            if x is array or x.__class__ is not np.ndarray:
                return False
            base = x.base
            if base is not None and (base is array or base.__class__ is not np.ndarray or base.base is not None):
                return False
        for other in got[:j]:
            if other is array:
                return False
    return True


class _FirstRunChecked:
    """A runner whose first call checks every kernel's results (the loop with checks), then runs ``fast``."""

    __slots__ = ("fn", "fast")

    def __init__(self, exe: Executable, fast: Any, copy_outputs: bool) -> None:
        self.fast = fast
        self.fn = lambda inputs: self._first(exe, inputs, copy_outputs)

    def _first(self, exe: Executable, inputs: Sequence[Any], copy_outputs: bool) -> list[np.ndarray]:
        outputs = exe._interpreter(True, copy_outputs)(inputs)
        self.fn = self.fast
        return outputs

    def __call__(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        return self.fn(inputs)


@dataclass
class ProfileReport:
    """Per-instruction median times from ``Executable.profile``."""

    rows: list[tuple[Any, float]]
    repeat: int

    @property
    def total(self) -> float:
        return sum(t for _, t in self.rows)

    def by_op(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for ins, t in self.rows:
            out[ins.op] = out.get(ins.op, 0.0) + t
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def top(self, n: int = 10) -> str:
        """A table of the ``n`` slowest nodes: time, share of the total, node. ``n`` is an int of 0 or more
        (``InputError`` otherwise: a negative one would slice off the fastest rows instead)."""
        n = positive_int(n, "ProfileReport.top(n)", InputError, low=0)
        total = self.total
        lines = [f"{'time (us)':>10}  {'share':>6}  node   (median of {self.repeat} runs, total {total * 1e6:.1f} us)"]
        for ins, t in sorted(self.rows, key=lambda r: -r[1])[:n]:
            lines.append(f"{t * 1e6:10.1f}  {t / total if total else 0.0:6.1%}  #{ins.index} {ins.text}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.top()
