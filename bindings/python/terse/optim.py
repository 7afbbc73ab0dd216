"""Full-matrix preconditioned optimizers: M-FAC, EFCP (sparse M-FAC with
error feedback), GGT and sparse GGT, as torch.optim.Optimizers.

    opt = terse.optim.SparseMFAC(model.parameters(), lr=1e-3, m=256,
                                 density=0.01)
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

Each optimizer treats ALL parameters of all its groups as one flat float32
vector w of length d (in group order, then parameter order) and keeps one
preconditioner over it (DESIGN §6, the C++ classes in efcp/). A step with
gradient g (a parameter without .grad counts as zeros):

    u = P(g)                                  the preconditioned direction
    momentum > 0: buf = u on the first step, else buf = mu*buf + (1-damp)*u;
                  u = nesterov ? u + mu*buf : buf          (as torch SGD)
    wd_mode='lr':    w <- (1 - lr*wd) * w - lr * u
    wd_mode='plain': w <- (1 - wd) * w - lr * u

so with lr=1, no momentum and no weight decay one step moves w by exactly
-u. P is
  * MFAC:       u = F^-1 g, F = damp*I + (1/m) sum of the last m g g^T;
  * SparseMFAC: a = e + g, c = top-k(a) (k = density*d), e = a - c;
                the window holds the last m c's; u = F^-1 c;
  * GGT:        u = (eps*I + (G^T G)^{1/2})^-1 v over the last `window`
                gradients G (row of age a weighted by beta2^a), with
                v = g (beta1 = 0) or v <- beta1*v + (1-beta1)*g;
  * SparseGGT:  GGT over the error-feedback top-k window, v = c when
                beta1 = 0.

Requirements and limits: parameters are dense float32 CPU tensors; every
param group must hold the same hyper-parameter values (the preconditioner
spans all of them; change lr in every group alike, as LR schedulers do);
no param groups can be added after construction. A NaN/Inf gradient raises
ValueError naming the parameter and changes nothing.

Distributed: wrap with terse.torch.DistributedOptimizer; each rank then
steps with the same averaged gradient, so every rank keeps an identical
preconditioner and identical parameters.

Checkpoints: state_dict()['efcp'] holds the preconditioner's state (window,
error buffer, Gram matrix, momentum, step count) as bytes; load_state_dict()
restores it, after which training continues exactly as it would have.
memory() / memory_bytes() report what the optimizer holds.
"""

import math

import torch

from terse._native import efcp as _efcp_lib

_STATE_KEY = "efcp"
_STATE_VERSION = 1
_STORAGES = ("u32_fp32", "block16_bf16")
_WD_MODES = ("lr", "plain")


def _check(condition, message):
    if not condition:
        raise ValueError(message)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value):
    return isinstance(value, (int, float)) and math.isfinite(value)


