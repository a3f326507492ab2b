"""frame-train: training for frame, everything a graph.

Optimizers are graph transforms (optax's composable pieces, torch.optim's formulas) whose state is named graph
inputs/outputs and whose learning rate and step are runtime inputs, so a schedule never recompiles;
``TrainStep`` compiles forward, backward and update as one executable; ``lbfgs`` drives scipy's L-BFGS-B with
a compiled value-and-gradient; ``fit`` is the loop, with a progress bar and JSON-lines metrics.

    import frame_train as ft

    step = ft.TrainStep(loss_fn, params, ft.adam(ft.warmup_cosine(1e-3, 100, 1000)))
    history = ft.fit(step, (x, y), epochs=10, batch_size=128, shuffle=np.random.default_rng(0))
"""

from __future__ import annotations

from .errors import NonFiniteLossError, OptimizerError, ParameterError, ScheduleError
from .optimizers import Group, Optimizer, accumulate, adagrad, adam, adamw, chain, group, lion, param_groups, rmsprop, sgd
from .schedules import Schedule, constant, cosine, exponential, linear, piecewise, step_decay, warmup_cosine
from .step import TrainStep
from .fit import History, batches, fit
from .lbfgs import flat_value_and_grad, lbfgs
from .transforms import (Transform, add_decayed_weights, clip_by_global_norm, scale, scale_by_adam,
                         scale_by_learning_rate, scale_by_lion, scale_by_rms, scale_by_rss, trace)

__all__ = [
    # optimizers
    "Optimizer", "chain", "accumulate", "param_groups", "group", "Group", "sgd", "adam", "adamw", "rmsprop", "adagrad",
    "lion",
    # transforms
    "Transform", "add_decayed_weights", "clip_by_global_norm", "scale", "scale_by_adam", "scale_by_learning_rate",
    "scale_by_lion", "scale_by_rms", "scale_by_rss", "trace",
    # schedules
    "Schedule", "constant", "step_decay", "exponential", "cosine", "linear", "warmup_cosine", "piecewise",
    # training
    "TrainStep", "fit", "History", "batches", "lbfgs", "flat_value_and_grad",
    # errors
    "OptimizerError", "ScheduleError", "ParameterError", "NonFiniteLossError",
]
