#!/usr/bin/env bash
# Prepares what a lent device machine needs for gpu_homolog.sh / gpu_check.sh, here, before
# the call: only the checkout travels there (not ../shared), and its image lacks hydra-core,
# omegaconf, antlr4 and biopython. Writes two folders that .git/info/exclude ignores:
#   .gpudata/data/       copies of the proteomes the scripts read (conf/data/proteomes14.yaml
#                        and conf/data/proteomes.yaml), ~28 MiB
#   .gpudata/clusters14  a copy of the `data cluster` output given as CLUSTERS (optional)
#   .whl/                wheels of the four missing packages for the device's Python (3.12)
# Then one device call carries both and runs a script, which installs the wheels itself:
#   CLUSTERS=clusters14 bash benchmarks/gpu_prepare.sh
#   run(command="OUT=$OUT bash benchmarks/gpu_homolog.sh", carry=[".gpudata", ".whl"])
# Knobs: DATA (default ../shared/data), CLUSTERS, PYVER (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
CLUSTERS=${CLUSTERS:-}
PYVER=${PYVER:-3.12}
# both folders are replaced below: never one that holds anything this script did not put there
if [ -d .whl ] && [ -n "$(find .whl -mindepth 1 ! -name '*.whl' -print -quit)" ]; then
    echo ".whl holds files that are not wheels: not replaced (move them, or remove .whl)" >&2
    exit 2
fi
if [ -n "$CLUSTERS" ] && [ -d .gpudata/clusters14 ] && [ ! -f .gpudata/clusters14/members.tsv ]; then
    echo ".gpudata/clusters14 is not a copy of a clustering (no members.tsv): not replaced" >&2
    exit 2
fi
for folder in .gpudata .whl; do
    grep -qx "/$folder/" .git/info/exclude 2>/dev/null || echo "/$folder/" >>.git/info/exclude
done
mapfile -t names < <(sed -n 's|.*pp_root:\.\./shared/data/\(.*\)}[[:space:]]*$|\1|p' \
    conf/data/proteomes14.yaml conf/data/proteomes.yaml | sort -u)
[ "${#names[@]}" -ge 14 ] || { echo "expected the proteomes of conf/data/proteomes14.yaml" >&2; exit 2; }
for name in "${names[@]}"; do
    [ -f "$DATA/$name" ] || { echo "missing proteome: $DATA/$name (set DATA=)" >&2; exit 2; }
    mkdir -p ".gpudata/data/$(dirname "$name")"
    cmp -s "$DATA/$name" ".gpudata/data/$name" 2>/dev/null || cp "$DATA/$name" ".gpudata/data/$name"
done
echo "copied ${#names[@]} proteomes to .gpudata/data"
if [ -n "$CLUSTERS" ]; then
    [ -f "$CLUSTERS/members.tsv" ] || { echo "CLUSTERS=$CLUSTERS holds no members.tsv" >&2; exit 2; }
    rm -rf .gpudata/clusters14.tmp && cp -r "$CLUSTERS" .gpudata/clusters14.tmp
    rm -rf .gpudata/clusters14 && mv .gpudata/clusters14.tmp .gpudata/clusters14
    echo "copied $CLUSTERS to .gpudata/clusters14"
fi
# the versions this checkout's environment runs (one of each: two stop the install there)
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
pins() { "$PY" -c 'import sys; from importlib.metadata import version as v
print(" ".join(f"{n}=={v(n)}" for n in sys.argv[1:]))' "$@"; }
rm -rf .whl.tmp && mkdir .whl.tmp
# pure Python (antlr4 4.9, which hydra 1.3 needs, is published as source only): built here
# shellcheck disable=SC2046
"$PY" -m pip wheel -q --no-deps -w .whl.tmp $(pins hydra-core omegaconf antlr4-python3-runtime)
# compiled: the device's Python and platform
# shellcheck disable=SC2046
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl.tmp $(pins biopython)
rm -rf .whl && mv .whl.tmp .whl  # only these: two versions of one package stop the install
echo "wheels in .whl: $(cd .whl && ls | tr '\n' ' ')"
du -sh .gpudata .whl
