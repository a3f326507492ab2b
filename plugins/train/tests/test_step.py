"""The fused training step: one executable, names, any batch size, buffers, fusion, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_train as ft

RNG = np.random.default_rng(11)
X = RNG.standard_normal((64, 8)).astype(np.float32)
Y = RNG.standard_normal((64, 1)).astype(np.float32)


def params():
    rng = np.random.default_rng(0)
    return {"fc1": {"w": (rng.standard_normal((8, 16)) * 0.3).astype(np.float32), "b": np.zeros(16, np.float32)},
            "fc2": {"w": (rng.standard_normal((16, 1)) * 0.3).astype(np.float32), "b": np.zeros(1, np.float32)}}


def mlp(p, x, y):
    h = ops.relu(x @ p["fc1"]["w"] + p["fc1"]["b"])
    return ops.mse_loss(h @ p["fc2"]["w"] + p["fc2"]["b"], y)


def test_one_graph_named_inputs_and_outputs():
    step = ft.TrainStep(mlp, params(), ft.adam(1e-2))
    step(X, Y)
    names = [v.name for v in step.graph.inputs]
    assert names == ["fc1.b", "fc1.w", "fc2.b", "fc2.w", "x", "y", "adam.m:fc1.b", "adam.m:fc1.w", "adam.m:fc2.b",
                     "adam.m:fc2.w", "adam.v:fc1.b", "adam.v:fc1.w", "adam.v:fc2.b", "adam.v:fc2.w", "lr", "step"]
    assert step.graph.output_names == ["loss", "fc1.b", "fc1.w", "fc2.b", "fc2.w", *names[6:14]]
    assert len(step.executables()) == 1


def test_matches_value_and_grad_plus_apply():
    """The fused step equals the unfused path: value_and_grad, then Optimizer.apply."""
    opt = ft.adamw(1e-2, weight_decay=0.1, mask=["*.w"])
    step = ft.TrainStep(mlp, params(), opt)
    vg = fc.value_and_grad(mlp)
    p, state = params(), opt.init(params())
    for _ in range(5):
        loss = step(X, Y)
        want, grads = vg(p, X, Y)
        p, state = opt.apply(p, grads, state)
        assert loss == pytest.approx(float(want), rel=1e-6)
    np.testing.assert_allclose(step.params["fc1"]["w"], p["fc1"]["w"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(step.state["adam"]["v"]["fc2"]["w"], state["adam"]["v"]["fc2"]["w"], rtol=1e-5)
    assert int(step.state["step"]) == int(state["step"]) == 5


def test_any_batch_size_and_schedule_never_recompile():
    """A short last batch compiles once per new shape signature; the schedule's lr never compiles."""
    step = ft.TrainStep(mlp, params(), ft.adam(ft.cosine(1e-2, 30)))
    for epoch in range(3):
        for start in range(0, 50, 16):  # 16, 16, 16, 2
            step(X[:50][start:start + 16], Y[:50][start:start + 16])
    info = step.executables()[0].specializations()
    assert (info.misses, info.hits) == (1, 2)  # the batch of 2: compiled at epoch 1, served after
    assert step.count == 12


def test_buffers_are_read_only_snapshots():
    step = ft.TrainStep(mlp, params(), ft.sgd(0.1))
    step(X, Y)
    held = step.params["fc1"]["w"]
    copy = held.copy()
    with pytest.raises(ValueError):
        held[0, 0] = 1.0  # nobody writes into the step's buffers behind its back
    step(X, Y)
    np.testing.assert_array_equal(held, copy)  # a later step never writes into what was handed out
    assert not np.array_equal(step.params["fc1"]["w"], copy)  # reading again gives the new values


def test_update_elementwise_work_is_fused():
    step = ft.TrainStep(mlp, params(), ft.adam(1e-2))
    step(X, Y)
    graph = step.executables()[0].traced.graph
    fused = {"fused_elementwise_internal", "native_fused_internal"}
    shapes = {tuple(t.shape) for t in step.types}
    loose = [n.op for n in graph.nodes if n.op in ("mul", "div", "add", "sub", "sqrt", "square")
             and tuple(n.outputs[0].type.shape) in shapes and all(v.producer is None or v.producer.op != "matmul"
                                                                 for v in n.inputs)]
    assert not loose, f"update ops left outside fused groups: {loose}"
    assert sum(n.op in fused for n in graph.nodes) >= len(step.names)


def test_state_and_resume_reproduce_the_run_bitwise(tmp_path):
    opt = ft.adam(ft.warmup_cosine(1e-2, 3, 20))
    full = ft.TrainStep(mlp, params(), opt)
    for _ in range(10):
        full(X, Y)
    first = ft.TrainStep(mlp, params(), opt)
    for _ in range(5):
        first(X, Y)
    first.save(tmp_path / "ckpt.safetensors")
    resumed = ft.TrainStep(mlp, params(), opt)
    resumed.load(tmp_path / "ckpt.safetensors")
    assert resumed.count == 5
    for _ in range(5):
        resumed(X, Y)
    np.testing.assert_array_equal(resumed.params["fc1"]["w"], full.params["fc1"]["w"])
    np.testing.assert_array_equal(resumed.state["adam"]["m"]["fc2"]["b"], full.state["adam"]["m"]["fc2"]["b"])


