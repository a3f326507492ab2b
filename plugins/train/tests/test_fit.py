"""The fit loop: batches, shuffling, metrics as JSON lines, NaN stops, and `frame plot`."""

from __future__ import annotations

import json
import numpy as np
import pytest

from frame_core import ops
import frame_train as ft

RNG = np.random.default_rng(5)
X = RNG.standard_normal((50, 3))
Y = X @ np.array([[1.0], [-2.0], [0.5]]) + 0.3


def linear(p, x, y):
    return ops.mse_loss(x @ p["w"] + p["b"], y)


def fresh(lr=0.1):
    return ft.TrainStep(linear, {"w": np.zeros((3, 1)), "b": np.zeros(1)}, ft.sgd(lr))


def test_fit_trains_keeps_the_short_batch_and_writes_metrics(tmp_path):
    step = fresh()
    history = ft.fit(step, (X, Y), epochs=30, batch_size=16, shuffle=np.random.default_rng(0),
                     metrics_path=tmp_path / "m.jsonl", progress=False)
    assert history.steps == 30 * 4 and step.count == 120  # 16 + 16 + 16 + 2
    assert history.epoch_losses[-1] < 1e-3 * history.epoch_losses[0]
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    per_step = [r for r in records if "step" in r]
    per_epoch = [r for r in records if "step" not in r]
    assert len(per_step) == 120 and len(per_epoch) == 30
    assert per_step[0]["loss"] == history.losses[0] and per_step[0]["lr"] == 0.1
    assert per_epoch[0]["steps"] == 4
    np.testing.assert_allclose(step.params["w"].ravel(), [1.0, -2.0, 0.5], atol=1e-2)


def test_drop_last_and_seeded_shuffle_reproduce():
    runs = []
    for _ in range(2):
        step = fresh()
        ft.fit(step, (X, Y), epochs=3, batch_size=16, shuffle=np.random.default_rng(42), drop_last=True,
               progress=False)
        runs.append(step.params["w"].copy())
        assert step.count == 9
    np.testing.assert_array_equal(*runs)
    batches = list(ft.batches([np.arange(10)], 4))
    assert [len(b[0]) for b in batches] == [4, 4, 2]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the divergence overflows on purpose
def test_nan_loss_stops_with_the_step_number():
    step = fresh(lr=1000.0)  # diverges: the loss grows ~1e6-fold a step, to inf
    with pytest.raises(ft.NonFiniteLossError, match=r"at step \d+ \(epoch \d+\)") as info:
        ft.fit(step, (X, Y), epochs=200, batch_size=50, progress=False)
    assert info.value.step == step.count
    carried = fresh(lr=1000.0)
    history = ft.fit(carried, (X, Y), epochs=200, batch_size=50, progress=False, stop_on_nan=False)
    assert history.steps == 200


def test_progress_bar_runs_and_iterable_batches():
    step = fresh()
    seen = []
    history = ft.fit(step, lambda epoch: [(X[:25], Y[:25]), (X[25:], Y[25:])], epochs=2, progress=True,
                     callback=lambda number, loss: seen.append(number))
    assert seen == [1, 2, 3, 4] and history.steps == 4


def test_bad_fit_arguments():
    step = fresh()
    with pytest.raises(ft.OptimizerError, match="seeded numpy Generator"):
        ft.fit(step, (X, Y), batch_size=4, shuffle=0)
    with pytest.raises(ft.OptimizerError, match="batch_size"):
        ft.fit(step, (X, Y))
    with pytest.raises(ft.OptimizerError, match="share their length"):
        ft.fit(step, (X, Y[:3]), batch_size=4)


def test_frame_plot_writes_an_image(tmp_path):
    pytest.importorskip("matplotlib")
    from typer.testing import CliRunner

    from frame_core.cli.main import app

    metrics = tmp_path / "m.jsonl"
    ft.fit(fresh(), (X, Y), epochs=3, batch_size=16, metrics_path=metrics, progress=False)
    out = tmp_path / "curve.png"
    done = CliRunner().invoke(app, ["plot", str(metrics), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "bad.jsonl").write_text('{"step": 1, "loss": 1.0}\nnot json\n')
    bad = CliRunner().invoke(app, ["plot", str(tmp_path / "bad.jsonl")])
    assert bad.exit_code == 2 and "bad.jsonl:2: not a JSON object" in bad.output


def test_plot_without_matplotlib_says_what_to_install(monkeypatch, tmp_path):
    import builtins

    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    from frame_train.plot import plot_metrics

    with pytest.raises(ft.OptimizerError, match=r"pip install 'frame-train\[plot\]'"):
        plot_metrics(tmp_path / "m.jsonl", tmp_path / "c.png")
