"""terse.tensorflow.data (Horovod's horovod.tensorflow.data) under mpirun.

Every rank is both a compute task (compute_worker.main on a thread: rank 0
starts the compute service and writes the config file, every rank runs a
tf.data worker) and a training task (reads the config file, moves its
dataset to the service). The references are the datasets' elements
computed with numpy:
  - dispatchers on the compute side, a job per training task: each rank
    reads its whole dataset (its own map of range(n)), in some order;
  - one shared job (reuse_dataset): every element of the dataset is read
    by exactly one rank (the ranks' lists, gathered, are range(n) mapped);
  - dispatchers on the training side (one per training task):
    tf_data_service yields the task's own dispatcher, which has its worker;
    send_to_data_service refuses that side, as Horovod;
  - the compute service's requests and errors (bad ids, a second address,
    a timeout, a wrong key) on a service of this rank's own, with a silent
    peer connected that must hold up nothing.
"""

import multiprocessing
import os
import socket
import tempfile
import threading

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
from mpi_testlib import expect, expect_raises, run
from terse.tensorflow.data import compute_worker
from terse.tensorflow.data.compute_service import (TfDataServiceConfig,
                                                   send_to_data_service,
                                                   tf_data_service)
from terse.tensorflow.data.rendezvous import ComputeClient, ComputeService

N = 40


def shared_dir():
    """A directory every rank (one host) sees: rank 0's, broadcast."""
    path = tempfile.mkdtemp(prefix="terse_tf_data_") if terse.rank() == 0 \
        else None
    return terse.broadcast_object(path, root_rank=0, name="tf_data.dir")


def start_compute_job(configfile, dispatchers, side):
    """This rank's compute task on a thread; returns the thread."""
    errors = []

    def body():
        try:
            compute_worker.main(dispatchers, side, configfile, timeout=60)
        except BaseException as e:  # noqa: BLE001 (reported by the test)
            errors.append(e)

    thread = threading.Thread(target=body, daemon=True)
    thread.errors = errors
    thread.start()
    return thread


def end_compute_job(config, thread):
    terse.barrier()
    if terse.rank() == 0:
        config.compute_client().shutdown()
    thread.join(60)
    expect(not thread.is_alive(), "the compute task ends after shutdown()")
    expect(not thread.errors, f"compute task: {thread.errors}")


def elements(dataset):
    return sorted(int(x) for x in dataset)


def test_compute_side_dispatcher(_):
    size, rank = terse.size(), terse.rank()
    configfile = os.path.join(shared_dir(), "compute.json")
    thread = start_compute_job(configfile, 1, "compute")
    config = TfDataServiceConfig.read(configfile,
                                      wait_for_file_creation=True)
    expect(config.workers_per_dispatcher == size and config.dispatchers == 1,
           f"config: {config}")

    # A job per training task: each rank reads all of its own dataset.
    own = tf.data.Dataset.range(N).map(lambda x: 3 * x + rank)
    got = elements(own.send_to_data_service(config, rank, size))
    want = sorted((3 * np.arange(N) + rank).tolist())
    expect(got == want, f"own job: {got} != {want}")

    # One shared job: every element read by exactly one rank.
    shared = tf.data.Dataset.range(N).map(lambda x: x * x)
    mine = elements(send_to_data_service(shared, config, rank, size,
                                         reuse_dataset=True))
    everyone = sorted(sum(terse.allgather_object(mine, name="tf_data.mine"),
                          []))
    want = sorted((np.arange(N) ** 2).tolist())
    expect(everyone == want, f"shared job: {everyone} != {want}")
    expect_raises(ValueError, ["round_robin needs reuse_dataset"],
                  send_to_data_service, shared, config, rank,
                  round_robin=True)
    end_compute_job(config, thread)


def test_training_side_dispatcher(_):
    size, rank = terse.size(), terse.rank()
    configfile = os.path.join(shared_dir(), "training.json")
    thread = start_compute_job(configfile, size, "training")
    config = TfDataServiceConfig.read(configfile,
                                      wait_for_file_creation=True)
    expect(config.workers_per_dispatcher == 1, f"config: {config}")
    expect_raises(RuntimeError, ["training side dispatcher not support"],
                  send_to_data_service, tf.data.Dataset.range(2), config,
                  rank)
    with tf_data_service(config, rank) as dispatcher:
        dataset = tf.data.Dataset.range(N).map(lambda x: x + 100 * rank)
        dataset = dataset.apply(tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=dispatcher))
        got = elements(dataset)
    want = list(range(100 * rank, 100 * rank + N))
    expect(got == want, f"training-side dispatcher: {got} != {want}")
    end_compute_job(config, thread)


