"""Horovod's horovod.tensorflow.data.compute_service: tf.data service for
terse jobs.

A compute job (`terserun -np W python -m terse.tensorflow.data.compute_worker
CONFIG`) runs tf.data service workers, and dispatchers on the compute side
(`--dispatcher-side compute`, default) or the training side; it writes the
compute service's config to CONFIG. A training job reads the config and
moves its input pipeline there:

    config = TfDataServiceConfig.read(CONFIG, wait_for_file_creation=True)
    dataset = dataset.send_to_data_service(config, terse.rank(), terse.size())
    ...                                   # train
    if terse.rank() == 0:
        config.compute_client().shutdown()   # ends the compute job

With dispatchers on the training side, the training job wraps its loop in
`with tf_data_service(config, rank) as dispatcher:` and distributes the
dataset itself (tf.data.experimental.service.distribute(..., service=
dispatcher)).

Importing this module adds Dataset.send_to_data_service, as Horovod's does.
What differs from Horovod: the compute service's transport is
multiprocessing.connection (terse.tensorflow.data.rendezvous); it listens on
every interface and advertises the host's address, or with
ComputeService(nics=[...]) those interfaces' addresses only; a worker
advertises the host's address (its name's), so the workers and the
training job must reach each other there.
"""

import binascii
import dataclasses
import json
import logging
import os
import socket
import time
from contextlib import contextmanager
from typing import Any, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

from terse.tensorflow.data.rendezvous import ComputeClient

_log = logging.getLogger("terse.tensorflow.data")

DISPATCHER_SIDES = ("compute", "training")


@dataclasses.dataclass(frozen=True)
class TfDataServiceConfig:
    """What a training job needs to reach a compute job (Horovod's fields).

    dispatchers: how many dispatchers (1: one for every training task;
        else one per training task, the training rank is its id).
    workers_per_dispatcher: compute workers registering with each.
    dispatcher_side: "compute" or "training".
    addresses: the compute service's {name: [(host, port)]}.
    key: bytes, the compute service's HMAC key.
    timeout: seconds any wait for a registration may take.
    """
    dispatchers: int
    workers_per_dispatcher: int
    dispatcher_side: str
    addresses: Mapping[str, Sequence[Tuple[str, int]]]
    key: bytes
    timeout: int = 60

    def __post_init__(self):
        if self.dispatcher_side not in DISPATCHER_SIDES:
            raise ValueError(f"dispatcher_side must be one of "
                             f"{DISPATCHER_SIDES}, got "
                             f"{self.dispatcher_side!r}")
        for field in ("dispatchers", "workers_per_dispatcher"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{field} must be a positive int, got "
                                 f"{value!r}")

    def compute_client(self, verbose=1) -> ComputeClient:
        return ComputeClient(self.addresses, self.key, verbose=verbose)

    def to_dict(self) -> Mapping[str, Any]:
        out = dataclasses.asdict(self)
        out["key"] = binascii.hexlify(self.key).decode()
        out["addresses"] = {k: [list(a) for a in v]
                            for k, v in self.addresses.items()}
        return out

    @staticmethod
    def from_dict(config: Mapping[str, Any]) -> "TfDataServiceConfig":
        missing = [f.name for f in dataclasses.fields(TfDataServiceConfig)
                   if f.name not in config and f.name != "timeout"]
        if missing:
            raise ValueError(f"tf.data service config lacks {missing}")
        return TfDataServiceConfig(
            dispatchers=config["dispatchers"],
            workers_per_dispatcher=config["workers_per_dispatcher"],
            dispatcher_side=config["dispatcher_side"],
            addresses={k: [(a[0], int(a[1])) for a in v]
                       for k, v in config["addresses"].items()},
            key=binascii.unhexlify(config["key"]),
            timeout=config.get("timeout", 60))

    def write(self, filename: str):
        """Writes the JSON atomically (a reader never sees half a file)."""
        tmp = f"{filename}.tmp.{os.getpid()}"
        with open(tmp, "w") as w:
            json.dump(self.to_dict(), w)
        os.replace(tmp, filename)

    @staticmethod
    def read(filename: str, wait_for_file_creation: bool = False
             ) -> "TfDataServiceConfig":
        while wait_for_file_creation and not os.path.exists(filename):
            time.sleep(0.2)
        with open(filename) as r:
            return TfDataServiceConfig.from_dict(json.load(r))


def _host_address():
    try:
        return socket.gethostbyname(socket.getfqdn())
    except OSError:
        return "127.0.0.1"


def _reachable_target(server):
    """server.target ("grpc://localhost:PORT") with the host's address, so
    tasks on other hosts can reach it too."""
    protocol, rest = server.target.split("://", 1)
    return f"{protocol}://{_host_address()}:{rest.rsplit(':', 1)[1]}"


