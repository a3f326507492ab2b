"""Write docs/reference.md, frame's API reference, from the code: signatures and docstrings of frame_core's
public names (issue 17: OpSchema's arguments were spread over four pages; DType's attributes and multi-output ops
were documented nowhere).

    python docs/make_reference.py          # rewrite docs/reference.md
    python docs/make_reference.py --check  # exit 1 when docs/reference.md is out of date (tests/test_reference_doc.py)

Each entry is a MyST ``{py:...}`` directive, so Sphinx puts every name in the general index and other pages can
link to it; the docstrings are the one source of truth: edit them, not the page.
"""

from __future__ import annotations

import inspect
import pathlib
import re
import sys
from typing import Any

import frame_core
from frame_core.ir.dtypes import DTYPES
from frame_core.ops_registry.schema import ATTR_KINDS, TRAITS

PAGE = pathlib.Path(__file__).resolve().parent / "reference.md"

#: (section title, intro, public names in the order they are documented). A public name of frame_core.__all__
#: placed in no section is documented under "More" (place it in its section here when you add it).
SECTIONS: list[tuple[str, str, list[str]]] = [
    ("Op schemas", "What a pack registers: one `OpSchema` per op, with its attributes, examples and the context "
     "its callables receive.", ["OpSchema", "AttrSpec", "Example", "NodeContext", "hookimpl", "PLUGIN_API_VERSION"]),
    ("Types", "Element types and tensor types of the IR.",
     ["DType", "float16", "bfloat16", "float32", "float64", "int32", "int64", "bool_", "TensorType"]),
    ("Graphs", "The IR: values, nodes, graphs, and what reads and writes them.",
     ["Graph", "Node", "Value", "clone_graph", "inline_graph", "verify", "check_graph", "format_graph", "to_dot",
      "save_graph", "load_graph", "dumps", "loads", "graph_key", "attrs_key"]),
    ("Tracing", "Python functions to graphs.",
     ["trace", "Tensor", "constant", "apply", "current_graph", "ops", "extend_graph", "trace_body", "Body",
      "align_captures", "check_arity", "flatten_result"]),
    ("Differentiation", "Reverse mode as a graph-to-graph transform.",
     ["build_backward_graph", "add_scalar_contraction", "build_vjp_graph", "split_vjp_graph",
      "build_sgd_update_graph"]),
    ("Parameters, shapes and checkpoints", "Named parameter trees, any-batch shapes and checkpoints "
     "([the design](design-parameters-and-shapes.md)).",
     ["params", "trace_params", "value_and_grad", "grad", "specialize", "DynamicExecutable", "save_checkpoint",
      "load_checkpoint", "checkpoint_bytes", "CHECKPOINT_FORMAT"]),
    ("Compiling and running", "", ["compile", "compile_cache", "compile_subgraph", "Executable", "PassSpec",
                                   "Rewriter", "node_has_side_effect", "FUSED_OP", "FUSED", "build_fused_kernel"]),
    ("Registry and plugins", "", ["registry", "use_registry", "reset_registry", "Registry", "load_registry",
                                  "discover_entry_points"]),
    ("Errors", "Every error frame raises is a `FrameError`; most are also the builtin exception a Python "
     "programmer would expect (`ShapeError` is a `ValueError`, ...).",
     ["FrameError", "IRError", "VerifyError", "ShapeError", "AttributeSpecError", "UnknownOpError",
      "AmbiguousOpError", "GraphFormatError", "PluginError", "RegistrationError", "GradientError",
      "NonScalarLossError", "MissingGradientError", "CompileError", "InputError", "KernelError", "ArgumentError",
      "DataError", "ParameterError", "CheckpointError"]),
]


