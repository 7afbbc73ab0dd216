"""tf_mpi_test: a Python script of terse.tensorflow under mpirun."""

def tf_mpi_test(name, script, np, args = [], data = [], size = "medium",
                tags = [], mpirun_timeout = 240):
    """An sh_test running `run_tf_mpi.sh NP SCRIPT ARGS` with the TensorFlow
    environment's Python. The runfiles carry the terse package (with
    _terse.so and libterse.so), the TensorFlow op library, the shared test
    helpers and the integration programs. NP 0: one process, no mpirun.
    Tagged exclusive: mpirun tests oversubscribe the cores. mpirun_timeout:
    seconds before tests/mpirun.sh kills the ranks (keep it below the size's
    Bazel timeout).
    """
    native.sh_test(
        name = name,
        srcs = ["//tests/tensorflow:run_tf_mpi.sh"],
        args = [str(np), "$(location " + script + ")"] + args,
        data = [
            script,
            "//bindings/python:package",
            "//bindings/tensorflow:_terse_tf_ops.so",
            "//integration:fashion_mnist_data.py",
            "//tests:mpirun.sh",
            "//tests/python:testlib",
        ] + data,
        env = {"TERSE_MPIRUN_TIMEOUT": str(mpirun_timeout)},
        size = size,
        tags = ["exclusive", "tf"] + tags,
    )