# -- bad input ------------------------------------------------------------------------------------------------
def test_gradient_for_a_name_that_is_not_a_parameter():
    opt = ft.sgd(0.1)
    p = params()
    grads = {**p, "fc3": {"w": np.zeros((1, 1), np.float32)}}
    with pytest.raises(ft.ParameterError, match=r"gradient for 'fc3.w', which is not a parameter"):
        opt.apply(p, grads, opt.init(p))


def test_state_of_another_model_lists_every_mismatch():
    p = params()
    other = {"fc1": {"w": np.zeros((8, 32), np.float32)}, "enc": {"b": np.zeros(3, np.float32)}}
    with pytest.raises(ft.ParameterError) as info:
        ft.TrainStep(mlp, p, ft.adam(), state=ft.adam().init(other))
    text = str(info.value)
    for needle in ("adam.m:fc1.w is float32[8, 32], the parameter is f32[8, 16]", "adam.m:fc2.w is missing",
                   "adam.v:enc.b names no parameter of this model"):
        assert needle in text
    with pytest.raises(ft.ParameterError, match="missing momentum.buf"):
        ft.TrainStep(mlp, p, ft.sgd(0.1, momentum=0.9), state=ft.adam().init(p))


def test_parameter_tree_that_does_not_match_the_graph():
    graph = fc.trace(lambda x, w: ops.sum(x @ w), "f32[4, 8]", "f32[8, 2]")
    with pytest.raises(ft.ParameterError, match=r"parameter 'v' \(f32\[8, 2\]\) is no input of the graph"):
        ft.TrainStep(graph, {"v": np.zeros((8, 2), np.float32)}, ft.sgd(0.1))(np.zeros((4, 8), np.float32))
    with pytest.raises(ft.ParameterError, match=r"parameter 'w' is f32\[8, 3\], the graph's input 1 is f32\[8, 2\]"):
        ft.TrainStep(graph, {"w": np.zeros((8, 3), np.float32)}, ft.sgd(0.1))(np.zeros((4, 8), np.float32))
    step = ft.TrainStep(graph, {"w": np.zeros((8, 2), np.float32)}, ft.sgd(0.1))
    assert step(np.ones((4, 8), np.float32)) == 0.0
    with pytest.raises(ft.ParameterError, match="unexpected 'u'"):
        step.set_params({"w": np.zeros((8, 2), np.float32), "u": np.zeros(2, np.float32)})


@pytest.mark.parametrize("rate", [-1e-3, math.nan, math.inf, "fast"])
def test_bad_learning_rate(rate):
    with pytest.raises(ft.OptimizerError, match="learning rate"):
        ft.adam(rate)


def test_schedule_returning_nan_names_the_step():
    step = ft.TrainStep(mlp, params(), ft.sgd(lambda count: 0.1 if count < 3 else math.nan))
    for _ in range(3):
        step(X, Y)
    with pytest.raises(ft.ScheduleError, match="returned nan at step 3"):
        step(X, Y)
    negative = ft.TrainStep(mlp, params(), ft.sgd(ft.linear(0.1, 0.0, 10)))
    negative.optimizer.schedule = lambda count: -0.5
    with pytest.raises(ft.ScheduleError, match=r"returned -0.5 at step 0; the learning rate must be a finite number"):
        negative(X, Y)


def test_bad_arguments_are_named():
    with pytest.raises(ft.OptimizerError, match=r"b1 \(beta1\) must be a finite number in \[0, 1\)"):
        ft.adam(b1=1.0)
    with pytest.raises(ft.OptimizerError, match="mask= is a function of the parameter name"):
        ft.adamw(mask=3)
    with pytest.raises(ft.OptimizerError, match=r"nesterov=True\) needs a momentum"):
        ft.sgd(nesterov=True)
    with pytest.raises(ft.ParameterError, match="mix dtypes"):
        ft.TrainStep(mlp, {"a": np.zeros(2, np.float32), "b": np.zeros(2)}, ft.sgd())
    with pytest.raises(ft.OptimizerError, match="piecewise takes one more value than boundaries"):
        ft.piecewise([1e-2], [10])
    step = ft.TrainStep(mlp, params(), ft.sgd())
    step(X, Y)
    with pytest.raises(ft.OptimizerError, match="takes 2 data inputs per call"):
        step(X)


def test_schedules_shapes():
    assert ft.piecewise([1.0, 0.1, 0.01], [10, 20])(9) == 1.0
    assert ft.piecewise([1.0, 0.1, 0.01], [10, 20])(10) == 0.1
    assert ft.piecewise([1.0, 0.1, 0.01], [10, 20])(25) == 0.01
    s = ft.warmup_cosine(1.0, 10, 110, init_value=0.0, end_value=0.1)
    assert s(0) == 0.0 and s(5) == pytest.approx(0.5) and s(10) == pytest.approx(1.0)
    assert s(60) == pytest.approx(0.55) and s(110) == pytest.approx(0.1) and s(500) == pytest.approx(0.1)
    assert ft.step_decay(1.0, 10, 0.5)(25) == 0.25
    assert ft.exponential(2.0, 0.5)(3) == 0.25
    assert ft.cosine(1.0, 10, alpha=0.2)(10) == pytest.approx(0.2)
    assert ft.linear(1.0, 0.0, 4)(2) == 0.5
