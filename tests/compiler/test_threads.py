"""Module-level state under threads (issue 8 §2): the stage list, the check kit's LRU, the collector pause, interning.

Each test widens the window a race needs (a slow builder, a barrier) so that it fails reliably without the lock
it checks, and passes with it.
"""

from __future__ import annotations

import gc
import sys
import threading
import time

import numpy as np

import frame_core as fc
from frame_core import ops
from frame_core._gc import gc_paused
from frame_core.compiler import pipeline

THREADS = 8


def _together(fn, n: int = THREADS) -> list:
    """Run ``fn(i)`` in ``n`` threads released at once; return results (exceptions are returned, not lost)."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def body(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_threads_making_their_first_compile_at_once_build_the_stage_list_once(monkeypatch):
    built = pipeline._stages

    def slow_stages():
        time.sleep(0.05)  # the import of every pass, on a cold start
        return built()

    monkeypatch.setattr(pipeline, "_STAGE_CACHE", type(pipeline._STAGE_CACHE)())
    monkeypatch.setattr(pipeline, "_stages", slow_stages)
    graph = fc.trace(lambda x: ops.sum(ops.relu(x) * 2.0), "f32[5]")
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    outs = _together(lambda i: fc.compile(graph, cache=False).run([x])[0])
    assert not [o for o in outs if isinstance(o, BaseException)], outs
    names = [s.name for s in pipeline.stages()]
    assert len(names) == len(set(names)) == 7, names  # not 7 per thread
    np.testing.assert_allclose(outs, [np.sum(np.maximum(x, 0) * 2)] * THREADS, rtol=1e-6)


def test_the_check_kits_setup_cache_is_never_read_half_updated(monkeypatch):
    """Another thread evicts the entry this one has just found, before it moves it to the end of the LRU."""
    from frame_core.testing import opcheck

    reg = fc.registry()
    first, *others = [s for s in reg if s.examples][: opcheck._MAX_SETUPS + 1]

    class Preempted(type(opcheck._SETUPS)):
        armed = False

        def get(self, key, default=None):
            hit = super().get(key, default)
            if self.armed and hit is not None:
                self.armed = False  # once: the other thread fills the cache past its size, evicting `key`
                evictor = threading.Thread(target=lambda: [opcheck._setup(s, 0, 1, reg) for s in others])
                evictor.start()
                evictor.join(0.5)  # with the lock it waits for us; without, it evicts `key` right now
                self.evictor = evictor
            return hit

    cache = Preempted()
    monkeypatch.setattr(opcheck, "_SETUPS", cache)
    monkeypatch.setattr(opcheck, "_ExampleSetup", lambda *args: object())
    opcheck._setup(first, 0, 0, reg)
    cache.armed = True
    opcheck._setup(first, 0, 0, reg)  # a KeyError from move_to_end without the lock
    cache.evictor.join(5)
    assert len(cache) <= opcheck._MAX_SETUPS


def test_one_thread_leaving_a_transform_does_not_restart_the_collector_under_another():
    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()
    seen: list[bool] = []

    def long_transform() -> None:
        with gc_paused():
            inside.set()
            leave.wait(5)
            seen.append(gc.isenabled())

    t = threading.Thread(target=long_transform)
    with gc_paused():  # this thread's transform starts first and ends while the other one runs
        t.start()
        inside.wait(5)
    still_paused = not gc.isenabled()
    leave.set()
    t.join()
    assert still_paused and seen == [False]
    assert gc.isenabled()  # restored after the last one left


def test_types_made_in_many_threads_at_once_are_one_object():
    shape = (7, 11, 13, 3)  # a shape no other test makes, so the threads race to intern it
    made = _together(lambda i: fc.TensorType("f64", shape))
    assert all(t is made[0] for t in made)
