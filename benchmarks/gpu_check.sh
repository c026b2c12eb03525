#!/usr/bin/env bash
# One-shot GPU check, prepared so that a lent device machine is used for one short call:
# correctness of the FAVOR kernels on CUDA against float64 CPU references, bf16 finiteness,
# then the attention scaling and whole-model throughput benchmarks in bf16.
# Needs only torch (+ numpy, matplotlib) from the machine's image; performer-pytorch is used
# when importable (carry its wheels), skipped otherwise. Writes JSON/PNG/logs under $OUT.
#
#   bash benchmarks/gpu_check.sh            # ~5-8 min on one H200
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv |
    tee "$OUT/gpu.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" |
    tee -a "$OUT/gpu.txt"

echo "== correctness on CUDA"
"$PY" benchmarks/device_check.py --device cuda 2>&1 | tee "$OUT/correctness.txt" || status=1

methods="favor-softmax favor-relu exact favor-softmax-causal favor-relu-causal exact-causal"
if "$PY" -c "import performer_pytorch" 2>/dev/null; then
    methods="$methods pp-softmax pp-softmax-causal"
fi
echo "== attention scaling (bf16 inputs)"
# shellcheck disable=SC2086
"$PY" benchmarks/attention_scaling.py --device cuda --dtype bfloat16 --methods $methods \
    --lengths 1024 4096 16384 32768 65536 --rounds 1 --repeats 5 --min-time 0.5 \
    --pp-causal-max-length 16384 --timeout 300 --json "$OUT/scaling_bf16.json" \
    2>&1 | tee "$OUT/scaling_bf16.txt" || status=1

echo "== whole model, bf16 autocast"
"$PY" benchmarks/model_throughput.py --device cuda --precision bf16 \
    --lengths 1024 8192 32768 65536 --tokens 65536 --steps 5 --timeout 300 \
    --json "$OUT/model_bf16.json" 2>&1 | tee "$OUT/model_bf16.txt" || status=1
exit $status
