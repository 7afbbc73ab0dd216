#!/bin/bash
# Regenerates the seed corpus tests/fuzz/corpus/{payload,control,config}/
# (deterministic; commit the result). Run from anywhere in the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //tests/fuzz:make_corpus
# Generated seeds only: the regress-* inputs (crashes found by fuzzing) stay.
find tests/fuzz/corpus -type f ! -name "regress-*" -delete 2>/dev/null || true
bazel-bin/tests/fuzz/make_corpus "$PWD/tests/fuzz/corpus"
find tests/fuzz/corpus -type f | sed 's|/[^/]*$||' | sort | uniq -c
