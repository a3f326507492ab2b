"""The background compiler: one daemon thread, LLVM through llvmlite, object code cached on disk.

Everything here runs on the compiler thread except ``submit``, ``wait``,
``status`` and the fork/exit hooks. The thread imports llvmlite and sets LLVM
up the first time it has work, so neither ``import frame_core`` nor
``compile()`` ever pays for LLVM. llvmlite makes its LLVM calls through
ctypes, which releases the GIL: the program keeps running while a kernel
compiles.

Safety rules, each with its reason:

* **Results**: kernels come from ``codegen`` (exactly rounded ops only, no
  FMA); a kernel refuses arrays that are not C-contiguous and aligned, and the caller
  runs numpy instead.
* **Bounded**: at most ``MAX_KERNELS`` distinct native kernels per process
  (groups of one structure, in any number of executables, share one) and
  ``QUEUE`` waiting jobs; beyond that, groups stay on numpy.
* **Fork**: a child process never compiles (LLVM's locks may have been held
  by the compiler thread at the fork); kernels already native keep working,
  the code is in the child's copy of the memory.
* **Exit**: the thread is a daemon; at exit a hook stops it between LLVM
  steps and waits at most ``EXIT_WAIT`` seconds, so a process never hangs
  and never unloads LLVM under a running compile.
* **Cache**: a per-user directory (``FRAME_NATIVE_CACHE``, else
  ``$XDG_CACHE_HOME/frame/native``, else ``~/.cache/frame/native``), created
  with mode 0700 and used only when this user owns it and nobody else can
  write to it. A file is named by the SHA-256 of everything the code depends
  on (the IR text, llvmlite's and LLVM's versions, the target triple, the
  CPU's name and features, the code generator's version) and holds a
  checksum of its bytes; a file that fails either check is compiled afresh.
  An entry is trusted like ``__pycache__`` (only this user can write it), but
  a damaged one must not crash the process in LLVM's loader: only a regular
  file, read without blocking and bounded, whose object passes ``objcheck``
  (one symbol, nothing called outside) is loaded. Without a usable directory the pack stays on numpy and says why once:
  every process would otherwise pay each compile again.
* **Failures** (llvmlite missing or broken, LLVM errors, an unexpected
  numpy memory layout) leave the groups on numpy with a one-line note on
  the ``frame_native`` logger.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .codegen import CODEGEN_VERSION, Plan, generate
from .objcheck import MAX_OBJECT_BYTES, object_problem

__all__ = ["submit", "wait", "status", "note", "reset", "MAX_KERNELS", "QUEUE"]

# hashlib, logging and tempfile (10 ms of imports) load when first used, not at frame's start-up

MAX_KERNELS = 512
QUEUE = 256
EXIT_WAIT = 2.0
_MAGIC = b"frame-native-object-1\n"
_CACHE_FILES = 4096  # the directory is pruned (oldest first) beyond this many files

#: How to make the plan (on the compiler thread: planning a large group takes milliseconds) and what to do
#: with the result: ``install(plan_or_None, function_or_None, how)`` where ``how`` is "compiled",
#: "cache", "failed" or "off".
Install = Callable[[Plan | None, Callable[..., Any] | None, str], None]
Job = tuple[Callable[[], Plan | str], Install]


class _State:
    """Process-wide compiler state (one per process; a forked child gets a disabled copy)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.queue: queue.Queue[Job | None] = queue.Queue(QUEUE)
        self.thread: threading.Thread | None = None
        self.disabled: str | None = None   # why nothing compiles any more
        self.stopping = False
        self.kernels = 0                 # groups submitted
        self.codes: set[str] = set()     # distinct kernels (cache keys) loaded or reused: at most MAX_KERNELS
        self.compiled = 0
        self.from_cache = 0
        self.cache_checked: str | None = None  # the cache directory found usable (it is checked again if it changes)
        self.notes: list[str] = []
        self.seen_notes: set[str] = set()


_state = _State()
_llvm: list["_LLVM"] = []  # LLVM is set up once per process, whatever the state
_loaded: dict[str, tuple[Any, str]] = {}  # cache key -> (callable, how): code the JIT engine holds


#: Longest note: LLVM's messages quote IR, one or many lines of it.
NOTE_CHARS = 300


