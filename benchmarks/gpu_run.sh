#!/usr/bin/env bash
# Run, on a GPU machine without internet access, the GPU tests, the kernel grid and the training benchmark
# from a directory that `python -m benchmarks.gpu_prepare` prepared on a machine without a GPU:
#
#   benchmarks/gpu_run.sh BUNDLE [SECONDS]
#
# from the repository root. Installs BUNDLE/wheels with pip (no index), loads the op BUNDLE/op was built
# into (LINTF_EXTENSION_DIR) when its torch is this machine's (else the first CUDA call builds it, minutes
# with nvcc), then runs three stages, each under its share of SECONDS (default 480): the GPU tests (45%),
# the performance model beside measured times (benchmarks.gpu_model --measure cuda) and the kernel grid of the
# causal, decayed, GLA and gated delta ops at B*H = 128, C = M = 64, bf16 (25%), and benchmarks.training_gpu
# in bf16-mixed (25%). Results go to benchmarks/results/: gpu_tests.log, gpu_model.md, the grid's
# *_gpu.{md,json}, training_gpu.{md,json}. A stage that fails or runs out of time is reported and the run
# goes on; the exit status is 0 only when every stage passed (2: bad arguments, 3: no GPU here).
set -uo pipefail

usage="usage: benchmarks/gpu_run.sh BUNDLE [SECONDS]  (BUNDLE from python -m benchmarks.gpu_prepare; SECONDS: the whole run's budget, >= 120, default 480)"
if [[ $# -lt 1 || $# -gt 2 ]]; then echo "$usage" >&2; exit 2; fi
bundle=$1
budget=${2:-480}
if [[ ! -d $bundle ]]; then echo "gpu_run: BUNDLE $bundle is not a directory; $usage" >&2; exit 2; fi
if ! [[ $budget =~ ^[0-9]+$ ]] || (( budget < 120 )); then
    echo "gpu_run: SECONDS must be a whole number >= 120, got '$budget'" >&2; exit 2
fi
if [[ ! -f pyproject.toml || ! -d benchmarks ]]; then
    echo "gpu_run: run it from the repository root (benchmarks/gpu_run.sh BUNDLE)" >&2; exit 2
fi
if ! python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_run: no CUDA device is visible to torch here (torch.cuda.is_available() is False); run this on the GPU machine, and benchmarks.gpu_prepare where there is none" >&2
    exit 3
fi

results=benchmarks/results
mkdir -p "$results"
shopt -s nullglob
wheels=("$bundle"/wheels/*.whl)
if (( ${#wheels[@]} )); then
    python -m pip install --quiet --no-index --no-deps "${wheels[@]}" || echo "gpu_run: installing the wheels failed; going on"
fi
here_torch=$(python -c 'import torch; print(torch.__version__)')
bundle_torch=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["torch"])' "$bundle/bundle.json" 2>/dev/null)
if [[ -d $bundle/op && $bundle_torch == "$here_torch" ]]; then
    export LINTF_EXTENSION_DIR=$bundle/op
else
    echo "gpu_run: $bundle/op was built for torch '${bundle_torch:-?}', this machine has $here_torch; the op builds on first use"
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

failed=()
stage() {  # stage NAME SHARE_PERCENT COMMAND...: run COMMAND under its share of the budget
    local name=$1 seconds=$(( budget * $2 / 100 ))
    shift 2
    echo "== $name (at most ${seconds}s): $*"
    timeout --kill-after=10 "$seconds" "$@"
    local rc=$?
    if (( rc == 124 || rc == 137 )); then failed+=("$name (out of time after ${seconds}s)");
    elif (( rc != 0 )); then failed+=("$name (exit $rc)"); fi
}

stage "GPU tests" 45 bash -c "python -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/ops/common/test_host_syncs.py tests/ops/common/test_cuda_graphs.py tests/ops/causal/test_cuda.py \
    tests/ops/decayed/test_cuda.py tests/ops/gla/test_cuda.py tests/ops/delta/test_cuda.py \
    tests/ops/causal/test_cuda_kernels.py 2>&1 | tee $results/gpu_tests.log; exit \${PIPESTATUS[0]}"
grid=(--heads 128 --lengths 2048 4096 16384 --dims 64 --dtypes bf16 --repeats 10 --out "$results")
stage "kernel grid" 25 bash -c "python -m benchmarks.gpu_model --measure cuda --lengths 2048 4096 16384 --out $results \
    && python -m benchmarks.causal_product_gpu ${grid[*]} --no-crossover --impls SDPA 'FLA chunk' \
    && python -m benchmarks.decayed_product_gpu ${grid[*]} --impls FLA && python -m benchmarks.gla_gpu ${grid[*]} --impls FLA \
    && python -m benchmarks.delta_rule_gpu ${grid[*]} --impls FLA"
stage "training benchmark" 25 python -m benchmarks.training_gpu --lengths 2048 8192 --precisions bf16-mixed \
    --compile off --attentions linear gla delta_net softmax --steps 5 --warmup 2 --out "$results"

if (( ${#failed[@]} )); then
    printf 'gpu_run: failed: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "gpu_run: every stage passed; results in $results/"
