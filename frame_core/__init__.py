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

from typing import Any

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
    DataError,
    MissingGradientError,
    NonScalarLossError,
    PluginError,
    RegistrationError,
    ShapeError,
    UnknownOpError,
    VerifyError,
)
from .ir.dtypes import DType, bfloat16, bool_, float16, float32, float64, int32, int64
from .ir import schemas as _schemas
from .ir.graph import Graph, Node, Value, clone_graph
from .ir.types import TensorType

__version__ = "0.1.0"


def _current_registry() -> Any:
    """The IR's default schema source (``ir.schemas``): the current registry, loaded on first use.

    Installed here, at the package root, so that the IR itself never imports the registry.
    """
    from .ops_registry.registry import current_registry

    return current_registry()


_schemas.set_default_source(_current_registry)

# name -> (module, attribute): loaded on first access so `import frame_core` stays light.
_LAZY = {
    "verify": ("frame_core.ir.verify", "verify"),
    "check_graph": ("frame_core.ir.verify", "check_graph"),
    "save_graph": ("frame_core.ir.serialize", "save_graph"),
    "load_graph": ("frame_core.ir.serialize", "load_graph"),
    "dumps": ("frame_core.ir.serialize", "dumps"),
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

__all__ = [
    "__version__",
    # IR
    "DType", "float16", "bfloat16", "float32", "float64", "int32", "int64", "bool_",
    "TensorType", "Value", "Node", "Graph", "clone_graph",
    # errors
    "FrameError", "IRError", "VerifyError", "ShapeError", "AttributeSpecError", "UnknownOpError", "AmbiguousOpError",
    "GraphFormatError", "PluginError", "RegistrationError", "GradientError", "NonScalarLossError",
    "MissingGradientError", "CompileError", "InputError", "KernelError", "ArgumentError", "DataError",
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

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
