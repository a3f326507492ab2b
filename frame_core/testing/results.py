"""What the checks of ``frame_core.testing`` return: ``CheckResult`` and ``OpReport``.

A ``CheckResult`` is one check of one op (or graph) on one example: its name
(``"gradient_order1"``, ``"kernel"``, ...), whether it passed, the measured
error where the check measures one, and a human-readable ``detail`` saying
what was compared and, on failure, where it differs. A check that does not
apply (an op whose shape inference rejects float16, an order above the op's
closure order) passes with ``skipped=True`` and says why in ``detail``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CheckResult", "OpReport", "gradient_check_name"]


def gradient_check_name(order: int) -> str:
    """The ``check`` name of the order-``order`` finite-difference comparison (``"gradient_order2"``)."""
    return f"gradient_order{order}"


@dataclass(frozen=True)
class CheckResult:
    """One check: ``op``, ``check``, ``example_index`` (``None`` for per-op checks), ``ok``, ``error``, ``detail``.

    ``error`` is the measured error (see ``frame_core.testing.numeric.relative_error``)
    for numerical checks and ``None`` otherwise; ``tolerance`` is the bound it
    was held to. ``skipped`` marks a check that did not apply (``ok`` is then true).
    """

    op: str
    check: str
    example_index: int | None
    ok: bool
    error: float | None = None
    detail: str = ""
    tolerance: float | None = None
    skipped: bool = False

    @property
    def id(self) -> str:
        """A readable identifier: ``relu-gradient_order2-ex1``."""
        return f"{self.op}-{self.check}" + ("" if self.example_index is None else f"-ex{self.example_index}")

    def __str__(self) -> str:
        status = "skipped" if self.skipped else ("ok" if self.ok else "FAILED")
        measured = ""
        if self.error is not None:
            measured = f" (error {self.error:.3g}" + (f", tolerance {self.tolerance:.3g})" if self.tolerance is not None else ")")
        return f"{self.id}: {status}{measured}" + (f": {self.detail}" if self.detail else "")


@dataclass
class OpReport:
    """Every check run on one op (or one graph): ``op``, ``results``, ``ok``, ``worst_error(order)``."""

    op: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok]

    def worst_error(self, order: int) -> float | None:
        """Worst error of the order-``order`` gradient checks over the examples; ``None`` if none was measured."""
        name = gradient_check_name(order)
        errors = [r.error for r in self.results if r.check == name and r.error is not None]
        return max(errors) if errors else None

    def describe(self) -> str:
        """A multi-line summary: one line per result, failures first."""
        ordered = sorted(self.results, key=lambda r: r.ok)
        lines = [f"{self.op}: {'ok' if self.ok else f'{len(self.failures)} failed'} ({len(self.results)} checks)"]
        lines += [f"  {r}" for r in ordered]
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise ``AssertionError`` listing the failed checks (for use in a test)."""
        if not self.ok:
            raise AssertionError("\n".join(str(r) for r in self.failures))

    def __str__(self) -> str:
        return self.describe()
