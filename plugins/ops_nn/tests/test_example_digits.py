"""examples/train_digits_cnn.py learns: two epochs on the digits lift test accuracy far above chance (10%)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "train_digits_cnn.py"


def test_the_digits_cnn_learns():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install 'frame-ops-nn[test]')")
    spec = importlib.util.spec_from_file_location("train_digits_cnn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.train(epochs=2, seed=0)
    assert result["accuracy"][-1] > 0.8, result["accuracy"]  # 15 epochs reach about 0.98 (docs/nn.md)