def _stop(server):
    # tf.data's servers have no public stop; _stop() is what their
    # __del__ calls.
    server._stop()  # pylint: disable=protected-access


@contextmanager
def tf_data_service(compute_config: TfDataServiceConfig, rank: int):
    """Yields the dispatcher address training task `rank` uses.

    With dispatcher_side "training", this task starts its dispatcher first
    (each task its own, or rank 0 the only one) and stops it on exit. Waits
    (up to compute_config.timeout s each) for the dispatcher and for its
    compute workers to register.
    """
    compute = compute_config.compute_client(verbose=2)
    server = None
    if compute_config.dispatcher_side == "training" and (
            compute_config.dispatchers > 1 or rank == 0):
        server = tf.data.experimental.service.DispatchServer()
        _log.info("dispatcher for training task %d at %s", rank,
                  server.target)
        compute.register_dispatcher(rank, _reachable_target(server))
    dispatcher_id = rank if compute_config.dispatchers > 1 else 0
    try:
        address = compute.wait_for_dispatcher_registration(
            dispatcher_id, compute_config.timeout)
        compute.wait_for_dispatcher_worker_registration(
            dispatcher_id, compute_config.timeout)
        yield address
    finally:
        if server is not None:
            _stop(server)


def send_to_data_service(dataset: tf.data.Dataset,
                         compute_config: TfDataServiceConfig,
                         rank: int,
                         size: Optional[int] = None,
                         reuse_dataset: bool = False,
                         round_robin: bool = False) -> tf.data.Dataset:
    """`dataset`, processed by the compute job's workers.

    Each element is produced once per job ("distributed_epoch"). Without
    reuse_dataset every training task has its own job, so every task reads
    the whole dataset; with it the tasks share one job and split its
    elements; with round_robin as well, each task reads as consumer `rank`
    of `size` (tf.data's coordinated reads: the dataset must be infinite).
    Needs dispatchers on the compute side (else RuntimeError, as Horovod).
    """
    if compute_config.dispatcher_side == "training":
        raise RuntimeError("training side dispatcher not support, use "
                           "tf_data_service context manager instead")
    if round_robin and (not reuse_dataset or size is None):
        raise ValueError("round_robin needs reuse_dataset=True and size")
    with tf_data_service(compute_config, rank) as dispatcher:
        return dataset.apply(tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=dispatcher,
            job_name="job" if reuse_dataset else None,
            consumer_index=rank if reuse_dataset and round_robin else None,
            num_consumers=size if reuse_dataset and round_robin else None))


tf.data.Dataset.send_to_data_service = send_to_data_service


def compute_worker_fn(compute_config: TfDataServiceConfig,
                      timeout: Optional[int] = None):
    """One compute task: its tf.data worker (and dispatcher, where it is
    the first of its dispatcher's workers on the compute side); blocks until
    the compute service shuts down, then stops them.

    The task's index and the job's size are terse.rank() and terse.size()
    (terse.init() is called here if the process has not). timeout: seconds
    the worker waits for its dispatcher before giving up (None: tf.data's).
    """
    from terse import basics
    if not basics.is_initialized():
        basics.init()
    index = basics.rank()
    per = compute_config.workers_per_dispatcher
    dispatcher_index = index // per
    if dispatcher_index >= compute_config.dispatchers:
        raise ValueError(
            f"compute task {index} would serve dispatcher {dispatcher_index},"
            f" but there are {compute_config.dispatchers} dispatchers of "
            f"{per} workers: the compute job has more tasks than "
            "dispatchers * workers_per_dispatcher")
    compute = compute_config.compute_client(verbose=2)
    dispatcher = None
    if compute_config.dispatcher_side == "compute" and index % per == 0:
        dispatcher = tf.data.experimental.service.DispatchServer()
        _log.info("dispatcher %d at %s", dispatcher_index, dispatcher.target)
        compute.register_dispatcher(dispatcher_index,
                                    _reachable_target(dispatcher))
    worker = None
    try:
        address = compute.wait_for_dispatcher_registration(
            dispatcher_index, compute_config.timeout)
        worker = tf.data.experimental.service.WorkerServer(
            tf.data.experimental.service.WorkerConfig(
                dispatcher_address=address.split("://", 1)[-1],
                worker_address=f"{_host_address()}:%port%",
                heartbeat_interval_ms=1000,
                dispatcher_timeout_ms=(timeout * 1000 if timeout else None)))
        compute.register_worker_for_dispatcher(dispatcher_index, index)
        compute.wait_for_shutdown()
    finally:
        if worker is not None:
            _stop(worker)
        if dispatcher is not None:
            _stop(dispatcher)