class _FlatPreconditioned(torch.optim.Optimizer):
    """The shared machinery; subclasses name the preconditioner.

    Subclasses set _STRUCTURAL (hyper-parameters fixed at construction: the
    preconditioner's shape and constants) and implement
    _make_preconditioner(lib, dim, settings) and _step_options(settings).
    """

    _STRUCTURAL = ()

    def __init__(self, params, defaults):
        self._efcp = None
        # torch may add entries of its own to self.defaults later.
        self._efcp_keys = tuple(defaults)
        super().__init__(params, defaults)
        self._efcp_params = [p for group in self.param_groups
                             for p in group["params"]]
        for i, p in enumerate(self._efcp_params):
            if p.dtype != torch.float32 or p.device.type != "cpu" or \
                    p.layout != torch.strided:
                raise TypeError(
                    f"{type(self).__name__}: parameter {i} is "
                    f"{p.dtype} {p.layout} on {p.device}; terse.optim "
                    "needs dense float32 CPU parameters")
        self._efcp_dim = sum(p.numel() for p in self._efcp_params)
        _check(self._efcp_dim > 0,
               f"{type(self).__name__}: the parameters hold no elements")
        settings = self._settings()
        self._efcp_structure = {key: settings[key]
                                for key in self._STRUCTURAL}
        lib = _efcp_lib()
        options = self._step_options(settings)
        try:
            preconditioner = self._make_preconditioner(lib, self._efcp_dim,
                                                       settings)
            self._efcp = lib.Optimizer(preconditioner, *options)
        except ValueError as e:
            raise ValueError(f"{type(self).__name__}: {e}") from None
        self._efcp_options = options
        self._efcp_flat_params = torch.empty(self._efcp_dim,
                                             dtype=torch.float32)
        self._efcp_flat_grad = torch.empty(self._efcp_dim,
                                           dtype=torch.float32)

    def add_param_group(self, param_group):
        if getattr(self, "_efcp", None) is not None:
            raise ValueError(
                f"{type(self).__name__}: parameter groups cannot be added "
                "after construction (one preconditioner spans a fixed set "
                "of parameters); pass all groups to the constructor")
        super().add_param_group(param_group)

    def _settings(self):
        """The groups' common hyper-parameters; ValueError if they differ
        or a structural one changed since construction."""
        first = self.param_groups[0]
        for key in self._efcp_keys:
            for i, group in enumerate(self.param_groups[1:], start=1):
                if group[key] != first[key]:
                    raise ValueError(
                        f"{type(self).__name__}: param group {i} has "
                        f"{key}={group[key]!r}, group 0 {first[key]!r}; "
                        "one preconditioner spans all groups, so every "
                        "group needs the same value")
        structure = getattr(self, "_efcp_structure", None)
        if structure is not None:
            for key, value in structure.items():
                if first[key] != value:
                    raise ValueError(
                        f"{type(self).__name__}: {key} is fixed at "
                        f"construction ({value!r}), got {first[key]!r}")
        return {key: first[key] for key in self._efcp_keys}

    def _make_preconditioner(self, lib, dim, settings):
        raise NotImplementedError

    def _step_options(self, settings):
        """(lr, momentum, dampening, nesterov, weight_decay, wd_mode)."""
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        options = self._step_options(self._settings())
        if options != self._efcp_options:
            try:
                self._efcp.set_options(*options)
            except ValueError as e:
                raise ValueError(f"{type(self).__name__}: {e}") from None
            self._efcp_options = options
        flat_p, flat_g = self._efcp_flat_params, self._efcp_flat_grad
        offset = 0
        for p in self._efcp_params:
            n = p.numel()
            flat_p[offset:offset + n].copy_(p.reshape(-1))
            if p.grad is None:
                flat_g[offset:offset + n].zero_()
            else:
                if p.grad.is_sparse:
                    raise TypeError(f"{type(self).__name__}: sparse "
                                    "gradients are not supported")
                flat_g[offset:offset + n].copy_(p.grad.reshape(-1))
            offset += n
        try:
            self._efcp.step(flat_p.data_ptr(), flat_g.data_ptr(),
                            self._efcp_dim)
        except ValueError as e:
            raise ValueError(self._explain(e)) from None
        offset = 0
        for p in self._efcp_params:
            n = p.numel()
            p.copy_(flat_p[offset:offset + n].view_as(p))
            offset += n
        return loss

    def _explain(self, error):
        """The step error, with the parameter holding a bad gradient."""
        for i, p in enumerate(self._efcp_params):
            if p.grad is not None and not torch.isfinite(p.grad).all():
                return (f"{type(self).__name__}: the gradient of parameter "
                        f"{i} (shape {tuple(p.shape)}) holds NaN or Inf; "
                        f"nothing was changed ({error})")
        return f"{type(self).__name__}: {error}"

    @property
    def dim(self):
        """d: the number of parameters the preconditioner spans."""
        return self._efcp_dim

    @property
    def efcp_steps(self):
        """Steps taken (restored by load_state_dict)."""
        return self._efcp.steps

    def memory(self):
        """Bytes held: 'window' (gradient history), 'error' (error-feedback
        buffer), 'small' (m x m matrices), 'scratch' (momentum, update and
        the flat parameter/gradient buffers), 'total'."""
        usage = dict(self._efcp.memory())
        usage["scratch"] += 2 * 4 * self._efcp_dim
        usage["total"] += 2 * 4 * self._efcp_dim
        return usage

    def memory_bytes(self):
        return self.memory()["total"]

    def state_dict(self):
        state = super().state_dict()
        state[_STATE_KEY] = {
            "version": _STATE_VERSION,
            "kind": self._efcp.name,
            "dim": self._efcp_dim,
            "blob": self._efcp.save_state(),
        }
        return state

    def load_state_dict(self, state_dict):
        """Restores the hyper-parameters and the preconditioner's state.

        All or nothing: a state of another kind, dimension or structure
        (m, window, density, storage, ...) raises ValueError and changes
        nothing.
        """
        name = type(self).__name__
        state_dict = dict(state_dict)
        saved = state_dict.pop(_STATE_KEY, None)
        _check(saved is not None,
               f"{name}: state_dict has no '{_STATE_KEY}' entry (not saved "
               "by a terse.optim optimizer)")
        _check(saved.get("version") == _STATE_VERSION,
               f"{name}: state version {saved.get('version')!r}, this terse "
               f"reads {_STATE_VERSION}")
        _check(saved.get("kind") == self._efcp.name and
               saved.get("dim") == self._efcp_dim,
               f"{name}: state of a {saved.get('kind')} optimizer over "
               f"{saved.get('dim')} parameters, this is a {self._efcp.name} "
               f"over {self._efcp_dim}")
        groups = state_dict.get("param_groups", [])
        _check(len(groups) == len(self.param_groups) and all(
            len(g["params"]) == len(h["params"])
            for g, h in zip(groups, self.param_groups)),
            f"{name}: the saved parameter groups do not match this "
            "optimizer's")
        for group in groups:
            for key, value in self._efcp_structure.items():
                _check(group.get(key) == value,
                       f"{name}: state saved with {key}={group.get(key)!r},"
                       f" this optimizer has {value!r}")
        try:
            self._efcp.restore_state(saved["blob"])
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        super().load_state_dict(state_dict)
        # The (restored) groups' options apply from the next step.
        self._efcp_options = None


