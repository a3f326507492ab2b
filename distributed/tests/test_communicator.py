"""The Communicator protocol, LocalCommunicator, the choice of default, and life without mpi4py.

Checks that depend on what is imported run in a fresh interpreter, so that
nothing this test process has imported can hide a problem.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import frame_core as fc
from frame_distributed import (
    Communicator,
    DistributedError,
    LocalCommunicator,
    MPICommunicator,
    MPIUnavailableError,
    default_communicator,
    launched_by_mpi,
)
from frame_distributed import communicator as communicator_module


def run_python(code: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("FRAME_") and k not in communicator_module.LAUNCHER_VARIABLES}
    environ.update(env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, f"subprocess failed:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_local_communicator_is_rank_0_of_1_and_keeps_buffers():
    comm = LocalCommunicator()
    assert isinstance(comm, Communicator)
    assert (comm.rank, comm.size) == (0, 1)
    buf = np.arange(4.0)
    comm.allreduce_(buf)
    comm.broadcast_(buf, 0)
    comm.barrier()
    np.testing.assert_array_equal(buf, np.arange(4.0))


@pytest.mark.parametrize("buffer,message", [
    (np.arange(4), "flat contiguous float32 or float64 array, got int64"),
    (np.zeros((2, 2)), r"got float64\[2, 2\]"),
    (np.zeros(8)[::2], r"contiguous: False"),
    ([1.0, 2.0], "takes a numpy array, got list"),
])
def test_allreduce_refuses_what_it_cannot_sum_in_place(buffer, message):
    with pytest.raises(DistributedError, match=message):
        LocalCommunicator().allreduce_(buffer)


def test_allreduce_refuses_a_read_only_buffer():
    buf = np.zeros(3)
    buf.flags.writeable = False
    with pytest.raises(DistributedError, match="read-only; pass a writeable copy"):
        LocalCommunicator().allreduce_(buf)


def test_broadcast_checks_its_root_and_buffer():
    with pytest.raises(DistributedError, match=r"root must be a rank in 0..0 \(an int\), got 1"):
        LocalCommunicator().broadcast_(np.zeros(2), root=1)
    LocalCommunicator().broadcast_(np.zeros(2), root=np.int64(0))  # a numpy integer (say from argmax) is a rank
    with pytest.raises(DistributedError, match=r"root must be a rank in 0..0 \(an int\), got np.True_"):
        LocalCommunicator().broadcast_(np.zeros(2), root=np.True_)
    with pytest.raises(DistributedError, match="C-contiguous writeable numpy array"):
        LocalCommunicator().broadcast_(np.zeros((4, 4)).T[0], 0)


def test_launcher_detection():
    assert launched_by_mpi({"PMI_RANK": "0", "PMI_SIZE": "2"})
    assert launched_by_mpi({"OMPI_COMM_WORLD_RANK": "1"})
    assert launched_by_mpi({"PMIX_RANK": "3"})
    assert not launched_by_mpi({"HOME": "/root", "SLURM_JOB_ID": "7"})


@pytest.fixture
def fresh_default(monkeypatch):
    monkeypatch.setattr(communicator_module, "_default", [])
    for name in (*communicator_module.LAUNCHER_VARIABLES, "FRAME_COMMUNICATOR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_default_is_local_outside_a_launcher_and_the_same_object_each_time(fresh_default):
    comm = default_communicator()
    assert isinstance(comm, LocalCommunicator)
    assert default_communicator() is comm


def test_default_refuses_a_bad_override(fresh_default):
    fresh_default.setenv("FRAME_COMMUNICATOR", "ray")
    with pytest.raises(DistributedError, match="FRAME_COMMUNICATOR must be 'mpi' or 'local', got 'ray'"):
        default_communicator()


def test_local_override_wins_under_a_launcher(fresh_default):
    fresh_default.setenv("PMI_RANK", "0")
    fresh_default.setenv("FRAME_COMMUNICATOR", "local")
    assert isinstance(default_communicator(), LocalCommunicator)


WITHOUT_MPI4PY = """
    import json, os, sys

    class NoMPI:  # what an environment without mpi4py looks like to import
        def find_spec(self, name, path=None, target=None):
            if name == "mpi4py" or name.startswith("mpi4py."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoMPI())
    import numpy as np
    import frame_core as fc
    from frame_core import ops
    import frame_distributed as fd

    result = {}
    try:
        fd.MPICommunicator()
    except fd.MPIUnavailableError as exc:
        result["mpi_error"] = [type(exc).__name__, str(exc), isinstance(exc, fc.FrameError), isinstance(exc, ImportError)]

    comm = fd.default_communicator()  # no launcher variables: the local one
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3))
    t = x @ np.array([[1.0], [-2.0], [0.5]])
    trainer = fd.DataParallelTrainer(lambda x, t, w: ops.mse_loss(x @ w, t), [np.zeros((3, 1))], 0.1, comm=comm)
    losses = [trainer.train_step(*fd.split_by_rank(x, t, comm=comm)) for _ in range(30)]
    outputs = fd.parallel_evaluate(fc.trace(lambda a: a * 2.0, "f64[2]"), [[np.ones(2)], [np.arange(2.0)]], comm=comm)

    os.environ["PMI_RANK"] = "0"  # as if mpiexec had started us
    fd.communicator._default.clear()
    try:
        fd.default_communicator()
    except fd.MPIUnavailableError as exc:
        result["under_launcher"] = str(exc)
    result.update(kind=type(comm).__name__, first=losses[0], last=losses[-1],
                  outputs=[o[0].tolist() for o in outputs], mpi4py_loaded="mpi4py" in sys.modules)
    print(json.dumps(result))
