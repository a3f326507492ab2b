"""Registry-driven gradient checks (ARCH-066): every example of every differentiable op of every loaded pack.

No hand list: the parametrisation is read from the installed packs when the
module is collected, so a new op (or pack) is checked the moment it registers
a GradientFn. Each op is checked to order 2 against central differences in
float64 (to its closure order if lower), and in float16/bfloat16 against
float32 where it accepts them; see ``docs/testing.md`` for steps and bounds.
"""

from __future__ import annotations

import pytest

from frame_core import registry
from frame_core.testing import check_op

OPS = sorted(s.name for s in registry() if s.gradient is not None)


@pytest.mark.parametrize("op", OPS)
def test_gradients_match_finite_differences(op):
    reg = registry()
    schema = reg.get(op)
    report = check_op(schema, order=2, registry=reg)
    assert report.ok, report.describe()
    checked = [r for r in report.results if r.check.startswith("gradient_order") and not r.skipped]
    indices = {r.example_index for r in checked}
    floating = [i for i, e in enumerate(schema.examples) if any(t.dtype.is_float for t in e.inputs)
                and any(t.dtype.is_float for t in schema.context(e.inputs, e.attrs).output_types)]
    assert indices == set(floating), "every example with a floating input and a floating output is differentiated"
    assert checked or not floating
    if schema.gradient_surrogate is not None:  # ARCH-066 exception: checked against the surrogate
        assert all("surrogate" in r.detail for r in checked if r.check == "gradient_order1")

