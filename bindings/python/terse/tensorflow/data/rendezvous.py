"""The compute service: where tf.data service dispatchers and workers find
each other, and how a training job tells the compute job to end.

Horovod's horovod.runner.common.service.compute_service, with the same
requests. One ComputeService (rank 0 of the compute job) holds, for each
dispatcher id, the dispatcher's address and the ids of the workers that
registered with it, and a shutdown flag. ComputeClient is how any process
that has the service's addresses and key reaches it:

    register_dispatcher(id, address)
    wait_for_dispatcher_registration(id, timeout) -> address
    register_worker_for_dispatcher(id, worker_id)
    wait_for_dispatcher_worker_registration(id, timeout)
    shutdown()
    wait_for_shutdown()

Transport: multiprocessing.connection over TCP, one connection per request,
each answered on a thread of its own, and only after an HMAC challenge on
the shared key (the bytes of TfDataServiceConfig.key): nothing from a peer
is unpickled before it proves the key. Requests and answers are small
pickled tuples. Errors travel back as exceptions: an id outside
[0, dispatchers), a dispatcher registered twice under different addresses
(ValueError), a wait that outlasts its timeout (TimeoutError naming what it
waited for).

Thread-safety: the service answers each connection on its own thread; its
state is guarded by one condition variable. A client may be used from any
thread (each request opens its own connection).
"""

import socket
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import (Client, Listener, answer_challenge,
                                        deliver_challenge)

# Connections the kernel queues before the service accepts them.
_BACKLOG = 128


def _interface_address(name):
    """The IPv4 address of network interface `name` (Linux: SIOCGIFADDR);
    ValueError naming the interface and those that exist when it has none."""
    import fcntl
    import struct
    known = sorted(n for _, n in socket.if_nameindex())
    if name not in known:
        raise ValueError(f"ComputeService(nics=...): no network interface "
                         f"{name!r} on this host (it has {known})")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915,  # SIOCGIFADDR
                                 struct.pack("256s", name.encode()[:15]))
        except OSError as e:
            raise ValueError(f"ComputeService(nics=...): interface {name!r} "
                             f"has no IPv4 address ({e})") from None
    return socket.inet_ntoa(packed[20:24])


def _local_addresses(port):
    """{interface-ish name: [(host, port)]}: the host's name and loopback."""
    out = {}
    try:
        host = socket.gethostbyname(socket.getfqdn())
        if host != "127.0.0.1":
            out["host"] = [(host, port)]
    except OSError:
        pass
    out["lo"] = [("127.0.0.1", port)]
    return out


