"""Compiled kernels called as Python builtins instead of through ctypes.

A ctypes function of seven ``py_object`` arguments costs about 1.5 µs a call
on this machine, several times the work of an elementwise kernel on a few
thousand floats; a scan body calls one or two kernels per step. A builtin
function (``METH_FASTCALL``) costs about 0.1 µs. So each kernel is wrapped in
a builtin whose C function is a small compiled *trampoline*, one per arity,
shared by every kernel of that arity:

    PyObject *call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)

``self`` is a uint64 ndarray ``[kernel address, id(OK), id(REFUSED)]``
(kept alive by the builtin). The trampoline checks ``nargs``, passes
``args[0..n-1]`` to the kernel and returns ``OK`` (0.0) when the kernel
returned 0, else ``REFUSED`` (1.0), taking a new reference by adding one to
its reference count (byte 0). So every caller's ``if fn(...):`` and
``fn(...) == 0`` read the same either way. ``OK`` and ``REFUSED`` are floats
made at run time, never immortal objects, whose count is a plain integer on
every GIL build.

The trampoline calls nothing outside itself (the kernel through a pointer),
raises nothing and needs the GIL held, as a builtin call has. Where any of
this cannot be checked (a free-threaded build, an unexpected object layout,
no ``PyCFunction_NewEx``) ``builtin_caller`` returns None and the kernel keeps
its ctypes function. The kernel is the same code either way: same bits.
"""

from __future__ import annotations

import ctypes
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["OK", "REFUSED", "builtin_caller", "trampoline_ir", "fast_calls_problem"]

# the results, made at run time so that each is an ordinary object of this process (a constant might be immortal)
OK: float = float("0")
REFUSED: float = float("1")

_METH_FASTCALL = 0x0080


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


_defs: list[_MethodDef] = []  # a builtin points at its PyMethodDef for life: never freed (bounded by MAX_KERNELS)


def trampoline_ir(n_args: int) -> tuple[str, str]:
    """(LLVM IR, symbol) of the trampoline for kernels of ``n_args`` pointer arguments (module docstring)."""
    symbol = f"frame_call_{n_args}"
    loads = []
    for k in range(n_args):
        loads += [f"  %p{k} = getelementptr ptr, ptr %args, i64 {k}", f"  %a{k} = load ptr, ptr %p{k}"]
    params = ", ".join(f"ptr %a{k}" for k in range(n_args))
    text = "\n".join([
        f"define ptr @{symbol}(ptr %self, ptr %args, i64 %nargs) {{",
        "entry:",
        "  %dp = getelementptr i8, ptr %self, i64 16",  # the ndarray's data pointer (jit checks the offset)
        "  %data = load ptr, ptr %dp",
        "  %okp = getelementptr i64, ptr %data, i64 1",
        "  %nop = getelementptr i64, ptr %data, i64 2",
        f"  %right = icmp eq i64 %nargs, {n_args}",
        "  br i1 %right, label %call, label %refuse",
        "call:",
        *loads,
        "  %fn = load ptr, ptr %data",
        f"  %status = call i32 %fn({params})",
        "  %good = icmp eq i32 %status, 0",
        "  br i1 %good, label %ok, label %refuse",
        "ok:",
        "  %o = load ptr, ptr %okp",
        "  br label %done",
        "refuse:",
        "  %r = load ptr, ptr %nop",
        "  br label %done",
        "done:",
        "  %obj = phi ptr [ %o, %ok ], [ %r, %refuse ]",
        "  %count = load i64, ptr %obj",
        "  %more = add i64 %count, 1",
        "  store i64 %more, ptr %obj",
        "  ret ptr %obj",
        "}",
        "",
    ])
    return text, symbol


def fast_calls_problem() -> str | None:
    """Why kernels cannot be called through a trampoline in this interpreter, or None when they can."""
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "a free-threaded build keeps reference counts differently"
    if sys.maxsize <= 2**32:
        return "a 32-bit build"
    if not hasattr(ctypes.pythonapi, "PyCFunction_NewEx"):
        return "this Python does not export PyCFunction_NewEx"
    immortal = getattr(sys, "_is_immortal", None)
    if immortal is not None and (immortal(OK) or immortal(REFUSED)):
        return "this Python made the results immortal"
    probe: list[Any] = []
    count = ctypes.c_ssize_t.from_address(id(probe))
    before = count.value
    holder = [probe]
    after = count.value
    del holder
    if after != before + 1 or count.value != before:
        return "an object's reference count is not the integer at its byte 0"
    return None


def builtin_caller(trampoline: int, kernel: int, n_args: int) -> Callable[..., Any]:
    """A builtin ``f(a0, ..., a{n_args-1})`` that runs the kernel at address ``kernel`` through the trampoline
    at address ``trampoline`` and returns ``OK`` or ``REFUSED``."""
    state = np.array([kernel, id(OK), id(REFUSED)], np.uint64)
    state.flags.writeable = False
    method = _MethodDef(f"frame_kernel_{n_args}".encode(), trampoline, _METH_FASTCALL, None)
    _defs.append(method)
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]
    fn: Callable[..., Any] = new(ctypes.addressof(method), state, None)
    return fn
