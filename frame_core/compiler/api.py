"""``compile(graph, backend="cpu") -> Executable`` and the compile cache."""

from __future__ import annotations

import contextvars
import threading
from collections import OrderedDict
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._args import env_flag, name_list
from .._gc import gc_paused, made
from .._text import short_repr
from ..errors import CompileError
from ..ir.graph import Graph, input_roles
from ..ir.keys import graph_key

if TYPE_CHECKING:  # pragma: no cover
    from ..ops_registry.registry import Registry
    from ..runtime.executable import Executable
    from .context import CompileContext

__all__ = ["compile", "compile_subgraph", "compile_cache", "CompileCache", "CacheInfo"]

# the compile in progress in this thread/task: kernel builders compiling sub-graphs inherit its options
_active: contextvars.ContextVar["CompileContext | None"] = contextvars.ContextVar("frame_compile_active", default=None)


@dataclass(frozen=True)
class CacheInfo:
    hits: int
    misses: int
    size: int
    maxsize: int


class CompileCache:
    """Executables keyed by graph structure, types, attributes, backend and options (LRU).

    ``hits`` and ``misses`` count lookups; a training loop that recompiles its
    unchanged graphs every step shows one miss per graph and hits after that.
    """

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Any, Executable] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> "Executable | None":
        with self._lock:
            exe = self._entries.get(key)
            if exe is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
            return exe

    def put(self, key: Any, exe: "Executable") -> None:
        with self._lock:
            self._entries[key] = exe
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, len(self._entries), self.maxsize)

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __repr__(self) -> str:
        return f"<CompileCache hits={self.hits} misses={self.misses} size={len(self._entries)}>"


compile_cache = CompileCache()


def _decomposed(names: tuple[str, ...], reg: "Registry") -> frozenset[str]:
    """The canonical keys of the ops ``compile(decompose=...)`` names; each must exist and have a DecomposeFn."""
    from ..errors import FrameError

    keys = set()
    for name in names:
        try:
            key, schema = reg.resolve(name)
        except FrameError as exc:
            raise CompileError(f"compile(decompose=...) names {name!r}: {exc}") from None
        if schema.decomposition is None:
            raise CompileError(f"compile(decompose=...) names {name!r}, which has no DecomposeFn (pack {schema.pack}), "
                               "so it cannot be decomposed; name only ops that register one (frame ops show NAME)")
        keys.add(key)
    return frozenset(keys)


def _has_bodies(graph: Graph) -> bool:
    """Whether a node of ``graph`` has a sub-graph attribute (control flow)."""
    for node in graph.nodes:
        attrs = node.attrs
        if attrs:
            for a in attrs.values():
                if type(a) is Graph:
                    return True
    return False


def _switch(spec: Any) -> Any:
    """A plugin pass's ``cache_key()``: a pack's code, so what it raises or returns unhashable is a
    ``CompileError`` naming the pass and its pack (as a failing pass is), never a raw exception."""
    try:
        value = spec.cache_key()
        hash(value)
    except (Exception, SystemExit) as exc:
        raise CompileError(f"pass {spec.name!r} (pack {spec.pack}): its cache_key() failed with "
                           f"{type(exc).__name__}: {exc}; it must return a hashable summary of what the pass "
                           "reads besides the graph (a bug in that pack)") from exc
    return value


