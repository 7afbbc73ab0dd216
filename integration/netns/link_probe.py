"""Measures the namespace network (netns.sh) from user space: the TCP round
trip of 8-byte messages (TCP_NODELAY) and one stream's throughput between
the first two hosts, then every host streaming to the next at once (a ring,
as a ring allreduce loads the links: each host's link carries data out and
the ACKs of the data coming in). Not a test.

    integration/netns/link_probe.py      # after netns.sh up / datacentre

Needs root (ip netns exec); reads the hosts from TERSE_NETNS_STATE.
"""

import os
import socket
import statistics
import subprocess
import sys
import time

PORT = 5901
RING_PORT = 5902
ROUND_TRIPS = 2000
STREAM_MIB = 400
RING_MIB = 300


def listen(host, port):
    """A listening socket on host:port; tells the parent it is ready."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(1)
    print("listening", flush=True)
    return listener


def serve(host):
    listener = listen(host, PORT)
    for _ in range(2):
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if conn.recv(1) == b"p":
            while True:
                data = conn.recv(8)
                if not data:
                    break
                conn.sendall(data)
        else:
            while conn.recv(1 << 20):
                pass
            conn.sendall(b"x")
        conn.close()


def probe(host):
    conn = socket.create_connection((host, PORT))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.sendall(b"p")
    times = []
    for _ in range(ROUND_TRIPS):
        start = time.perf_counter()
        conn.sendall(b"12345678")
        got = b""
        while len(got) < 8:
            got += conn.recv(8 - len(got))
        times.append(time.perf_counter() - start)
    conn.close()
    times.sort()
    print(f"round trip, 8 bytes: median {statistics.median(times) * 1e6:.0f} us"
          f", p10 {times[len(times) // 10] * 1e6:.0f}, p90 "
          f"{times[9 * len(times) // 10] * 1e6:.0f} ({ROUND_TRIPS} trips)")
    conn = socket.create_connection((host, PORT))
    conn.sendall(b"t")
    print(f"one TCP stream: {stream(conn, STREAM_MIB):.0f} Mbit/s")


def stream(conn, mib):
    """Sends `mib` MiB on `conn`, waits for the receiver's byte after the
    end; returns the rate in Mbit/s."""
    block = b"\0" * (1 << 20)
    start = time.perf_counter()
    for _ in range(mib):
        conn.sendall(block)
    conn.shutdown(socket.SHUT_WR)
    conn.recv(1)
    return mib * 8 * 1.048576 / (time.perf_counter() - start)


def ring_sink(host):
    conn, _ = listen(host, RING_PORT).accept()
    buf = bytearray(1 << 20)
    while conn.recv_into(buf):
        pass
    conn.sendall(b"x")


def ring_source(host):
    conn = socket.create_connection((host, RING_PORT))
    print(f"{stream(conn, RING_MIB):.0f}", flush=True)


def ring(hosts, me):
    """Every host i streams RING_MIB to host i + 1, all at once."""
    sinks = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, me,
                               "ring_sink", addr], stdout=subprocess.PIPE,
                              text=True) for addr, ns in hosts]
    for sink in sinks:
        sink.stdout.readline()  # "listening"
    sources = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable,
                                 me, "ring_source",
                                 hosts[(i + 1) % len(hosts)][0]],
                                stdout=subprocess.PIPE, text=True)
               for i, (_, ns) in enumerate(hosts)]
    rates = [int(source.communicate(timeout=120)[0].split()[-1])
             for source in sources]
    for sink in sinks:
        sink.wait(timeout=30)
    print(f"ring of {len(hosts)} streams, host i to i + 1 at once: "
          + ", ".join(f"{r}" for r in rates) + " Mbit/s")


def main():
    if len(sys.argv) == 3:
        {"serve": serve, "probe": probe, "ring_sink": ring_sink,
         "ring_source": ring_source}[sys.argv[1]](sys.argv[2])
        return
    state = os.environ.get("TERSE_NETNS_STATE", "/run/terse-netns.hosts")
    with open(state) as f:
        hosts = [line.split() for line in f if line.strip()]
    if len(hosts) < 2:
        raise SystemExit(f"{state} lists fewer than 2 hosts")
    (_, ns0), (addr1, ns1) = hosts[0], hosts[1]
    me = os.path.abspath(__file__)
    server = subprocess.Popen(["ip", "netns", "exec", ns1, sys.executable, me,
                               "serve", addr1], stdout=subprocess.PIPE,
                              text=True)
    try:
        server.stdout.readline()  # "listening"
        subprocess.run(["ip", "netns", "exec", ns0, sys.executable, me,
                        "probe", addr1], check=True)
    finally:
        server.wait(timeout=30)
    ring(hosts, me)


if __name__ == "__main__":
    main()
