# Sourced by gpu_check.sh and gpu_homolog.sh after PY is set: on a lent device machine, use
# what benchmarks/gpu_prepare.sh carried. The wheels in .whl are installed (into a temporary
# folder put on PYTHONPATH) when hydra, omegaconf or biopython cannot be imported; proteomes
# are read from ../shared/data where it exists, else from the carried .gpudata/data.
if ! "$PY" -c "import hydra, omegaconf, Bio" 2>/dev/null; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
        echo "hydra-core, omegaconf or biopython missing and no .whl/ carried: run" \
            "benchmarks/gpu_prepare.sh here and carry .whl (and .gpudata)" >&2
        exit 2
    fi
    pp_site=$(mktemp -d /tmp/pp_site.XXXXXX) || exit 2
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$pp_site" \
        .whl/*.whl || { echo "installing the carried .whl/ failed" >&2; exit 2; }
    export PYTHONPATH="$pp_site${PYTHONPATH:+:$PYTHONPATH}"
    echo "installed $(ls .whl | wc -l) carried wheels into $pp_site"
fi
if [ -d ../shared/data ]; then pp_data=../shared/data; else pp_data=.gpudata/data; fi
