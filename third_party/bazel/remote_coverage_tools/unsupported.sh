#!/bin/sh
echo "bazel coverage is not supported in the offline build" >&2
exit 1