def note(reason: str, then: str | None = "those fused groups run on numpy") -> None:
    """Say once per process why something stays on numpy (a one-line warning on the ``frame_native`` logger,
    ``reason; then``; ``then=None`` when the reason says what happens instead, as a refused cache entry that is
    compiled afresh). A multi-line reason (LLVM's errors quote the IR with a caret line) is folded to one line
    and shortened."""
    reason = " ".join(reason.split())
    if len(reason) > NOTE_CHARS:
        reason = reason[:NOTE_CHARS - 3] + "..."
    with _state.lock:
        if reason in _state.seen_notes:
            return
        _state.seen_notes.add(reason)
        _state.notes.append(reason)
    import logging

    logging.getLogger("frame_native").warning("frame-native: %s%s", reason, f"; {then}" if then else "")


def _disable(reason: str) -> None:
    _state.disabled = reason
    note(reason)


def cache_dir() -> str:
    explicit = os.environ.get("FRAME_NATIVE_CACHE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "frame", "native")


def _usable_cache(path: str) -> str | None:
    """Why ``path`` cannot hold this user's compiled code, or None when it can (creating it if missing)."""
    if os.path.exists(path) and not os.path.isdir(path):
        return f"the kernel cache {path!r} is a file, not a directory; point FRAME_NATIVE_CACHE at a directory"
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        return (f"cannot create the kernel cache {path!r} ({exc.strerror or exc}); point FRAME_NATIVE_CACHE at a "
                "directory this user can create")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"the kernel cache {path!r} belongs to another user; set FRAME_NATIVE_CACHE"
    if st.st_mode & 0o022:
        return f"the kernel cache {path!r} is writable by others; chmod 700 it or set FRAME_NATIVE_CACHE"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"the kernel cache {path!r} is read-only; set FRAME_NATIVE_CACHE to a writable directory"
    return None


def submit(make_plan: Callable[[], Plan | str], install: Install) -> bool:
    """Queue a kernel: ``make_plan()`` then ``install(plan, function, how)`` run on the compiler thread.
    Returns False (and the caller stays on numpy) when nothing will be compiled."""
    s = _state
    if os.getpid() != s.pid:  # a forked child: never touch LLVM here (see the module docstring)
        return False
    if s.disabled or s.stopping:
        return False
    with s.lock:
        if s.thread is None:
            s.thread = threading.Thread(target=_run, name="frame-native-compiler", daemon=True)
            s.thread.start()
        s.kernels += 1
    try:
        s.queue.put_nowait((make_plan, install))
    except queue.Full:
        with s.lock:
            s.kernels -= 1
        return False
    return True


#: How long ``wait()`` waits by default: far longer than any compile (a fraction of a second each), so a
#: compiler stuck for good (LLVM hung) costs the caller a minute and a False, never the process.
WAIT_DEFAULT = 60.0


def wait(timeout: float | None = WAIT_DEFAULT) -> bool:
    """Block until every queued kernel is compiled (or failed); False if ``timeout`` seconds passed first
    (default ``WAIT_DEFAULT``, 60 s; ``None`` waits as long as the compiler thread lives)."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout >= 0):
        from frame_core import ArgumentError

        raise ArgumentError(f"frame_native.wait(timeout) is a number of seconds, 0 or more (or None), got "
                            f"{type(timeout).__name__} {timeout!r:.40}")
    deadline = None if timeout is None else time.monotonic() + timeout
    s = _state
    while s.queue.unfinished_tasks and os.getpid() == s.pid and s.thread is not None and s.thread.is_alive():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def status() -> dict[str, Any]:
    s = _state
    return {"active": s.disabled is None and os.getpid() == s.pid, "disabled": s.disabled, "queued": s.queue.qsize(),
            "kernels": s.kernels, "compiled": s.compiled, "from_cache": s.from_cache, "cache": cache_dir(),
            "notes": list(s.notes), "llvm": _llvm[0].version if _llvm else None}


def reset() -> None:
    """Forget everything (for tests): a fresh state with no thread; loaded kernels stay valid."""
    global _state
    old = _state
    old.stopping = True
    if old.thread is not None:
        old.queue.put(None)
        old.thread.join(EXIT_WAIT)
    _state = _State()


# -- the compiler thread ----------------------------------------------------------------------------
def _run() -> None:
    # what the compiles and notes need, imported as the thread starts (the first submit, never at exit) rather
    # than at frame's start-up or in the middle of a compile that may outlast the exit wait
    import hashlib  # noqa: F401
    import logging  # noqa: F401
    import tempfile  # noqa: F401

    s = _state
    while True:
        job = s.queue.get()
        try:
            if job is None or s.stopping:
                return
            make_plan, install = job
            plan: Plan | str | None = None
            try:
                plan = make_plan()
                if isinstance(plan, str):
                    note(f"a group cannot be compiled: {plan}")
                    fn, how, plan = None, "off", None
                else:
                    fn, how = _compile(s, plan)
            except _Stopping:  # the process is exiting: nothing failed, nothing to say
                return
            except Exception as exc:  # LLVM or our code: the group stays on numpy
                note(f"compiling a fused group failed ({type(exc).__name__}: {exc})")
                fn, how, plan = None, "failed", None
            if not s.stopping and os.getpid() == s.pid:
                try:
                    install(plan if fn is not None else None, fn, how)
                except Exception as exc:  # else this thread would die, and every later group wait forever
                    note(f"installing a compiled kernel failed ({type(exc).__name__}: {exc})")
                    install(None, None, "failed")
        finally:
            s.queue.task_done()


class _Stopping(Exception):
    """Raised on the compiler thread between LLVM steps once the process has begun to exit."""


class _LLVM:
    """LLVM set up for this machine: a target machine for code generation and one JIT engine to load into."""

    def __init__(self) -> None:
        import llvmlite
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.llvm = llvm
        triple = llvm.get_process_triple()
        cpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
        target = llvm.Target.from_triple(triple)
        self.tm = target.create_target_machine(cpu=cpu, features=features, opt=2)
        # the engine owns the target machine it is given: give it its own
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target.create_target_machine(
            cpu=cpu, features=features, opt=2))
        self.version = f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}"
        self.identity = "\n".join([self.version, triple, cpu, features, CODEGEN_VERSION, sys.byteorder])
        self.width_bytes = 64 if "+avx512f" in features else 32 if "+avx" in features else 16

    def compile(self, ir: str) -> bytes:
        llvm = self.llvm
        module = llvm.parse_assembly(ir)
        module.verify()
        if _state.stopping:
            raise _Stopping
        builder = llvm.create_pass_builder(self.tm, llvm.create_pipeline_tuning_options(2))
        builder.getModulePassManager().run(module, builder)
        if _state.stopping:
            raise _Stopping
        return bytes(self.tm.emit_object(module))

    def load(self, obj: bytes, symbol: str) -> int:
        self.engine.add_object_file(self.llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()
        address = self.engine.get_function_address(symbol)
        if not address:
            raise RuntimeError(f"symbol {symbol} missing from the object code")
        return address


def _check_numpy_layout() -> str | None:
    """The kernels read a PyArrayObject's type (byte 8), ``data`` (16), ``nd`` (24), ``dimensions`` (32),
    ``descr`` (56) and ``flags`` (64: C-contiguous is bit 0, aligned bit 8, writeable bit 10): check each on
    this numpy before any kernel runs."""
    probe = np.empty((3, 5), np.float32)
    strided = probe[:, ::2]
    unaligned = np.frombuffer(np.zeros(13, np.uint8).data, np.float32, 3, offset=1)
    frozen = np.empty(3, np.float32)
    frozen.flags.writeable = False
    read = ctypes.c_void_p.from_address
    try:
        ok = (read(id(probe) + 8).value == id(np.ndarray) and read(id(probe) + 16).value == probe.ctypes.data
              and ctypes.c_int.from_address(id(probe) + 24).value == 2
              and (dims := read(id(probe) + 32).value) is not None
              and list((ctypes.c_int64 * 2).from_address(dims)) == [3, 5]
              and read(id(probe) + 56).value == id(np.dtype(np.float32))
              and ctypes.c_int.from_address(id(probe) + 64).value & 0x501 == 0x501
              and not ctypes.c_int.from_address(id(frozen) + 64).value & 0x400
              and not ctypes.c_int.from_address(id(strided) + 64).value & 1
              and not ctypes.c_int.from_address(id(unaligned) + 64).value & 0x100)
    except Exception as exc:  # pragma: no cover - ctypes cannot fail to read our own object
        return f"cannot read numpy's array layout ({exc})"
    if not ok or sys.maxsize <= 2**32:  # (the offsets are those of a 64-bit build)
        return f"numpy {np.__version__} lays out its arrays differently than the compiled kernels expect"
    return None


def _setup(s: _State) -> "_LLVM | None":
    if s.stopping:  # never import llvmlite while the process exits (see _at_exit)
        raise _Stopping
    folder = cache_dir()  # read at every compile: a directory set later is checked like the first one
    if s.cache_checked != folder:
        problem = (_check_numpy_layout() if s.cache_checked is None else None) or _usable_cache(folder)
        if problem:
            _disable(problem)
            return None
        s.cache_checked = folder
    if not _llvm:
        try:
            _llvm.append(_LLVM())
        except ImportError as exc:
            _disable(f"llvmlite is not available ({exc})")
            return None
        except Exception as exc:
            _disable(f"LLVM could not be set up ({type(exc).__name__}: {exc})")
            return None
    return _llvm[0]


def _compile(s: _State, plan: Plan) -> tuple[Callable[..., Any] | None, str]:
    llvm = _setup(s)
    if llvm is None:
        return None, "off"
    import hashlib  # loaded by _run as the compiler thread started: a lookup in sys.modules

    width = max(1, llvm.width_bytes // plan.dtype.itemsize)
    text = plan.ir(width) if hasattr(plan, "ir") else generate(plan, width)  # rows.RowPlan has its own
    key = hashlib.sha256((llvm.identity + "\n" + text).encode()).hexdigest()
    symbol = f"frame_kernel_{key[:32]}"
    n_args = plan.n_args + 2  # the ndarray type and the dtype, then the arrays
    if key not in s.codes:  # the bound is on machine code: groups of one structure share one kernel
        if len(s.codes) >= MAX_KERNELS:
            note(f"{MAX_KERNELS} distinct native kernels is the most one process compiles")
            return None, "off"
        s.codes.add(key)
    hit = _loaded.get(key)
    if hit is None:
        path = os.path.join(s.cache_checked or cache_dir(), key + ".o")
        obj = _read_cached(path, symbol)
        how = "cache"
        address = 0
        if obj is not None:
            try:
                address = llvm.load(obj, symbol)
            except Exception:
                address = 0
        if not address:
            obj = llvm.compile(text.replace("@kernel(", f"@{symbol}("))
            address = llvm.load(obj, symbol)
            problem = object_problem(obj, symbol)
            if problem is None:
                _write_cached(path, obj)
            else:  # the cache would refuse it: keep the code, note why it is not cached
                note(f"a compiled kernel is not cached: its object fails the cache's check ({problem})", then=None)
            how = "compiled"
            s.compiled += 1
        else:
            s.from_cache += 1
        hit = _loaded[key] = (_caller(llvm, address, n_args), how)
    fn, how = hit
    return fn, how


def _caller(llvm: "_LLVM", address: int, n_args: int) -> Callable[..., Any]:
    """The kernel at ``address`` as a callable: a builtin through a compiled trampoline (``fastcall``: about
    0.1 µs a call), else a ctypes function (about 1.5 µs). Either returns 0 (0.0) when the kernel ran, else 1."""
    from . import fastcall

    if not _trampolines:  # checked once per process
        problem = fastcall.fast_calls_problem()
        _trampolines[-1] = 0 if problem else 1
        if problem:
            note(f"compiled kernels are called through ctypes: {problem}", then=None)
    if _trampolines[-1]:
        trampoline = _trampolines.get(n_args)
        if trampoline is None:
            text, symbol = fastcall.trampoline_ir(n_args)
            trampoline = _trampolines[n_args] = llvm.load(llvm.compile(text), symbol)
        return fastcall.builtin_caller(trampoline, address, n_args)
    return ctypes.PYFUNCTYPE(ctypes.c_int, *[ctypes.py_object] * n_args)(address)


#: n_args -> the address of its trampoline; -1 -> 1 when builtins can call kernels here, 0 when not
_trampolines: dict[int, int] = {}


def _read_cached(path: str, symbol: str) -> bytes | None:
    """The object code cached at ``path`` for ``symbol``, or None (then the caller compiles afresh).

    Only a regular file of this user, read without blocking (a FIFO planted as an entry would block the
    compiler thread for good) and at most ``MAX_OBJECT_BYTES + 1`` bytes of it, whose checksum matches and
    whose structure is that of a kernel object (``objcheck``): LLVM's loader trusts its input and crashes the
    process on a malformed object. A refused entry is noted once and replaced by the fresh compile."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symlink (O_NOFOLLOW), no permission
        return _refused(path, exc.strerror or str(exc))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _refused(path, "not a regular file")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return _refused(path, "it belongs to another user")
        head = len(_MAGIC) + 32
        if st.st_size > MAX_OBJECT_BYTES + head:
            return _refused(path, f"{st.st_size} bytes, more than a kernel object")
        chunks, left = [], MAX_OBJECT_BYTES + head + 1  # bounded even if the file grows while read
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        return _refused(path, exc.strerror or str(exc))
    finally:
        os.close(fd)
    if len(data) > MAX_OBJECT_BYTES + head or not data.startswith(_MAGIC) or len(data) < head:
        return _refused(path, "not a frame-native cache entry")
    digest, obj = data[len(_MAGIC):head], data[head:]
    import hashlib

    if hashlib.sha256(obj).digest() != digest:
        return _refused(path, "its checksum does not match (a damaged file)")
    problem = object_problem(obj, symbol)
    return obj if problem is None else _refused(path, f"its object code is {problem}" if problem.startswith(
        ("not ", "larger", "malformed")) else f"its object code fails the check: {problem}")


def _refused(path: str, why: str) -> bytes | None:
    """Note why a cache entry is not used; ``None``, what ``_read_cached`` returns for no usable entry."""
    note(f"the kernel cache entry {os.path.basename(path)} is not used ({why}); it is compiled afresh", then=None)
    return None


def _write_cached(path: str, obj: bytes) -> None:
    import hashlib
    import tempfile

    folder = os.path.dirname(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".o")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, path)  # readers see the old file or the whole new one
    except OSError as exc:
        note(f"cannot write to the kernel cache ({exc.strerror or exc})",
             then="the kernels run, compiled afresh in each process")
        return
    _prune(folder)


