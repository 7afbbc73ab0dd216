"""terse.optim (MFAC, SparseMFAC, GGT, SparseGGT) against independent
oracles: the fp64 closed forms of DESIGN §6 in numpy on small d, and the C++
preconditioners driven directly through _efcp (bit-identical steps)."""

import io
import math
import unittest

import numpy as np
import torch

import terse.optim as optim
from terse._native import efcp

D_SHAPES = [(4, 5), (7,), (3,)]  # d = 30, three tensors of a flat vector
D = 30


def make_params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=g))
            for s in D_SHAPES]


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def set_grads(params, vector):
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = vector[offset:offset + n].clone().view_as(p)
        offset += n


def random_grads(steps, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [scale * (1 + i % 3) * torch.randn(D, generator=g)
            for i in range(steps)]


def mfac_oracle(rows, m, lam, x):
    """u = (x - G^T (m lam I + G G^T)^-1 G x) / lam, fp64, G zero-padded."""
    G = np.zeros((m, len(x)))
    for i, r in enumerate(rows[-m:]):
        G[i] = r
    x = np.asarray(x, dtype=np.float64)
    K = m * lam * np.eye(m) + G @ G.T
    return (x - G.T @ np.linalg.solve(K, G @ x)) / lam


def ggt_oracle(rows, eps, x, beta2=1.0):
    """(eps I + (G^T G)^{1/2})^-1 x from the d x d eigendecomposition; the
    row of age a weighted by beta2^a."""
    d = len(x)
    M = np.zeros((d, d))
    n = len(rows)
    for i, r in enumerate(rows):
        w = beta2 ** (n - 1 - i)
        M += np.outer(w * r, w * r)
    lam, V = np.linalg.eigh(M)
    root = np.sqrt(np.clip(lam, 0, None))
    return V @ ((V.T @ np.asarray(x, np.float64)) / (eps + root))


def topk_feedback(e, g, k):
    """a = e + g (float32), c = top-k by magnitude, e = a - c."""
    a = (e + g).astype(np.float32)
    keep = np.argsort(-np.abs(a), kind="stable")[:k]
    c = np.zeros_like(a)
    c[keep] = a[keep]
    return c, a - c


def rel_err(got, want):
    got = np.asarray(got, np.float64)
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300)


def step_lr1(opt, params, grad):
    """One step; returns the parameter movement before - after."""
    before = flat(params)
    set_grads(params, grad)
    opt.step()
    return before - flat(params)


class ClosedFormTest(unittest.TestCase):
    """lr=1, no momentum/decay: the movement is u, checked in fp64."""

    def test_mfac(self):
        m, lam = 5, 0.1
        params = make_params()
        opt = optim.MFAC(params, lr=1.0, damp=lam, m=m)
        rows = []
        for i, g in enumerate(random_grads(2 * m + 2, seed=1)):
            u = step_lr1(opt, params, g)
            rows.append(g.double().numpy())
            self.assertLess(rel_err(u, mfac_oracle(rows, m, lam, rows[-1])),
                            1e-4, f"step {i}")
        self.assertEqual(opt.efcp_steps, 2 * m + 2)

    def test_sparse_mfac(self):
        m, lam, density = 4, 0.05, 0.2
        k = int(density * D)
        params = make_params()
        opt = optim.SparseMFAC(params, lr=1.0, damp=lam, m=m,
                               density=density)
        rows, e = [], np.zeros(D, np.float32)
        sum_g = np.zeros(D)
        for i, g in enumerate(random_grads(3 * m, seed=2)):
            u = step_lr1(opt, params, g)
            c, e = topk_feedback(e, g.numpy(), k)
            sum_g += g.double().numpy()
            rows.append(c.astype(np.float64))
            self.assertEqual(np.count_nonzero(c), k)
            self.assertLess(rel_err(u, mfac_oracle(rows, m, lam, rows[-1])),
                            1e-4, f"step {i}")
        # Error feedback conserves: e_T + sum c_t = sum g_t.
        np.testing.assert_allclose(e + np.sum(rows, axis=0), sum_g,
                                   atol=1e-4)

    def test_sparse_mfac_density_one_is_mfac(self):
        a_params, b_params = make_params(), make_params()
        a = optim.MFAC(a_params, lr=1.0, damp=0.1, m=4)
        b = optim.SparseMFAC(b_params, lr=1.0, damp=0.1, m=4, density=1.0)
        for g in random_grads(7, seed=3):
            ua = step_lr1(a, a_params, g)
            ub = step_lr1(b, b_params, g)
            self.assertLess(rel_err(ub, ua.double().numpy()), 1e-5)

    def test_ggt_and_beta2(self):
        for beta2 in (1.0, 0.7):
            r, eps = 4, 0.05
            params = make_params()
            opt = optim.GGT(params, lr=1.0, window=r, eps=eps, beta2=beta2)
            rows = []
            for i, g in enumerate(random_grads(2 * r + 1, seed=4)):
                u = step_lr1(opt, params, g)
                rows = (rows + [g.double().numpy()])[-r:]
                self.assertLess(
                    rel_err(u, ggt_oracle(rows, eps, rows[-1], beta2)), 1e-4,
                    f"beta2 {beta2} step {i}")

    def test_ggt_beta1_averages_the_gradient(self):
        r, eps, beta1 = 4, 0.5, 0.6
        params = make_params()
        opt = optim.GGT(params, lr=1.0, window=r, eps=eps, beta1=beta1)
        rows, v = [], np.zeros(D)
        for i, g in enumerate(random_grads(2 * r, seed=5)):
            u = step_lr1(opt, params, g)
            rows = (rows + [g.double().numpy()])[-r:]
            v = beta1 * v + (1 - beta1) * g.double().numpy()
            self.assertLess(rel_err(u, ggt_oracle(rows, eps, v)), 1e-4,
                            f"step {i}")

    def test_sparse_ggt(self):
        r, eps, density = 4, 0.05, 0.25
        k = int(density * D)
        params = make_params()
        opt = optim.SparseGGT(params, lr=1.0, window=r, eps=eps,
                              density=density)
        rows, e = [], np.zeros(D, np.float32)
        for i, g in enumerate(random_grads(2 * r + 1, seed=6)):
            u = step_lr1(opt, params, g)
            c, e = topk_feedback(e, g.numpy(), k)
            rows = (rows + [c.astype(np.float64)])[-r:]
            self.assertLess(rel_err(u, ggt_oracle(rows, eps, rows[-1])),
                            1e-4, f"step {i}")


