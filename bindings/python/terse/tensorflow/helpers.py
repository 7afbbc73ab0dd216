"""Two small helpers horovod.tensorflow exports by name (from its
mpi_ops), for code that calls them directly."""

import warnings

from terse.tensorflow.ops import Average, Sum


def handle_average_backwards_compatibility(op, average):
    """The reduce op meant by Horovod's (op, average) pair: `average` is
    the deprecated spelling (True: Average, False: Sum, with a
    DeprecationWarning); both given is a ValueError; neither is Average."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please "
                             "provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and "
                      "will be removed in v1.0", DeprecationWarning,
                      stacklevel=2)
        return Average if average else Sum
    return Average


def check_num_rank_power_of_2(num_rank):
    """True when num_rank is a power of two (1, 2, 4, ...), as Horovod's
    Adasum requires of the ranks."""
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0
