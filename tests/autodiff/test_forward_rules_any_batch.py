"""Forward mode and second order through conv_transpose, group_norm, batch_norm and selective_scan at any batch.

Their JVP graphs (and, but for selective_scan, their second-order graphs) used to be refused at a batch other
than the traced one: the rules held traced sizes (a kernel size in an attribute op, a reshape to the traced
batch, batch_norm's 1/N and 1/(N - 1)). Each graph here is traced at batch 4, compiled once with
``dynamic_shapes=True`` and run at 1, 7 and 8: bit for bit a graph traced there, and right by central
differences of the forward (JVP) or of the first-order gradient (second order), in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops

TRACED, SIZES, STEP = 4, (1, 7, 8), 1e-6


def _ss_all(u, delta, A, B, C, D, z, bias):  # noqa: ANN001, ANN202 - variable B and C, every optional input
    return ops.selective_scan(u, delta, A, B, C, D, z, bias, delta_softplus=True)


def _ss_grouped(u, delta, A, B, C, z):  # noqa: ANN001, ANN202 - grouped B, constant C, the gate only
    return ops.selective_scan(u, delta, A, B, C, z, optional_inputs=["z"])


# name: (function, input shapes with "B" for the batch, (low, high) per input, differentiated inputs, kinds)
CASES = {
    "conv_transpose1d": (lambda x, w: ops.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1, groups=2),
                         [("B", 4, 5), (4, 3, 3)], None, [0, 1], ("jvp", "vjp2")),
    "conv_transpose2d": (lambda x, w: ops.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
                         [("B", 3, 4, 4), (3, 2, 3, 3)], None, [0, 1], ("jvp", "vjp2")),
    "group_norm": (lambda x, w, b: ops.group_norm(x, w, b, num_groups=3), [("B", 6, 5), (6,), (6,)], None,
                   [0, 1, 2], ("jvp", "vjp2")),
    "batch_norm": (lambda x, w, b, m, v: ops.batch_norm(x, w, b, m, v, momentum=0.3),  # y and both running averages
                   [("B", 3, 4), (3,), (3,), (3,), (3,)], [(-1, 1)] * 4 + [(0.5, 1.5)], [0, 1, 2], ("jvp", "vjp2")),
    "selective_scan": (_ss_all, [("B", 4, 5), ("B", 4, 5), (4, 3), ("B", 3, 5), ("B", 3, 5), (4,), ("B", 4, 5), (4,)],
                       [(-1, 1), (-0.5, 0.5), (-1.5, -0.2)] + [(-1, 1)] * 5, list(range(8)), ("jvp",)),
    "selective_scan_grouped": (_ss_grouped, [("B", 4, 4), ("B", 4, 4), (4, 2), ("B", 2, 2, 4), (4, 2), ("B", 4, 4)],
                               [(-1, 1), (0.1, 0.6), (-1.5, -0.2)] + [(-1, 1)] * 3, list(range(6)), ("jvp",)),
}


def _forward(name: str, batch: int) -> fc.Graph:
    fn, shapes, _, _, _ = CASES[name]
    return fc.trace(fn, *[f"f64{[batch if d == 'B' else d for d in s]}".replace(" ", "") for s in shapes])


def _graph(name: str, kind: str, batch: int) -> fc.Graph:
    forward = _forward(name, batch)
    wrt = CASES[name][3]
    if kind == "jvp":
        return fc.build_jvp_graph(forward, wrt)
    vjp = fc.build_vjp_graph(forward, wrt)  # (primals, cotangents) -> gradients; then its own VJP
    return fc.build_vjp_graph(vjp, list(range(len(vjp.inputs))))


def _primals(name: str, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    _, shapes, ranges, _, _ = CASES[name]
    ranges = ranges or [(-1.0, 1.0)] * len(shapes)
    return [rng.uniform(lo, hi, tuple(batch if d == "B" else d for d in s)) for s, (lo, hi) in zip(shapes, ranges)]


def _run(exe, arrays):  # noqa: ANN001, ANN202
    return exe.run([a.copy() for a in arrays])


def _directional(f, xs: list[np.ndarray], dxs: list[np.ndarray]) -> list[np.ndarray]:  # noqa: ANN001
    """Central differences of ``f`` (a list of arrays) along ``dxs``."""
    plus = f([x + STEP * d for x, d in zip(xs, dxs)])
    minus = f([x - STEP * d for x, d in zip(xs, dxs)])
    return [(p - m) / (2 * STEP) for p, m in zip(plus, minus)]


CHECKS = [(name, kind) for name, case in CASES.items() for kind in case[4]]


@pytest.mark.parametrize("name, kind", CHECKS, ids=[f"{n}-{k}" for n, k in CHECKS])
def test_a_graph_traced_at_batch_4_runs_at_1_7_and_8_as_one_traced_there(name, kind):
    dynamic = fc.compile(_graph(name, kind, TRACED), dynamic_shapes=True)
    forward = fc.compile(_forward(name, TRACED), dynamic_shapes=True)
    rng = np.random.default_rng(len(name))
    for size in SIZES:
        xs = _primals(name, size, rng)
        graph = _graph(name, kind, size)
        extra = [rng.uniform(-1.0, 1.0, v.type.shape) for v in graph.inputs[len(xs):]]
        got = _run(dynamic, [*xs, *extra])
        want = _run(fc.compile(graph), [*xs, *extra])
        for a, b in zip(got, want, strict=True):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"{name} {kind} at batch {size}"
        wrt = CASES[name][3]
        if kind == "jvp":  # tangents against central differences of the forward, run at the new batch too
            tangents = [np.zeros_like(x) for x in xs]
            for k, d in zip(wrt, extra):
                tangents[k] = d
            numeric = _directional(lambda v: _run(forward, v), xs, tangents)
            for a, b in zip(got[-len(numeric):], numeric, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * max(1.0, float(np.abs(b).max())))
        else:  # <gradient of <V, c> wrt the primals, dx> against central differences of <V(x), c>
            vjp = fc.compile(fc.build_vjp_graph(_forward(name, size), wrt))
            n_cot, cs = len(graph.inputs) - len(xs) - len(wrt), extra[-len(wrt):]
            cots = extra[:n_cot]
            dxs = [rng.uniform(-1.0, 1.0, x.shape) for x in xs]
            numeric = _directional(lambda v: [np.array(sum(np.sum(g * c) for g, c in zip(_run(vjp, [*v, *cots]), cs)))],
                                   xs, dxs)[0]
            analytic = sum(np.sum(g * d) for g, d in zip(got[:len(xs)], dxs))
            assert abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric)), f"{name} at batch {size}"


def test_batch_norm_second_order_at_one_value_per_channel_is_refused_by_name():
    # x [1, C] has no unbiased variance: a fresh trace refuses, and so does the graph traced at 4, naming an op:
    # the forward's batch_norm, which the VJP graphs keep, or inverse_count_internal (its 1/(N - 1) read off x at
    # run time) where a graph no longer holds the batch_norm and could run on and answer nonsense
    def graph(batch: int) -> fc.Graph:
        forward = fc.trace(lambda x, w, b, m, v: ops.batch_norm(x, w, b, m, v), f"f64[{batch}, 3]", *["f64[3]"] * 4)
        vjp = fc.build_vjp_graph(forward, [0, 1, 2])
        return fc.build_vjp_graph(vjp, list(range(len(vjp.inputs))))

    traced = graph(TRACED)
    dynamic = fc.compile(traced, dynamic_shapes=True)
    with pytest.raises(fc.ShapeError, match="needs more than one value per channel"):
        graph(1)
    arrays = [np.ones((1, *v.type.shape[1:]) if v.type.shape[0] == TRACED else v.type.shape) for v in traced.inputs]
    with pytest.raises(fc.ShapeError, match=r"\((batch_norm|inverse_count_internal)\) refuses them.*needs more than "
                                            r"(one value per channel|offset = 1)"):
        dynamic.run(arrays)
