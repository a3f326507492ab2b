"""The pack is found through its entry point and loads cleanly, alone and next to the other packs."""

import frame_core

OPS = {"softplus", "gelu_tanh", "leaky_relu", "elu"}


def test_plugin_loads():
    reg = frame_core.load_registry()
    record = reg.packs["activations"]
    assert record.status == "loaded", record.error
    assert record.distribution == "frame-ops-activations"
    assert OPS <= set(record.ops)


def test_every_op_is_closed_under_differentiation():
    reg = frame_core.load_registry()
    assert {op: reg.closure[op].order for op in reg.packs["activations"].ops} == \
        {op: "closed" for op in reg.packs["activations"].ops}


def test_without_ops_basic_the_gradients_cannot_close():
    # the gradients use ops of frame-ops-basic: with that pack disabled, the audit says which op is missing
    reg = frame_core.load_registry(environ={"FRAME_LOAD_PLUGINS": "activations"})
    assert reg.packs["activations"].status == "loaded"
    info = reg.closure["softplus"]
    assert info.order == 0
    assert any("sigmoid" in p or "mul" in p for p in info.problems)
