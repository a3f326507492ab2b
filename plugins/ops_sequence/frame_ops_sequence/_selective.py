"""selective_scan: its input layout (shape checks), its mathematics in frame ops and its GradientFn.

``_Math.backward`` is Mamba's backward (``selective_scan_bwd_kernel.cuh``,
research note §4.2) written with frame ops, time-major like the forward kernel:
the state lives in ``(L, batch, G, D/G, N)``. The GradientFn runs it as the
numpy kernels of ``recurrence`` (float32/float64) or, in half precision, as
these frame ops; the kernels' own GradientFns differentiate these frame ops. With ``a_t = exp(delta_t A)``,
``b_t = delta_t B_t u_t`` and ``h = linear_scan(a, b)``:

    lam    = linear_scan(a shifted one step back, C^T gy, reverse)   adjoint of h
    ga     = lam * h_{t-1}                                          (h_{-1} = 0)
    gA     = sum_{t,b} ga * a * delta
    gdelta = sum_n (ga * a * A) + u * sum_n (lam * B)
    gu     = delta * sum_n (lam * B) + D gy
    gB     = sum_d lam * delta * u,       gC = sum_d gy * h
    gD     = sum_{b,t} gy * u,            gz = gout * y_pre * silu'(z)
    softplus: gdelta_raw = gdelta * sigmoid(delta + bias),  gbias = sum_{b,t} gdelta_raw

Every op used (linear_scan, slice, pad, mul, exp, sum, reshape, transpose,
sigmoid, relu, log) is closed, so selective_scan is closed too.
"""

from __future__ import annotations

import math

from frame_core import NodeContext, Record, TensorType, ops

from ._common import shift

OPTIONAL = ("D", "z", "delta_bias")


class Layout(Record):
    """The checked shapes of one selective_scan node."""

    __match_args__ = ("u", "batch", "dim", "length", "n", "groups", "b_form", "c_form", "optional", "b_groups",
                      "c_groups")
    u: TensorType
    batch: int
    dim: int
    length: int
    n: int
    groups: int
    b_form: str
    c_form: str
    optional: tuple[str, ...]
    b_groups: int
    c_groups: int

    def __init__(
        self, u: TensorType, batch: int, dim: int, length: int, n: int, groups: int, b_form: str, c_form: str,
        optional: tuple[str, ...], b_groups: int = 1, c_groups: int = 1
    ) -> None:
        # groups: the state's groups: a multiple of B's and of C's group count (their lcm), dividing D
        # b_form: "variable" (batch, N, L), "grouped" (batch, G, N, L) or "constant" (D, N)
        # b_groups: B's and C's own group counts (1 unless grouped)
        self._store(u=u, batch=batch, dim=dim, length=length, n=n, groups=groups, b_form=b_form, c_form=c_form,
                    optional=optional, b_groups=b_groups, c_groups=c_groups)


def _form(ctx: NodeContext, name: str, t: TensorType, batch: int, dim: int, length: int, n: int) -> tuple[str, int]:
    """(form, groups) of B or C, or a ShapeError listing the three accepted shapes."""
    if t.shape == (batch, n, length):
        return "variable", 1
    if t.rank == 4 and t.shape[0] == batch and t.shape[2:] == (n, length) and t.shape[1] >= 1 and dim % t.shape[1] == 0:
        return "grouped", t.shape[1]
    if t.shape == (dim, n):
        return "constant", 1
    raise ctx.error(
        f"{name} must be [batch, N, L] = [{batch}, {n}, {length}] (variable), [batch, G, N, L] with G dividing "
        f"D = {dim} (grouped) or [D, N] = [{dim}, {n}] (constant), got {t} (batch, D and L come from u, N = {n} from "
        "A's last axis: check A too)"
    )


def _optional_names(ctx: NodeContext, count: int) -> tuple[str, ...]:
    given = ctx.attrs["optional_inputs"]
    if given is None:
        if count > len(OPTIONAL):
            raise ctx.error(f"takes at most {5 + len(OPTIONAL)} inputs (u, delta, A, B, C, D, z, delta_bias), got "
                            f"{5 + count}")
        return OPTIONAL[:count]
    names = tuple(given)
    unknown = [x for x in names if x not in OPTIONAL]
    if unknown or len(set(names)) != len(names) or list(names) != sorted(names, key=OPTIONAL.index):
        raise ctx.error(f"optional_inputs must name some of {list(OPTIONAL)}, each once and in that order, got "
                        f"{list(names)}")
    if len(names) != count:
        raise ctx.error(f"optional_inputs names {len(names)} input(s) {list(names)}, but {count} follow C")
    return names


