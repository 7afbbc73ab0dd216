"""SyncBatchNorm: batch normalisation over the batch of every rank together.

In training, each channel's mean and variance are those of the global batch
(all ranks' samples), so the output equals a single-process BatchNorm over
the concatenated batch; the running statistics get the global mean and the
unbiased global variance. Backward allreduces the two per-channel sums the
input gradient needs; the weight and bias gradients stay this rank's own
(DistributedOptimizer then averages them, as with any parameter), exactly
as Horovod's and torch.nn.SyncBatchNorm's. In eval mode, or on one rank,
it is torch's BatchNorm.

Every rank must call forward (and backward) the same number of times in
the same order: each is a collective.
"""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from terse import basics
from terse.torch import ops


def _channel_sums(x):
    """(sum, sum of squares) over every dimension but 1, per channel."""
    dims = [d for d in range(x.dim()) if d != 1]
    return x.sum(dims), (x * x).sum(dims)


def _shape_for(x, v):
    return v.reshape([1, -1] + [1] * (x.dim() - 2))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps,
                momentum):
        x = x.contiguous()
        channels = x.shape[1]
        local_count = x.numel() // channels
        local_sum, local_sumsq = _channel_sums(x.double())
        stats = torch.cat([local_sum, local_sumsq,
                           torch.tensor([float(local_count)],
                                        dtype=torch.float64)])
        stats = ops.allreduce(stats, op=ops.Sum,
                              name=ops._table.auto_name("sync_batch_norm"))
        count = stats[-1].item()
        if count <= 1:
            raise ValueError(
                "SyncBatchNorm: expected more than 1 value per channel over "
                f"all ranks when training, got {int(count)}")
        mean = stats[:channels] / count
        var = stats[channels:2 * channels] / count - mean * mean
        var = var.clamp_min(0.0)
        invstd = 1.0 / torch.sqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(
                    (mean * momentum).to(running_mean.dtype))
                unbiased = var * count / (count - 1)
                running_var.mul_(1 - momentum).add_(
                    (unbiased * momentum).to(running_var.dtype))
        mean_x = _shape_for(x, mean.to(x.dtype))
        invstd_x = _shape_for(x, invstd.to(x.dtype))
        out = (x - mean_x) * invstd_x
        if weight is not None:
            out = out * _shape_for(x, weight) + _shape_for(x, bias)
        ctx.save_for_backward(x, weight, mean_x, invstd_x)
        ctx.count = count
        return out

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean_x, invstd_x = ctx.saved_tensors
        dy = grad_output.contiguous()
        channels = x.shape[1]
        xmu = x - mean_x
        dims = [d for d in range(x.dim()) if d != 1]
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)
        grad_weight = grad_bias = None
        if weight is not None:
            grad_weight = sum_dy_xmu * invstd_x.reshape(-1)
            grad_bias = sum_dy.clone()
        both = ops.allreduce(torch.cat([sum_dy, sum_dy_xmu]).double(),
                             op=ops.Sum,
                             name=ops._table.auto_name("sync_batch_norm"))
        mean_dy = _shape_for(x, (both[:channels] / ctx.count).to(x.dtype))
        mean_dy_xmu = _shape_for(
            x, (both[channels:] / ctx.count).to(x.dtype))
        scale = invstd_x if weight is None else invstd_x * _shape_for(x,
                                                                       weight)
        grad_input = (dy - mean_dy - xmu * invstd_x * invstd_x *
                      mean_dy_xmu) * scale
        return grad_input, grad_weight, grad_bias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Horovod's SyncBatchNorm(num_features, eps=1e-5, momentum=0.1,
    affine=True, track_running_stats=True): BatchNorm whose training
    statistics cover every rank's batch (module docstring)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine,
                         track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(
                f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        if not self.training or basics.size() == 1:
            return F.batch_norm(
                input, self.running_mean, self.running_var, self.weight,
                self.bias, self.training or not self.track_running_stats,
                momentum, self.eps)
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias,
            self.running_mean if self.track_running_stats else None,
            self.running_var if self.track_running_stats else None,
            self.eps, momentum)


__all__ = ["SyncBatchNorm"]
