"""Session 17: what one Python allreduce_async_ call costs, piece by piece
(one rank, nothing to wait for). Run from the repository root:
    mpirun -np 1 --bind-to none /usr/bin/python3 \
        docs/results/engine_speed/session17/py_call_costs.py
Printed on 2026-12-05 (07:2x UTC): device.type 296 ns, is_cpu 47,
is_contiguous 60, data_ptr 58, numel 55, list(shape) 120, dtype lookup 71,
is_initialized 111, isinstance 35; enqueue 3.51 us/tensor, synchronize
0.75; the native call alone 1.89 us (wait 0.55); the handle table's add
and pop 0.57 us."""
import sys, time, torch
sys.path[:0] = ['bindings/python', 'bazel-bin/bindings/python']
import terse.torch as hvd
_native = hvd.ops._native
hvd.init()
torch.set_num_threads(1)
ts = [torch.zeros(16) for _ in range(1000)]
names = [f"t{i}" for i in range(1000)]
def bench(label, fn, n=20000):
    t = ts[0]
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n): fn(t)
        best = min(best, (time.perf_counter() - t0) / n)
    print(f"{label:40s} {best*1e9:8.0f} ns")
bench("device.type == cpu", lambda t: t.device.type == "cpu")
bench("is_cpu", lambda t: t.is_cpu)
bench("is_contiguous", lambda t: t.is_contiguous())
bench("data_ptr", lambda t: t.data_ptr())
bench("numel", lambda t: t.numel())
bench("list(shape)", lambda t: list(t.shape))
bench("dtype lookup", lambda t: hvd.ops._FAST_CODES.get(t.dtype))
bench("is_initialized", lambda t: _native.is_initialized())
bench("isinstance", lambda t: isinstance(t, torch.Tensor))
# full enqueue+sync
def step():
    hs = [hvd.allreduce_async_(t, name=n, op=hvd.Sum) for t, n in zip(ts, names)]
    t1 = time.perf_counter()
    for h in hs: hvd.synchronize(h)
    return t1
for _ in range(3): step()
es, ss = [], []
for _ in range(30):
    t0 = time.perf_counter(); t1 = step(); t2 = time.perf_counter()
    es.append((t1 - t0) / 1000); ss.append((t2 - t1) / 1000)
es.sort(); ss.sort()
print(f"enqueue {es[15]*1e6:.2f} us/tensor, synchronize {ss[15]*1e6:.2f} us/tensor")
ops = hvd.ops
code = ops._FAST_CODES[torch.float32]
def native_only():
    hs = []
    t0 = time.perf_counter()
    for t, n in zip(ts, names):
        p = t.data_ptr()
        hs.append(_native.allreduce_async(n, p, p, t.numel(), code, -1, list(t.shape), hvd.Sum, 1.0, 1.0, 0, "", 0))
    t1 = time.perf_counter()
    for h in hs: _native.wait(h)
    return t1 - t0, time.perf_counter() - t1
for _ in range(3): native_only()
r = sorted(native_only() for _ in range(30))
print(f"native only: enqueue {r[15][0]*1e3:.2f} us/tensor wait {r[15][1]*1e3:.2f}")
def table_only():
    t0 = time.perf_counter()
    for i, t in enumerate(ts):
        ops._table.add(i, ops._Entry((t,), lambda: t))
    for i in range(1000): ops._table.pop(i)
    return time.perf_counter() - t0
r = sorted(table_only() for _ in range(30))
print(f"table add+pop: {r[15]*1e3:.2f} us/tensor")
