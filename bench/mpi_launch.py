"""Launching one benchmark job per mode under mpirun, shared by the Python
benchmarks (torch_step_bench.py, py_allreduce_bench.py). Not a test.

Every mode of one invocation runs under the same mpirun command, so a ratio
between modes measures the libraries, not the transport:

  transport  mpirun command
  shm        tools/terserun's for one host: --bind-to none --map-by slot,
             --mca btl self,vader,tcp, TCP and OOB on lo, --oversubscribe
             with more ranks than cores (shared memory between the ranks)
  tcp        the same with --mca btl self,tcp (TCP on loopback only)
  netns      integration/netns/mpirun_netns.sh: one rank per network
             namespace, TCP over veth links (netns.sh; `netns.sh datacentre`
             gives the links a per-message delay and a rate)

With more ranks than cores OMPI_MCA_mpi_yield_when_idle=1 is set for every
mode (waiting ranks yield their core); on netns it is passed as an MCA
parameter, since there each "host" has one slot and Open MPI does not know
the namespaces share 2 cores.

Horovod runs from its own virtual environment (bench/peers/horovod.sh),
under the same mpirun command, never under horovodrun.
"""

import argparse
import json
import os
import socket
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_TAG = "BENCH_RESULT "
TRANSPORTS = ("shm", "tcp", "netns")
HOROVOD_VENV = os.environ.get("TERSE_HOROVOD_VENV", "/opt/terse-horovod-venv")
NETNS_MPIRUN = os.path.join(ROOT, "integration", "netns", "mpirun_netns.sh")
# Variables mpirun_netns.sh does not forward by itself.
_NETNS_FORWARD_PREFIXES = ("HOROVOD_", "BENCH_")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emit(result):
    """Prints one rank's result for the driver. One write per line: mpirun
    interleaves the ranks' output otherwise."""
    import sys
    sys.stdout.write(RESULT_TAG + json.dumps(result) + "\n")
    sys.stdout.flush()


def results(text):
    """Every JSON object that follows a RESULT_TAG in `text`."""
    decoder = json.JSONDecoder()
    out, start = [], text.find(RESULT_TAG)
    while start >= 0:
        try:
            obj, _ = decoder.raw_decode(text, start + len(RESULT_TAG))
            out.append(obj)
        except json.JSONDecodeError:
            pass
        start = text.find(RESULT_TAG, start + 1)
    return out


def build_terse():
    """Builds terse's Python extension (`bazel build
    //bindings/python:_terse.so`) before a benchmark imports it from
    bazel-bin, so a run never measures a binding older than the checkout.
    Exits with Bazel's output if the build fails."""
    proc = subprocess.run(["bazel", "build", "//bindings/python:_terse.so"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("bazel build //bindings/python:_terse.so failed:\n"
                         + proc.stderr[-3000:])


def terse_pythonpath():
    parts = [os.path.join(ROOT, "bindings", "python"),
             os.path.join(ROOT, "bazel-bin", "bindings", "python")]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def horovod_python():
    """The Python of Horovod's virtual environment; exits with the command
    that builds it when it is missing."""
    python = os.path.join(HOROVOD_VENV, "bin", "python")
    if not os.access(python, os.X_OK):
        raise SystemExit(
            f"Horovod's environment {HOROVOD_VENV} is missing: run "
            "bench/peers/horovod.sh (about 6 minutes), or drop the horovod "
            "modes")
    return python


def netns_hosts():
    state = os.environ.get("TERSE_NETNS_STATE", "/run/terse-netns.hosts")
    try:
        with open(state) as f:
            return [line.split()[0] for line in f if line.strip()]
    except OSError:
        return []


def check_transport(transport, np):
    if transport not in TRANSPORTS:
        raise SystemExit(f"transport {transport!r} is not one of "
                         f"{', '.join(TRANSPORTS)}")
    if transport == "netns":
        hosts = netns_hosts()
        if len(hosts) != np:
            raise SystemExit(
                f"--transport netns needs {np} namespaces, found "
                f"{len(hosts)} (integration/netns/netns.sh datacentre {np}, "
                "and the same TERSE_NETNS_* variables here)")


def describe_transport(transport):
    if transport == "shm":
        return "Open MPI btl self,vader,tcp (shared memory), OOB on lo"
    if transport == "tcp":
        return "Open MPI btl self,tcp, TCP and OOB on lo"
    return ("Open MPI btl self,tcp across network namespaces "
            "(integration/netns, one rank per namespace)")


def mpirun_command(np, transport, env):
    """The mpirun argument list (before the program) for `np` ranks."""
    cores = os.cpu_count() or 1
    if transport == "netns":
        cmd = [NETNS_MPIRUN]
        if np > cores:
            cmd += ["--mca", "mpi_yield_when_idle", "1"]
        for name in sorted(env):
            if name.startswith(_NETNS_FORWARD_PREFIXES):
                cmd += ["-x", name]
        return cmd + ["--"]
    from importlib.machinery import SourceFileLoader
    terserun = SourceFileLoader(
        "terserun", os.path.join(ROOT, "tools", "terserun")).load_module()
    launch = argparse.Namespace(np=np, hosts=None, hostfile=None,
                                mpi_args="", command=[])
    cmd = terserun.build_command(launch, env, os.geteuid(), cores)
    if transport == "tcp":
        # mpirun rejects an MCA parameter given twice, so the btl list is
        # edited rather than overridden.
        at = [i for i in range(len(cmd) - 2)
              if cmd[i] == "--mca" and cmd[i + 1] == "btl"]
        if len(at) != 1:
            raise SystemExit(f"terserun gave no single btl list: {cmd}")
        cmd[at[0] + 2] = "self,tcp"
    return cmd


def job_env(np, library, extra=None):
    """The environment of one job: `library` is 'terse', 'horovod', 'ddp' or
    'mpi'. Only terse's jobs get terse on PYTHONPATH."""
    env = dict(os.environ)
    if library in ("terse", "ddp"):
        env["PYTHONPATH"] = terse_pythonpath()
    else:
        env.pop("PYTHONPATH", None)
    if np > (os.cpu_count() or 1):
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"
    env.update(extra or {})
    return env


def run_job(np, transport, env, program, timeout):
    """Runs `program` (an argument list) as one job; returns every rank's
    result object, ordered by rank. Raises RuntimeError with the output's
    tail when the job fails or a rank reports nothing."""
    cmd = mpirun_command(np, transport, env) + list(program)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    ranks = results(proc.stdout)
    if proc.returncode != 0 or len(ranks) != np:
        raise RuntimeError(
            f"job failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return sorted(ranks, key=lambda r: r["rank"])


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return []