def _prune(folder: str) -> None:
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".o") and not n.startswith(".")]
        if len(names) <= _CACHE_FILES:
            return
        paths = sorted((os.path.join(folder, n) for n in names), key=os.path.getmtime)
        for p in paths[: len(paths) - _CACHE_FILES * 9 // 10]:
            os.unlink(p)
    except OSError:
        pass


# -- fork and exit ----------------------------------------------------------------------------------
def _forked_child() -> None:
    """Runs in a child right after ``fork``: this process never compiles (a compile thread did not survive).

    The child gets a fresh lock and an empty queue: the parent's compiler thread may have held either one at
    the fork, and no thread is left in the child to release it (``note`` and ``status`` would wait forever)."""
    _state.lock = threading.Lock()
    _state.queue = queue.Queue(QUEUE)
    _state.disabled = _state.disabled or "forked child process (compiles only in the parent)"


def _at_exit() -> None:
    s = _state
    s.stopping = True
    if s.thread is not None and s.thread.is_alive():
        try:
            s.queue.put_nowait(None)
        except queue.Full:
            pass
        s.thread.join(EXIT_WAIT)
    # llvmlite frees its LLVM objects in __del__ unless its own at-exit hook has said the interpreter is going
    # down; imported on the compiler thread after the exit hooks began (a process ending during its first
    # compile), it never registered that hook, and its objects' __del__ then ran against torn-down modules
    # ("Exception ignored ... 'NoneType' object is not callable"). Say it for llvmlite: the memory goes with
    # the process either way, and code still loaded must stay valid for exit hooks that run kernels.
    common = sys.modules.get("llvmlite.binding.common")
    flag = getattr(common, "_shutting_down", None)
    if isinstance(flag, list) and flag:
        flag[0] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)
atexit.register(_at_exit)
