"""Adam over stacked parameters: many small models updated as one set of tensors.

Why our own: each model of a stack has its own L2 (weight decay) and leaves the stack when it
stops early, which ``torch.optim.Adam`` cannot express; the arithmetic is torch's (its fused
CPU kernel when this torch has one), so a model's trajectory equals training it alone.
"""

from __future__ import annotations

import math
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch


def _find_fused_adam() -> Optional[Callable[..., Any]]:
    """torch's fused CPU Adam op when this torch has one (>= 2.4), else None."""
    op = getattr(torch, "_fused_adam_", None)
    if op is None:
        return None
    try:  # probe once: some builds expose the op without a CPU kernel
        p, g = torch.zeros(2), torch.ones(2)
        op([p], [g], [torch.zeros(2)], [torch.zeros(2)], [], [torch.tensor(1.0)], lr=1e-3,
           beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    except (RuntimeError, TypeError, NotImplementedError):
        return None
    return op


_FUSED_ADAM = _find_fused_adam()


def _decay_in_kernel_is_exact() -> bool:
    """Whether the fused CPU kernel's own weight decay gives the bits of adding the decay to
    the gradient first (``addcmul``), checked once on random tensors whose length has a
    vector body and a scalar tail: where it does, a stack whose models share one L2 value
    hands that value to the kernel and saves a pass over the parameters and gradients
    (DC's MLP: 10 of 170 ms a step); where a build rounds them differently, the decay stays
    in the gradient and the numbers stay those of training each model alone."""
    if _FUSED_ADAM is None:
        return False
    gen = torch.Generator().manual_seed(0)
    n = 4099
    p0, g0 = torch.randn(n, generator=gen), torch.randn(n, generator=gen) * 1e-3
    out = []
    for in_kernel in (True, False):
        p, g, m, v = p0.clone(), g0.clone(), torch.zeros(n), torch.zeros(n)
        for step, decay in ((1.0, 1e-9), (2.0, 0.1), (3.0, 1e-4)):
            if not in_kernel:
                torch._foreach_addcmul_([g], [p], [torch.full((n,), decay)])
            _FUSED_ADAM([p], [g], [m], [v], [], [torch.tensor(step)], lr=1e-3, beta1=0.9,
                        beta2=0.999, weight_decay=decay if in_kernel else 0.0, eps=1e-8,
                        amsgrad=False, maximize=False)
            g = g0.clone()
        out.append((p, m, v))
    return all(torch.equal(a, b) for a, b in zip(*out))


_DECAY_IN_KERNEL = _decay_in_kernel_is_exact()


def _shared_decay(decay: Sequence[torch.Tensor]) -> Optional[float]:
    """The one L2 value of every model in a CPU stack (SentEval's ``noreg`` tasks: DC,
    NLI, SSP, RST), or None: a grid of L2 values, an empty stack or another device."""
    if not decay or any(d.device.type != "cpu" or d.numel() == 0 for d in decay):
        return None
    first = decay[0].reshape(-1)[0]
    if all(bool((d == first).all()) for d in decay):
        return float(first)
    return None


def _step_tensors(counts: Sequence[float], params: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The fused kernel's step counts, one 0-d tensor per parameter on its device.

    Why not ``torch.tensor(t, device=...)`` per parameter: on a GPU each such tensor is a
    host-to-device copy from pageable memory, which waits for the device to finish every
    step queued before it, so the host could never run ahead of the GPU (measured: a probe
    step cost 1.7 ms on an H100, most of it waiting). One pinned host buffer copied without
    blocking keeps the GPU's queue full; the values are the same floats."""
    device = params[0].device if params else torch.device("cpu")
    if device.type == "cpu":
        return [torch.tensor(c) for c in counts]
    host = torch.tensor(list(counts), dtype=torch.float32, pin_memory=True)
    return list(host.to(device, non_blocking=True).unbind(0))


class StackedAdam:
    """Adam over stacked parameters with per-model weight decay (as torch.optim.Adam does)."""

    def __init__(self, params: List[torch.Tensor], decay: List[torch.Tensor], lr: float,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params, self.decay = params, decay
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0
        #: the L2 value the fused kernel applies itself (every model has it and the kernel
        #: rounds as the gradient's ``addcmul`` does), else None: added to the gradient
        self.kernel_decay = _shared_decay(decay) if _DECAY_IN_KERNEL else None

    def _decayed(self, grads: List[torch.Tensor], params: List[torch.Tensor],
                 decay: List[torch.Tensor]) -> float:
        """Adds each model's L2 term to its gradient, as torch.optim.Adam's
        ``weight_decay`` does, unless the fused kernel applies it; returns the decay left to
        the kernel (0 when added here)."""
        if self.kernel_decay is not None:
            return self.kernel_decay
        torch._foreach_addcmul_(grads, params, decay)
        return 0.0

    def step(self, grads: List[torch.Tensor],
             segments: Optional[Sequence[Tuple[int, int]]] = None,
             steps: Optional[Sequence[int]] = None) -> None:
        """One Adam step. ``segments``: row ranges (one per seed) updated as separate tensors,
        so each seed's parameters meet exactly the kernels they meet when trained alone
        (vectorised kernels round the tail of a tensor in scalar code). ``steps``: each
        segment's own step count (streams on training subsets of different sizes take
        different numbers of steps; only the segments given are updated, ``grads`` covering
        rows up to the last one)."""
        if steps is not None:
            self._step_segments(grads, segments or [], steps)
            return
        self.t += 1
        params, decay, m, v = self.params, self.decay, self.m, self.v
        if segments is not None and len(segments) > 1:
            def split(ts: List[torch.Tensor]) -> List[torch.Tensor]:
                return [t[a:b] for t in ts for a, b in segments]
            params, decay, m, v, grads = (split(params), split(decay), split(m), split(v),
                                          split(grads))
        kernel_decay = self._decayed(grads, params, decay)
        if _FUSED_ADAM is not None:
            # torch's fused CPU Adam kernel (what torch.optim.Adam(fused=True) runs): one pass
            # over each tensor instead of nine
            step_counts = _step_tensors([float(self.t)] * len(params), params)
            _FUSED_ADAM(params, grads, m, v, [], step_counts, lr=self.lr,
                        beta1=self.b1, beta2=self.b2, weight_decay=kernel_decay,
                        eps=self.eps, amsgrad=False, maximize=False)
            return
        bc1 = 1.0 - self.b1 ** self.t
        bc2_sqrt = math.sqrt(1.0 - self.b2 ** self.t)
        torch._foreach_mul_(m, self.b1)
        torch._foreach_add_(m, grads, alpha=1.0 - self.b1)
        torch._foreach_mul_(v, self.b2)
        torch._foreach_addcmul_(v, grads, grads, value=1.0 - self.b2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bc2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, m, denom, value=-self.lr / bc1)

    def _step_segments(self, grads: List[torch.Tensor], segments: Sequence[Tuple[int, int]],
                       steps: Sequence[int]) -> None:
        """Adam on each segment's rows with that segment's own step count."""
        def split(ts: List[torch.Tensor]) -> List[torch.Tensor]:
            return [t[a:b] for t in ts for a, b in segments]
        params, decay, m, v, g = (split(self.params), split(self.decay), split(self.m),
                                  split(self.v), split(grads))
        kernel_decay = self._decayed(g, params, decay)
        per_view = [int(steps[i % len(segments)]) for i in range(len(params))]
        if _FUSED_ADAM is not None:
            counts = _step_tensors([float(t) for t in per_view], params)
            _FUSED_ADAM(params, g, m, v, [], counts, lr=self.lr, beta1=self.b1, beta2=self.b2,
                        weight_decay=kernel_decay, eps=self.eps, amsgrad=False,
                        maximize=False)
            return
        for p, gi, mi, vi, t in zip(params, g, m, v, per_view):
            mi.mul_(self.b1).add_(gi, alpha=1.0 - self.b1)
            vi.mul_(self.b2).addcmul_(gi, gi, value=1.0 - self.b2)
            denom = vi.sqrt().div_(math.sqrt(1.0 - self.b2 ** t)).add_(self.eps)
            p.addcdiv_(mi, denom, value=-self.lr / (1.0 - self.b1 ** t))

    def keep(self, rows: torch.Tensor, cols: torch.Tensor, blocks: List[int]) -> None:
        """Keep only the models in feature groups ``rows`` x L2 columns ``cols``."""
        for lst in (self.params, self.decay, self.m, self.v):
            lst[:] = [_select_models(t, k, rows, cols) for t, k in zip(lst, blocks)]


def _select_models(t: torch.Tensor, block: int, rows: torch.Tensor,
                   cols: torch.Tensor) -> torch.Tensor:
    """Rows (feature groups) and columns (L2 values) of a stacked parameter."""
    t = t.index_select(0, rows)
    if block == 0:  # (G, R, ...)
        return t.index_select(1, cols).contiguous()
    g, rk, x = t.shape  # (G, R*K, X)
    return t.view(g, rk // block, block, x).index_select(1, cols).reshape(
        g, len(cols) * block, x)
