"""Fake op packs for the loader and closure tests (no package is ever installed).

Two ways to fake a pack, as pluggy's and pytest's own tests do:

* ``Site`` writes ``<dist>-<version>.dist-info/{METADATA,entry_points.txt}``
  and the pack's module into a temporary directory put on ``sys.path``, so the
  real discovery code (``frame_core.ops_registry.entrypoints``) finds it;
* ``FakeEntryPoint`` hands an in-memory plugin module straight to
  ``load_registry(entry_points=[...])``.

Pack modules are given unique names per test, and removed from
``sys.modules`` afterwards, so no test sees another's modules.
"""

from __future__ import annotations

import itertools
import sys
import textwrap
import types
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.schema import Example, OpSchema

from ..fakes import FakeEntryPoint

_counter = itertools.count()

PACK_HEADER = '''\
import numpy as np
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.schema import Example, OpSchema


def op(name, **overrides):
    """An identity op on f32[3] whose gradient passes gy through (closed)."""
    spec = dict(inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
                kernels={"cpu": lambda ctx: (lambda x: x.copy())},
                gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy),
                examples=[Example(["f32[3]"])], doc="identity (a fake pack's op)")
    spec.update(overrides)
    return OpSchema(name, **spec)
'''


def pack_source(ops: Sequence[str] = (), *, api: str | None = '"1.0"', body: str = "", register: str | None = None) -> str:
    """Source of a pack module: ``FRAME_PLUGIN_API = <api>``, ``body``, and a ``frame_register_ops``.

    ``register`` is the hook's body (default: ``return [op(name) for name in ops]``).
    """
    api_line = "" if api is None else f"FRAME_PLUGIN_API = {api}\n"
    register = register or f"return [op(name) for name in {list(ops)!r}]"
    hook = "@hookimpl\ndef frame_register_ops():\n" + textwrap.indent(textwrap.dedent(register).strip(), "    ") + "\n"
    return PACK_HEADER + "\n" + api_line + textwrap.dedent(body) + "\n\n" + hook


class Site:
    """A temporary site directory on ``sys.path`` holding fake distributions."""

    def __init__(self, root: Path, monkeypatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        self.modules: list[str] = []
        self.dirs: list[Path] = []
        self.add_dir(root)

    def add_dir(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        self.monkeypatch.syspath_prepend(str(path))
        self.dirs.append(path)
        return path

    def pack(self, dist: str, source: str, *, ep_name: str | None = None, version: str = "1.0",
             where: Path | None = None, module: str | None = None) -> str:
        """Write distribution ``dist`` with one ``frame`` entry point to a module holding ``source``.

        Returns the module name (unique per call unless ``module`` is given).
        """
        where = where or self.root
        ep_name = ep_name or dist.replace("-", "_")
        module = module or f"fakepack_{next(_counter)}_{ep_name}"
        (where / f"{module}.py").write_text(source)
        info = where / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\nA fake pack.\n")
        (info / "entry_points.txt").write_text(f"[console_scripts]\nnot-ours = {module}:main\n\n[frame]\n{ep_name} = {module}\n")
        self.modules.append(module)
        return module

    def cleanup(self) -> None:
        for module in self.modules:
            sys.modules.pop(module, None)


def plugin(name: str, make_ops: Callable[[], list], api: str = "1.0") -> types.ModuleType:
    """An in-memory pack module whose ``frame_register_ops`` returns ``make_ops()`` (fresh schemas per load)."""
    module = types.ModuleType(f"fake_plugin_{name}")
    module.FRAME_PLUGIN_API = api

    @hookimpl
    def frame_register_ops():
        return make_ops()

    module.frame_register_ops = frame_register_ops
    return module


def unary(name: str, gradient=None, *, not_differentiable: str | None = None, example: str = "f32[3]",
          traits: Sequence[str] = (), **overrides) -> OpSchema:
    """A same-type unary op with a numpy identity kernel."""
    spec = dict(inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]],
                kernels={"cpu": lambda ctx: (lambda x: np.array(x, copy=True))}, gradient=gradient,
                not_differentiable=not_differentiable, examples=[Example([example])], traits=traits,
                doc=f"fixture op {name}")
    spec.update(overrides)
    return OpSchema(name, **spec)


def binary_internal(name: str, gradient=None) -> OpSchema:
    """``name(x, gy) -> x``-typed internal op (the shape of a typical ``*_grad_internal``)."""
    return OpSchema(name, inputs=("x", "gy"), shape_infer=lambda ctx: [ctx.input_types[0]],
                    kernels={"cpu": lambda ctx: (lambda x, gy: np.array(gy, copy=True))}, gradient=gradient,
                    examples=[Example(["f32[3]", "f32[3]"])], doc=f"fixture internal op {name}")
