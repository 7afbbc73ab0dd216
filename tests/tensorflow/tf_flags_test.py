"""The op library's build flags (third_party/tensorflow.BUILD) are the ones
the installed TensorFlow asks for, and the op library loads into it: a
TensorFlow upgrade without a matching BUILD change fails here, not as a
crash inside a training job."""

import os
import sys

import tensorflow as tf

WANT_VERSION = "2.15.1"
BUILD_DEFINES = {"-D_GLIBCXX_USE_CXX11_ABI=1", "-DEIGEN_MAX_ALIGN_BYTES=64"}
VENV_TF = "/opt/terse-tf-venv/lib/python3.11/site-packages/tensorflow"


def main():
    failures = []
    if tf.__version__ != WANT_VERSION:
        failures.append(f"TensorFlow {tf.__version__}, pinned {WANT_VERSION}")
    flags = tf.sysconfig.get_compile_flags()
    defines = {f for f in flags if f.startswith("-D")}
    if defines != BUILD_DEFINES:
        failures.append(f"compile defines {sorted(defines)} != BUILD's "
                        f"{sorted(BUILD_DEFINES)}")
    includes = [f[2:] for f in flags if f.startswith("-I")]
    if [os.path.realpath(p) for p in includes] != [
            os.path.realpath(os.path.join(VENV_TF, "include"))]:
        failures.append(f"include dirs {includes}, BUILD uses {VENV_TF}")
    if not any("c++17" in f for f in flags):
        failures.append(f"no -std=c++17 in {flags}")
    links = tf.sysconfig.get_link_flags()
    if "-l:libtensorflow_framework.so.2" not in links:
        failures.append(f"link flags {links}")

    from terse.tensorflow._library import ops
    loaded = ops()
    for name in ("terse_allreduce", "terse_allgather", "terse_broadcast"):
        if not hasattr(loaded, name):
            failures.append(f"op library lacks {name}")
    for failure in failures:
        print("FAIL:", failure, file=sys.stderr)
    print("1 passed, 0 failed" if not failures else "0 passed, 1 failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