def _markdown(doc: str) -> str:
    """A docstring (reST-flavoured) as MyST Markdown: roles become code, underlined titles become bold lines."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    for line in lines:
        if out and out[-1].strip() and re.fullmatch(r"\s*([-=~])\1{2,}\s*", line):
            out[-1] = f"**{out[-1].strip()}**"
            continue
        out.append(re.sub(r":(?:class|func|meth|attr|mod|data|exc):`~?([^`]+)`", r"``\1``", line))
    return "\n".join(out).strip()


def _definitions(text: str) -> str:
    """reST definition lines (a term, then its indented text) as a MyST definition list."""
    items: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("    ") and items:
            items[-1].append(line.strip())
        elif line.strip():
            items.append([line.strip()])
    return "\n\n".join(f"{item[0]}\n: {' '.join(item[1:])}" for item in items)


def _signature(obj: Any) -> str:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    # self/cls and private keywords (``_enclosing``: the function's own recursion) are not the caller's business
    shown = [p for i, p in enumerate(signature.parameters.values())
             if not p.name.startswith("_") and not (i == 0 and p.name in ("self", "cls"))]
    text = str(signature.replace(parameters=shown))
    text = re.sub(r" at 0x[0-9a-f]+", "", text)  # no memory addresses: the page must be the same every time
    text = re.sub(r"(: |-> )\"?'([^']*)'\"?", r"\1\2", text)  # annotations are strings (postponed evaluation)
    return text.removesuffix(" -> None")


def _directive(kind: str, target: str, doc: str) -> str:
    body = _markdown(doc) if doc else ""
    return f"````{{py:{kind}}} {target}\n:module: frame_core\n\n{body}\n````\n" if body else \
        f"````{{py:{kind}}} {target}\n:module: frame_core\n````\n"


def _members(cls: type) -> list[str]:
    """The documented public methods and properties of a frame class, in source order."""
    parts = []
    for name, member in vars(cls).items():
        if name.startswith("_") or not (inspect.isfunction(member) or isinstance(member, (property, classmethod,
                                                                                             staticmethod))):
            continue
        function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        doc = inspect.getdoc(function) or ""
        if not doc:
            continue
        if isinstance(member, property):
            parts.append(_directive("property", f"{cls.__name__}.{name}", doc))
        else:
            parts.append(_directive("method", f"{cls.__name__}.{name}{_signature(function)}", doc))
    return parts


def _entry(name: str) -> str:
    obj = getattr(frame_core, name)
    if inspect.ismodule(obj):  # ops, params: a namespace, described by its module docstring
        return _directive("data", name, obj.__doc__ or "")
    if name in {d.name if d.name != "bool" else "bool_" for d in DTYPES}:
        return _directive("data", name, f"The `{obj.name}` element type (`{obj.short}`), a `DType`.")
    if isinstance(obj, type):
        if issubclass(obj, BaseException):
            bases = ", ".join(b.__name__ for b in obj.__bases__)
            return _directive("exception", f"{name}", f"*Is a* {bases}.\n\n" + (inspect.getdoc(obj) or ""))
        init = obj.__dict__.get("__init__")
        signature = _signature(init) if init else _signature(obj)
        text = _directive("class", f"{name}{signature}", inspect.getdoc(obj) or "")
        extra = _members(obj)
        return text + ("\n" + "\n".join(extra) if extra else "")
    if callable(obj) and not isinstance(obj, frame_core.OpSchema):
        return _directive("function", f"{name}{_signature(obj)}", inspect.getdoc(obj) or "")
    if isinstance(obj, frame_core.OpSchema):
        return _directive("data", name, f"The `OpSchema` of `{obj.name}`: {obj.doc}")
    if isinstance(obj, (str, int, float)):
        return _directive("data", name, f"`{obj!r}`")
    # an object with state (the compile cache): its class's docstring, never its repr, which changes as it is used
    return _directive("data", name, f"A `{type(obj).__name__}`. " + (inspect.getdoc(type(obj)) or ""))


def _tables() -> str:
    dtypes = ["| dtype | `name` | `short` | `itemsize` | `is_float` | `is_int` |", "|---|---|---|---|---|---|"]
    for d in DTYPES:
        dtypes.append(f"| `frame_core.{d.name if d.name != 'bool' else 'bool_'}` | `{d.name}` | `{d.short}` | "
                      f"{d.itemsize} | {d.is_float} | {d.is_int} |")
    traits = ["| trait | what it promises |", "|---|---|"] + [f"| `{k}` | {v} |" for k, v in TRAITS.items()]
    kinds = ", ".join(f"`{k}`" for k in ATTR_KINDS)
    return ("### The dtypes\n\n" + "\n".join(dtypes) + "\n\n### Traits (`OpSchema(traits=...)`)\n\n"
            + "\n".join(traits) + f"\n\n### Attribute kinds (`AttrSpec(kind)`)\n\n{kinds}; join kinds with `|` for "
            "a value that may be either (`\"str|ints\"`).\n")


def render() -> str:
    parts = [
        "# API reference\n",
        "<!-- Generated by docs/make_reference.py from frame_core's docstrings: edit those and run "
        "`python docs/make_reference.py`; tests/test_reference_doc.py fails when this page is out of date. -->\n",
        "Every public name of `frame_core` (`import frame_core as fc`), grouped by what it is for, with its "
        "signature and its docstring. The callables an `OpSchema` takes (shape inference, kernel builders, "
        "GradientFn, DecomposeFn) have their contracts in [Writing an op pack](writing-a-pack.md); the conformance "
        "kit `frame_core.testing` is in [Testing a pack](testing.md).\n",
        "## Tables\n", _tables(),
    ]
    for title, intro, names in SECTIONS:
        parts.append(f"## {title}\n")
        if intro:
            parts.append(intro + "\n")
        if title == "Op schemas":
            import frame_core.ops_registry.schema as schema_module

            contracts = _markdown(schema_module.__doc__ or "").split("**Contracts**", 1)[-1].strip()
            parts.append("### Contracts of the callables\n\n" + _definitions(contracts) + "\n")
        parts += [_entry(name) for name in names]
    placed = {name for _, _, names in SECTIONS for name in names}
    more = [name for name in frame_core.__all__ if name not in placed and name != "__version__"]
    if more:
        parts.append("## More\n")
        parts += [_entry(name) for name in more]
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"{PAGE} is out of date: run python docs/make_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
