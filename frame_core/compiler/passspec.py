"""``PassSpec``: how a plugin contributes a compile pass (kept free of heavy imports)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

__all__ = ["PassSpec", "STAGES", "PLAN_STAGES", "pass_problems"]

#: Stages 8 and 9, which build the plan and the program rather than a graph.
PLAN_STAGES = ("plan_memory", "lower")
#: Every built-in stage name, in order (a plugin pass anchors to one of these).
STAGES = ("verify", "infer_types", "decompose", "fold_constants", "eliminate_common_subexpressions",
          "eliminate_dead_nodes", "fuse_elementwise", *PLAN_STAGES)


@dataclass
class PassSpec:
    """A plugin pass: ``fn(graph, ctx) -> graph`` run ``before`` or ``after`` the named built-in stage.

    Exactly one of ``before``/``after`` is set, naming a stage up to ``before="plan_memory"``
    (stages 8 and 9 do not make graphs, so nothing runs after them). ``min_level`` is the lowest
    ``opt_level`` at which it runs. ``pack`` is filled in by the loader. ``cache_key``, for a pass that
    reads something besides the graph and ``ctx`` (an environment switch), returns a hashable summary of
    it: the value joins the compile cache's key, so a changed switch recompiles instead of returning an
    executable built under the old setting.
    """

    name: str
    fn: Callable[[Any, Any], Any]
    before: str | None = None
    after: str | None = None
    min_level: int = 1
    doc: str = ""
    pack: str | None = None
    cache_key: Callable[[], Hashable] | None = None


def pass_problems(spec: Any) -> list[str]:
    """What is wrong with a pass specification (empty when it can run). The loader refuses a pack whose
    passes have problems, so one bad anchor cannot make every compile in the process fail."""
    if not isinstance(spec, PassSpec):
        return [f"frame_register_passes returned a {type(spec).__name__}, expected PassSpec"]
    problems = []
    if not isinstance(spec.name, str) or not spec.name:
        problems.append(f"pass name {spec.name!r} must be a non-empty string")
    elif spec.name in STAGES:  # disable=[name] would mean the built-in stage (or be refused, for verify)
        problems.append(f"pass name {spec.name!r} is the name of a built-in stage; give the pass its own name, so "
                        "that compile(disable=[...]) and Executable.log can tell them apart")
    for label in ("before", "after"):
        if getattr(spec, label) is not None and not isinstance(getattr(spec, label), str):
            problems.append(f"pass {spec.name!r}: {label}= must name a stage (a string), got {getattr(spec, label)!r}")
    if not isinstance(spec.min_level, int) or isinstance(spec.min_level, bool) or spec.min_level not in (0, 1, 2):
        problems.append(f"pass {spec.name!r}: min_level must be 0, 1 or 2, got {spec.min_level!r}")
    if problems:
        return problems
    if not callable(spec.fn):
        problems.append(f"pass {spec.name!r}: fn is not callable")
    if spec.cache_key is not None and not callable(spec.cache_key):
        problems.append(f"pass {spec.name!r}: cache_key must be a function returning a hashable value (or None), "
                        f"got {type(spec.cache_key).__name__}")
    anchor = spec.before or spec.after
    if anchor not in STAGES or (spec.before and spec.after):
        problems.append(f"pass {spec.name!r} must name one built-in stage in before= or after=, got "
                        f"before={spec.before!r}, after={spec.after!r}; stages: {', '.join(STAGES)}")
    elif spec.after in PLAN_STAGES or spec.before == "lower":  # a graph pass must run before the plan is made
        problems.append(f"pass {spec.name!r} is anchored {'after' if spec.after else 'before'} {anchor!r}, but graph "
                        "passes must run before plan_memory; use before='plan_memory' or after='fuse_elementwise'")
    return problems