def raw_preconditioner(kind, **kw):
    lib = efcp()
    return {
        "mfac": lambda: lib.dense_mfac(D, kw["m"], kw["damp"]),
        "sparse_mfac": lambda: lib.sparse_mfac(D, kw["m"], kw["damp"],
                                               kw["density"],
                                               kw.get("storage", "u32_fp32")),
        "ggt": lambda: lib.ggt(D, kw["window"], kw["eps"]),
        "sparse_ggt": lambda: lib.sparse_ggt(D, kw["window"], kw["eps"],
                                             kw["density"],
                                             kw.get("storage", "u32_fp32")),
    }[kind]()


def raw_step(pre, g):
    u = torch.empty(D)
    g = g.contiguous()
    pre.step(g.data_ptr(), u.data_ptr(), D)
    return u


CASES = [
    ("mfac", optim.MFAC, dict(m=4, damp=0.01)),
    ("sparse_mfac", optim.SparseMFAC, dict(m=4, damp=0.01, density=0.3)),
    ("sparse_mfac", optim.SparseMFAC,
     dict(m=4, damp=0.01, density=0.3, storage="block16_bf16")),
    ("ggt", optim.GGT, dict(window=4, eps=0.1)),
    ("sparse_ggt", optim.SparseGGT, dict(window=4, eps=0.1, density=0.3)),
]


