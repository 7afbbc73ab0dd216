"""py_mpi_test: a Python script under mpirun with the terse package."""

def py_mpi_test(name, script, np, args = [], data = [], size = "medium",
                tags = [], runner = "//tests/python:run_py_mpi.sh"):
    """An sh_test running `runner NP SCRIPT ARGS` (tests/mpirun.sh inside).

    The runfiles carry the terse package with _terse.so beside it, the shared
    test helpers and the integration modules; PYTHONPATH points at them.
    Tagged exclusive: mpirun tests oversubscribe the cores.
    """
    native.sh_test(
        name = name,
        srcs = [runner],
        args = [str(np), "$(location " + script + ")"] + args,
        data = [
            script,
            "//bindings/python:package",
            "//integration:fashion_mnist_data.py",
            "//tests:mpirun.sh",
            "//tests/python:run_py_mpi.sh",
            "//tests/python:testlib",
        ] + data,
        size = size,
        tags = ["exclusive"] + tags,
    )
