#!/usr/bin/env bash
# One-shot GPU run for the long-context issue, prepared so that a lent device machine is used
# for one short call:
#   1. correctness of the FAVOR kernels on the device (benchmarks/device_check.py);
#   2. experiment=homolog_lookup for the attention kinds (hybrid: the preset; exact:
#      model=transformer; exact_nope: the same with no positions in any layer,
#      model.nope_layers=[0,1,2,3], the fair exact baseline at 8,192; FAVOR alone:
#      model.exact_layers=[]) at equal wall-clock: they run side by side on the one GPU, each stopped by trainer.max_time=TRAIN_SECONDS, with the
#      preset's model and TOKS tokens per step; validation every VAL_EVERY steps (the curves);
#   3. each kind's last.ckpt evaluated on the test clusters (>= 3 members, 300 proteins) with
#      and without homologs, at 512 tokens and at 8,192 with context_fill (as docs/results.md);
#   4. model-level scaling at the paper's regular size (bf16 autocast) for the three kinds and
#      the no-attention optimum.
# Needs ../shared/data-like proteomes in DATA and a `data cluster` output in CLUSTERS (made on
# a machine with MMseqs2; the device machine has none). On a lent device machine neither
# ../shared nor hydra/biopython is there: run benchmarks/gpu_prepare.sh here first (CLUSTERS=
# the keep-order clustering of docs/results.md) and carry .gpudata and .whl; DATA and CLUSTERS
# then default to the carried copies:
#   run(command="OUT=$OUT bash benchmarks/gpu_homolog.sh", carry=[".gpudata", ".whl"])
# Results: $OUT/homolog_gpu.tar.gz
# (logs, metrics.csv, summary.json, eval JSONs), $OUT/model_scaling_regular_gpu.json and PNG,
# $OUT/<first kind>_last.ckpt; everything else goes to stdout.
#
#   OUT=/tmp/gpu CLUSTERS=clusters14 bash benchmarks/gpu_homolog.sh        # ~8 min on one H200
#   DEVICE=cpu QUICK=1 OUT=/tmp/dry CLUSTERS=clusters14 bash benchmarks/gpu_homolog.sh  # dry run
# Size MAX_STEPS to the time: on one H200 at 16,384 tokens per step the three side by side ran
# 12-18 steps/s each (hybrid 2,366 steps in 181 s), so a longer hybrid-only run is e.g.
#   KINDS=hybrid TRAIN_SECONDS=360 MAX_STEPS=6000 SCALING=0 ... (its checkpoint comes back).
# Knobs (environment): KINDS, SCALING, TRAIN_SECONDS, MAX_STEPS, VAL_EVERY, TOKS,
# CONTEXT_ORDER (evaluate's context_order; the 2026-12-04 rows were drawn in file order:
# given), DEADLINE (seconds for the whole script: each stage's timeout is cut to what is left,
# so it ends inside one call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/gpu_homolog}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
PY=${PYTHON:-python3}
# shellcheck source=benchmarks/_device_env.sh
. benchmarks/_device_env.sh
DATA=${DATA:-$pp_data}
[ -d .gpudata/clusters14 ] && [ ! -d ../shared/data ] && CLUSTERS=${CLUSTERS:-.gpudata/clusters14}
CLUSTERS=${CLUSTERS:?CLUSTERS must name a data cluster output for the 14 proteomes}
TRAIN_SECONDS=${TRAIN_SECONDS:-180}
MAX_STEPS=${MAX_STEPS:-3000}
VAL_EVERY=${VAL_EVERY:-250}
TOKS=${TOKS:-16384}
CONTEXT_ORDER=${CONTEXT_ORDER:-id}
KINDS=${KINDS:-hybrid exact exact_nope favor}
SCALING=${SCALING:-1}  # 0: no model-scaling stage (its rows are in docs/results already)
DEADLINE=${DEADLINE:-560}
WORK=${WORK:-}  # the runs' directory: a new temporary one unless given (then new or empty)
if [ "$QUICK" = 1 ]; then
    trainer=cpu extra="model.dim=32 model.depth=2 model.heads=2 model.ffn_dim=64 trainer.limit_val_batches=2"
    nope="[0,1]"
    eval_extra="context_max_proteins=4" scaling="--lengths 256 --dim 64 --depth 1 --heads 2 --ffn-dim 128 --tokens 512 --steps 1"
    precision=fp32
else
    trainer=gpu extra="data.num_workers=3" eval_extra="" precision=bf16 nope="[0,1,2,3]"
    scaling="--size regular --lengths 1024 8192 32768 --tokens 65536 --steps 3"
fi
for kind in $KINDS; do
    case $kind in hybrid | exact | exact_nope | favor) ;;
        *) echo "KINDS: hybrid, exact, exact_nope, favor (got '$kind')" >&2; exit 2 ;; esac
done
for knob in TRAIN_SECONDS DEADLINE; do
    case ${!knob} in
        '' | *[!0-9]*) echo "$knob must be a whole number of seconds (got '${!knob}')" >&2
            exit 2 ;;
    esac