class MatchesCppTest(unittest.TestCase):
    """The optimizer's step equals the C++ preconditioner's direction, bit
    for bit: params_after = params_before - lr * u (lr = 1 exactly -u)."""

    def test_lr_one_moves_by_exactly_minus_u(self):
        for kind, cls, kw in CASES:
            params = make_params()
            opt = cls(params, lr=1.0, **kw)
            pre = raw_preconditioner(kind, **kw)
            for g in random_grads(6, seed=7):
                before = flat(params)
                u = raw_step(pre, g)
                set_grads(params, g)
                opt.step()
                self.assertTrue(torch.equal(flat(params), before - u),
                                f"{kind} {kw}")

    def test_momentum_weight_decay_dampening(self):
        lr, mu, wd, damp = 0.1, 0.9, 0.05, 0.3
        for wd_mode in ("lr", "plain"):
            for nesterov in (False, True):
                dampening = 0.0 if nesterov else damp
                params = make_params()
                opt = optim.MFAC(params, lr=lr, damp=0.01, m=4,
                                 weight_decay=wd, momentum=mu,
                                 wd_mode=wd_mode, dampening=dampening,
                                 nesterov=nesterov)
                pre = raw_preconditioner("mfac", m=4, damp=0.01)
                w = flat(params).numpy().astype(np.float64)
                buf = None
                for g in random_grads(6, seed=8):
                    u = raw_step(pre, g).double().numpy()
                    buf = u if buf is None else \
                        mu * buf + (1 - dampening) * u
                    direction = u + mu * buf if nesterov else buf
                    decay = 1 - lr * wd if wd_mode == "lr" else 1 - wd
                    w = decay * w - lr * direction
                    set_grads(params, g)
                    opt.step()
                    np.testing.assert_allclose(
                        flat(params).numpy(), w, rtol=1e-5, atol=1e-6,
                        err_msg=f"{wd_mode} nesterov={nesterov}")

    def test_lr_change_applies_next_step(self):
        params = make_params()
        opt = optim.MFAC(params, lr=1.0, damp=0.1, m=3)
        pre = raw_preconditioner("mfac", m=3, damp=0.1)
        for i, g in enumerate(random_grads(4, seed=9)):
            lr = 1.0 if i < 2 else 0.25
            for group in opt.param_groups:
                group["lr"] = lr
            before = flat(params)
            u = raw_step(pre, g)
            set_grads(params, g)
            opt.step()
            self.assertTrue(torch.equal(flat(params), before - lr * u))

    def test_param_groups_and_missing_grads(self):
        params = make_params()
        opt = optim.MFAC([{"params": params[:1]}, {"params": params[1:]}],
                         lr=1.0, damp=0.1, m=3)
        pre = raw_preconditioner("mfac", m=3, damp=0.1)
        g = random_grads(1, seed=10)[0]
        g[20:] = 0  # params[1] and [2] get no gradient
        before = flat(params)
        set_grads(params, g)
        params[1].grad = None
        params[2].grad = None
        opt.step()
        self.assertTrue(torch.equal(flat(params),
                                    before - raw_step(pre, g)))


class StateDictTest(unittest.TestCase):

    def test_round_trip_continues_identically(self):
        for kind, cls, kw in CASES:
            extra = dict(momentum=0.5) if kind == "mfac" else {}
            a_params = make_params()
            a = cls(a_params, lr=0.3, **kw, **extra)
            grads = random_grads(12, seed=11)
            for g in grads[:6]:
                set_grads(a_params, g)
                a.step()
            buffer = io.BytesIO()
            torch.save(a.state_dict(), buffer)
            b_params = [torch.nn.Parameter(p.detach().clone())
                        for p in a_params]
            b = cls(b_params, lr=0.9, **kw, **extra)  # lr comes from state
            b.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
            self.assertEqual(b.param_groups[0]["lr"], 0.3)
            self.assertEqual(b.efcp_steps, 6)
            for g in grads[6:]:
                set_grads(a_params, g)
                set_grads(b_params, g)
                a.step()
                b.step()
                self.assertTrue(torch.equal(flat(a_params), flat(b_params)),
                                f"{kind} {kw}")

    def test_mismatched_state_is_refused_and_changes_nothing(self):
        a = optim.MFAC(make_params(), lr=1.0, damp=0.1, m=4)
        set_grads(a.param_groups[0]["params"], random_grads(1, seed=12)[0])
        a.step()
        saved = a.state_dict()
        for other, fragment in [
                (optim.MFAC(make_params(), lr=1.0, damp=0.1, m=5), "m=4"),
                (optim.MFAC(make_params(), lr=1.0, damp=0.2, m=4), "damp"),
                (optim.GGT(make_params(), lr=1.0, window=4), "dense_mfac"),
                (optim.MFAC(make_params()[:2], lr=1.0, m=4, damp=0.1),
                 "over 30")]:
            with self.assertRaisesRegex(ValueError, fragment):
                other.load_state_dict(saved)
            self.assertEqual(other.efcp_steps, 0)
        corrupt = dict(saved)
        corrupt["efcp"] = dict(saved["efcp"], blob=saved["efcp"]["blob"][:-5])
        b = optim.MFAC(make_params(), lr=1.0, damp=0.1, m=4)
        with self.assertRaises(ValueError):
            b.load_state_dict(corrupt)
        self.assertEqual(b.efcp_steps, 0)
        with self.assertRaisesRegex(ValueError, "no 'efcp' entry"):
            b.load_state_dict(torch.optim.SGD(make_params(), lr=1)
                              .state_dict())


