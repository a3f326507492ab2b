"""Kernels' own temporaries are checked when a graph is compiled, as the memory plan's buffers are."""

from __future__ import annotations

import pytest

import frame_core as fc
from frame_core import ops


def test_a_padding_whose_temporaries_exceed_the_machine_is_refused_at_compile():
    """Found in QA: conv1d with an absurd padding allocated a 16-24 GB padded copy for a minute before a
    MemoryError. The kernel's own temporaries are now checked when the graph is compiled, as the memory plan's
    buffers are: a MemoryLimitError (a CompileError and a MemoryError) naming the op and the padding."""
    from frame_core.errors import MemoryLimitError, machine_memory

    total = machine_memory()
    if total is None:
        pytest.skip("this system does not report its memory")
    pad = total // (4 * 4096) + 1  # 4096 channels of float32: the padded copy alone is past the machine
    graph = fc.trace(lambda x, w: ops.conv1d(x, w, padding=[pad, 0]), "f32[1, 4096, 8]", "f32[1, 4096, 1]")
    with pytest.raises(MemoryLimitError) as info:
        fc.compile(graph, cache=False)
    message = str(info.value)
    assert isinstance(info.value, MemoryError) and isinstance(info.value, fc.CompileError)
    assert "conv1d" in message and f"padding [{pad}, 0]" in message and "of memory" in message
    assert "bug in pack" not in message


def test_a_memory_plan_past_the_machine_is_refused_before_anything_is_allocated(monkeypatch):
    from frame_core.compiler.passes import lower
    from frame_core.errors import MemoryLimitError

    monkeypatch.setattr(lower, "machine_memory", lambda: 1 << 20)  # a machine of 1 MiB
    graph = fc.trace(lambda x: ops.sum(ops.matmul(ops.matmul(x, x), x)), "f32[1024, 1024]")
    with pytest.raises(MemoryLimitError, match="more than this machine can allocate"):
        fc.compile(graph, cache=False)