def layout(ctx: NodeContext) -> Layout:
    """Check every input of a selective_scan node and return its layout (ShapeErrors name the input)."""
    types = ctx.input_types
    if len(types) < 5:
        raise ctx.error(f"takes u, delta, A, B, C and optionally D, z, delta_bias; got {len(types)} inputs")
    optional = _optional_names(ctx, len(types) - 5)
    u = types[0]
    if not u.dtype.is_float or u.rank != 3:
        raise ctx.error(f"u must be a floating [batch, D, L] tensor, got {u}")
    batch, dim, length = u.shape
    named = dict(zip(("u", "delta", "A", "B", "C", *optional), types))
    for name, t in named.items():
        if t.dtype is not u.dtype:
            raise ctx.error(f"every input must have u's dtype {u.dtype.name}; {name} is {t}")
    if named["delta"] != u:
        raise ctx.error(f"delta must have u's shape [batch, D, L] = {list(u.shape)}, got {named['delta']}")
    A = named["A"]
    if A.rank != 2 or A.shape[0] != dim:
        raise ctx.error(f"A must be [D, N] with D = {dim} (u's channels), got {A}")
    n = A.shape[1]
    b_form, b_groups = _form(ctx, "B", named["B"], batch, dim, length, n)
    c_form, c_groups = _form(ctx, "C", named["C"], batch, dim, length, n)
    if "z" in named and named["z"] != u:
        raise ctx.error(f"z must have u's shape [batch, D, L] = {list(u.shape)}, got {named['z']}")
    for name in ("D", "delta_bias"):
        if name in named and named[name].shape != (dim,):
            raise ctx.error(f"{name} must be [D] = [{dim}], got {named[name]}")
    # B and C may be grouped apart (as in selective_scan_ref, each is repeated to the channels by its own count):
    # the state is split into lcm(G_B, G_C) groups, which divides D since both counts do
    groups = math.lcm(b_groups, c_groups)
    return Layout(u, batch, dim, length, n, groups, b_form, c_form, optional, b_groups, c_groups)


# -- the GradientFn -------------------------------------------------------------------------------------
def _softplus(x):  # noqa: ANN001, ANN202 - traced tensors
    """log(1 + e^x) = relu(x) + log(1 + e^-|x|), with -|x| = x - 2 relu(x): no overflow; derivative sigmoid(x)."""
    r = ops.relu(x)
    return r + ops.log(ops.exp(x - r * 2.0) + 1.0)


