"""ONNX import: import + compile time against ONNX Runtime's session creation, and inference of imported
models in frame against ONNX Runtime on one CPU thread (and a hand-written numpy reference).

Models are built with onnx.helper (nothing downloaded):
- cnn: conv 3->32->64->128 (3x3, ReLU, 2x2 max pools) on 32x32 images, then a 2048->448 and a 448->10 layer:
  about 1.0M parameters;
- chain: 10,000 nodes (a matmul every tenth node, tanh/add/mul between) on a [64, 64] tensor;
- mlp: 784-256-256-10 ReLU, batch 64.

    python benchmarks/onnx_import.py [--repeat 20] [--import-rounds 7] [--import-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

THREADS = os.environ.get("FRAME_BENCH_THREADS", "1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, THREADS)

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import frame_core as fc  # noqa: E402
import frame_onnx  # noqa: E402

F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def _w(*shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _model(nodes, inits, x_shape, y_shape) -> bytes:
    graph = helper.make_graph(nodes, "bench", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("y", F, y_shape)],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model.SerializeToString()


def cnn(batch: int) -> tuple[bytes, dict[str, np.ndarray]]:
    nodes, inits, x, channels = [], {}, "x", [3, 32, 64, 128]
    for k in range(3):
        inits[f"conv{k}.weight"], inits[f"conv{k}.bias"] = _w(channels[k + 1], channels[k], 3, 3), _w(channels[k + 1])
        nodes += [helper.make_node("Conv", [x, f"conv{k}.weight", f"conv{k}.bias"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"]),
                  helper.make_node("MaxPool", [f"r{k}"], [f"p{k}"], kernel_shape=[2, 2], strides=[2, 2])]
        x = f"p{k}"
    inits["fc1.weight"], inits["fc1.bias"] = _w(2048, 448), _w(448)
    inits["fc2.weight"], inits["fc2.bias"] = _w(448, 10), _w(10)
    nodes += [helper.make_node("Flatten", [x], ["f"]), helper.make_node("Gemm", ["f", "fc1.weight", "fc1.bias"], ["h"]),
              helper.make_node("Relu", ["h"], ["hr"]), helper.make_node("Gemm", ["hr", "fc2.weight", "fc2.bias"], ["y"])]
    return _model(nodes, inits, ["batch", 3, 32, 32], ["batch", 10]), inits


def chain(n: int) -> bytes:
    nodes, inits, x = [], {}, "x"
    for k in range(n):
        out = f"v{k}"
        if k % 10 == 0:
            inits[f"w{k}"] = _w(64, 64)
            nodes.append(helper.make_node("MatMul", [x, f"w{k}"], [out]))
        else:
            op = ("Tanh", "Add", "Mul")[k % 3]
            nodes.append(helper.make_node(op, [x] if op == "Tanh" else [x, x], [out]))
        x = out
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    return _model(nodes, inits, [64, 64], [64, 64])


def mlp() -> tuple[bytes, dict[str, np.ndarray]]:
    sizes, nodes, inits, x = [784, 256, 256, 10], [], {}, "x"
    for k in range(3):
        inits[f"fc{k}.weight"], inits[f"fc{k}.bias"] = _w(sizes[k + 1], sizes[k]), _w(sizes[k + 1])
        nodes.append(helper.make_node("Gemm", [x, f"fc{k}.weight", f"fc{k}.bias"], [f"g{k}"], transB=1))
        x = f"g{k}"
        if k < 2:
            nodes.append(helper.make_node("Relu", [x], [f"a{k}"]))
            x = f"a{k}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    return _model(nodes, inits, ["batch", 784], ["batch", 10]), inits


def cnn_products(params: dict[str, np.ndarray], batch: int):
    """The cnn's matrix products alone, in the shapes frame's kernels use (one product per sample and conv layer,
    on columns made beforehand), and its two dense layers: the floor of any im2col kernel on this BLAS."""
    convs, size = [], 32
    for k in range(3):
        w = params[f"conv{k}.weight"]
        wm = np.ascontiguousarray(w.reshape(w.shape[0], -1))
        convs.append((wm, rng.standard_normal((wm.shape[1], size * size)).astype(np.float32),
                      np.empty((wm.shape[0], size * size), np.float32)))
        size //= 2
    h = rng.standard_normal((batch, 2048)).astype(np.float32)

    def products():
        for wm, cols, out in convs:
            for _ in range(batch):
                np.matmul(wm, cols, out=out)
        np.matmul(np.matmul(h, params["fc1.weight"]), params["fc2.weight"])
    return products


def ort_session(data: bytes):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = int(THREADS)
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def median_time(fn, repeat: int) -> float:
    return median_times([fn], repeat)[0]


def median_times(fns, repeat: int, cpu: list[float] | None = None) -> list[float]:
    """The median time of each function, the functions run in turn in every repetition (interleaved: a burst of
    load on the shared machine then falls on all of them, not on whichever ran during it); with ``cpu``, the
    median CPU time of each is appended to it (steadier than wall time under load)."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    cpu_times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, ts, cs in zip(fns, times, cpu_times):
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
            cs.append(time.process_time() - c0)
    if cpu is not None:
        cpu.extend(statistics.median(cs) for cs in cpu_times)
    return [statistics.median(ts) for ts in times]


