#!/bin/bash
# Regenerates the seed corpus tests/fuzz/corpus/{payload,control,config}/
# (deterministic; commit the result). Run from anywhere in the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //tests/fuzz:make_corpus
rm -rf tests/fuzz/corpus
bazel-bin/tests/fuzz/make_corpus "$PWD/tests/fuzz/corpus"
find tests/fuzz/corpus -type f | sed 's|/[^/]*$||' | sort | uniq -c
