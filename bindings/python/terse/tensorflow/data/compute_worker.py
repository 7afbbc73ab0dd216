"""The compute job of tf.data service for terse training jobs.

Horovod's horovod.tensorflow.data.compute_worker:

    terserun -np W python -m terse.tensorflow.data.compute_worker CONFIG \
        [--dispatchers D] [--dispatcher-side compute|training] [--timeout S]

Rank 0 starts the compute service and writes its TfDataServiceConfig to
CONFIG (a path every rank and the training job can read); every rank then
runs a tf.data worker (compute_worker_fn) until the training job calls
config.compute_client().shutdown(). W must be a multiple of D.
"""

import argparse
import secrets

from terse import basics
from terse.tensorflow.data.compute_service import (TfDataServiceConfig,
                                                   compute_worker_fn)
from terse.tensorflow.data.rendezvous import ComputeService


def main(dispatchers, dispatcher_side, configfile, timeout=60):
    """One rank of the compute job (see the module comment). Returns when
    the compute service shuts down."""
    if not basics.is_initialized():
        basics.init()
    rank, size = basics.rank(), basics.size()
    if dispatchers <= 0 or size % dispatchers:
        raise ValueError(f"Number of processes ({size}) must be a multiple "
                         f"of number of dispatchers ({dispatchers}).")
    compute = None
    try:
        if rank == 0:
            key = secrets.token_bytes(32)
            compute = ComputeService(dispatchers, size // dispatchers, key)
            config = TfDataServiceConfig(
                dispatchers=dispatchers,
                workers_per_dispatcher=size // dispatchers,
                dispatcher_side=dispatcher_side,
                addresses=compute.addresses(), key=key, timeout=timeout)
            config.write(configfile)
        else:
            config = TfDataServiceConfig.read(configfile,
                                              wait_for_file_creation=True)
        compute_worker_fn(config, timeout)
    finally:
        if compute is not None:
            compute.shutdown()


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configfile",
                   help="where rank 0 writes the compute service's config")
    p.add_argument("--dispatchers", type=int, default=1,
                   help="the number of dispatchers")
    p.add_argument("--dispatcher-side", default="compute",
                   choices=["compute", "training"],
                   help="where the dispatchers run")
    p.add_argument("--timeout", type=int, default=60,
                   help="seconds a registration may take")
    return p.parse_args(argv)


if __name__ == "__main__":
    args = _parse()
    main(args.dispatchers, args.dispatcher_side, args.configfile,
         args.timeout)
    basics.shutdown()
