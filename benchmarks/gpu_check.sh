#!/usr/bin/env bash
# One-shot GPU check, prepared so that a lent device machine is used for one short call:
#   1. correctness of the FAVOR kernels on the device against float64 CPU references, bf16;
#   2. the GPU recipe (experiment=gpu_recipe) on the real proteomes: a short probe measures the
#      step rate, max_steps is sized to RECIPE_SECONDS, then train + evaluate on the test split;
#   3. attention scaling (forward+backward vs L, bf16) with performer-pytorch when importable;
#   4. whole-model training throughput vs L (bf16 autocast).
# Needs torch, numpy, matplotlib, lightning (+ hydra-core, biopython for stage 2) on the path.
# Writes at most 6 files (JSON/PNG/CSV) under $OUT; everything else goes to stdout.
#
#   OUT=/tmp/gpu bash benchmarks/gpu_check.sh                 # ~7 min on one H200
# On a lent device machine: run benchmarks/gpu_prepare.sh here first and carry .gpudata and
# .whl (the proteomes and the packages its image lacks; RECIPE_DATA defaults to the copies):
#   run(command="OUT=$OUT bash benchmarks/gpu_check.sh", carry=[".gpudata", ".whl"])
# Knobs (environment): RECIPE_SECONDS, SCALING_LENGTHS, MODEL_LENGTHS, MODEL_ATTENTIONS.
#   DEVICE=cpu QUICK=1 OUT=/tmp/dry bash benchmarks/gpu_check.sh   # dry run of the script
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/gpu}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
PY=${PYTHON:-python3}
# shellcheck source=benchmarks/_device_env.sh
. benchmarks/_device_env.sh
RECIPE_DATA=${RECIPE_DATA:-$pp_data}          # holds the two proteomes of conf/data/proteomes
RECIPE_SECONDS=${RECIPE_SECONDS:-180}          # training time the step count is sized for
RECIPE_OVERRIDES=${RECIPE_OVERRIDES:-}         # extra Hydra overrides (dry runs)
case $RECIPE_SECONDS in
    '' | *[!0-9]*) echo "RECIPE_SECONDS must be a whole number of seconds (got '$RECIPE_SECONDS')" >&2
        exit 2 ;;
esac
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
if [ "$QUICK" = 1 ]; then
    scaling_lengths="256 512" model_lengths="256" model_dims="--dim 64 --depth 1 --heads 2"
    probe_dims="--dim 64 --depth 1 --heads 2 --ffn-dim 256 --features 16"
else
    scaling_lengths="4096 8192 16384 65536" model_lengths="1024 8192 65536" model_dims=""
    probe_dims="--size regular --features 256"
fi
scaling_lengths=${SCALING_LENGTHS:-$scaling_lengths}
model_lengths=${MODEL_LENGTHS:-$model_lengths}
model_attentions=${MODEL_ATTENTIONS:-performer_relu performer_softmax transformer}
in_process=""
case $DEVICE in cuda*) in_process="--in-process" ;; esac
stage() { echo; echo "== $* ($(date +%T))"; }

stage "machine"
if [ "$DEVICE" != cpu ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

stage "correctness on $DEVICE"
timeout 120 "$PY" benchmarks/device_check.py --device "$DEVICE" || status=1

ecoli=$RECIPE_DATA/uniprot_UP000000625_ecoli_k12.fasta
yeast=$RECIPE_DATA/uniprot_UP000002311_yeast_s288c.fasta.gz
if [ -f "$ecoli" ] && [ -f "$yeast" ]; then
    stage "gpu_recipe: step-rate probe (model sizes as in conf/experiment/gpu_recipe.yaml)"
    rm -f /tmp/recipe_probe.json
    # shellcheck disable=SC2086
    timeout 120 "$PY" benchmarks/model_scaling.py --device "$DEVICE" --precision bf16 \
        --lengths 512 --tokens 65536 --steps 5 --attentions performer_relu $probe_dims \
        --json /tmp/recipe_probe.json --overwrite || status=1
    steps=$("$PY" - "$RECIPE_SECONDS" <<'EOF'
import json, sys
point = json.load(open("/tmp/recipe_probe.json"))["points"][0]
rate = point["tokens_per_s"] / 65536  # steps/s of the bare model; 0.7 leaves room for
print(max(100, int(0.7 * rate * float(sys.argv[1]))))  # data, logging and validation
EOF
    ) || steps=1000
    echo "max_steps=$steps for ${RECIPE_SECONDS} s"
    run=/tmp/gpu_recipe_run
    rm -rf "$run"
    stage "gpu_recipe: train"
    limit=$((RECIPE_SECONDS + 60))
    max_time=$(printf '00:%02d:%02d:%02d' $((limit / 3600)) $((limit / 60 % 60)) $((limit % 60)))
    set -f  # the overrides are split into words but not globbed ([a,b] is a Hydra list)
    # shellcheck disable=SC2086
    timeout $((limit + 120)) "$PY" -m protein_performer.cli.main train experiment=gpu_recipe \
        "data.files=[$ecoli,$yeast]" trainer.max_steps="$steps" \
        trainer.max_time="$max_time" trainer.enable_progress_bar=false \
        hydra.run.dir="$run" $RECIPE_OVERRIDES || status=1
    set +f
    cp "$run/summary.json" "$OUT/recipe_summary.json" 2>/dev/null
    cp "$run/metrics.csv" "$OUT/recipe_metrics.csv" 2>/dev/null
    stage "gpu_recipe: evaluate on the test split"
    timeout 180 "$PY" -m protein_performer.cli.main evaluate checkpoint="$run/checkpoints/best.ckpt" \
        split=test "fasta=[$ecoli,$yeast]" output="$OUT/recipe_eval_test.json" overwrite=true \
        || status=1
else
    stage "gpu_recipe skipped: no proteomes in $RECIPE_DATA (carry .gpudata: gpu_prepare.sh)"
    status=1
fi

methods="favor-softmax favor-relu exact favor-softmax-causal favor-relu-causal exact-causal"
if "$PY" -c "import performer_pytorch" 2>/dev/null; then
    methods="$methods pp-softmax pp-softmax-causal"
fi
stage "attention scaling (bf16 inputs)"
# shellcheck disable=SC2086
timeout 300 "$PY" benchmarks/attention_scaling.py --device "$DEVICE" --dtype bfloat16 \
    --methods $methods --lengths $scaling_lengths --rounds 1 --repeats 3 --min-time 0.2 $in_process \
    --pp-causal-max-length 16384 --timeout 60 --json "$OUT/scaling_bf16.json" --overwrite \
    || status=1

stage "whole model, bf16 autocast"
# shellcheck disable=SC2086
timeout 200 "$PY" benchmarks/model_scaling.py --device "$DEVICE" --precision bf16 \
    --lengths $model_lengths --attentions $model_attentions --tokens 65536 --steps 5 \
    --timeout 60 $model_dims \
    --json "$OUT/model_bf16.json" --overwrite || status=1
stage "done, status $status"
exit $status