class MFAC(_FlatPreconditioned):
    """M-FAC (Frantar et al., 2021): the inverse of the empirical Fisher of
    the last m gradients, damp*I + (1/m) G^T G, applied to the gradient.

    Window memory: m*d*4 bytes. dampening and nesterov act on momentum as
    in torch.optim.SGD; wd_mode 'lr' decays by lr*weight_decay, 'plain' by
    weight_decay.
    """

    _STRUCTURAL = ("damp", "m")

    def __init__(self, params, lr=1e-3, damp=1e-4, m=1024, weight_decay=0.0,
                 momentum=0.0, wd_mode="lr", dampening=0.0, nesterov=False):
        _check(_is_int(m) and m >= 1, f"MFAC: m must be an int >= 1, got "
               f"{m!r}")
        _check_common("MFAC", lr, damp, "damp", weight_decay, wd_mode,
                      momentum, dampening)
        super().__init__(params, dict(
            lr=lr, damp=damp, m=m, weight_decay=weight_decay,
            momentum=momentum, wd_mode=wd_mode, dampening=dampening,
            nesterov=nesterov))

    def _make_preconditioner(self, lib, dim, s):
        return lib.dense_mfac(dim, s["m"], s["damp"])

    def _step_options(self, s):
        return (float(s["lr"]), float(s["momentum"]), float(s["dampening"]),
                bool(s["nesterov"]), float(s["weight_decay"]), s["wd_mode"])


class SparseMFAC(MFAC):
    """EFCP (Modoranu et al., ICML 2024): M-FAC over a window of the top-k
    entries (k = floor(density*d), at least 1) of the error-corrected
    gradient, with error feedback.

    storage 'u32_fp32': 32-bit indices + fp32 values (8 bytes per kept
    entry); 'block16_bf16': block-relative 16-bit indices + bf16 values
    (4 bytes per slot, k slots a row and nothing else: <= 1% of the dense
    window at density 1%; a slot is an entry or, rarely, a block marker,
    and an entry a row has no slot for stays in the error buffer).
    """

    _STRUCTURAL = ("damp", "m", "density", "storage")

    def __init__(self, params, lr=1e-3, damp=1e-4, m=1024, density=0.01,
                 storage="u32_fp32", weight_decay=0.0, momentum=0.0,
                 wd_mode="lr", dampening=0.0, nesterov=False):
        _check(_is_int(m) and m >= 1, f"SparseMFAC: m must be an int >= 1, "
               f"got {m!r}")
        _check_density("SparseMFAC", density, storage)
        _check_common("SparseMFAC", lr, damp, "damp", weight_decay, wd_mode,
                      momentum, dampening)
        _FlatPreconditioned.__init__(self, params, dict(
            lr=lr, damp=damp, m=m, density=density, storage=storage,
            weight_decay=weight_decay, momentum=momentum, wd_mode=wd_mode,
            dampening=dampening, nesterov=nesterov))

    def _make_preconditioner(self, lib, dim, s):
        return lib.sparse_mfac(dim, s["m"], s["damp"], s["density"],
                               s["storage"])


