"""frame: a plugin-based computational-graph framework.

The core holds the tensor-graph IR, the op-schema registry and its plugin
hooks, reverse-mode autodiff as a graph-to-graph transform, the compile
pipeline and a numpy CPU runtime. Operators come from op packs, found through
the ``frame`` entry-point group when ``registry()`` is first used (never at
import; this module imports only numpy and the IR).

    import frame_core as fc
    from frame_core import ops

    g = fc.trace(lambda x, w, b: ops.relu(x @ w + b), "f32[16, 784]", "f32[784, 256]", "f32[256]")
    print(g)
    y, = fc.compile(g).run([x, w, b])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    AmbiguousOpError,
    ArgumentError,
    AttributeSpecError,
    CompileError,
    FrameError,
    GradientError,
    GraphFormatError,
    InputError,
    IRError,
    KernelError,
    CheckpointError,
    DataError,
    MissingGradientError,
    NonScalarLossError,
    ParameterError,
    PluginError,
    RegistrationError,
    ShapeError,
    UnknownOpError,
    VerifyError,
)
from .ir.dtypes import DType, bfloat16, bool_, float16, float32, float64, int32, int64
from .ir import schemas as _schemas
from .ir.graph import Graph, Node, Value, clone_graph, inline_graph
from .ir.types import TensorType

__version__ = "0.1.0"


_registry_of_now: Any = None  # ops_registry.registry.current_registry, bound on first use (not at import)


def _current_registry() -> Any:
    """The IR's default schema source (``ir.schemas``): the current registry, loaded on first use.

    Installed here, at the package root, so that the IR itself never imports the registry.
    """
    global _registry_of_now
    if _registry_of_now is None:  # an import statement here cost more than the rest of each add_node
        from .ops_registry.registry import current_registry

        _registry_of_now = current_registry
    return _registry_of_now()


_schemas.set_default_source(_current_registry)

# name -> (module, attribute): loaded on first access so `import frame_core` stays light.
_LAZY = {
    "verify": ("frame_core.ir.verify", "verify"),
    "check_graph": ("frame_core.ir.verify", "check_graph"),
    "save_graph": ("frame_core.ir.serialize", "save_graph"),
    "load_graph": ("frame_core.ir.serialize", "load_graph"),
    "dumps": ("frame_core.ir.serialize", "dumps"),
    "FrameWarning": ("frame_core.errors", "FrameWarning"),
    "loads": ("frame_core.ir.serialize", "loads"),
    "format_graph": ("frame_core.ir.printer", "format_graph"),
    "to_dot": ("frame_core.ir.dot", "to_dot"),
    "registry": ("frame_core.ops_registry.registry", "registry"),
    "use_registry": ("frame_core.ops_registry.registry", "use_registry"),
    "reset_registry": ("frame_core.ops_registry.registry", "reset_registry"),
    "Registry": ("frame_core.ops_registry.registry", "Registry"),
    "load_registry": ("frame_core.ops_registry.loader", "load_registry"),
    "OpSchema": ("frame_core.ops_registry.schema", "OpSchema"),
    "AttrSpec": ("frame_core.ops_registry.schema", "AttrSpec"),
    "Example": ("frame_core.ops_registry.schema", "Example"),
    "NodeContext": ("frame_core.ops_registry.schema", "NodeContext"),
    "hookimpl": ("frame_core.ops_registry.hookspecs", "hookimpl"),
    "PLUGIN_API_VERSION": ("frame_core.ops_registry.hookspecs", "PLUGIN_API_VERSION"),
    "trace": ("frame_core.frontend.trace", "trace"),
    "Tensor": ("frame_core.frontend.trace", "Tensor"),
    "constant": ("frame_core.frontend.trace", "constant"),
    "extend_graph": ("frame_core.frontend.extend", "extend_graph"),
    "trace_body": ("frame_core.frontend.subgraph", "trace_body"),
    "align_captures": ("frame_core.frontend.subgraph", "align_captures"),
    "Body": ("frame_core.frontend.subgraph", "Body"),
    "compile": ("frame_core.compiler.api", "compile"),
    "compile_cache": ("frame_core.compiler.api", "compile_cache"),
    "compile_subgraph": ("frame_core.compiler.api", "compile_subgraph"),
    "Executable": ("frame_core.runtime.executable", "Executable"),
    "build_backward_graph": ("frame_core.autodiff.backward", "build_backward_graph"),
    "add_scalar_contraction": ("frame_core.autodiff.backward", "add_scalar_contraction"),
    "build_vjp_graph": ("frame_core.autodiff.vjp", "build_vjp_graph"),
    "split_vjp_graph": ("frame_core.autodiff.vjp", "split_vjp_graph"),
    "build_sgd_update_graph": ("frame_core.autodiff.sgd", "build_sgd_update_graph"),
    "PassSpec": ("frame_core.compiler.passspec", "PassSpec"),
    "Rewriter": ("frame_core.compiler.rewrite", "Rewriter"),
    # named parameters, any-batch shapes, checkpoints (docs/design-parameters-and-shapes.md)
    "params": ("frame_core.params", None),
    "trace_params": ("frame_core.params", "trace_params"),
    "specialize": ("frame_core.compiler.specialize", "specialize"),
    "DynamicExecutable": ("frame_core.runtime.dynamic", "DynamicExecutable"),
    "value_and_grad": ("frame_core.autodiff.value_and_grad", "value_and_grad"),
    "grad": ("frame_core.autodiff.value_and_grad", "grad"),
    "save_checkpoint": ("frame_core.checkpoint", "save_checkpoint"),
    "load_checkpoint": ("frame_core.checkpoint", "load_checkpoint"),
    # for importers and pack tooling: dtype names, marking baked sizes, the closure order of a graph
    "as_dtype": ("frame_core.ir.dtypes", "as_dtype"),
    "as_type": ("frame_core.ir.types", "as_type"),
    "holds_traced_sizes": ("frame_core.frontend.trace", "holds_traced_sizes"),
    "Record": ("frame_core.records", "Record"),
    "MutableRecord": ("frame_core.records", "MutableRecord"),
    "graph_order": ("frame_core.ops_registry.closure", "graph_order"),
    # reading FRAME_* switches as the core does (a pack's own variables too)
    "env_flag": ("frame_core._args", "env_flag"),
    "warn_environment": ("frame_core._args", "warn_environment"),
    "checkpoint_bytes": ("frame_core.checkpoint", "checkpoint_bytes"),
    "CHECKPOINT_FORMAT": ("frame_core.checkpoint", "CHECKPOINT_FORMAT"),
    # what op packs build with (issue 17): the bundled packs import only these public names, as a third party does
    "apply": ("frame_core.frontend.trace", "apply"),
    "current_graph": ("frame_core.frontend.trace", "current_graph"),
    "check_arity": ("frame_core.frontend.subgraph", "check_arity"),
    "flatten_result": ("frame_core.frontend.subgraph", "flatten_result"),
    "attrs_key": ("frame_core.ir.keys", "attrs_key"),
    "graph_key": ("frame_core.ir.keys", "graph_key"),
    "node_has_side_effect": ("frame_core.ops_registry.schema", "node_has_side_effect"),
    "FUSED": ("frame_core.compiler.fused", "FUSED"),
    "FUSED_OP": ("frame_core.compiler.fused", "FUSED_OP"),
    "build_fused_kernel": ("frame_core.compiler.fused", "build_fused_kernel"),
    "discover_entry_points": ("frame_core.ops_registry.loader", "discover_entry_points"),
    # forward mode and one-pass differential operators (docs/forward-mode.md)
    "build_jvp_graph": ("frame_core.autodiff.jvp", "build_jvp_graph"),
    "jvp_inputs": ("frame_core.autodiff.jvp", "jvp_inputs"),
    "jacfwd": ("frame_core.autodiff.helpers", "jacfwd"),
    "jacrev": ("frame_core.autodiff.helpers", "jacrev"),
    "hessian": ("frame_core.autodiff.helpers", "hessian"),
    "hvp": ("frame_core.autodiff.helpers", "hvp"),
    "build_laplacian_graph": ("frame_core.autodiff.laplacian", "build_laplacian_graph"),
    "build_taylor_graph": ("frame_core.autodiff.laplacian", "build_taylor_graph"),
    "TangentError": ("frame_core.errors", "TangentError"),
}

# What type checkers and editors see for the lazy names above (``__getattr__`` alone would make them ``Any``).
# Adding a lazy name is two lines: its ``_LAZY`` entry and its import here (``from .pkg.mod import name as
# name``; a lazy module, ``(module, None)``, is ``from . import mod as mod``); tests/test_public_api.py checks
# that the two lists agree, so a name added to one only fails a test rather than typing as ``Any``.
if TYPE_CHECKING:
    from . import ops as ops
    from . import params as params
    from .autodiff.backward import add_scalar_contraction as add_scalar_contraction
    from .autodiff.backward import build_backward_graph as build_backward_graph
    from .autodiff.sgd import build_sgd_update_graph as build_sgd_update_graph
    from .autodiff.value_and_grad import grad as grad
    from .autodiff.value_and_grad import value_and_grad as value_and_grad
    from .checkpoint import CHECKPOINT_FORMAT as CHECKPOINT_FORMAT
    from .checkpoint import checkpoint_bytes as checkpoint_bytes
    from .checkpoint import load_checkpoint as load_checkpoint
    from .ir.dtypes import as_dtype as as_dtype
    from .ir.types import as_type as as_type
    from .autodiff.jvp import build_jvp_graph as build_jvp_graph
    from .autodiff.jvp import jvp_inputs as jvp_inputs
    from .autodiff.helpers import hessian as hessian
    from .autodiff.helpers import hvp as hvp
    from .autodiff.helpers import jacfwd as jacfwd
    from .autodiff.helpers import jacrev as jacrev
    from .autodiff.laplacian import build_laplacian_graph as build_laplacian_graph
    from .autodiff.laplacian import build_taylor_graph as build_taylor_graph
    from .errors import TangentError as TangentError
    from .frontend.trace import holds_traced_sizes as holds_traced_sizes
    from .records import MutableRecord as MutableRecord, Record as Record
    from .ops_registry.closure import graph_order as graph_order
    from ._args import env_flag as env_flag
    from .errors import FrameWarning as FrameWarning
    from ._args import warn_environment as warn_environment
    from .checkpoint import save_checkpoint as save_checkpoint
    from .compiler.specialize import specialize as specialize
    from .params import trace_params as trace_params
    from .runtime.dynamic import DynamicExecutable as DynamicExecutable
    from .autodiff.vjp import build_vjp_graph as build_vjp_graph
    from .autodiff.vjp import split_vjp_graph as split_vjp_graph
    from .compiler.api import compile as compile
    from .compiler.api import compile_cache as compile_cache
    from .compiler.api import compile_subgraph as compile_subgraph
    from .compiler.fused import FUSED as FUSED
    from .compiler.fused import FUSED_OP as FUSED_OP
    from .compiler.fused import build_fused_kernel as build_fused_kernel
    from .compiler.passspec import PassSpec as PassSpec
    from .compiler.rewrite import Rewriter as Rewriter
    from .frontend.extend import extend_graph as extend_graph
    from .frontend.subgraph import Body as Body
    from .frontend.subgraph import align_captures as align_captures
    from .frontend.subgraph import check_arity as check_arity
    from .frontend.subgraph import flatten_result as flatten_result
    from .frontend.subgraph import trace_body as trace_body
    from .frontend.trace import Tensor as Tensor
    from .frontend.trace import apply as apply
    from .frontend.trace import constant as constant
    from .frontend.trace import current_graph as current_graph
    from .frontend.trace import trace as trace
    from .ir.dot import to_dot as to_dot
    from .ir.keys import attrs_key as attrs_key
    from .ir.keys import graph_key as graph_key
    from .ir.printer import format_graph as format_graph
    from .ir.serialize import dumps as dumps
    from .ir.serialize import load_graph as load_graph
    from .ir.serialize import loads as loads
    from .ir.serialize import save_graph as save_graph
    from .ir.verify import check_graph as check_graph
    from .ir.verify import verify as verify
    from .ops_registry.hookspecs import PLUGIN_API_VERSION as PLUGIN_API_VERSION
    from .ops_registry.hookspecs import hookimpl as hookimpl
    from .ops_registry.loader import discover_entry_points as discover_entry_points
    from .ops_registry.loader import load_registry as load_registry
    from .ops_registry.registry import Registry as Registry
    from .ops_registry.registry import registry as registry
    from .ops_registry.registry import reset_registry as reset_registry
    from .ops_registry.registry import use_registry as use_registry
    from .ops_registry.schema import AttrSpec as AttrSpec
    from .ops_registry.schema import Example as Example
    from .ops_registry.schema import NodeContext as NodeContext
    from .ops_registry.schema import OpSchema as OpSchema
    from .ops_registry.schema import node_has_side_effect as node_has_side_effect
    from .runtime.executable import Executable as Executable

__all__ = [
    "__version__",
    # IR
    "DType", "float16", "bfloat16", "float32", "float64", "int32", "int64", "bool_",
    "TensorType", "Value", "Node", "Graph", "clone_graph", "inline_graph",
    # errors
    "FrameError", "IRError", "VerifyError", "ShapeError", "AttributeSpecError", "UnknownOpError", "AmbiguousOpError",
    "GraphFormatError", "PluginError", "RegistrationError", "GradientError", "NonScalarLossError",
    "MissingGradientError", "CompileError", "InputError", "KernelError", "ArgumentError", "DataError",
    "ParameterError", "CheckpointError",
    # lazily loaded
    *_LAZY,
    "ops",
]


def __getattr__(name: str) -> Any:
    if name == "ops":
        import importlib

        return importlib.import_module("frame_core.ops")
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'frame_core' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(target[0])
    value = module if target[1] is None else getattr(module, target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
