"""The line ``frame graph grad -o`` prints says which outputs are which, in English for one or several."""

from __future__ import annotations

import pytest

import frame_core
from frame_core import ops


@pytest.mark.parametrize("wrt, expected", [
    ("0", "wrote {out}: outputs 0..1 are the forward outputs, output 2 is the gradient of output 0 with respect "
          "to input 0"),
    ("0,1", "wrote {out}: outputs 0..1 are the forward outputs, outputs 2..3 are the gradients of output 0 with "
            "respect to inputs 0, 1"),
])
def test_grad_summary_names_outputs_in_singular_and_plural(invoke, tmp_path, wrt, expected):
    path = tmp_path / "model.json"
    frame_core.save_graph(frame_core.trace(lambda x, w: (ops.sum(x * w), ops.greater(x, w)), "f64[2]", "f64[2]"),
                          path)
    out = tmp_path / "grad.json"
    result = invoke("graph", "grad", str(path), "--wrt", wrt, "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stderr.strip() == expected.format(out=out)


def test_grad_summary_of_a_single_forward_output(invoke, tmp_path):
    path = tmp_path / "model.json"
    frame_core.save_graph(frame_core.trace(lambda x: ops.sum(x * x), "f64[2]"), path)
    out = tmp_path / "grad.json"
    result = invoke("graph", "grad", str(path), "-o", str(out))
    assert result.stderr.strip() == (f"wrote {out}: output 0 is the forward output, output 1 is the gradient of "
                                     "output 0 with respect to input 0")


def test_grad_summary_and_names_of_a_negative_loss_say_the_real_output(invoke, tmp_path):
    path = tmp_path / "model.json"
    frame_core.save_graph(frame_core.trace(lambda x: (ops.sum(x * x), ops.sum(x)), "f64[2]"), path)
    out = tmp_path / "grad.json"
    result = invoke("graph", "grad", str(path), "--loss", "-1", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stderr.strip() == (f"wrote {out}: outputs 0..1 are the forward outputs, output 2 is the gradient "
                                     "of output 1 with respect to input 0")
    assert frame_core.load_graph(out).output_names[2] == "grad(output 1, x)"
