"""With frame-ops-nn installed, 2-D convolutions, pools and normalisations import as its ops (not the im2col
or written-out forms) and its convolution and pooling ops export as ONNX Conv/MaxPool/AveragePool. (Without that pack the im2col path is tested elsewhere.)"""

from __future__ import annotations

import numpy as np
import pytest

import frame_core as fc
from frame_core import ops
import frame_onnx

pytest.importorskip("frame_ops_nn", reason="frame-ops-nn is not installed")
ort = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("name", ["conv2d-stride-dilation", "conv2d-same", "avgpool2d-padded", "maxpool2d-strided",
                                  "batchnorm", "layernorm-axis"])
def test_imported_with_ops_nn_equals_onnxruntime(name):
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location("_cases", pathlib.Path(__file__).with_name("test_import_ops.py"))
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    model, feeds = cases.CASES[name]()
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    imported = frame_onnx.load(model)
    assert {"conv2d", "max_pool2d", "avg_pool2d", "batch_norm", "layer_norm"} & {n.op for n in imported.graph.nodes}
    got = imported.run([feeds[n] for n in imported.input_names])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_ops_nn_graph_exports():
    def f(x, w):
        h = ops.conv2d(x, w, stride=[2, 1], padding=[1, 0, 1, 2], dilation=[1, 2])
        h = ops.max_pool2d(h, kernel_size=2, stride=1, padding=[1, 0, 0, 1])
        return ops.avg_pool2d(h, kernel_size=[2, 2], padding="same", count_include_pad=False)
    graph = fc.trace(f, "f32[2, 3, 9, 9]", "f32[4, 3, 3, 2]")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 2)).astype(np.float32)]
    model = frame_onnx.to_onnx(graph)
    got = ort.InferenceSession(model.SerializeToString()).run(None, {i.name: a for i, a in zip(model.graph.input, args)})
    np.testing.assert_allclose(got[0], fc.compile(graph).run(args)[0], rtol=1e-5, atol=1e-5)