done
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2  # absolute: the tarball is made in WORK
if [ -z "$WORK" ]; then
    WORK=$(mktemp -d /tmp/gpu_homolog.XXXXXX) || exit 2
elif [ -e "$WORK" ] && [ -n "$(ls -A "$WORK" 2>/dev/null)" ]; then
    echo "WORK=$WORK exists and is not empty: give a new or empty directory" >&2
    exit 2
fi
mkdir -p "$WORK" || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1
status=0
stage() { echo; echo "== $* ($(date +%T), ${SECONDS} s)"; }
# a stage's timeout: what it wants, cut to what is left of DEADLINE (at least 1 s: timeout 0
# would mean no limit)
budget() { local left=$((DEADLINE - SECONDS)); echo $(($1 < left ? $1 : (left > 1 ? left : 1))); }
# the 14 files in conf/data/proteomes14.yaml's order, under DATA
mapfile -t names < <(sed -n 's|.*pp_root:\.\./shared/data/\(.*\)}[[:space:]]*$|\1|p' \
    conf/data/proteomes14.yaml)
[ "${#names[@]}" = 14 ] || { echo "expected 14 files in conf/data/proteomes14.yaml, found ${#names[@]}" >&2; exit 2; }
paths=()
for name in "${names[@]}"; do
    [ -f "$DATA/$name" ] || { echo "missing proteome: $DATA/$name" >&2; exit 2; }
    paths+=("$DATA/$name")
done
files=$(IFS=,; echo "${paths[*]}")

stage "machine"
[ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

stage "correctness on $DEVICE"
timeout "$(budget 90)" "$PY" benchmarks/device_check.py --device "$DEVICE" || status=1

stage "homolog_lookup: $KINDS side by side, ${TRAIN_SECONDS} s each"
declare -A kind_overrides=([hybrid]="" [exact]="model=transformer"
    [exact_nope]="model=transformer model.nope_layers=$nope" [favor]="model.exact_layers=[]")
max_time=$(printf '00:%02d:%02d:%02d' $((TRAIN_SECONDS / 3600)) $((TRAIN_SECONDS / 60 % 60)) \
    $((TRAIN_SECONDS % 60)))
set -f  # overrides are split into words but not globbed ([a,b] is a Hydra list)
pids=()
limit=$(budget $((TRAIN_SECONDS + 150)))
for kind in $KINDS; do
    # shellcheck disable=SC2086
    timeout "$limit" "$PY" -m protein_performer.cli.main train \
        experiment=homolog_lookup trainer=$trainer "data.clusters=$CLUSTERS" "data.files=[$files]" \
        trainer.max_steps="$MAX_STEPS" trainer.max_time="$max_time" \
        trainer.val_check_interval="$VAL_EVERY" trainer.enable_progress_bar=false \
        data.toks_per_batch="$TOKS" hydra.run.dir="$WORK/$kind" $extra ${kind_overrides[$kind]} \
        >"$WORK/${kind}_train.log" 2>&1 &
    pids+=($!)
done
set +f
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for kind in $KINDS; do
    echo "-- $kind"; tail -n 4 "$WORK/${kind}_train.log"
    [ -f "$WORK/$kind/checkpoints/last.ckpt" ] || status=1
done

stage "evaluate with and without homologs (test clusters), 512 and 8,192 with fill"
pids=()
limit=$(budget 240)
for kind in $KINDS; do
    ckpt=$WORK/$kind/checkpoints/last.ckpt
    [ -f "$ckpt" ] || continue
    for length in 512 8192; do
        fill=""; [ "$length" = 8192 ] && fill="context_fill=true"
        # shellcheck disable=SC2086
        timeout "$limit" "$PY" -m protein_performer.cli.main evaluate checkpoint="$ckpt" \
            "fasta=[$files]" clusters="$CLUSTERS" split=test context=cluster \
            context_min_members=3 context_max_proteins=300 context_order="$CONTEXT_ORDER" \
            max_length=$length $fill $eval_extra output="$WORK/${kind}_eval${length}.json" overwrite=true \
            >"$WORK/${kind}_eval${length}.log" 2>&1 &
        pids+=($!)
    done
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for kind in $KINDS; do
    for length in 512 8192; do
        echo "-- $kind $length"; tail -n 6 "$WORK/${kind}_eval${length}.log" 2>/dev/null
        [ -f "$WORK/${kind}_eval${length}.json" ] || status=1
    done
done
first=${KINDS%% *}
cp "$WORK/$first/checkpoints/last.ckpt" "$OUT/${first}_last.ckpt" || status=1
(cd "$WORK" && tar czf "$OUT/homolog_gpu.tar.gz" --exclude='*.ckpt' .) || status=1

if [ "$SCALING" = 0 ]; then
    stage "done, status $status"
    exit $status
fi
stage "whole model, regular size, $precision"
# shellcheck disable=SC2086
timeout "$(budget 240)" "$PY" benchmarks/model_scaling.py --device "$DEVICE" \
    --precision "$precision" $scaling \
    --attentions performer_relu performer_softmax transformer none --timeout 60 \
    --json "$OUT/model_scaling_regular_gpu.json" --overwrite || status=1
stage "done, status $status"
exit $status