def settle(exe, argv) -> str:
    """Run a compiled graph until frame-native (when installed) has compiled its kernels, so that the timings are
    of the steady state (onnxruntime's session creation is outside them too); the tiers reached, for the log."""
    for _ in range(3):
        exe.run(argv)
    try:
        import frame_native
    except ImportError:
        return "frame-native not installed"
    frame_native.wait(120)
    tiers = frame_native.tier_of(exe)
    return ", ".join(f"{tiers.count(t)} {t}" for t in sorted(set(tiers))) or "no tiered kernels"


def import_and_compile(data: bytes, dims: dict[str, int], probe: bool | str = True) -> float:
    t0 = time.perf_counter()
    if probe == "twice":
        model = import_twice(data, dims)
    else:
        model = frame_onnx.load(data, dims=dims, check_any_batch=probe)
    fc.compile(model.graph, cache=False)
    return time.perf_counter() - t0


def import_twice(data: bytes, dims: dict[str, int]):
    """The any-batch probe as it was: two whole imports (each re-checks the serialised model and decodes its
    initializers), then the comparison; kept as the reference the cheaper probe is measured against."""
    from frame_core import holds_traced_sizes
    from frame_onnx._import import import_model, same_structure
    from frame_onnx._read import read_model

    proto, _ = read_model(data)
    model = import_model(proto, dims=dims)
    probe = import_model(proto, dims={k: v + 1 for k, v in model.dims.items()}, default_dim=2)
    model.any_batch = same_structure(model.graph, probe.graph)
    if not model.any_batch:
        holds_traced_sizes(model.graph)
    return model


