"""Small helpers Horovod exports by name from its frameworks' mpi_ops
modules (horovod.tensorflow and horovod.torch.mpi_ops), for code that calls
them directly. Framework-neutral."""

from terse.basics import resolve_average


def handle_average_backwards_compatibility(op, average):
    """The reduce op meant by Horovod's (op, average) pair: `average` is
    the deprecated spelling (True: Average, False: Sum, with a
    DeprecationWarning); both given is a ValueError; neither is Average."""
    return resolve_average(op, average, stacklevel=2)


def check_num_rank_power_of_2(num_rank):
    """True when num_rank is a power of two (1, 2, 4, ...), as Horovod's
    Adasum requires of the ranks."""
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


# horovod.torch.mpi_ops's name for the same check.
num_rank_is_power_2 = check_num_rank_power_of_2
