"""Probing classifiers that train many models at once, as one tensor program.

Why batched: a layer-by-layer sweep trains (layer specs x L2 values) small models on the same
examples. Training them one by one is dominated by per-step overhead, so here all of them are
a leading "model" dimension: feature groups ``G`` (one per layer spec, the features differ)
times ``R`` L2 values (same features, different weight decay). Parameters are stacked tensors,
updates are batched matmuls and our own Adam over the stacks, each model with its own L2 and
its own early stopping.

Why each model's trajectory equals training it alone with the same seed: every model gets the
same initial weights (drawn once from a generator seeded by ``seed``), sees the same example
order (pass ``p`` is permuted by an RNG seeded by ``(seed, p)``), and the same dropout masks
(one mask per step from a generator seeded by ``seed``, shared by all models), and no
computation mixes models. Training ``G = R = 1`` (``--sequential``) runs the same code.

SentEval's behaviour, reproduced (their code is the reference for the published numbers):
nhid=0 -> ``Linear(F, C)``; nhid>0 -> ``Linear(F, H), Dropout(p), Sigmoid, Linear(H, C)``
(dropout before the sigmoid, as published); cross-entropy (batch mean, which is what
SentEval's ``CrossEntropyLoss`` computes on PyTorch >= 0.4); Adam lr 1e-3, betas 0.9/0.999,
eps 1e-8, L2 added to the gradient (``weight_decay``, biases included); PyTorch's Linear init.
Early stopping: rounds of ``epoch_size`` passes, then dev accuracy; a better dev accuracy keeps
a copy of the model; otherwise the non-improvement count is checked (stop once it has reached
``tenacity``) and incremented. The count is cumulative, never reset on improvement, exactly as
in SentEval's code, so our numbers stay comparable with the published ones.

A model that has stopped is frozen in the sense that matters: its best copy, dev score and
epoch count no longer change (``active`` mask). Its live weights may keep being updated until
every model of its feature group has stopped, when the group is dropped from the program; they
are never read again, so the results are those of the model trained alone.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from estratos.probe.settings import DEFAULT_L2_GRID, RecordedEstimator
from estratos.protocols import DEFAULT_KFOLD, VALIDATION_SPLIT

log = logging.getLogger(__name__)

_EVAL_CHUNK = 2048


def _find_fused_adam():
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


def _set_deterministic(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode)`` without its side import of the inductor
    compiler (about 4 s per process, to set a flag for compiled code we never run)."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:  # pragma: no cover - other torch versions
        torch.use_deterministic_algorithms(mode)
    else:
        setter(mode)


@contextlib.contextmanager
def torch_runtime(threads: Optional[int] = None) -> Iterator[None]:
    """Pin torch's intra-op threads and turn on deterministic algorithms, then restore both.

    Why a context manager: these are process-wide torch switches; the probe sets them for
    its own work and gives the process back as it found it (no hidden global state). Every op
    the probes run on CPU is deterministic for a fixed thread count; the switch guards
    against a future op that is not (torch then raises instead of silently varying).
    """
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    try:
        if threads is not None:
            torch.set_num_threads(max(1, int(threads)))
        _set_deterministic(True)
        yield
    finally:
        _set_deterministic(old_det)
        torch.set_num_threads(old_threads)


def pass_permutation(n: int, seed: int, pass_index: int) -> np.ndarray:
    """The example order of training pass ``pass_index`` (same for every model of a seed)."""
    return np.random.default_rng((int(seed), 0, int(pass_index))).permutation(n)


def _as_tensor(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(torch.float32)
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def _as_groups(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    t = _as_tensor(x)
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() != 3:
        raise ValueError(f"features must be (G, n, F) or (n, F), got shape {tuple(t.shape)}")
    return t


def _l2_table(l2: Sequence[float] | np.ndarray, n_groups: int) -> np.ndarray:
    """``l2`` as (G, R): a 1-d grid is shared by every group."""
    table = np.asarray(l2, dtype=np.float64)
    if table.ndim == 0:
        table = table.reshape(1, 1)
    if table.ndim == 1:
        table = np.tile(table[None, :], (n_groups, 1))
    if table.shape[0] != n_groups or table.ndim != 2:
        raise ValueError(f"l2 must be (R,) or (G={n_groups}, R), got shape {table.shape}")
    return table


class _Adam:
    """Adam over stacked parameters with per-model weight decay (as torch.optim.Adam does)."""

    def __init__(self, params: List[torch.Tensor], decay: List[torch.Tensor], lr: float,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params, self.decay = params, decay
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads: List[torch.Tensor],
             segments: Optional[Sequence[Tuple[int, int]]] = None) -> None:
        """One Adam step. ``segments``: row ranges (one per seed) updated as separate tensors,
        so each seed's parameters meet exactly the kernels they meet when trained alone
        (vectorised kernels round the tail of a tensor in scalar code)."""
        self.t += 1
        params, decay, m, v = self.params, self.decay, self.m, self.v
        if segments is not None and len(segments) > 1:
            def split(ts: List[torch.Tensor]) -> List[torch.Tensor]:
                return [t[a:b] for t in ts for a, b in segments]
            params, decay, m, v, grads = (split(params), split(decay), split(m), split(v),
                                          split(grads))
        # per-model weight decay enters the gradient, as torch.optim.Adam's weight_decay does
        torch._foreach_addcmul_(grads, params, decay)
        if _FUSED_ADAM is not None:
            # torch's fused CPU Adam kernel (what torch.optim.Adam(fused=True) runs): one pass
            # over each tensor instead of nine
            steps = [torch.tensor(float(self.t), device=p.device) for p in params]
            _FUSED_ADAM(params, grads, m, v, [], steps, lr=self.lr,
                        beta1=self.b1, beta2=self.b2, weight_decay=0.0, eps=self.eps,
                        amsgrad=False, maximize=False)
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
    g, x, rk = t.shape
    return t.view(g, x, rk // block, block).index_select(2, cols).reshape(
        g, x, len(cols) * block)


def _copy_model(dst: torch.Tensor, src: torch.Tensor, block: int, g: int, r: int, i: int,
                j: int) -> None:
    """dst's model (g, r) <- src's model (i, j) (the same parameter, other layouts)."""
    if block == 0:
        dst[g, r] = src[i, j]
    else:
        dst[g, :, r * block:(r + 1) * block] = src[i, :, j * block:(j + 1) * block]


class _Net:
    """Stacked parameters of P x R models and their forward/backward passes.

    P "streams" are (seed, feature group) pairs, seed-major (stream ``s * G + g``): every
    model of a stream sees the same examples in the same order (its seed's), so one ``bmm``
    per layer serves all R models of a stream. Layouts:
    linear: ``W (P, F, R*C)``, ``b (P, 1, R*C)``; hidden: ``W1 (P, F, R*H)``, ``b1 (P, 1, R*H)``,
    ``W2 (P, R, H, C)``, ``b2 (P, R, 1, C)``. Logits come out as ``(P, B, R, C)``
    (contiguous, so softmax over C is a fast inner-dimension reduction).

    Random numbers (init, dropout masks) are drawn on the CPU from one generator per seed and
    moved to the device, so a model starts and drops out the same way on every device.
    """

    def __init__(self, n_groups: int, n_l2: int, n_features: int, n_classes: int, nhid: int,
                 dropout: float, seeds: Sequence[int],
                 device: torch.device = torch.device("cpu")) -> None:
        self.G, self.R, self.F, self.C, self.H = n_groups, n_l2, n_features, n_classes, nhid
        self.dropout = dropout
        self.seeds = [int(s) for s in seeds]
        self.device = device
        R = n_l2
        #: per parameter: block width K of the "wide" layout (P, X, R*K), or 0 for (P, R, ...)
        self.blocks = [n_classes, n_classes] if nhid == 0 else [nhid, nhid, 0, 0]
        per_seed = [self._init(seed, n_groups, R) for seed in self.seeds]
        self.params = [torch.cat(parts).to(device).contiguous() for parts in zip(*per_seed)]
        self.dropout_gens = [torch.Generator().manual_seed(s) for s in self.seeds]
        #: seed index and feature group of every stream
        self.stream_seed = np.repeat(np.arange(len(self.seeds)), n_groups)
        self.stream_group = np.tile(np.arange(n_groups), len(self.seeds))

    def _init(self, seed: int, G: int, R: int) -> List[torch.Tensor]:
        """One seed's stacked initial parameters: every model of the seed starts the same."""
        gen = torch.Generator().manual_seed(int(seed))
        F, C, H = self.F, self.C, self.H

        def linear_init(fan_in: int, fan_out: int) -> Tuple[torch.Tensor, torch.Tensor]:
            # torch.nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both
            bound = 1.0 / math.sqrt(fan_in)
            w = (torch.rand((fan_out, fan_in), generator=gen) * 2 - 1) * bound
            b = (torch.rand((fan_out,), generator=gen) * 2 - 1) * bound
            return w.t().contiguous(), b

        if H == 0:
            w, b = linear_init(F, C)
            return [w.unsqueeze(1).repeat(1, R, 1).reshape(1, F, R * C).repeat(G, 1, 1),
                    b.repeat(R).reshape(1, 1, R * C).repeat(G, 1, 1)]
        w1, b1 = linear_init(F, H)
        w2, b2 = linear_init(H, C)
        return [w1.unsqueeze(1).repeat(1, R, 1).reshape(1, F, R * H).repeat(G, 1, 1),
                b1.repeat(R).reshape(1, 1, R * H).repeat(G, 1, 1),
                w2.reshape(1, 1, H, C).repeat(G, R, 1, 1),
                b2.reshape(1, 1, 1, C).repeat(G, R, 1, 1)]

    def decay_tensors(self, l2: torch.Tensor) -> List[torch.Tensor]:
        """Per-model L2 ``(P, R)`` broadcast to each parameter's layout."""
        P, R = l2.shape
        l2 = l2.to(self.device)
        if self.H == 0:
            wide = l2.repeat_interleave(self.C, dim=1).reshape(P, 1, R * self.C)
            return [wide, wide.clone()]
        wide = l2.repeat_interleave(self.H, dim=1).reshape(P, 1, R * self.H)
        per_model = l2.reshape(P, R, 1, 1)
        return [wide, wide.clone(), per_model, per_model.clone()]

    def draw_masks(self, live_seeds: np.ndarray, batch: int) -> Optional[torch.Tensor]:
        """This step's dropout masks of the streams whose seeds are ``live_seeds`` (one per
        live stream, ``(Ga, 1, B, H)``): one ``(B, H)`` draw per seed still training, from
        that seed's generator, as training the seed alone draws it."""
        if self.H == 0 or self.dropout <= 0:
            return None
        keep = 1.0 - self.dropout
        present = np.unique(live_seeds)
        drawn = {int(s): (torch.rand((batch, self.H), generator=self.dropout_gens[s]) < keep)
                 for s in present}
        if len(present) == 1:
            mask = drawn[int(present[0])].to(torch.float32).div_(keep)
            return mask.to(self.device)[None, None]
        stack = torch.stack([drawn[int(s)] for s in present]).to(torch.float32).div_(keep)
        pos = torch.as_tensor(np.searchsorted(present, live_seeds))
        return stack.index_select(0, pos).to(self.device)[:, None]

    def forward(self, x: torch.Tensor, params: Optional[List[torch.Tensor]] = None,
                mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, tuple]:
        """``x (Ga, B, F)`` -> logits ``(Ga, B, R, C)`` and what backward needs; ``mask``:
        dropout masks (training only)."""
        p = self.params if params is None else params
        Ga, B = x.shape[0], x.shape[1]
        R = self.R
        if self.H == 0:
            z = torch.baddbmm(p[1], x, p[0]).view(Ga, B, R, self.C)
            return z, (x,)
        a = torch.baddbmm(p[1], x, p[0]).view(Ga, B, R, self.H).transpose(1, 2)
        if mask is not None:
            a = a * mask
        h = torch.sigmoid(a)  # (Ga, R, B, H)
        z = torch.matmul(h, p[2]).add_(p[3]).transpose(1, 2).contiguous()
        return z, (x, h, mask)

    def backward(self, dz: torch.Tensor, saved: tuple) -> List[torch.Tensor]:
        """Gradients of every parameter from ``dz = dLoss/dlogits (Ga, B, R, C)``."""
        x = saved[0]
        Ga, B = x.shape[0], x.shape[1]
        xt = x.transpose(1, 2)
        if self.H == 0:
            d = dz.reshape(Ga, B, self.R * self.C)
            return [torch.bmm(xt, d), d.sum(dim=1, keepdim=True)]
        h, mask = saved[1], saved[2]
        dz = dz.transpose(1, 2)  # (Ga, R, B, C)
        gw2 = torch.matmul(h.transpose(-1, -2), dz)
        gb2 = dz.sum(dim=2, keepdim=True)
        dh = torch.matmul(dz, self.params[2].transpose(-1, -2))
        da = dh.mul_(h).mul_(1.0 - h)
        if mask is not None:
            da.mul_(mask)
        d = da.transpose(1, 2).reshape(Ga, B, self.R * self.H)
        return [torch.bmm(xt, d), d.sum(dim=1, keepdim=True), gw2, gb2]

    def logits(self, x: torch.Tensor, params: List[torch.Tensor],
               groups: Optional[np.ndarray] = None) -> torch.Tensor:
        """Eval-mode logits ``(Ga, n, R, C)`` of ``x (G, n, F)`` (host or device), in row
        chunks; ``groups``: the feature group of each stream (None: stream g = group g)."""
        index = None if groups is None else torch.as_tensor(groups)
        parts = []
        for i in range(0, x.shape[1], _EVAL_CHUNK):
            chunk = x[:, i:i + _EVAL_CHUNK]
            if index is not None:
                chunk = chunk.index_select(0, index)
            parts.append(self.forward(chunk.to(self.device), params)[0])
        if not parts:
            n_rows = x.shape[0] if groups is None else len(groups)
            return torch.zeros((n_rows, 0, self.R, self.C), device=self.device)
        return torch.cat(parts, dim=1)


#: dLoss/dlogits for a batch: (logits (Ga,B,R,C), batch targets (B,C) or (Ga,B,C), seed
#: segments) -> (Ga,B,R,C)
GradFn = Callable[[torch.Tensor, torch.Tensor, Optional[Sequence[Tuple[int, int]]]],
                  torch.Tensor]
#: dev score of every model: (dev logits (Ga,n,R,C)) -> (Ga,R) float64, higher is better
ScoreFn = Callable[[torch.Tensor], np.ndarray]


def _softmax(z: torch.Tensor, segments: Optional[Sequence[Tuple[int, int]]] = None
             ) -> torch.Tensor:
    """Softmax over the last dimension; written out because torch's kernel is several times
    slower for the handful of classes probes have. ``segments`` (row ranges, one per seed):
    the exponential runs on each seed's rows as their own tensor, as when that seed trains
    alone (a vectorised ``exp`` rounds the tail of a tensor in scalar code)."""
    e = z - z.amax(dim=-1, keepdim=True)
    if segments is not None and len(segments) > 1:
        for a, b in segments:
            e[a:b].exp_()
    else:
        e.exp_()
    return e.div_(e.sum(dim=-1, keepdim=True))


def _per_model(target: torch.Tensor) -> torch.Tensor:
    """Batch targets ``(B, C)`` (shared by every stream) or ``(Ga, B, C)`` -> broadcastable
    against logits ``(Ga, B, R, C)``."""
    return target[None, :, None, :] if target.dim() == 2 else target[:, :, None, :]


def _cross_entropy_grad(z: torch.Tensor, onehot: torch.Tensor,
                        segments: Optional[Sequence[Tuple[int, int]]] = None) -> torch.Tensor:
    p = _softmax(z, segments)
    return p.sub_(_per_model(onehot)).div_(z.shape[1])


def _soft_mse_grad(z: torch.Tensor, target: torch.Tensor,
                   segments: Optional[Sequence[Tuple[int, int]]] = None) -> torch.Tensor:
    """d/dz of mean((softmax(z) - target)^2) over the batch and the classes."""
    p = _softmax(z, segments)
    g = (p - _per_model(target)).mul_(2.0 / (z.shape[1] * z.shape[3]))
    return p * (g - (g * p).sum(dim=-1, keepdim=True))


class _FitState:
    """Outcome of one batched fit: best parameters, dev scores and epochs per model."""

    def __init__(self, net: _Net, best: List[torch.Tensor], dev: np.ndarray,
                 epochs: np.ndarray) -> None:
        self.net, self.best, self.dev, self.epochs = net, best, dev, epochs


def _train(net: _Net, x: torch.Tensor, targets: torch.Tensor, x_dev: torch.Tensor,
           l2: np.ndarray, *, grad_fn: GradFn, score_fn: ScoreFn, batch_size: int,
           epoch_size: int, max_epoch: int, tenacity: int, lr: float) -> _FitState:
    """SentEval's fit loop, for all P x R models at once (see the module docstring).

    ``x (G, n, F)`` and ``x_dev`` are shared by every seed; ``l2 (P, R)``. Each step gathers
    every live stream's batch from its seed's example order. Models leave the program when
    they stop: after each round, the streams (rows) and L2 values (columns) with no active
    model left are dropped from every tensor.
    """
    P, R = l2.shape
    n = x.shape[1]
    device = net.device
    seeds = net.seeds
    xt = x.transpose(0, 1).contiguous().to(device)  # (n, G, F): one example's groups side by side
    targets = targets.to(device)
    adam = _Adam(net.params, net.decay_tensors(torch.as_tensor(l2, dtype=torch.float32)), lr)
    best = [p.clone() for p in net.params]
    best_score = np.full((P, R), -1.0)  # SentEval starts from -1
    count = np.zeros((P, R), dtype=np.int64)
    epochs = np.zeros((P, R), dtype=np.int64)
    active = np.ones((P, R), dtype=bool)
    rows, cols = np.arange(P), np.arange(R)  # models still in the program
    nepoch = 0
    while active.any() and nepoch <= max_epoch:
        row_seed = net.stream_seed[rows]
        row_group = net.stream_group[rows]
        live_seeds = np.unique(row_seed)
        # all rows of a single seed: the batch is one contiguous gather (the common case)
        simple = len(seeds) == 1 and len(rows) == net.G
        g_index = torch.as_tensor(row_group, device=device)
        s_pos = torch.as_tensor(np.searchsorted(live_seeds, row_seed), device=device)
        # rows stay seed-major: each live seed's streams are one contiguous block
        starts = np.searchsorted(row_seed, live_seeds)
        segments = list(zip(starts.tolist(), starts[1:].tolist() + [len(rows)]))
        for pass_index in range(nepoch, nepoch + epoch_size):
            perms = torch.stack([torch.from_numpy(pass_permutation(n, seeds[s], pass_index))
                                 for s in live_seeds]).to(device)  # (S_live, n)
            for start in range(0, n, batch_size):
                idx = perms[:, start:start + batch_size]  # (S_live, B)
                if simple:
                    xb = xt.index_select(0, idx[0]).transpose(0, 1)
                    tb = targets.index_select(0, idx[0])
                else:
                    rows_idx = idx.index_select(0, s_pos)  # (Ga, B): each stream's examples
                    xb = xt[rows_idx.t(), g_index[None, :]].transpose(0, 1)
                    tb = targets[rows_idx] if len(live_seeds) > 1 else targets.index_select(
                        0, idx[0])
                z, saved = net.forward(xb, mask=net.draw_masks(row_seed, idx.shape[1]))
                adam.step(net.backward(grad_fn(z, tb, segments), saved), segments)
        nepoch += epoch_size
        identity = len(seeds) == 1 and len(rows) == net.G
        scores = score_fn(net.logits(x_dev, net.params, None if identity else row_group))
        live = np.ix_(rows, cols)
        act = active[live]
        improved = act & (scores > best_score[live])
        stalled = act & ~improved
        for i, j in zip(*np.nonzero(improved)):
            for b, p, k in zip(best, net.params, net.blocks):
                _copy_model(b, p, k, int(rows[i]), int(cols[j]), int(i), int(j))
        sub = best_score[live]
        sub[improved] = scores[improved]
        best_score[live] = sub
        sub = count[live]
        stop = stalled & (sub >= tenacity)
        sub[stalled] += 1
        count[live] = sub
        act_after = act & ~stop
        active[live] = act_after
        sub = epochs[live]
        sub[act] = nepoch
        epochs[live] = sub
        keep_rows = act_after.any(axis=1)
        if not keep_rows.any():
            break
        keep_cols = act_after[keep_rows].any(axis=0)
        if not (keep_rows.all() and keep_cols.all()):
            r_idx = torch.as_tensor(np.flatnonzero(keep_rows), device=device)
            c_idx = torch.as_tensor(np.flatnonzero(keep_cols), device=device)
            adam.keep(r_idx, c_idx, net.blocks)
            net.params = adam.params
            net.R = int(keep_cols.sum())
            rows, cols = rows[keep_rows], cols[keep_cols]
    log.debug("trained %d x %d models for %d epochs", P, R, nepoch)
    net.R = R
    return _FitState(net, best, best_score, epochs)


def _seed_list(seed: Union[int, Sequence[int]]) -> List[int]:
    return [int(seed)] if isinstance(seed, (int, np.integer)) else [int(s) for s in seed]


def _torch_device(device: Union[str, torch.device]) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(str(device))


class SentEvalClassifier(RecordedEstimator):
    """SentEval's PyTorch MLP/logistic probe, batched over G feature groups x R L2 values
    (x S seeds).

    ``fit(X, y, X_dev, y_dev, l2)`` with ``X (G, n, F)`` (or ``(n, F)``), int labels and
    ``l2`` a grid ``(R,)`` shared by all groups or a table ``(G, R)``; then ``predict(X)`` ->
    ``(G', R, n)`` labels from each model's best (dev-selected) weights. ``dev_score_`` holds
    the best dev accuracy (fraction) and ``epochs_`` the epochs run, both ``(G', R)``.
    ``seed`` is one seed (G' = G) or a sequence of S seeds trained together on the same data
    (G' = S x G, seed-major: group ``s * G + g``), each model exactly as trained alone.

    Every hyper-parameter is a constructor parameter (SentEval's defaults): the network
    (``nhid``, ``dropout``), the optimiser and schedule (``optim``, ``lr``, ``batch_size``,
    ``tenacity``, ``epoch_size``, ``max_epoch``) and what the protocols read from it
    (``l2_grid``, ``kfold``, ``validation_split``). ``n_classes`` None: from the labels.
    ``device``: where the tensor program runs (``cpu``, ``cuda:N``).
    """

    name = "senteval"
    _recorded = ("nhid", "optim", "batch_size", "tenacity", "epoch_size", "max_epoch",
                 "dropout", "l2_grid")

    def __init__(self, n_classes: Optional[int] = None, nhid: int = 0, dropout: float = 0.0,
                 optim: str = "adam", batch_size: int = 64, tenacity: int = 5,
                 epoch_size: int = 4, max_epoch: int = 200,
                 l2_grid: Sequence[float] = DEFAULT_L2_GRID, kfold: int = DEFAULT_KFOLD,
                 validation_split: float = VALIDATION_SPLIT,
                 seed: Union[int, Sequence[int]] = 1111, lr: float = 1e-3,
                 device: Union[str, torch.device] = "cpu") -> None:
        self.n_classes = n_classes
        self.nhid = nhid
        self.dropout = dropout
        self.optim = optim
        self.batch_size = batch_size
        self.tenacity = tenacity
        self.epoch_size = epoch_size
        self.max_epoch = max_epoch
        self.l2_grid = l2_grid
        self.kfold = kfold
        self.validation_split = validation_split
        self.seed = seed
        self.lr = lr
        self.device = device

    def fit(self, X, y, X_dev, y_dev, l2) -> "SentEvalClassifier":
        x, x_dev = _as_groups(X), _as_groups(X_dev)
        device = _torch_device(self.device)
        seeds = _seed_list(self.seed)
        y = np.asarray(y, dtype=np.int64)
        y_dev_t = torch.from_numpy(np.asarray(y_dev, dtype=np.int64)).to(device)
        n_classes = self.n_classes or int(max(y.max(initial=0), y_dev_t.max().item()) + 1)
        table = np.tile(_l2_table(l2, x.shape[0]), (len(seeds), 1))
        if len(y_dev_t) == 0:
            raise ValueError("early stopping needs at least one dev example")
        net = _Net(x.shape[0], table.shape[1], x.shape[2], n_classes, self.nhid, self.dropout,
                   seeds, device)
        onehot = torch.nn.functional.one_hot(torch.from_numpy(y), n_classes).to(torch.float32)

        def score(logits: torch.Tensor) -> np.ndarray:
            hits = logits.argmax(dim=-1) == y_dev_t[None, :, None]
            return hits.to(torch.float64).mean(dim=1).cpu().numpy()

        state = _train(net, x, onehot, x_dev, table, grad_fn=_cross_entropy_grad,
                       score_fn=score, batch_size=self.batch_size, epoch_size=self.epoch_size,
                       max_epoch=self.max_epoch, tenacity=self.tenacity, lr=self.lr)
        self._state = state
        self.dev_score_ = state.dev
        self.epochs_ = state.epochs
        self.l2_ = table
        return self

    def _logits(self, X) -> torch.Tensor:
        net = self._state.net
        groups = None if len(net.seeds) == 1 else net.stream_group
        return net.logits(_as_groups(X), self._state.best, groups)

    def predict(self, X) -> np.ndarray:
        """Labels ``(G', R, n)`` of every model's best weights."""
        return self._logits(X).argmax(dim=-1).transpose(1, 2).cpu().numpy()

    def score(self, X, y) -> np.ndarray:
        """Accuracy (fraction) ``(G', R)`` of every model."""
        return (self.predict(X) == np.asarray(y)[None, None, :]).mean(axis=-1)


class RelatednessRegressor(RecordedEstimator):
    """Tai et al.'s SICK-R probe (as in SentEval), batched over G feature groups.

    A score ``y`` in [1, K] becomes a distribution over K classes (:func:`score_distribution`);
    ``Linear(F, K)`` + softmax is trained with MSE against it (Adam, batch 64, no L2); every
    ``epoch_size`` (50) passes the dev Pearson of the expected score picks the best model;
    stop after ``tenacity`` (3) non-improving rounds (cumulative count, checked as in the
    classifier) or ``max_epoch`` (1000) passes. ``predict(X)`` -> expected scores ``(G, n)``.
    Results record it under the ``--classifier`` name asked for (the run's cells belong to
    that classifier), with its fixed facts: linear, Adam, no dropout, no L2.
    """

    name = "senteval-relatedness"
    _recorded = ("nhid", "optim", "batch_size", "tenacity", "epoch_size", "max_epoch",
                 "dropout", "l2_grid")
    _facts = {"nhid": 0, "optim": "adam", "dropout": 0.0, "l2_grid": (0.0,)}

    def __init__(self, n_classes: int = 5, batch_size: int = 64, tenacity: int = 3,
                 epoch_size: int = 50, max_epoch: int = 1000,
                 seed: Union[int, Sequence[int]] = 1111, lr: float = 1e-3,
                 device: Union[str, torch.device] = "cpu") -> None:
        self.n_classes = n_classes
        self.batch_size = batch_size
        self.tenacity = tenacity
        self.epoch_size = epoch_size
        self.max_epoch = max_epoch
        self.seed = seed
        self.lr = lr
        self.device = device

    def fit(self, X, scores, X_dev, dev_scores) -> "RelatednessRegressor":
        x, x_dev = _as_groups(X), _as_groups(X_dev)
        device = _torch_device(self.device)
        seeds = _seed_list(self.seed)
        target = torch.from_numpy(score_distribution(scores, self.n_classes).astype(np.float32))
        dev = np.asarray(dev_scores, dtype=np.float64)
        net = _Net(x.shape[0], 1, x.shape[2], self.n_classes, 0, 0.0, seeds, device)
        levels = torch.arange(1, self.n_classes + 1, dtype=torch.float64, device=device)

        def score(logits: torch.Tensor) -> np.ndarray:
            yhat = torch.softmax(logits.to(torch.float64), dim=-1) @ levels  # (Ga, n, 1)
            return pearson_rows(yhat.transpose(1, 2).cpu().numpy(), dev)

        state = _train(net, x, target, x_dev, np.zeros((len(seeds) * x.shape[0], 1)),
                       grad_fn=_soft_mse_grad, score_fn=score, batch_size=self.batch_size,
                       epoch_size=self.epoch_size, max_epoch=self.max_epoch,
                       tenacity=self.tenacity, lr=self.lr)
        self._state = state
        self.dev_score_ = state.dev[:, 0]
        self.epochs_ = state.epochs[:, 0]
        return self

    def predict(self, X) -> np.ndarray:
        """Expected scores ``(G', n)`` (G' = S x G with S seeds, seed-major)."""
        net = self._state.net
        groups = None if len(net.seeds) == 1 else net.stream_group
        logits = net.logits(_as_groups(X), self._state.best, groups)[:, :, 0]
        levels = torch.arange(1, self.n_classes + 1, dtype=torch.float64, device=net.device)
        return (torch.softmax(logits.to(torch.float64), dim=-1) @ levels).cpu().numpy()


def score_distribution(scores: Sequence[float], n_classes: int = 5) -> np.ndarray:
    """Tai et al.'s target: score y in [1, K] -> p with p[floor(y)] = y - floor(y) and
    p[floor(y)-1] = floor(y) - y + 1 (1-indexed classes), so an integer y is one-hot."""
    y = np.asarray(scores, dtype=np.float64)
    if y.size and (y.min() < 1 or y.max() > n_classes):
        raise ValueError(f"relatedness scores must lie in [1, {n_classes}]")
    out = np.zeros((len(y), n_classes), dtype=np.float64)
    fl = np.floor(y).astype(np.int64)
    rows = np.arange(len(y))
    frac = y - fl
    upper = fl < n_classes  # y == K has no class above it
    out[rows[upper], fl[upper]] = frac[upper]
    out[rows, fl - 1] = 1.0 - frac
    return out


def pearson_rows(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Pearson r of each row of ``pred (..., n)`` with ``gold (n,)``; NaN (constant) -> 0."""
    p = pred - pred.mean(axis=-1, keepdims=True)
    g = gold - gold.mean()
    num = (p * g).sum(axis=-1)
    den = np.sqrt((p * p).sum(axis=-1) * (g * g).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        r = num / den
    return np.where(np.isfinite(r), r, 0.0)


class LBFGSClassifier(RecordedEstimator):
    """Full-batch multinomial logistic regression (L-BFGS), same interface as SentEval's.

    For fast exploration, not for comparison with published numbers. The objective is mean
    cross-entropy + ``l2/2 * ||W||^2`` (scikit-learn with ``C = 1 / (l2 * n)``); dev data is
    only used to choose L2 afterwards (no early stopping). ``epochs_`` = L-BFGS iterations.
    A task's network and schedule overrides (``nhid``, ``tenacity``...) do not apply.
    """

    name = "lbfgs"
    _recorded = ("nhid", "optim", "max_iter", "tol", "l2_grid")
    _facts = {"nhid": 0, "optim": "lbfgs"}

    def __init__(self, n_classes: Optional[int] = None, max_iter: int = 1000,
                 tol: float = 1e-4, l2_grid: Sequence[float] = DEFAULT_L2_GRID,
                 kfold: int = DEFAULT_KFOLD, validation_split: float = VALIDATION_SPLIT,
                 seed: int = 1111) -> None:
        self.n_classes = n_classes
        self.max_iter = max_iter
        self.tol = tol
        self.l2_grid = l2_grid
        self.kfold = kfold
        self.validation_split = validation_split
        self.seed = seed

    def fit(self, X, y, X_dev, y_dev, l2) -> "LBFGSClassifier":
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        x, x_dev = _as_groups(X).numpy(), _as_groups(X_dev).numpy()
        y = np.asarray(y, dtype=np.int64)
        y_dev = np.asarray(y_dev, dtype=np.int64)
        table = _l2_table(l2, x.shape[0])
        G, R = table.shape
        self.models_ = [[None] * R for _ in range(G)]
        self.dev_score_ = np.zeros((G, R))
        self.epochs_ = np.zeros((G, R), dtype=np.int64)
        self._constant = None
        classes = np.unique(y)
        if len(classes) == 1:  # a degenerate fold: every prediction is the one class
            self._constant = int(classes[0])
            self.dev_score_[:] = (y_dev == self._constant).mean() if len(y_dev) else 0.0
            return self
        for g in range(G):
            for r in range(R):
                c = 1.0 / (max(table[g, r], 1e-12) * len(y))
                clf = LogisticRegression(C=c, max_iter=self.max_iter, tol=self.tol)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    clf.fit(x[g], y)
                self.models_[g][r] = clf
                self.epochs_[g, r] = int(np.max(clf.n_iter_))
                if len(y_dev):
                    self.dev_score_[g, r] = float((clf.predict(x_dev[g]) == y_dev).mean())
        return self

    def predict(self, X) -> np.ndarray:
        x = _as_groups(X).numpy()
        G, R = self.dev_score_.shape
        if self._constant is not None:
            return np.full((G, R, x.shape[1]), self._constant, dtype=np.int64)
        return np.stack([np.stack([self.models_[g][r].predict(x[g]) for r in range(R)])
                         for g in range(G)]).astype(np.int64)

    def score(self, X, y) -> np.ndarray:
        return (self.predict(X) == np.asarray(y)[None, None, :]).mean(axis=-1)


#: ``--classifier`` name -> estimator class
CLASSIFIER_CLASSES = {"senteval": SentEvalClassifier, "lbfgs": LBFGSClassifier}