class BadInputTest(unittest.TestCase):

    def test_bad_options_name_the_problem(self):
        p = make_params()
        for make, fragment in [
                (lambda: optim.MFAC(p, m=0), "m must be"),
                (lambda: optim.MFAC(p, m=2.5), "m must be"),
                (lambda: optim.MFAC(p, damp=0.0), "damp"),
                (lambda: optim.MFAC(p, lr=-1.0), "lr"),
                (lambda: optim.MFAC(p, lr=math.nan), "lr"),
                (lambda: optim.MFAC(p, wd_mode="x"), "wd_mode"),
                (lambda: optim.MFAC(p, momentum=1.0), "momentum"),
                (lambda: optim.MFAC(p, lr=2.0, weight_decay=1.0),
                 "weight decay factor"),
                (lambda: optim.MFAC(p, nesterov=True), "nesterov"),
                (lambda: optim.SparseMFAC(p, density=0.0), "density"),
                (lambda: optim.SparseMFAC(p, density=1.5), "density"),
                (lambda: optim.SparseMFAC(p, density=math.nan), "density"),
                (lambda: optim.SparseMFAC(p, m=0), "m must be"),
                (lambda: optim.SparseMFAC(p, storage="fp8"), "storage"),
                (lambda: optim.GGT(p, lr=1.0, window=0), "window"),
                (lambda: optim.GGT(p, lr=1.0, eps=0.0), "eps"),
                (lambda: optim.GGT(p, lr=1.0, beta1=1.0), "beta1"),
                (lambda: optim.GGT(p, lr=1.0, beta2=1.5), "beta2"),
                (lambda: optim.SparseGGT(p, lr=1.0, density=2.0),
                 "density"),
                (lambda: optim.MFAC([], m=2), "empty parameter list"),
                (lambda: optim.MFAC([{"params": p[:1], "lr": 0.1},
                                     {"params": p[1:], "lr": 0.2}]),
                 "same value"),
        ]:
            with self.assertRaisesRegex(ValueError, fragment):
                make()
        with self.assertRaisesRegex(TypeError, "float32"):
            optim.MFAC([torch.nn.Parameter(torch.zeros(3,
                                                       dtype=torch.float64))])

    def test_non_finite_gradient_raises_and_changes_nothing(self):
        for kind, cls, kw in CASES:
            params = make_params()
            opt = cls(params, lr=1.0, **kw)
            pre = raw_preconditioner(kind, **kw)
            grads = random_grads(3, seed=13)
            set_grads(params, grads[0])
            opt.step()
            raw_step(pre, grads[0])
            for bad in (math.nan, math.inf):
                before = flat(params)
                g = grads[1].clone()
                g[25] = bad  # parameter 1 holds entries 20..26
                set_grads(params, g)
                with self.assertRaisesRegex(ValueError, "parameter 1"):
                    opt.step()
                self.assertTrue(torch.equal(flat(params), before))
            # The state did not change: the next good step matches.
            before = flat(params)
            set_grads(params, grads[2])
            opt.step()
            self.assertTrue(torch.equal(flat(params),
                                        before - raw_step(pre, grads[2])),
                            kind)

    def test_structure_is_fixed(self):
        params = make_params()
        opt = optim.SparseMFAC(params, m=4, density=0.5)
        with self.assertRaisesRegex(ValueError, "cannot be added"):
            opt.add_param_group({"params": [torch.nn.Parameter(
                torch.zeros(2))]})
        opt.param_groups[0]["m"] = 8
        set_grads(params, random_grads(1, seed=14)[0])
        with self.assertRaisesRegex(ValueError, "m is fixed"):
            opt.step()


class MemoryTest(unittest.TestCase):

    def test_window_memory(self):
        d, m = 100000, 8
        p = [torch.nn.Parameter(torch.zeros(d))]
        dense = optim.MFAC(p, m=m).memory()
        self.assertEqual(dense["window"], m * d * 4)
        u32 = optim.SparseMFAC(p, m=m, density=0.01).memory()
        self.assertEqual(u32["window"], m * 1000 * 8)
        self.assertLessEqual(u32["window"], 0.02 * dense["window"])
        self.assertEqual(u32["error"], d * 4)
        bf16 = optim.SparseMFAC(p, m=m, density=0.01,
                                storage="block16_bf16")
        self.assertLessEqual(bf16.memory()["window"],
                             0.011 * dense["window"])
        self.assertEqual(bf16.memory_bytes(), bf16.memory()["total"])
        mem = bf16.memory()
        self.assertEqual(mem["total"], mem["window"] + mem["error"] +
                         mem["small"] + mem["scratch"])


if __name__ == "__main__":
    unittest.main()
