#!/usr/bin/env bash
# The C extensions' tests under AddressSanitizer and UndefinedBehaviorSanitizer: a copy of the
# tree (this one's .so files stay as they are) with the extensions built -fsanitize=address,undefined, then
# pytest there with libasan preloaded. Any out-of-bounds read, use after free or undefined behaviour stops
# the run with the sanitizer's report. Not part of ./scripts/test.sh (a few minutes); run it after changing
# gateway/**/*.c or gateway/_cext/*.h.
#
#   ./scripts/sanitize_extensions.sh                  # the extensions' own test files, three times
#   ./scripts/sanitize_extensions.sh tests/tubemq/test_frame.py  # these files instead, once
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
python="$root/.venv/bin/python"
[ -x "$python" ] || { echo "no .venv: run ./scripts/test.sh tests/project/test_layering.py once first" >&2; exit 2; }
asan=$(gcc -print-file-name=libasan.so)
ubsan=$(gcc -print-file-name=libubsan.so)
[ -e "$asan" ] && [ -e "$ubsan" ] || {
    echo "gcc's libasan/libubsan are missing: apt-get install gcc (they come with it on Debian)" >&2
    exit 2
}

work=$(mktemp -d /tmp/sanitize-extensions.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r setup.py pyproject.toml README.md gateway tests "$work/"
find "$work" \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g"
(cd "$work" && CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" "$python" setup.py -q build_ext --inplace \
    -t "$work/build")
built=$(find "$work/gateway" -name '_*.so' | wc -l)
sources=$(find "$work/gateway" -name '_*.c' -not -path '*/_cext/*' | wc -l)
[ "$built" -eq "$sources" ] || { echo "built $built of the $sources extensions" >&2; exit 1; }

if [ $# -gt 0 ]; then
    files=("$@")
    rounds=1
else
    files=(tests/tubemq/test_speedups*.py tests/api/test_rendered.py tests/api/test_publish_json.py
        tests/api/test_publish_render.py tests/grpc/test_consumed_wire.py tests/service/test_slots_maker.py
        tests/grpc/test_publish_wire.py tests/api/test_consumer_render.py tests/tubemq/test_frame.py
        tests/tubemq/test_connection_batch.py tests/tubemq/test_consumer_batch.py)
    rounds=3 # hypothesis draws other examples each round
fi
export LD_PRELOAD="$asan $ubsan"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd "$work"
for round in $(seq "$rounds"); do
    echo "== round $round of $rounds"
    "$python" -m pytest -q -p no:cacheprovider -x "${files[@]}"
done
