#!/usr/bin/env python3
"""pytorch_bench.py: one trial of templates/pytorch.yaml.

Times the forward pass of a model at one setting of dtype, batch size,
torch.compile mode and CPU threads, and writes

- the metrics, as {"metrics": {...}}, to $TUNECTL_RESULT (tunectl's result
  file; see docs/trial-contract.md): `samples_per_s` (one sample per timed
  iteration) and `latency_ms`;
- the model's outputs for the first PROBE_ROWS rows of the batch, in
  float32, as a JSON array, to --out (the study compares it with the
  baseline's under gate.tolerance).

The input's first PROBE_ROWS rows are the same for every batch size (drawn
from their own seeded generator), so the outputs of two configs are
comparable whatever their batch.

Replace build_model() and make_input() with your model and input: keep the
input's first rows independent of the batch size, and the model's weights
seeded.
"""
import argparse
import json
import os
import statistics
import time

import torch

PROBE_ROWS = 8
FEATURES = 1024


def build_model() -> torch.nn.Module:
    """EDIT: your model. This one is a small MLP stack."""
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Linear(FEATURES, 4 * FEATURES), torch.nn.GELU(),
                   torch.nn.Linear(4 * FEATURES, FEATURES), torch.nn.LayerNorm(FEATURES)]
    return torch.nn.Sequential(*layers)


def make_input(batch: int) -> torch.Tensor:
    """EDIT: your input. The first PROBE_ROWS rows must not depend on `batch`."""
    probe = torch.randn(PROBE_ROWS, FEATURES, generator=torch.Generator().manual_seed(1))
    rest = torch.randn(max(batch - PROBE_ROWS, 0), FEATURES,
                       generator=torch.Generator().manual_seed(2))
    return torch.cat([probe, rest])[:batch]


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compile", default="off",
                    choices=["off", "default", "reduce-overhead", "max-autotune"])
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0 keeps torch's default")
    ap.add_argument("--warmup-iters", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="outputs.json")
    args = ap.parse_args()
    if args.batch < PROBE_ROWS:
        ap.error(f"--batch must be at least {PROBE_ROWS} (the rows compared by the gate)")

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]

    model = build_model().to(device=device, dtype=dtype).eval()
    x = make_input(args.batch).to(device=device, dtype=dtype)
    if args.compile != "off":
        model = torch.compile(model, mode=args.compile)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with torch.inference_mode():
        # Warm-up: the first calls compile (torch.compile), autotune and
        # fill caches; they are not timed.
        for _ in range(args.warmup_iters):
            out = model(x)
        sync()
        times = []
        for _ in range(args.iters):
            start = time.perf_counter()
            out = model(x)
            sync()
            times.append(time.perf_counter() - start)

    probe = out[:PROBE_ROWS].float().cpu()
    with open(args.out, "w") as f:
        json.dump(probe.tolist(), f)

    result = {
        "metrics": {
            "samples_per_s": [args.batch / t for t in times],
            "latency_ms": [t * 1000 for t in times],
        }
    }
    path = os.environ.get("TUNECTL_RESULT", "tunectl-result.json")
    with open(path, "w") as f:
        json.dump(result, f)
    print(f"{args.dtype} batch={args.batch} compile={args.compile} threads={args.threads} "
          f"device={device}: median {statistics.median(times) * 1000:.3f} ms, "
          f"{args.batch / statistics.median(times):.1f} samples/s")


if __name__ == "__main__":
    main()
