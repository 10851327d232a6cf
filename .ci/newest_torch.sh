#!/usr/bin/env bash
# lintf installed as the README says (`pip install torch && pip install -e ".[dev]"`, so the newest torch
# release, its CUDA build, on a machine without a GPU), in a virtual environment kept outside the clone and
# reused while its torch is still the newest. Runs the README's test command on the op tests (the rest of
# the suite runs on the pinned torch in .ci/run), a short CLI fit, and two processes that build and then
# load the op from an empty extension cache (the second one must load what the first built, silently).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
cache="${LINTF_CI_CACHE:-$HOME/.cache/lintf-ci}"
venv="$cache/newest-torch-venv"
pip_install() { "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }

mkdir -p "$cache"
exec 9>"$cache/newest-torch-venv.lock"
flock 9  # one CI run at a time sets up and uses the shared environment

if [ ! -x "$venv/bin/python" ]; then
  rm -rf "$venv"
  python -m venv "$venv"
fi
# a no-op (an index query) while the installed torch is still the newest release
pip_install --upgrade torch
pip_install -e ".[dev]"
echo "newest-torch check: torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') in $venv"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# (a) the op tests and the op's build faults, building the op from an empty extension cache
TORCH_EXTENSIONS_DIR="$work/extensions-a" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/ops \
  tests/faults/test_op_faults.py

# (b) a short fit through the CLI; it loads the op the tests built (a second process after a build)
mkdir "$work/fit"
(cd "$work/fit" && TORCH_EXTENSIONS_DIR="$work/extensions-a" "$venv/bin/lintf" fit \
  --config "$repo/configs/copy.yaml" --trainer.max_steps 5 --trainer.val_check_interval 5 \
  --trainer.limit_val_batches 1 --trainer.log_every_n_steps 1 --trainer.enable_progress_bar false \
  --data.init_args.train_size 320 --data.init_args.val_size 32 \
  --model.init_args.encoder.d_model 16 --model.init_args.encoder.n_layers 1 \
  --model.init_args.lr_scheduler.init_args.total_steps 5)
test -s "$work/fit/lightning_logs/copy-linear/version_0/checkpoints/last.ckpt"

# (c) two processes from an empty extension cache: the first builds, saying only that it starts and how
# long it took on stderr (torch's note that its CUDA build finds no CUDA runtime stays out of it), the
# second loads that build and writes nothing to stderr
load='from lintf.ops.extension import load_library; assert load_library(), "the compiled op did not load"'
notice="$("$venv/bin/python" -c 'from lintf.ops.extension.build import BUILD_NOTICE; print(BUILD_NOTICE)')"
built='lintf: built the compiled ops in '
failed=""
for process in first second; do
  TORCH_EXTENSIONS_DIR="$work/extensions-c" "$venv/bin/python" -W always -c "$load" 2>"$work/$process.err" \
    || failed="$failed $process"
done
unexpected="$(grep -v -F -e "$notice" -e "$built" "$work/first.err" || true)$(cat "$work/second.err")"
if [ -n "$failed" ] || [ -n "$unexpected" ] || [ "$(grep -c -F -e "$notice" "$work/first.err")" != 1 ] \
  || [ "$(grep -c -F -e "$built" "$work/first.err")" != 1 ]; then
  echo "error: the first process must build the op (saying only so on stderr), the second load it silently" \
    "(failed:${failed:- none}):" >&2
  echo "--- first:" >&2; cat "$work/first.err" >&2
  echo "--- second:" >&2; cat "$work/second.err" >&2
  exit 1
fi
echo "newest-torch check: tests/ops, a CLI fit and a build loaded by a second process all pass"
