"""A pack's kernel that raises (at build or at run time) and a DecomposeFn of the wrong arity name the pack.

Found by writing a third-party pack from the docs: the user saw "the cpu kernel of node 0 (%0 = qbad_kexit(%x))
failed: SystemExit: 4", "building the cpu kernel of node 0 (qbad_kbuild) failed: KeyError" and "DecomposeFn of
'qbad_decomp' returns [f32[3], f32[3]], expected [f32[3]]", none saying which installed pack to report it to
(the results check of the first run already did: ARCH-063's contract is the pack's).
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import frame_core as fc
import frame_ops_basic.plugin
from frame_core.errors import CompileError, KernelError
from frame_core.frontend.trace import apply
from frame_core.ops_registry.hookspecs import hookimpl
from frame_core.ops_registry.loader import load_registry
from frame_core.ops_registry.schema import Example, OpSchema

from ..fakes import FakeEntryPoint


def _op(name: str, builder, **extra) -> OpSchema:  # noqa: ANN001 - the builder under test
    return OpSchema(name, inputs=("x",), shape_infer=lambda ctx: [ctx.input_types[0]], kernels={"cpu": builder},
                    gradient=lambda ctx: ctx.grad_graph(lambda x, y, gy: gy), doc="a broken op",
                    examples=[Example(["f32[3]"])], **extra)


OPS = [_op("kp_raises", lambda ctx: lambda x: np.log(x, out=None) if x[0] > 0 else sys.exit(4)),
       _op("kp_build", lambda ctx: {}["no such setting"]),
       _op("kp_decomp", lambda ctx: lambda x: x.copy(),
           decomposition=lambda ctx: ctx.decomposition_graph(lambda x: [x * 1.0, x * 2.0]))]


@pytest.fixture(scope="module")
def reg():
    module = types.ModuleType("kp_pack_plugin")
    module.FRAME_PLUGIN_API = "1.0"
    module.frame_register_ops = hookimpl(lambda: OPS)
    return load_registry([FakeEntryPoint("ops_basic", frame_ops_basic.plugin, "frame-ops-basic"),
                          FakeEntryPoint("kp_pack", module, "frame-ops-kp")], environ={}, strict=False)


def _graph(reg, op: str) -> fc.Graph:  # noqa: ANN001
    with fc.use_registry(reg):
        return fc.trace(lambda x: apply(op, x), "f32[3]")


def test_a_kernel_failing_at_run_time_names_its_op_and_pack(reg):
    exe = fc.compile(_graph(reg, "kp_raises"), cache=False, registry=reg)
    exe.run([np.ones(3, np.float32)])
    with pytest.raises(KernelError, match=r"failed: SystemExit: 4 \(op 'kp_raises' of pack kp_pack, frame-ops-kp\)$"):
        exe.run([-np.ones(3, np.float32)])


def test_a_kernel_builder_failing_names_the_pack(reg):
    with pytest.raises(CompileError, match=r"KeyError: 'no such setting' \(a bug in pack kp_pack\)$"):
        fc.compile(_graph(reg, "kp_build"), cache=False, registry=reg)


def test_a_decomposition_of_the_wrong_arity_names_the_pack(reg):
    with pytest.raises(CompileError, match=r"returns \[f32\[3\], f32\[3\]\], expected \[f32\[3\]\] \(a bug in pack kp_pack\)"):
        fc.compile(_graph(reg, "kp_decomp"), cache=False, registry=reg, decompose=["kp_decomp"])
