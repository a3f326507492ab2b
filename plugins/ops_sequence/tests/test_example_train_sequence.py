"""examples/train_sequence.py trains: held-out accuracy on the delayed copy rises far above chance (1/8)."""

from __future__ import annotations

import importlib.util
import pathlib

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "train_sequence.py"


def test_the_sequence_example_learns_the_delayed_copy():
    spec = importlib.util.spec_from_file_location("train_sequence", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    accuracies = module.train(steps=500, lr=0.3, delay=2, seed=0)
    chance = 1 / module.VOCAB
    assert accuracies[0] < 2 * chance          # untrained: about chance
    assert accuracies[-1] > 6 * chance         # trained: above 75%, where a memoryless model stays at 12.5%