class ComputeService:
    """The registry of dispatchers and workers (see the module comment).

    dispatchers, workers_per_dispatcher: positive ints. key: bytes, the
    HMAC key every client must hold. Listens on every interface at a free
    port from construction until shutdown(); addresses() says where: the
    host's address and loopback, or with nics (interface names, Horovod's)
    those interfaces' IPv4 addresses only (ValueError naming an interface
    that does not exist or has none).
    """

    def __init__(self, dispatchers, workers_per_dispatcher, key, nics=None):
        if not isinstance(dispatchers, int) or dispatchers <= 0:
            raise ValueError("The number of dispatchers must be larger than "
                             f"0: {dispatchers}")
        if (not isinstance(workers_per_dispatcher, int)
                or workers_per_dispatcher <= 0):
            raise ValueError("The number of workers per dispatcher must be "
                             f"larger than 0: {workers_per_dispatcher}")
        if not isinstance(key, bytes) or not key:
            raise ValueError("key must be non-empty bytes")
        # nics (Horovod's): the service advertises only these interfaces'
        # addresses, {name: [(address, port)]}, so clients reach it there.
        self._nics = None
        if nics is not None:
            if isinstance(nics, str):
                nics = [nics]
            self._nics = {n: _interface_address(n) for n in nics}
            if not self._nics:
                raise ValueError("ComputeService(nics=...): name at least "
                                 "one network interface, or pass None")
        self._dispatchers = dispatchers
        self._workers_per_dispatcher = workers_per_dispatcher
        self._addresses = [None] * dispatchers
        self._workers = [set() for _ in range(dispatchers)]
        self._shutdown = False
        self._cond = threading.Condition()
        # multiprocessing's default backlog is 1: with a job's worth of
        # clients connecting at once, connections overflowed the queue and
        # hung in the handshake (seen with 4 ranks).
        self._key = key
        self._listener = Listener(("0.0.0.0", 0), backlog=_BACKLOG)
        self._port = self._listener.address[1]
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name="terse-compute-service")
        self._thread.start()

    def addresses(self):
        """{name: [(host, port)]}: where clients reach this service."""
        if self._nics is not None:
            return {n: [(a, self._port)] for n, a in self._nics.items()}
        return _local_addresses(self._port)

    def shutdown(self):
        """Wakes every wait_for_shutdown() and stops listening. Idempotent."""
        with self._cond:
            if self._shutdown:
                return
            self._shutdown = True
            self._cond.notify_all()
        # Unblock accept(): connect once (its handshake fails; ignored).
        try:
            with socket.create_connection(("127.0.0.1", self._port), 5):
                pass
        except OSError:
            pass
        self._thread.join(10)
        self._listener.close()

    # The accept loop and the requests.

    def _serve(self):
        while True:
            try:
                conn = self._listener.accept()
            except OSError:
                conn = None
            with self._cond:
                if self._shutdown:
                    if conn is not None:
                        conn.close()
                    return
            if conn is not None:
                threading.Thread(target=self._answer, args=(conn,),
                                 daemon=True).start()

    def _answer(self, conn):
        try:
            # The HMAC handshake on this connection's own thread, so a slow
            # or silent client holds up no other.
            deliver_challenge(conn, self._key)
            answer_challenge(conn, self._key)
            request, args = conn.recv()
            try:
                reply = ("ok", self._handle(request, *args))
            except Exception as e:  # noqa: BLE001 (sent to the client)
                reply = ("error", e)
            conn.send(reply)
        except (OSError, EOFError, AuthenticationError):
            pass
        finally:
            conn.close()

    def _check_id(self, dispatcher_id):
        if (not isinstance(dispatcher_id, int)
                or not 0 <= dispatcher_id < self._dispatchers):
            raise IndexError("Dispatcher id must be within "
                             f"[0..{self._dispatchers - 1}]: {dispatcher_id}")

    def _wait(self, ready, timeout, what):
        with self._cond:
            if not self._cond.wait_for(ready, timeout):
                raise TimeoutError(f"Timed out waiting for {what} "
                                   f"({timeout} s)")

    def _handle(self, request, *args):
        if request == "register_dispatcher":
            dispatcher_id, address = args
            self._check_id(dispatcher_id)
            with self._cond:
                known = self._addresses[dispatcher_id]
                if known is not None and known != address:
                    raise ValueError(
                        f"Dispatcher with id {dispatcher_id} has already been "
                        f"registered under different address {known}: "
                        f"{address}")
                self._addresses[dispatcher_id] = address
                self._cond.notify_all()
            return None
        if request == "wait_for_dispatcher_registration":
            dispatcher_id, timeout = args
            self._check_id(dispatcher_id)
            self._wait(lambda: self._addresses[dispatcher_id] is not None,
                       timeout, f"dispatcher {dispatcher_id} to register")
            return self._addresses[dispatcher_id]
        if request == "register_worker_for_dispatcher":
            dispatcher_id, worker_id = args
            self._check_id(dispatcher_id)
            with self._cond:
                self._workers[dispatcher_id].add(worker_id)
                self._cond.notify_all()
            return None
        if request == "wait_for_dispatcher_worker_registration":
            dispatcher_id, timeout = args
            self._check_id(dispatcher_id)
            # One dispatcher serves every training task: wait for it.
            if self._dispatchers == 1:
                dispatcher_id = 0
            want = self._workers_per_dispatcher
            self._wait(lambda: len(self._workers[dispatcher_id]) >= want,
                       timeout, f"{want} workers for dispatcher "
                       f"{dispatcher_id} to register")
            return None
        if request == "shutdown":
            threading.Thread(target=self.shutdown, daemon=True).start()
            return None
        if request == "wait_for_shutdown":
            self._wait(lambda: self._shutdown, None, "shutdown")
            return None
        raise ValueError(f"unknown compute service request {request!r}")


class ComputeClient:
    """Sends requests to a ComputeService at `compute_addresses` (as its
    addresses()) with `key`. Each call blocks until the service answers and
    raises what the service raised; OSError/ConnectionError when no address
    answers."""

    def __init__(self, compute_addresses, key, verbose=1):
        self._addresses = [tuple(a) for addrs in compute_addresses.values()
                           for a in addrs]
        if not self._addresses:
            raise ValueError("compute_addresses holds no address")
        self._key = key
        self._verbose = verbose

    def _send(self, request, *args):
        errors = []
        for address in self._addresses:
            try:
                conn = Client(address, authkey=self._key)
            except OSError as e:
                errors.append(f"{address[0]}:{address[1]}: {e}")
                continue
            try:
                conn.send((request, args))
                status, value = conn.recv()
            finally:
                conn.close()
            if status == "error":
                raise value
            return value
        raise ConnectionError("no address of the compute service answers: "
                              + "; ".join(errors))

    def register_dispatcher(self, dispatcher_id, dispatcher_address):
        self._send("register_dispatcher", dispatcher_id, dispatcher_address)

    def wait_for_dispatcher_registration(self, dispatcher_id, timeout):
        return self._send("wait_for_dispatcher_registration", dispatcher_id,
                          timeout)

    def register_worker_for_dispatcher(self, dispatcher_id, worker_id):
        self._send("register_worker_for_dispatcher", dispatcher_id, worker_id)

    def wait_for_dispatcher_worker_registration(self, dispatcher_id, timeout):
        self._send("wait_for_dispatcher_worker_registration", dispatcher_id,
                   timeout)

    def shutdown(self):
        self._send("shutdown")

    def wait_for_shutdown(self):
        self._send("wait_for_shutdown")
