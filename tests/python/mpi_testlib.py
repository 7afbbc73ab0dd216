"""A minimal runner for test scripts launched under mpirun.

Every rank runs the module's test_* functions in name order. The first
failure prints the rank, the test and the traceback and ends the process
with status 1 at once; mpirun then stops the other ranks, so a failure never
turns into a hang in a collective the failed rank will not reach.

    from mpi_testlib import expect, run
    def test_something(tt): ...
    if __name__ == "__main__":
        run(globals(), setup=...)
"""

import os
import sys
import time
import traceback


class Failure(AssertionError):
    pass


def expect(condition, message):
    if not condition:
        raise Failure(message)


def expect_raises(exception_type, fragments, fn, *args, **kwargs):
    """Calls fn; expects exception_type whose message holds every fragment."""
    try:
        fn(*args, **kwargs)
    except exception_type as e:
        text = str(e)
        for fragment in fragments:
            expect(fragment in text,
                   f"message {text!r} does not mention {fragment!r}")
        return e
    raise Failure(f"{getattr(fn, '__name__', fn)} did not raise "
                  f"{exception_type.__name__}")


def mpi_rank():
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))


def run(namespace, setup=None, teardown=None):
    """Runs namespace's test_* functions with setup()'s result as argument."""
    rank = mpi_rank()
    tests = sorted(name for name, fn in namespace.items()
                   if name.startswith("test_") and callable(fn))
    context = setup() if setup else None
    for name in tests:
        start = time.time()
        try:
            if context is None:
                namespace[name]()
            else:
                namespace[name](context)
        except BaseException:
            sys.stdout.flush()
            sys.stderr.write(f"[rank {rank}] FAIL {name}\n")
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        print(f"[rank {rank}] ok   {name} ({time.time() - start:.2f} s)",
              flush=True)
    if teardown:
        teardown(context)
    print(f"[rank {rank}] {len(tests)} passed", flush=True)