def compile(  # noqa: A001 - the name users expect
    graph: Graph,
    backend: str = "cpu",
    *,
    opt_level: int = 2,
    disable: Iterable[str] = (),
    decompose: Iterable[str] = (),
    checks: bool | None = None,
    cache: bool = True,
    registry: "Registry | None" = None,
    dynamic_shapes: bool = False,
    fast_math: bool = False,
) -> "Executable":
    """Compile ``graph`` for ``backend`` through the pipeline (see ``frame_core.compiler.pipeline``).

    ``opt_level`` 0 runs only what correctness needs, 1 adds constant folding
    and dead-node elimination, 2 (default) everything. ``disable`` names
    stages to skip; ``decompose`` names ops to replace by their DecomposeFn
    even when a kernel exists. ``checks`` (default: ``FRAME_CHECKS=1``) runs
    ``verify`` after every stage and checks every kernel's results on every run
    (without it only the first run's are checked). Identical graphs hit the
    compile cache. ``dynamic_shapes=True`` returns a ``DynamicExecutable`` that also runs inputs of
    other dimensions (same dtypes and ranks), re-specialising the graph once per new shape signature
    (docs/design-parameters-and-shapes.md). ``fast_math=True`` lets packs run an approximation of a function in
    place of numpy's (frame-native: float32 tanh within 7 ulp, XLA's 5; docs/fast-math.md); the default
    computes numpy's bits.
    """
    from ..ops_registry.registry import Registry, registry as current, use_registry
    from ..runtime.executable import Executable
    from .passes.lower import lower
    from .passes.memory import plan_memory
    from .context import CompileContext
    from .pipeline import run_graph_stages

    if not isinstance(graph, Graph):
        raise CompileError(f"compile() takes a Graph, got {type(graph).__name__}; build one with frame_core.trace(...)")
    if not isinstance(opt_level, int) or isinstance(opt_level, bool) or opt_level not in (0, 1, 2):
        raise CompileError(f"opt_level must be 0, 1 or 2, got {opt_level!r}")
    if not isinstance(backend, str) or not backend:
        raise CompileError(f"backend is a name such as 'cpu', got {short_repr(backend)}")
    if registry is not None and not isinstance(registry, Registry):
        raise CompileError(f"registry= takes a frame_core Registry (frame_core.registry(), load_registry(...)), got "
                           f"{type(registry).__name__} {short_repr(registry)}")
    for flag, value in (("checks", checks), ("cache", cache), ("dynamic_shapes", dynamic_shapes),
                        ("fast_math", fast_math)):
        if value is not None and not isinstance(value, bool):
            raise CompileError(f"{flag}= is True or False, got {short_repr(value)}")
    if dynamic_shapes:
        from ..runtime.dynamic import DynamicExecutable
        from .specialize import specialize

        options = dict(backend=backend, opt_level=opt_level, disable=disable, decompose=decompose, checks=checks,
                       cache=cache, registry=registry, fast_math=fast_math)
        base = compile(graph, **options)  # type: ignore[arg-type]
        return DynamicExecutable(base, lambda types: specialize(graph, types, registry=registry),  # type: ignore[return-value]
                                 options)
    reg = registry if registry is not None else current()
    if checks is None:
        checks = env_flag("FRAME_CHECKS")  # FRAME_CHECKS=false/no/off is off, as for FRAME_STRICT
    disable = frozenset(name_list(disable, "compile(disable=...)", CompileError, "['fuse_elementwise']"))
    decompose = _decomposed(name_list(decompose, "compile(decompose=...)", CompileError, "['softplus']"), reg)
    # The registry itself, not its id: a freed registry's id can be reused by another one. Input names
    # are in the key because run() names inputs in its errors.
    key: Any = None
    if cache:
        # what plugin passes read besides the graph (FRAME_NATIVE=0, say): a changed switch misses the cache
        switches = tuple([_switch(spec) for spec in reg.passes if spec.cache_key is not None])
        key = (graph_key(graph), tuple([v.name for v in graph.inputs]), tuple(graph.output_names), backend,
               opt_level, disable, decompose, checks, reg, switches, fast_math)
        hit = compile_cache.get(key)
        if hit is not None:
            return hit
    elif _has_bodies(graph):  # without the cache nothing reads the key, but building it refuses a body that
        graph_key(graph)      # holds its own graph (an IRError before verify, as with the cache)
    ctx = CompileContext(backend=backend, registry=reg, opt_level=opt_level, decompose=decompose, checks=checks,
                         disable=disable, fast_math=fast_math)
    # DecomposeFns, plugin passes and kernel builders look ops up in the current registry: make it `reg`
    current_reg = use_registry(reg) if registry is not None else nullcontext()
    token = _active.set(ctx)
    try:
        with gc_paused(), current_reg:
            made(len(graph.nodes))
            optimised = run_graph_stages(graph, ctx, disable)
            plan = plan_memory(optimised, reg, reuse=opt_level >= 2 and "plan_memory" not in disable)
            program = lower(optimised, plan, ctx)
            exe = Executable(optimised, program, plan, backend, ctx.log, checks=checks)
            exe.output_names = graph.output_names  # the passes keep output positions
            exe.input_roles = input_roles(graph)  # what a seed input is, for the messages of a wrong one
    finally:
        _active.reset(token)
    if cache:
        compile_cache.put(key, exe)
    return exe


def compile_subgraph(graph: Graph, backend: str | None = None) -> "Executable":
    """Compile a sub-graph (a control-flow body) from inside a kernel builder.

    The sub-graph goes through the whole pipeline (verify, folding, CSE,
    dead-node elimination, fusion, memory planning) with the options of the
    compile in progress: its registry, ``opt_level``, ``disable``,
    ``decompose``, ``checks`` and ``fast_math``, and its backend unless ``backend`` is given.
    Outside a compile (the conformance kit calling a kernel builder directly)
    the defaults and the current registry apply. The executable is never
    shared through the compile cache: the kernel owns it, so it may run it
    through ``Executable.unchecked()`` (no input checks, no lock) once per
    iteration. A kernel builder runs once per distinct node signature of an
    executable, so each body is compiled once per executable, not per run.
    """
    if not isinstance(graph, Graph):
        raise CompileError(f"compile_subgraph() takes a Graph, got {type(graph).__name__}")
    if backend is not None and (not isinstance(backend, str) or not backend):
        raise CompileError(f"backend is a name such as 'cpu', got {short_repr(backend)}")
    ctx = _active.get()
    if ctx is None:
        return compile(graph, backend or "cpu", cache=False)
    return compile(graph, backend or ctx.backend, opt_level=ctx.opt_level, disable=ctx.disable,
                   decompose=ctx.decompose, checks=ctx.checks, cache=False, registry=ctx.registry,
                   fast_math=ctx.fast_math)
