"""The core with no pack loaded (SPEC §2): imports light, lists zero user ops, differentiates built-in graphs.

Each check runs in a fresh interpreter, so nothing this test process has
already imported or loaded can hide a problem.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def run_python(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FRAME_")}
    environ.update(env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"subprocess failed:\n{done.stderr}"
    return done.stdout


CORE_ALONE = """
    import json
    import numpy as np
    import frame_core as fc

    reg = fc.registry()
    g = fc.Graph("builtin_only")
    x = g.add_input("f32[]", "x")
    two = g.constant(np.float32(2.0))
    y = g.apply("accumulate_internal", x, x)            # 2x
    loss = g.apply("accumulate_internal", y, two)       # 2x + 2
    g.mark_output(loss)
    fc.verify(g)

    first = fc.build_backward_graph(g, 0, [0])          # [loss, dloss/dx]
    second = fc.build_backward_graph(first, 1, [0])     # [loss, dloss/dx, d2loss/dx2]
    fc.verify(first)
    fc.verify(second)
    outs = fc.compile(second).run([np.array(3.0, np.float32)])

    # a vector graph: higher order through add_scalar_contraction needs no pack either
    v = fc.Graph("vector")
    a = v.add_input("f64[3]", "a")
    v.mark_output(v.apply("weighted_sum_internal", v.apply("accumulate_internal", a, a), weights=np.array([1.0, 2.0, 3.0])))
    g1 = fc.build_backward_graph(v, 0, [0])
    g1c, k = fc.add_scalar_contraction(g1, 1, weights=np.array([1.0, 0.0, -1.0]))
    vector = fc.compile(fc.build_backward_graph(g1c, k, [0])).run([np.ones(3)])
    print(json.dumps({
        "vector": [o.tolist() for o in vector],
        "user_ops": [s.name for s in reg.user_ops()],
        "ops": sorted(reg.names()),
        "packs": {p.name: p.status for p in reg.packs.values()},
        "problems": reg.problems,
        "outputs": [float(o) for o in outs],
        "dtypes": [str(np.asarray(o).dtype) for o in outs],
        "closed": {n: c.closed for n, c in reg.closure.items()},
    }))
"""


def test_core_alone_imports_lists_no_user_ops_and_differentiates_builtin_graphs():
    facts = json.loads(run_python(CORE_ALONE, FRAME_LOAD_PLUGINS=""))
    assert facts["user_ops"] == []
    assert facts["vector"] == [12.0, [2.0, 4.0, 6.0], -4.0, [0.0, 0.0, 0.0]]  # sum(w*2a), 2w, <(1,0,-1), 2w>, linear
    assert facts["ops"] == ["accumulate_internal", "constant", "fused_elementwise_internal", "weighted_broadcast_internal",
                            "weighted_sum_internal", "zeros_like_internal"]
    assert facts["packs"]["core"] == "loaded"
    assert all(status == "disabled" for name, status in facts["packs"].items() if name != "core")
    assert facts["problems"] == []
    assert facts["outputs"] == [8.0, 2.0, 0.0]  # 2x + 2 at x = 3; d/dx = 2; d2/dx2 = 0
    assert facts["dtypes"] == ["float32"] * 3
    assert facts["closed"] == {"weighted_sum_internal": True, "weighted_broadcast_internal": True,
                               "constant": True, "accumulate_internal": True, "fused_elementwise_internal": False,
                               "zeros_like_internal": True}


HEAVY = ("typer", "rich", "pluggy", "ml_dtypes", "importlib.metadata", "frame_ops_basic")


def test_import_frame_core_stays_light():
    out = run_python(f"""
        import sys
        import frame_core
        print([m for m in {HEAVY!r} if m in sys.modules])
    """)
    assert out.strip() == "[]"


def test_loading_the_registry_does_not_import_the_cli_stack():
    out = run_python("""
        import sys
        import frame_core
        frame_core.registry()
        print([m for m in ("typer", "rich", "click") if m in sys.modules])
    """)
    assert out.strip() == "[]"


def test_packs_are_loaded_on_first_use_of_the_registry_not_at_import():
    out = run_python("""
        import sys
        import frame_core
        before = "frame_ops_basic" in sys.modules
        frame_core.registry()
        print(before, "frame_ops_basic" in sys.modules)
    """)
    assert out.split() == ["False", "True"]