def cpu_profile(exe, argv, repeat: int) -> str:
    """``exe.profile`` with CPU time around each instruction (the machine is shared: wall time is skewed by load)."""
    from types import SimpleNamespace

    from frame_core.runtime import executable

    executable.time = SimpleNamespace(perf_counter=time.process_time)  # the profile's clock, in that module only
    try:
        return str(exe.profile(argv, repeat=repeat))
    finally:
        executable.time = time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--import-rounds", type=int, default=7, help="interleaved rounds of the import timings")
    parser.add_argument("--import-only", action="store_true", help="skip the inference timings")
    parser.add_argument("--profile", action="store_true", help="also print the cnn's time per instruction (CPU time)")
    args = parser.parse_args()
    print(f"threads: {THREADS}")

    cnn_data, cnn_params = cnn(16)
    chain_data = chain(10_000)
    n_params = sum(a.size for a in cnn_params.values())
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    rounds = max(3, args.import_rounds)
    print(f"\n== import + compile, medians of {rounds} interleaved rounds (wall ms, cpu ms) vs onnxruntime session "
          "creation ==")
    cases = ((f"cnn ({n_params / 1e6:.2f}M parameters)", cnn_data, {"batch": 16}, True),
             ("cnn, without the any-batch probe", cnn_data, {"batch": 16}, False),
             ("cnn, probe as two full imports", cnn_data, {"batch": 16}, "twice"),
             ("chain (10,000 nodes)", chain_data, {}, True))
    walls: dict[str, list[float]] = {label: [] for label, *_ in cases}
    cpus: dict[str, list[float]] = {label: [] for label, *_ in cases}
    ort_walls: dict[str, list[float]] = {label: [] for label, *_ in cases}
    for _ in range(rounds):  # every case once per round, so load changes hit them all alike
        for label, data, dims, probe in cases:
            c0 = time.process_time()
            walls[label].append(import_and_compile(data, dims, probe))
            cpus[label].append(time.process_time() - c0)
            t0 = time.perf_counter()
            ort_session(data)
            ort_walls[label].append(time.perf_counter() - t0)
    for label, *_ in cases:
        ours, cpu, theirs = (statistics.median(v[label]) for v in (walls, cpus, ort_walls))
        print(f"{label:32s} frame {ours * 1e3:7.1f} ms (cpu {cpu * 1e3:7.1f})   onnxruntime {theirs * 1e3:7.1f} ms   "
              f"ratio {ours / theirs:5.2f}")
    probe, plain, twice = cases[0][0], cases[1][0], cases[2][0]
    for label, case in (("the any-batch probe", probe), ("two full imports (the previous probe)", twice)):
        print(f"{label} costs {(statistics.median(walls[case]) / statistics.median(walls[plain]) - 1) * 100:.0f}% "
              f"(wall), {(statistics.median(cpus[case]) / statistics.median(cpus[plain]) - 1) * 100:.0f}% (cpu) over "
              "an import without it")
    if args.import_only:
        return

    print(f"\n== inference, median of {args.repeat} interleaved runs (ratio = frame / onnxruntime, of wall and of "
          f"CPU time), load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} ==")
    mlp_data, mlp_params = mlp()
    for label, data, shape, dims in (("mlp 784-256-256-10, batch 64", mlp_data, (64, 784), {"batch": 64}),
                                     ("cnn, batch 16", cnn_data, (16, 3, 32, 32), {"batch": 16})):
        x = rng.standard_normal(shape).astype(np.float32)
        model = frame_onnx.load(data, dims=dims)
        exe = fc.compile(model.graph)
        argv = model.arguments([x])
        tiers = settle(exe, argv)
        session = ort_session(data)
        fns, cpu = [lambda: exe.run(argv), lambda: session.run(None, {"x": x})], []
        if data is cnn_data:  # what no im2col kernel on this BLAS can go below, interleaved with the two
            fns.append(cnn_products(cnn_params, shape[0]))
        ours, theirs, *floor = median_times(fns, args.repeat, cpu)
        np.testing.assert_allclose(exe.run(argv)[0], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
        line = (f"{label:32s} frame {ours * 1e3:8.3f} ms   onnxruntime {theirs * 1e3:8.3f} ms   ratio {ours / theirs:5.2f}"
                f" (cpu {cpu[0] / cpu[1]:5.2f})")
        if floor:
            line += (f"   the products alone {floor[0] * 1e3:8.3f} ms (/ onnxruntime {floor[0] / theirs:4.2f}, "
                     f"cpu {cpu[2] / cpu[1]:4.2f})")
        if data is mlp_data:
            p = mlp_params

            def by_hand():
                h = np.maximum(x @ p["fc0.weight"].T + p["fc0.bias"], 0)
                h = np.maximum(h @ p["fc1.weight"].T + p["fc1.bias"], 0)
                return h @ p["fc2.weight"].T + p["fc2.bias"]
            numpy_time = median_time(by_hand, args.repeat)
            line += f"   numpy {numpy_time * 1e3:8.3f} ms (frame / numpy {ours / numpy_time:4.2f})"
        print(line + f"   [tiered kernels: {tiers}]")
        if args.profile and data is cnn_data:
            print(cpu_profile(exe, argv, args.repeat))


if __name__ == "__main__":
    main()