class _Math:
    """The selective scan written with frame ops in the state layout ``(L, batch, G, D/G, N)`` of one node."""

    def __init__(self, lay: Layout, softplus: bool, input_types: list[TensorType]) -> None:
        self.lay, self.softplus, self.types = lay, softplus, input_types
        self.per = lay.dim // lay.groups
        self.state = (lay.length, lay.batch, lay.groups, self.per, 1)

    def to_state(self, x):  # noqa: ANN001, ANN201 - (batch, D, L) -> (L, batch, G, D/G, 1)
        return ops.reshape(ops.transpose(x, perm=[2, 0, 1]), shape=list(self.state))

    def from_state(self, x):  # noqa: ANN001, ANN201 - (L, batch, G, D/G, 1) -> (batch, D, L)
        lay = self.lay
        return ops.transpose(ops.reshape(x, shape=[lay.length, lay.batch, lay.dim]), perm=[1, 2, 0])

    def mat_to_state(self, m, form, own):  # noqa: ANN001, ANN201 - B or C (of `own` groups), broadcastable
        lay = self.lay
        length, batch, groups, n = lay.length, lay.batch, lay.groups, lay.n
        if form == "variable":
            return ops.reshape(ops.transpose(m, perm=[2, 0, 1]), shape=[length, batch, 1, 1, n])
        if form == "grouped":
            m = ops.reshape(ops.transpose(m, perm=[3, 0, 1, 2]), shape=[length, batch, own, 1, 1, n])
            # state group g reads group g // (groups / own) of m: each of m's groups repeated groups / own times
            m = ops.broadcast_to(m, shape=[length, batch, own, groups // own, 1, n])
            return ops.reshape(m, shape=[length, batch, groups, 1, n])
        return ops.reshape(m, shape=[groups, self.per, n])

    def mat_from_state(self, g, form, own, t):  # noqa: ANN001, ANN201 - a full-state gradient summed to B's/C's form
        lay = self.lay
        if form == "variable":
            return ops.transpose(ops.sum(g, axes=[2, 3]), perm=[1, 2, 0])
        if form == "grouped":  # summed over the channels of each of m's groups (the repeats of mat_to_state too)
            g = ops.sum(ops.reshape(g, shape=[lay.length, lay.batch, own, lay.groups // own, self.per, lay.n]),
                        axes=[3, 4])
            return ops.transpose(g, perm=[1, 2, 3, 0])
        return ops.reshape(ops.sum(g, axes=[0, 1]), shape=list(t.shape))

    def named(self, xs):  # noqa: ANN001, ANN201
        extra = dict(zip(self.lay.optional, xs[5:]))
        return (*xs[:5], extra.get("D"), extra.get("z"), extra.get("delta_bias"))

    def dt(self, delta, bias):  # noqa: ANN001, ANN201 - the step size (L, batch, G, D/G, 1), and its pre-softplus value
        raw = delta if bias is None else delta + ops.reshape(bias, shape=[self.lay.dim, 1])
        return (_softplus(raw) if self.softplus else raw), raw

    def decay_and_state(self, xs):  # noqa: ANN001, ANN201 - a = exp(delta A) and h, both (L, batch, G, D/G, N)
        u, delta, A, B, C, D, z, bias = self.named(xs)
        lay = self.lay
        dt, _ = self.dt(delta, bias)
        dt_s = self.to_state(dt)
        a = ops.exp(dt_s * ops.reshape(A, shape=[lay.groups, self.per, lay.n]))
        b_mat = self.mat_to_state(B, lay.b_form, lay.b_groups)
        return a, ops.linear_scan(a, dt_s * self.to_state(u) * b_mat, axis=0)

    def pre_gate(self, xs, h):  # noqa: ANN001, ANN201 - y = C h + D u, (batch, D, L): the output before the gate
        u, _, _, _, C, D, _, _ = self.named(xs)
        y = self.from_state(ops.sum(h * self.mat_to_state(C, self.lay.c_form, self.lay.c_groups), axes=[4],
                                    keepdims=True))
        return y if D is None else y + u * ops.reshape(D, shape=[self.lay.dim, 1])

    def saved(self, xs):  # noqa: ANN001, ANN201 - (a, h, dt, y): what the saving kernel returns after out
        a, h = self.decay_and_state(xs)
        _, delta, _, _, _, _, _, bias = self.named(xs)
        return [a, h, self.dt(delta, bias)[0], self.pre_gate(xs, h)]

    def backward(self, xs, a, h, gout, dt=None, y_pre=None):  # noqa: ANN001, ANN201 - one gradient per input
        u, delta, A, B, C, D, z, bias = self.named(xs)
        lay = self.lay
        dim, n, groups = lay.dim, lay.n, lay.groups
        step, raw = self.dt(delta, bias)
        dt = step if dt is None else dt
        dt_s, u_s = self.to_state(dt), self.to_state(u)
        a_s = ops.reshape(A, shape=[groups, self.per, n])
        b_mat = self.mat_to_state(B, lay.b_form, lay.b_groups)
        c_mat = self.mat_to_state(C, lay.c_form, lay.c_groups)
        du = dt_s * u_s
        gy = gout
        grads = {}
        if z is not None:  # out = y_pre * silu(z)
            sig = ops.sigmoid(z)
            if y_pre is None:
                y_pre = self.pre_gate(xs, h)
            grads["z"] = gout * y_pre * (sig * (z * (1.0 - sig) + 1.0))   # silu'(z) = s (1 + z (1 - s))
            gy = gout * (z * sig)
        if D is not None:
            grads["D"] = ops.sum(gy * u, axes=[0, 2])
        gy_s = self.to_state(gy)
        grads["C"] = self.mat_from_state(gy_s * h, lay.c_form, lay.c_groups, self.types[4])
        lam = ops.linear_scan(shift(a, 0, -1), gy_s * c_mat, axis=0, reverse=True)
        ga_a = lam * shift(h, 0, 1) * a                                     # gradient of the exponent delta A
        lam_b = ops.sum(lam * b_mat, axes=[4], keepdims=True)
        g_dt = ops.sum(ga_a * a_s, axes=[4], keepdims=True) + lam_b * u_s
        grads["A"] = ops.reshape(ops.sum(ga_a * dt_s, axes=[0, 1]), shape=[dim, n])
        grads["B"] = self.mat_from_state(lam * du, lay.b_form, lay.b_groups, self.types[3])
        gu = self.from_state(lam_b * dt_s)
        grads["u"] = gu if D is None else gu + gy * ops.reshape(D, shape=[dim, 1])
        g_raw = self.from_state(g_dt)
        if self.softplus:
            g_raw = g_raw * ops.sigmoid(raw)
        grads["delta"] = g_raw
        if bias is not None:
            grads["delta_bias"] = ops.sum(g_raw, axes=[0, 2])
        return [grads[name] for name in ("u", "delta", "A", "B", "C", *lay.optional)]


def fast_path(t: TensorType) -> bool:
    """Whether selective_scan's gradient runs through the saving/backward kernels (float32 and float64; half
    precision, computed in float32, keeps the composite gradient)."""
    return t.dtype.name in ("float32", "float64")


def selective_scan_gradient(ctx: NodeContext):
    lay = layout(ctx)
    fm = _Math(lay, ctx.attrs["delta_softplus"], list(ctx.input_types))
    attrs = {"delta_softplus": ctx.attrs["delta_softplus"], "optional_inputs": list(lay.optional)}
    n = len(ctx.input_types)

    def grad(*args):  # noqa: ANN001, ANN202
        xs, gout = args[:n], args[-1]
        if fast_path(lay.u):  # the forward saves a, h, dt and y (merged with the forward node), one fused backward
            _, *saved = ops.selective_scan_saving_internal(*xs, **attrs)
            return list(ops.selective_scan_backward_internal(*xs, *saved, gout, **attrs))
        a, h = fm.decay_and_state(xs)
        return fm.backward(xs, a, h, gout)
    return ctx.grad_graph(grad)
