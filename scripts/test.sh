#!/usr/bin/env bash
# Installs what is missing, builds Triad and runs every test:
#   1. the full build (compiler, tools, runtime) and its lit + GoogleTest suite;
#   2. the runtime alone, configured with LLVM and MLIR made unfindable and
#      built with AddressSanitizer and UndefinedBehaviorSanitizer, and its
#      unit tests (file loaders fed corrupt input among them) under ctest;
#   3. libFuzzer on the runtime's file loaders, TRIAD_FUZZ_SECONDS (15) per
#      target (scripts/fuzz.sh; a longer run: scripts/fuzz.sh 3600).
# Exits non-zero when anything fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRIAD_BUILD_DIR:-$root/build}"
runtime_build="${TRIAD_RUNTIME_BUILD_DIR:-$root/build-runtime}"
jobs="${TRIAD_JOBS:-$(nproc)}"

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"

echo
echo "test: lit and unit tests (check-triad)"
status=0
results="$build/test-results.xml"
rm -f "$results"
LIT_OPTS="${LIT_OPTS:-} --xunit-xml-output=$results" \
  ninja -C "$build" check-triad || status=$?

echo
echo "test: the runtime alone, without LLVM or MLIR, under ASan and UBSan"
cmake -S "$root" -B "$runtime_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo --no-warn-unused-cli \
  -DTRIAD_ENABLE_COMPILER=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-sanitize-recover=all" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
  -DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON
ninja -C "$runtime_build" -j "$jobs"
(cd "$runtime_build" && ctest --output-on-failure) || status=$?

echo
echo "test: fuzzing the runtime's file loaders (libFuzzer)"
bash "$root/scripts/fuzz.sh" "${TRIAD_FUZZ_SECONDS:-15}" || status=$?

if [ -f "$results" ]; then
  python3 - "$results" <<'PY'
import sys
import xml.etree.ElementTree as ET
suites = ET.parse(sys.argv[1]).getroot().iter("testsuite")
tests = failures = skipped = 0
for suite in suites:
    tests += int(suite.get("tests", 0))
    failures += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped += int(suite.get("skipped", 0))
print(f"lit: {tests - failures - skipped} passed, {failures} failed, {skipped} skipped")
PY
fi
exit "$status"