class GGT(_FlatPreconditioned):
    """GGT (Agarwal et al., 2019): (eps*I + (G^T G)^{1/2})^-1 over a window
    of the last `window` gradients, through the window x window Gram
    matrix's eigendecomposition (O(window^3) per step).

    beta1 > 0 preconditions the moving average v = beta1*v + (1-beta1)*g
    (costs one more pass over the window); beta2 < 1 weights the gradient of
    age a by beta2^a. weight_decay/wd_mode as in MFAC (decoupled).
    """

    _STRUCTURAL = ("window", "eps", "beta1", "beta2")

    def __init__(self, params, lr, window=100, eps=1e-5, beta1=0.0,
                 beta2=1.0, weight_decay=0.0, wd_mode="lr"):
        _check_ggt("GGT", window, beta1, beta2)
        _check_common("GGT", lr, eps, "eps", weight_decay, wd_mode, 0.0, 0.0)
        super().__init__(params, dict(
            lr=lr, window=window, eps=eps, beta1=beta1, beta2=beta2,
            weight_decay=weight_decay, wd_mode=wd_mode))

    def _make_preconditioner(self, lib, dim, s):
        return lib.ggt(dim, s["window"], s["eps"], s["beta1"], s["beta2"])

    def _step_options(self, s):
        return (float(s["lr"]), 0.0, 0.0, False, float(s["weight_decay"]),
                s["wd_mode"])


class SparseGGT(GGT):
    """GGT over an error-feedback top-k window (as SparseMFAC): the
    direction preconditions the kept part c of e + g (or, with beta1 > 0,
    the moving average of the gradients)."""

    _STRUCTURAL = ("window", "eps", "beta1", "beta2", "density", "storage")

    def __init__(self, params, lr, window=100, eps=1e-5, beta1=0.0,
                 beta2=1.0, density=0.01, storage="u32_fp32",
                 weight_decay=0.0, wd_mode="lr"):
        _check_ggt("SparseGGT", window, beta1, beta2)
        _check_density("SparseGGT", density, storage)
        _check_common("SparseGGT", lr, eps, "eps", weight_decay, wd_mode,
                      0.0, 0.0)
        _FlatPreconditioned.__init__(self, params, dict(
            lr=lr, window=window, eps=eps, beta1=beta1, beta2=beta2,
            density=density, storage=storage, weight_decay=weight_decay,
            wd_mode=wd_mode))

    def _make_preconditioner(self, lib, dim, s):
        return lib.sparse_ggt(dim, s["window"], s["eps"], s["density"],
                              s["storage"], s["beta1"], s["beta2"])


def _check_common(name, lr, damping, damping_name, weight_decay, wd_mode,
                  momentum, dampening):
    _check(_finite(lr) and lr >= 0, f"{name}: lr must be finite and >= 0, "
           f"got {lr!r}")
    _check(_finite(damping) and damping > 0,
           f"{name}: {damping_name} must be finite and > 0, got "
           f"{damping!r}")
    _check(_finite(weight_decay) and weight_decay >= 0,
           f"{name}: weight_decay must be finite and >= 0, got "
           f"{weight_decay!r}")
    _check(wd_mode in _WD_MODES, f"{name}: wd_mode must be one of "
           f"{_WD_MODES}, got {wd_mode!r}")
    _check(_finite(momentum) and 0 <= momentum < 1,
           f"{name}: momentum must be in [0, 1), got {momentum!r}")
    _check(_finite(dampening) and 0 <= dampening <= 1,
           f"{name}: dampening must be in [0, 1], got {dampening!r}")


def _check_density(name, density, storage):
    _check(_finite(density) and 0 < density <= 1,
           f"{name}: density must be in (0, 1], got {density!r}")
    _check(storage in _STORAGES, f"{name}: storage must be one of "
           f"{_STORAGES}, got {storage!r}")


def _check_ggt(name, window, beta1, beta2):
    _check(_is_int(window) and window >= 1,
           f"{name}: window must be an int >= 1, got {window!r}")
    _check(_finite(beta1) and 0 <= beta1 < 1,
           f"{name}: beta1 must be in [0, 1), got {beta1!r}")
    _check(_finite(beta2) and 0 <= beta2 <= 1,
           f"{name}: beta2 must be in [0, 1], got {beta2!r}")


__all__ = ["MFAC", "SparseMFAC", "GGT", "SparseGGT"]
