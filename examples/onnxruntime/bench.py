#!/usr/bin/env python3
"""A tunectl trial program: time a small ONNX model on onnxruntime's CPU provider.

The model is built here, at run time, with the onnx helper API (nothing is
downloaded): an MLP of MatMul + Add + Relu layers whose weights are drawn
from a fixed seed, so every run builds the same model. `--weights fp16`
stores the weights as float16 (cast back to float32 in the graph): the
model is half the size, but its weights are rounded, so its output moves by
up to about 3e-4, which is what the study's tolerance gate must catch.

Each run:
  1. builds the model and saves it as model.onnx in the working directory
     (the trial's directory);
  2. opens an onnxruntime.InferenceSession on CPUExecutionProvider with the
     session options given on the command line;
  3. runs the model once on a fixed seeded input and writes its output,
     flattened, as a JSON array to --out (the study's gate compares it with
     the baseline's under a tolerance);
  4. runs --warmup untimed inferences, then --batches batches of --iters
     inferences each, timing every batch;
  5. writes {"metrics": {"throughput": [...], "latency_ms": [...]}} to
     $TUNECTL_RESULT: one sample per batch, in inferences/s and in
     milliseconds per inference (printed instead when the variable is unset).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
MODES = {
    "sequential": ort.ExecutionMode.ORT_SEQUENTIAL,
    "parallel": ort.ExecutionMode.ORT_PARALLEL,
}
SEED = 16


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--intra-op", type=int, default=1, help="intra_op_num_threads")
    p.add_argument("--inter-op", type=int, default=1, help="inter_op_num_threads")
    p.add_argument("--opt-level", choices=sorted(OPT_LEVELS), default="all")
    p.add_argument("--mode", choices=sorted(MODES), default="sequential")
    p.add_argument("--weights", choices=["fp32", "fp16"], default="fp32")
    p.add_argument("--batch", type=int, default=32, help="rows per inference")
    p.add_argument("--width", type=int, default=768, help="hidden layer width")
    p.add_argument("--layers", type=int, default=4, help="hidden layers")
    p.add_argument("--warmup", type=int, default=20, help="untimed inferences")
    p.add_argument("--batches", type=int, default=5, help="timed batches (samples)")
    p.add_argument("--iters", type=int, default=20, help="inferences per batch")
    p.add_argument("--model", default="model.onnx", help="where to save the model")
    p.add_argument("--out", default="outputs.json", help="the output to gate on")
    args = p.parse_args()
    for name in ("intra_op", "inter_op", "batch", "width", "layers", "batches", "iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must be at least 0")
    return args


def build_model(width, layers, weights):
    """An MLP: `layers` hidden layers of `width` (MatMul, Add, Relu), then a
    linear layer to 16 outputs. Weights are N(0, 1/fan_in), biases small."""
    rng = np.random.default_rng(SEED)
    nodes, inits = [], []
    x = "input"
    dims = [width] * (layers + 1) + [16]
    for i in range(len(dims) - 1):
        w = (rng.standard_normal((dims[i], dims[i + 1])) / np.sqrt(dims[i])).astype(np.float32)
        b = (0.1 * rng.standard_normal(dims[i + 1])).astype(np.float32)
        if weights == "fp16":
            # Stored in half precision and cast back: the rounding stays.
            inits.append(numpy_helper.from_array(w.astype(np.float16), f"w{i}_half"))
            nodes.append(helper.make_node("Cast", [f"w{i}_half"], [f"w{i}"], to=TensorProto.FLOAT))
        else:
            inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(b, f"b{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"]))
        last = i == len(dims) - 2
        y = "output" if last else f"h{i}"
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], [y if last else f"a{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [y]))
        x = y
    graph = helper.make_graph(
        nodes,
        "tunectl-mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 16])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tunectl-example"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    args = parse_args()
    model = build_model(args.width, args.layers, args.weights)
    onnx.save(model, args.model)

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.intra_op
    so.inter_op_num_threads = args.inter_op
    so.graph_optimization_level = OPT_LEVELS[args.opt_level]
    so.execution_mode = MODES[args.mode]
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])

    # The gated output: the model on a fixed input (its own seed).
    x = np.random.default_rng(SEED + 1).standard_normal((args.batch, args.width))
    x = x.astype(np.float32)
    (y,) = sess.run(["output"], {"input": x})
    with open(args.out, "w") as f:
        json.dump([float(v) for v in y.ravel()], f)

    feed = {"input": x}
    for _ in range(args.warmup):
        sess.run(None, feed)
    throughput, latency_ms = [], []
    for _ in range(args.batches):
        t0 = time.perf_counter()
        for _ in range(args.iters):
            sess.run(None, feed)
        dt = time.perf_counter() - t0
        throughput.append(args.iters / dt)
        latency_ms.append(1000.0 * dt / args.iters)

    result = {"metrics": {"throughput": throughput, "latency_ms": latency_ms}}
    path = os.environ.get("TUNECTL_RESULT")
    if path:
        with open(path, "w") as f:
            json.dump(result, f)
    else:
        json.dump(result, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
