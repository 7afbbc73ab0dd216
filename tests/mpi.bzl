"""mpi_test: runs a cc_binary under mpirun with NP ranks as an sh_test."""

def mpi_test(name, binary, np, args = [], size = "medium", tags = [], **kwargs):
    """Declares an sh_test that runs `binary` under `tests/mpirun.sh np`.

    The test passes when every rank exits 0. Tagged exclusive: mpirun tests
    oversubscribe the machine's cores and must not overlap each other.
    """
    native.sh_test(
        name = name,
        srcs = ["//tests:mpirun.sh"],
        args = [str(np), "$(location " + binary + ")"] + args,
        data = [binary],
        size = size,
        tags = ["exclusive"] + tags,
        **kwargs
    )