def test_compute_service_requests(_):
    key = os.urandom(16)
    service = ComputeService(2, 2, key)
    client = ComputeClient(service.addresses(), key)
    # A peer that connects and says nothing holds up no request (before,
    # the handshake ran on the accept loop: this would hang to the mpirun
    # timeout).
    host, port = service.addresses()["lo"][0]
    silent = socket.create_connection((host, port))
    try:
        client.register_dispatcher(1, "grpc://a:1")
        client.register_dispatcher(1, "grpc://a:1")  # the same: accepted
        expect(client.wait_for_dispatcher_registration(1, 5) == "grpc://a:1",
               "the registered address")
        expect_raises(ValueError, ["already been registered",
                                   "grpc://a:1", "grpc://b:2"],
                      client.register_dispatcher, 1, "grpc://b:2")
        expect_raises(IndexError, ["within [0..1]", "2"],
                      client.register_dispatcher, 2, "grpc://a:1")
        expect_raises(TimeoutError, ["dispatcher 0 to register"],
                      client.wait_for_dispatcher_registration, 0, 0.2)
        client.register_worker_for_dispatcher(1, 7)
        expect_raises(TimeoutError, ["2 workers for dispatcher 1"],
                      client.wait_for_dispatcher_worker_registration, 1, 0.2)
        client.register_worker_for_dispatcher(1, 8)
        client.wait_for_dispatcher_worker_registration(1, 5)
        wrong = ComputeClient(service.addresses(), b"not the key")
        expect_raises(multiprocessing.AuthenticationError, [],
                      wrong.register_dispatcher, 0, "grpc://c:3")
        expect_raises(TimeoutError, ["dispatcher 0"],
                      client.wait_for_dispatcher_registration, 0, 0.1)
        waiter = threading.Thread(target=client.wait_for_shutdown)
        waiter.start()
        client.shutdown()
        waiter.join(30)
        expect(not waiter.is_alive(), "wait_for_shutdown returns")
    finally:
        silent.close()
        service.shutdown()
    expect_raises(ValueError, ["dispatchers must be larger than 0"],
                  ComputeService, 0, 1, key)
    # nics: only the named interfaces' addresses are advertised, and they
    # answer.
    lo = ComputeService(1, 1, key, nics=["lo"])
    try:
        addresses = lo.addresses()
        expect(list(addresses) == ["lo"] and
               addresses["lo"][0][0] == "127.0.0.1", f"nics: {addresses}")
        ComputeClient(addresses, key).register_dispatcher(0, "grpc://l:1")
        expect(ComputeClient(addresses, key).wait_for_dispatcher_registration(
            0, 5) == "grpc://l:1", "registered through the nic's address")
    finally:
        lo.shutdown()
    expect_raises(ValueError, ["no network interface", "'no-such-nic'"],
                  ComputeService, 1, 1, key, nics=["no-such-nic"])
    expect_raises(ValueError, ["dispatcher_side"], TfDataServiceConfig,
                  1, 1, "elsewhere", {}, key)


def test_config_round_trip(_):
    config = TfDataServiceConfig(
        dispatchers=2, workers_per_dispatcher=3, dispatcher_side="compute",
        addresses={"lo": [("127.0.0.1", 1234)]}, key=b"\x00\xffkey",
        timeout=7)
    again = TfDataServiceConfig.from_dict(config.to_dict())
    expect(again == config, f"{again} != {config}")
    path = os.path.join(tempfile.mkdtemp(), "c.json")
    config.write(path)
    expect(TfDataServiceConfig.read(path) == config, "file round trip")
    expect_raises(ValueError, ["lacks", "key"], TfDataServiceConfig.from_dict,
                  {"dispatchers": 1, "workers_per_dispatcher": 1,
                   "dispatcher_side": "compute", "addresses": {}})


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
