"""``frame new-pack NAME``: scaffold a third-party op pack in a new folder.

The generated project is what ``docs/writing-a-pack.md`` walks through: a
hatchling ``pyproject.toml`` with the ``frame`` entry point, a package whose
``plugin.py`` declares ``FRAME_PLUGIN_API`` and one complete op (schema,
shape inference, a kernel with ``accepts_out``, a GradientFn written with
``ctx.grad_graph``, examples), tests that run the conformance kit of
``frame_core.testing`` and assert the plugin loads, and a README.

The example op's gradient uses only the op itself, so the pack depends on
``frame-core`` alone and is closed under differentiation from the start.
"""

from __future__ import annotations

import keyword
import os
import re
from string import Template

from ._common import EXIT_USAGE, CliFailure, warn

__all__ = ["NAME_RULE", "check_name", "new_pack", "render"]

NAME_RULE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def check_name(name: str) -> None:
    """Refuse a pack name that cannot be an entry-point name, a package suffix and an op-name prefix."""
    problem = None
    if not NAME_RULE.match(name):
        problem = "must start with a lowercase letter and contain only lowercase letters, digits and '_' (at most 40)"
    elif keyword.iskeyword(name):
        problem = "is a Python keyword"
    elif name.endswith("_internal") or "__" in name or name.endswith("_"):
        problem = "may not end in '_' or '_internal', nor contain '__'"
    elif name == "core":  # the namespace of frame-core's built-in ops: a pack of that name never loads
        problem = "is the namespace of frame-core's own ops (core::constant, ...), so such a pack could never load"
    if problem:
        fixed = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
        if fixed and not fixed[0].isalpha():
            fixed = "ops_" + fixed
        hint = f"; try {fixed!r}" if fixed and fixed != name and NAME_RULE.match(fixed) else ""
        raise CliFailure(f"error: invalid pack name {name!r}: it {problem}{hint}", EXIT_USAGE)


def render(name: str) -> dict[str, str]:
    """The files of a new pack called ``name``: relative path -> text."""
    package = f"frame_ops_{name}"
    values = {
        "pack": name,
        "package": package,
        "dist": f"frame-ops-{name.replace('_', '-')}",
        "op": f"{name}_scale",
        "OP": f"{name.upper()}_SCALE",
    }
    return {
        path.replace("PACKAGE", package): Template(text).substitute(values)
        for path, text in _FILES.items()
    }


def new_pack(name: str, directory: str | None) -> None:
    """Write the pack into ``directory`` (default ``./frame-ops-NAME``), which must not exist or be empty."""
    check_name(name)
    files = render(name)
    target = directory or f"frame-ops-{name.replace('_', '-')}"
    if os.path.exists(target):
        if not os.path.isdir(target):
            raise CliFailure(f"error: {target} exists and is not a folder; choose another --dir", EXIT_USAGE)
        if os.listdir(target):
            raise CliFailure(f"error: {target} already exists and is not empty; choose a new folder with --dir "
                             "(frame new-pack never overwrites files)", EXIT_USAGE)
    _warn_if_taken(name)
    try:
        for rel, text in files.items():
            path = os.path.join(target, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "x", encoding="utf-8") as f:
                f.write(text)
    except OSError as exc:
        raise CliFailure(f"error: cannot write the pack into {target}: {exc.strerror or exc}", EXIT_USAGE) from None
    warn(f"created pack {name!r} in {target}:")
    for rel in sorted(files):
        warn(f"  {rel}")
    warn(f"next:\n  pip install -e '{target}[test]'\n  pytest {os.path.join(target, 'tests')}\n"
         f"  frame ops list --pack {name}\n  frame audit gradients --pack {name}")


def _warn_if_taken(name: str) -> None:
    from ..ops_registry.entrypoints import entry_points
    from ..ops_registry.loader import GROUP

    for ep in entry_points(GROUP):
        if ep.name == name:
            warn(f"warning: an installed pack is already called {name!r} ({ep.dist_name} {ep.dist_version}); "
                 "two packs with one name cannot load together, so rename one before installing this one")


_PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.18"]
build-backend = "hatchling.build"

[project]
name = "$dist"
version = "0.1.0"
description = "Ops for frame: $op"
readme = "README.md"
requires-python = ">=3.11"
license = { text = "MIT" }
# Targets frame plugin API 1.x ($package.plugin.FRAME_PLUGIN_API). If your gradients use ops from
# another pack (add, mul, ... come from frame-ops-basic), list that pack here too.
dependencies = ["frame-core>=0.1,<0.2", "numpy>=1.26"]

[project.optional-dependencies]
test = ["pytest>=8"]

# The entry point frame finds the pack by: group "frame", name = the pack's name.
[project.entry-points.frame]
$pack = "$package.plugin"

[tool.hatch.build.targets.wheel]
packages = ["$package"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

_INIT = '''\
"""$dist: ops for frame (pack ``$pack``)."""

__version__ = "0.1.0"
'''

_PLUGIN = '''\
"""Entry point of $dist: the pack's ops and the hook that registers them.

One op reads in one place: its shape function, kernel and GradientFn, then
the ``OpSchema`` that ties them together with its examples. Add ops the same
way and list them in ``frame_register_ops``. Each op is also ``$pack::<name>``:
when another pack registers the same name, users reach this pack's op by that
qualified name, and inside this pack a short name means this pack's op first.
The example op carries the pack's name as a prefix, which spares users that.
"""

from __future__ import annotations

import numpy as np

from frame_core import AttrSpec, Example, NodeContext, OpSchema, TensorType, hookimpl, ops

#: The frame plugin API this pack is written for; a core with another major version refuses it.
FRAME_PLUGIN_API = "1.0"


# $op(x; factor) = factor * x
def _scale_shape(ctx: NodeContext) -> list[TensorType]:
    (x,) = ctx.input_types
    if not x.dtype.is_float:
        raise ctx.error(f"needs a floating input, got {x}; cast it to a float dtype first")
    return [x]


def _scale_kernel(ctx: NodeContext):
    # the attribute as a scalar of the node's dtype: a Python float would turn bfloat16 into float32
    factor = ctx.input_types[0].dtype.np.type(ctx.attrs["factor"])

    def scale(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        # accepts_out: write into `out` when the runtime passes one (it may be `x` itself, which is safe for an
        # elementwise ufunc). Without one, allocate: kernels return ndarrays, never numpy scalars.
        return np.multiply(x, factor, out=np.empty_like(x) if out is None else out)
    return scale


def _scale_gradient(ctx: NodeContext):
    factor = ctx.attrs["factor"]
    # inputs [x, y, gy] -> [gx]; gx = factor * gy. It uses only this op, so its gradient is closed: differentiable to any order.
    return ctx.grad_graph(lambda x, y, gy: ops.$op(gy, factor=factor))


$OP = OpSchema(
    "$op",
    inputs=("x",),
    attrs={"factor": AttrSpec("float", 2.0, "the number every element is multiplied by")},
    shape_infer=_scale_shape,
    kernels={"cpu": _scale_kernel},
    gradient=_scale_gradient,
    # any_shape_gradient: the GradientFn writes no size down, so training graphs run at any batch size
    traits=("elementwise", "accepts_out", "any_shape_gradient"),
    doc="Elementwise factor * x.",
    examples=[
        Example(["f32[3, 4]"]),
        Example(["f64[5]"], {"factor": -0.5}),
        Example(["f32[]"], {"factor": 3.0}, note="a scalar"),
    ],
)


@hookimpl
def frame_register_ops() -> list[OpSchema]:
    return [$OP]
'''

_TEST_PLUGIN = '''\
"""The pack is found through its entry point and loads cleanly next to the other installed packs."""

import frame_core


# These tests name no op: they keep passing when you replace the example op with yours. What each op does is
# tested by the conformance kit (test_conformance.py) and by your own value tests.


def test_plugin_loads():
    reg = frame_core.load_registry()
    record = reg.packs["$pack"]
    assert record.status == "loaded", record.error
    assert record.distribution == "$dist"
    assert record.ops, "the pack registers no op: list your OpSchemas in frame_register_ops"
    assert all(op in reg.schemas for op in record.ops)
    problems = [p for p in reg.problems if "$pack" in p or "$dist" in p]
    assert not problems, problems  # name collisions with other packs, misspelt hooks, ...


def test_plugin_loads_alone():
    # the pack depends on no other pack: its ops, GradientFns included, use only its own ops and the core's
    reg = frame_core.load_registry(environ={"FRAME_LOAD_PLUGINS": "$pack"})
    record = reg.packs["$pack"]
    assert record.status == "loaded", record.error
    assert record.ops == frame_core.load_registry().packs["$pack"].ops
    open_ops = [op for op in record.ops if reg.closure[op].differentiable == "yes" and not reg.closure[op].closed]
    assert not open_ops, f"gradients not closed to any order without the other packs: {open_ops}"
'''

_TEST_CONFORMANCE = '''\
"""frame's conformance kit over every op of this pack (frame_core.testing).

One test per (op, check, example): the schema, the examples, the kernel
against shape inference, the GradientFn contract, gradients against finite
differences to order 2, float16/bfloat16 against float32, and the declared
traits (elementwise, accepts_out, ...).
"""

import numpy as np
import pytest

import frame_core
from frame_core.testing import conformance_tests

test_conformance = conformance_tests("$pack")

#: An independent reference for each op's forward values: op -> (input arrays, attributes, the same computation in
#: numpy). Add a row per op of yours; a row whose op the pack no longer registers is skipped with a note saying so.
REFERENCES = {
    "$op": ([np.linspace(-1.0, 1.0, 12).reshape(3, 4)], {"factor": 0.5}, lambda x: 0.5 * x),
}


@pytest.mark.parametrize("op", sorted(REFERENCES))
def test_values_against_numpy(op):
    reg = frame_core.load_registry()
    if op not in reg.packs["$pack"].ops:
        pytest.skip(f"the pack no longer registers {op!r}: remove its row from REFERENCES, add rows for your ops")
    inputs, attrs, reference = REFERENCES[op]
    types = [frame_core.TensorType(a.dtype, a.shape) for a in inputs]
    with frame_core.use_registry(reg):
        graph = frame_core.trace(lambda *xs: getattr(frame_core.ops, op)(*xs, **attrs), *types)
        (y,) = frame_core.compile(graph).run(inputs)
    np.testing.assert_allclose(y, reference(*inputs), rtol=1e-15)
'''

_README = """\
# $dist

Ops for frame (a plugin-based computational-graph framework) in the pack `$pack`:

| op | what it computes | gradient |
|---|---|---|
| `$op(x; factor=2.0)` | `factor * x`, elementwise | `factor * gy` (closed) |

## Install and test

```bash
pip install -e '.[test]'
pytest
frame ops list --pack $pack
frame audit gradients --pack $pack --order 2 --numeric
```

## Layout

- `pyproject.toml`: the entry point `$pack = "$package.plugin"` in group `frame`.
- `$package/plugin.py`: `FRAME_PLUGIN_API`, the ops, and `frame_register_ops`.
- `tests/`: the conformance kit of `frame_core.testing` over every op of the pack,
  and a test that the plugin loads.

See frame's guide "Writing an op pack" for the contracts and for publishing.
"""

_FILES = {
    "pyproject.toml": _PYPROJECT,
    "README.md": _README,
    "PACKAGE/__init__.py": _INIT,
    "PACKAGE/plugin.py": _PLUGIN,
    "PACKAGE/py.typed": "",  # PEP 561: type checkers read the pack's annotations
    "tests/test_plugin.py": _TEST_PLUGIN,
    "tests/test_conformance.py": _TEST_CONFORMANCE,
}
