"""selective_scan's forward-mode rule (JvpFn): the tangent of the scan is a scan of the same decays.

With ``a_t = exp(dt_t A)``, ``b_t = dt_t B_t u_t`` and ``h_t = a_t h_{t-1} + b_t`` (``_selective``'s docstring),
differentiating the recurrence gives another one over the same ``a``:

    dh_t   = a_t dh_{t-1} + (da_t h_{t-1} + db_t)         linear_scan(a, da * h shifted one step + db)
    da     = a (d_dt A + dt dA),       db = (d_dt u + dt du) B + dt u dB
    dy     = sum_n (dh C + h dC) + du D + u dD,             dout = dy silu(z) + y silu'(z) dz
    d_dt   = sigmoid(raw) (ddelta + dbias) with softplus, else ddelta + dbias

In float32 and float64, ``a``, ``h``, ``dt`` and ``y`` come from ``selective_scan_saving_internal`` (which the pass
merge_selective_scan_saving merges with the forward node), so the tangent costs one more scan and the elementwise
terms above; half precision computes them with frame ops, as the composite gradient does. Every reshape writes
the batch as -1, and B and C reach the state layout by transposes, new axes, slices and joins, never a size:
a JVP graph through selective_scan runs at any batch size, bit for bit one traced there.
"""

from __future__ import annotations

from frame_core import NodeContext, ops

from ._common import shift
from ._selective import Layout, _softplus, fast_path, layout


class _State:
    """The maps between selective_scan's layouts and the state layout ``(L, batch, G, D/G, N)``, batch free."""

    def __init__(self, lay: Layout) -> None:
        self.lay, self.per = lay, lay.dim // lay.groups

    def of(self, x):  # noqa: ANN001, ANN201 - (batch, D, L) -> (L, batch, G, D/G, 1)
        lay = self.lay
        return ops.reshape(ops.transpose(x, perm=[2, 0, 1]), shape=[lay.length, -1, lay.groups, self.per, 1])

    def back(self, x):  # noqa: ANN001, ANN201 - (L, batch, G, D/G, 1) -> (batch, D, L)
        lay = self.lay
        return ops.transpose(ops.reshape(x, shape=[lay.length, -1, lay.dim]), perm=[1, 2, 0])

    def of_matrix(self, m, form: str, own: int):  # noqa: ANN001, ANN201 - B or C (`own` groups), broadcastable
        lay = self.lay
        if form == "variable":  # (batch, N, L) -> (L, batch, 1, 1, N)
            return ops.expand_dims(ops.transpose(m, perm=[2, 0, 1]), axes=[2, 3])
        if form == "grouped":  # (batch, own, N, L) -> (L, batch, G, 1, N): each group repeated G / own times
            m = ops.expand_dims(ops.transpose(m, perm=[3, 0, 1, 2]), axes=[3])
            repeats = lay.groups // own
            if repeats == 1:
                return m
            rows = [ops.slice(m, starts=[i], stops=[i + 1], axes=[2]) for i in range(own)]
            return ops.concat(*[row for row in rows for _ in range(repeats)], axis=2)
        return ops.reshape(m, shape=[lay.groups, self.per, lay.n])  # constant (D, N)


def selective_scan_jvp(ctx: NodeContext):
    lay = layout(ctx)
    softplus, n_in = ctx.attrs["delta_softplus"], len(ctx.input_types)
    if lay.length * lay.dim == 0:  # out is empty at every batch size: so is its tangent
        return ctx.jvp_graph(lambda *args: None)
    st = _State(lay)
    attrs = {"delta_softplus": softplus, "optional_inputs": list(lay.optional)}

    def named(xs):  # noqa: ANN001, ANN202
        extra = dict(zip(lay.optional, xs[5:]))
        return (*xs[:5], extra.get("D"), extra.get("z"), extra.get("delta_bias"))

    def jvp(*args):  # noqa: ANN001, ANN202 - traced tensors (xs.., out, dxs..)
        u, delta, A, B, C, D, z, bias = named(args[:n_in])
        du, ddelta, dA, dB, dC, dD, dz, dbias = named(args[n_in + 1:])
        raw, d_raw = (delta, ddelta) if bias is None else \
            (delta + ops.reshape(bias, shape=[lay.dim, 1]), ddelta + ops.reshape(dbias, shape=[lay.dim, 1]))
        d_dt = ops.sigmoid(raw) * d_raw if softplus else d_raw  # (softplus' derivative is the sigmoid)
        a_s, da_s = (ops.reshape(t, shape=[lay.groups, st.per, lay.n]) for t in (A, dA))
        b_m, db_m = st.of_matrix(B, lay.b_form, lay.b_groups), st.of_matrix(dB, lay.b_form, lay.b_groups)
        c_m, dc_m = st.of_matrix(C, lay.c_form, lay.c_groups), st.of_matrix(dC, lay.c_form, lay.c_groups)
        u_s, du_s = st.of(u), st.of(du)
        if fast_path(lay.u):  # a, h, dt and y from the forward's own kernel (merged with the forward node)
            _, a, h, dt, y = ops.selective_scan_saving_internal(*args[:n_in], **attrs)
            dt_s = st.of(dt)
        else:  # half precision: the forward in frame ops, as the composite gradient
            dt_s = st.of(_softplus(raw) if softplus else raw)
            a = ops.exp(dt_s * a_s)
            h = ops.linear_scan(a, dt_s * u_s * b_m, axis=0)
            y = None
        d_dt_s = st.of(d_dt)
        da = a * (d_dt_s * a_s + dt_s * da_s)
        db = (d_dt_s * u_s + dt_s * du_s) * b_m + dt_s * u_s * db_m
        dh = ops.linear_scan(a, da * shift(h, 0, 1) + db, axis=0)
        dy = st.back(ops.sum(dh * c_m + h * dc_m, axes=[4], keepdims=True))
        if D is not None:
            dy = dy + du * ops.reshape(D, shape=[lay.dim, 1]) + u * ops.reshape(dD, shape=[lay.dim, 1])
        if z is None:
            return dy
        if y is None:
            y = st.back(ops.sum(h * c_m, axes=[4], keepdims=True))
            if D is not None:
                y = y + u * ops.reshape(D, shape=[lay.dim, 1])
        sig = ops.sigmoid(z)
        return dy * (z * sig) + y * (sig * (z * (1.0 - sig) + 1.0)) * dz  # silu'(z) = s (1 + z (1 - s))
    return ctx.jvp_graph(jvp)
