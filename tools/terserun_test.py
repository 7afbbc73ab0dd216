"""terserun builds the mpirun command a user expects."""

import argparse
import importlib.machinery
import importlib.util
import os
import unittest

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "terserun")
_loader = importlib.machinery.SourceFileLoader("terserun", _PATH)
_spec = importlib.util.spec_from_loader("terserun", _loader)
terserun = importlib.util.module_from_spec(_spec)
_loader.exec_module(terserun)


def command(np=4, hosts=None, hostfile=None, mpi_args="", environ=None,
            euid=1000, cores=2, program=("python", "train.py")):
    args = argparse.Namespace(np=np, hosts=hosts, hostfile=hostfile,
                              mpi_args=mpi_args, command=list(program))
    return terserun.build_command(args, environ or {}, euid, cores)


def has(cmd, *seq):
    n = len(seq)
    return any(tuple(cmd[i:i + n]) == seq for i in range(len(cmd) - n + 1))


class TerserunTest(unittest.TestCase):

    def test_local_defaults(self):
        cmd = command(environ={"TERSE_CF": "10", "TERSE_COMPRESSION": "topk",
                               "PYTHONPATH": "/x", "HOME": "/root"})
        self.assertEqual(cmd[:3], ["mpirun", "-np", "4"])
        self.assertEqual(cmd[-2:], ["python", "train.py"])
        self.assertTrue(has(cmd, "--bind-to", "none"))
        self.assertTrue(has(cmd, "--oversubscribe"))  # 4 ranks, 2 cores.
        self.assertTrue(has(cmd, "--mca", "btl", "self,vader,tcp"))
        self.assertTrue(has(cmd, "--mca", "btl_tcp_if_include", "lo"))
        self.assertTrue(has(cmd, "--mca", "oob_tcp_if_include", "lo"))
        for name in ("TERSE_CF", "TERSE_COMPRESSION", "PYTHONPATH"):
            self.assertTrue(has(cmd, "-x", name), name)
        self.assertFalse(has(cmd, "-x", "HOME"))
        self.assertNotIn("--allow-run-as-root", cmd)

    def test_root_and_enough_cores(self):
        cmd = command(euid=0, cores=8)
        self.assertIn("--allow-run-as-root", cmd)
        self.assertNotIn("--oversubscribe", cmd)

    def test_remote_hosts_use_the_network(self):
        cmd = command(np=8, hosts="node1:4,node2:4")
        self.assertTrue(has(cmd, "-H", "node1:4,node2:4"))
        self.assertTrue(has(cmd, "--bind-to", "none"))
        self.assertNotIn("btl_tcp_if_include", cmd)
        self.assertNotIn("--oversubscribe", cmd)

    def test_localhost_list_is_local(self):
        cmd = command(hosts="localhost:4")
        self.assertTrue(has(cmd, "--mca", "btl_tcp_if_include", "lo"))

    def test_bad_host_list(self):
        with self.assertRaisesRegex(ValueError, "bad slot count"):
            command(hosts="node1:x")

    def test_mpi_args_come_last_before_the_program(self):
        cmd = command(mpi_args="--mca btl_tcp_if_include eth1 -x FOO")
        self.assertEqual(cmd[-7:], ["--mca", "btl_tcp_if_include", "eth1",
                                    "-x", "FOO", "python", "train.py"])

    def test_dry_run_prints_and_runs_nothing(self):
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = terserun.main(["--dry-run", "-np", "2", "--", "prog", "-H"])
        self.assertEqual(rc, 0)
        self.assertTrue(out.getvalue().startswith("mpirun -np 2 "))
        self.assertTrue(out.getvalue().rstrip().endswith("prog -H"))


if __name__ == "__main__":
    unittest.main()