"""


def test_without_mpi4py_local_works_and_mpi_says_what_to_install():
    result = run_python(WITHOUT_MPI4PY)
    name, message, is_frame_error, is_import_error = result["mpi_error"]
    assert name == "MPIUnavailableError" and is_frame_error and is_import_error
    assert "needs mpi4py" in message and "pip install 'frame-distributed[mpi]'" in message
    assert "LocalCommunicator()" in message
    assert result["kind"] == "LocalCommunicator"
    assert result["last"] < 0.5 * result["first"]
    assert result["outputs"] == [[2.0, 2.0], [0.0, 2.0]]
    assert "an MPI launcher started this process" in result["under_launcher"]
    assert "every process would run alone" in result["under_launcher"]
    assert "pip install 'frame-distributed[mpi]'" in result["under_launcher"]
    assert result["mpi4py_loaded"] is False


def test_mpi4py_without_an_mpi_library_is_the_same_named_error():
    # mpi4py 4 loads the MPI library at run time; with none to load, MPICommunicator() and default_communicator()
    # under a launcher raised a bare RuntimeError("cannot load MPI library").
    result = run_python("""
        import json, os
        import frame_distributed as fd
        found = []
        for make in (fd.MPICommunicator, fd.default_communicator):
            try:
                make()
            except fd.MPIUnavailableError as exc:
                found.append(str(exc))
            os.environ["PMI_RANK"] = "0"
        print(json.dumps({"found": found}))
    """, MPI4PY_LIBMPI="/nonexistent/libmpi.so.12")
    direct, default = result["found"]
    assert "mpi4py is installed but cannot load an MPI library" in direct
    assert "pip install 'frame-distributed[mpi]'" in direct and "LocalCommunicator()" in direct
    assert "an MPI launcher started this process" in default


def test_frame_core_imports_neither_this_package_nor_mpi4py():
    result = run_python("""
        import json, sys
        import numpy as np
        import frame_core as fc
        from frame_core import ops
        g = fc.trace(lambda x: ops.relu(x), "f32[3]")
        fc.compile(g).run([np.ones(3, np.float32)])
        packs = sorted(fc.registry().packs)
        core = sorted(m for m in sys.modules if m.split(".")[0] in ("frame_distributed", "mpi4py"))
        import frame_distributed
        print(json.dumps({"core": core, "packs": packs, "mpi4py": "mpi4py" in sys.modules}))
    """)
    assert result["core"] == []
    assert not any("distributed" in p for p in result["packs"])  # not an op pack: no `frame` entry point
    assert result["mpi4py"] is False  # importing frame_distributed does not load MPI either


def test_mpi_communicator_checks_its_timeout_before_starting_mpi(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # were MPI started first, this would be MPIUnavailableError
    for value in (0, -1.0, True, "5"):
        with pytest.raises(DistributedError, match="timeout_s must be a positive number of seconds or None"):
            MPICommunicator(timeout_s=value)
    with pytest.raises(MPIUnavailableError):
        MPICommunicator(timeout_s=5)
