"""The batched trainer: many probing models trained at once, as one tensor program.

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
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from estratos.probe.estimators.adam import StackedAdam

log = logging.getLogger(__name__)

_EVAL_CHUNK = 2048
#: device types whose programs take their dropout masks a pass at a time (:class:`_MaskFeed`);
#: on the CPU each step draws its own (the same numbers, without a pass's masks in memory)
PASS_MASK_DEVICES = ("cuda",)


def pass_permutation(n: int, seed: int, pass_index: int) -> np.ndarray:
    """The example order of training pass ``pass_index`` (same for every model of a seed)."""
    return np.random.default_rng((int(seed), 0, int(pass_index))).permutation(n)


def as_tensor(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(torch.float32)
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def as_groups(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    t = as_tensor(x)
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() != 3:
        raise ValueError(f"features must be (G, n, F) or (n, F), got shape {tuple(t.shape)}")
    return t


def _copy_model(dst: torch.Tensor, src: torch.Tensor, block: int, g: int, r: int, i: int,
                j: int) -> None:
    """dst's model (g, r) <- src's model (i, j) (the same parameter, other layouts)."""
    if block == 0:
        dst[g, r] = src[i, j]
    else:
        dst[g, r * block:(r + 1) * block] = src[i, j * block:(j + 1) * block]


class StackedNet:
    """Stacked parameters of P x R models and their forward/backward passes.

    P "streams" are (seed, feature group) pairs, seed-major (stream ``s * G + g``): every
    model of a stream sees the same examples in the same order (its seed's), so one ``bmm``
    per layer serves all R models of a stream. Layouts:
    linear: ``W (P, R*C, F)``, ``b (P, R*C, 1)``; hidden: ``W1 (P, R*H, F)``,
    ``b1 (P, R*H, 1)``, ``W2 (P, R, H, C)``, ``b2 (P, R, 1, C)``. Logits come out as
    ``(P, B, R, C)`` (contiguous, so softmax over C is a fast inner-dimension reduction).

    Why the first layer's weights are stored as torch.nn.Linear stores them, outputs by
    inputs: the R models' outputs are few (R*C: 8 for a 2-class task over 4 L2 values), and
    a product whose small dimension is the result's rows (``W @ x^T``, ``dz^T @ x``) runs
    about 4 times faster than one where it is the columns (``x @ W``, ``x^T @ dz``) on MKL
    (one thread: 53.4 against 13.3 GFLOP/s, ``probe_step_tall`` and ``probe_step`` in
    bench/full_suite.py; the es-senteval grid 1.5x faster, docs/probe.md).

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
        #: per parameter: block width K of the "tall" layout (P, R*K, X), or 0 for (P, R, ...)
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
            # torch.nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both,
            # the weight (fan_out, fan_in)
            bound = 1.0 / math.sqrt(fan_in)
            w = (torch.rand((fan_out, fan_in), generator=gen) * 2 - 1) * bound
            b = (torch.rand((fan_out,), generator=gen) * 2 - 1) * bound
            return w, b

        def tall(w: torch.Tensor, b: torch.Tensor) -> List[torch.Tensor]:
            # the R models' copies stacked along the outputs: (G, R*K, X) and (G, R*K, 1)
            return [w.repeat(R, 1).unsqueeze(0).repeat(G, 1, 1).contiguous(),
                    b.repeat(R).reshape(1, -1, 1).repeat(G, 1, 1)]

        if H == 0:
            return tall(*linear_init(F, C))
        first = tall(*linear_init(F, H))
        w2, b2 = linear_init(H, C)
        return first + [
            w2.t().reshape(1, 1, H, C).repeat(G, R, 1, 1).contiguous(),
            b2.reshape(1, 1, 1, C).repeat(G, R, 1, 1)]

    def decay_tensors(self, l2: torch.Tensor) -> List[torch.Tensor]:
        """Per-model L2 ``(P, R)`` broadcast to each parameter's layout."""
        P, R = l2.shape
        l2 = l2.to(self.device)
        if self.H == 0:
            tall = l2.repeat_interleave(self.C, dim=1).reshape(P, R * self.C, 1)
            return [tall, tall.clone()]
        tall = l2.repeat_interleave(self.H, dim=1).reshape(P, R * self.H, 1)
        per_model = l2.reshape(P, R, 1, 1)
        return [tall, tall.clone(), per_model, per_model.clone()]

    def draw_masks(self, live_seeds: np.ndarray, batch: int) -> Optional[torch.Tensor]:
        """This step's dropout masks of the streams whose seeds are ``live_seeds`` (one per
        live stream, ``(Ga, 1, B, H)``): one ``(B, H)`` draw per seed still training, from
        that seed's generator, as training the seed alone draws it."""
        if self.H == 0 or self.dropout <= 0:
            return None
        keep = 1.0 - self.dropout
        present = np.unique(live_seeds)

        def draw(s: int) -> torch.Tensor:
            return torch.rand((batch, self.H), generator=self.dropout_gens[s]) < keep

        drawn = {int(s): draw(int(s)) for s in present}
        if len(present) == 1:
            mask = drawn[int(present[0])].to(torch.float32).div_(keep)
            return mask.to(self.device)[None, None]
        stack = torch.stack([drawn[int(s)] for s in present]).to(torch.float32).div_(keep)
        pos = torch.as_tensor(np.searchsorted(present, live_seeds))
        return stack.index_select(0, pos).to(self.device)[:, None]

    def pass_masks(self, live_seeds: np.ndarray, n: int) -> Optional[torch.Tensor]:
        """A whole pass's keep masks of the seeds ``live_seeds`` (``(S_live, n, H)`` bool,
        on the host): the ``n`` rows that the pass's steps would draw one batch at a time
        from each seed's generator, drawn at once (the generator's stream is the same, so
        the masks are). :class:`_MaskFeed` draws them ahead and sends them to the device in
        one copy; :meth:`step_mask` cuts each step's out."""
        if self.H == 0 or self.dropout <= 0:
            return None
        keep = 1.0 - self.dropout
        return torch.stack([torch.rand((n, self.H), generator=self.dropout_gens[int(s)]) < keep
                            for s in live_seeds])

    def step_mask(self, masks: Optional[torch.Tensor], seed_pos: torch.Tensor, start: int,
                  batch: int) -> Optional[torch.Tensor]:
        """This step's dropout masks (as :meth:`draw_masks` returns them) cut from a pass's
        ``masks`` (:meth:`pass_masks`, on the device); ``seed_pos``: each live stream's
        position among the pass's seeds (on the device)."""
        if masks is None:
            return None
        keep = 1.0 - self.dropout
        rows = masks[:, start:start + batch]
        if masks.shape[0] == 1:
            return rows.to(torch.float32).div_(keep)[:, None]
        return rows.index_select(0, seed_pos).to(torch.float32).div_(keep)[:, None]

    def forward(self, x: torch.Tensor, params: Optional[List[torch.Tensor]] = None,
                mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, tuple]:
        """``x (Ga, B, F)`` -> logits ``(Ga, B, R, C)`` and what backward needs; ``mask``:
        dropout masks (training only)."""
        p = self.params if params is None else params
        Ga, B = x.shape[0], x.shape[1]
        R = self.R
        xt = x.transpose(1, 2)
        if self.H == 0:
            zt = torch.baddbmm(p[1], p[0], xt)  # (Ga, R*C, B)
            return zt.view(Ga, R, self.C, B).permute(0, 3, 1, 2).contiguous(), (x,)
        a = torch.baddbmm(p[1], p[0], xt).view(Ga, R, self.H, B).transpose(2, 3)
        if mask is not None:
            a = a * mask
        h = torch.sigmoid(a)  # (Ga, R, B, H)
        z = torch.matmul(h, p[2]).add_(p[3]).transpose(1, 2).contiguous()
        return z, (x, h, mask)

    def backward(self, dz: torch.Tensor, saved: tuple,
                 params: Optional[List[torch.Tensor]] = None,
                 workspace: Optional["GradWorkspace"] = None) -> List[torch.Tensor]:
        """Gradients of every parameter from ``dz = dLoss/dlogits (Ga, B, R, C)``
        (``params``: the ones the forward pass ran with, default all). ``workspace``: where
        the first layer's weight gradient is written (:class:`GradWorkspace`; None: a fresh
        tensor); the caller must have used the previous step's gradients by then."""
        p = self.params if params is None else params
        x = saved[0]
        Ga, B = x.shape[0], x.shape[1]
        if self.H == 0:
            dt = dz.reshape(Ga, B, self.R * self.C).transpose(1, 2)  # (Ga, R*C, B)
            return [_weight_grad(dt, x, workspace), dt.sum(dim=2, keepdim=True)]
        h, mask = saved[1], saved[2]
        dz = dz.transpose(1, 2)  # (Ga, R, B, C)
        gw2 = torch.matmul(h.transpose(-1, -2), dz)
        gb2 = dz.sum(dim=2, keepdim=True)
        dh = torch.matmul(dz, p[2].transpose(-1, -2))
        da = dh.mul_(h).mul_(1.0 - h)
        if mask is not None:
            da.mul_(mask)
        dt = da.transpose(2, 3).reshape(Ga, self.R * self.H, B)
        return [_weight_grad(dt, x, workspace), dt.sum(dim=2, keepdim=True), gw2, gb2]

    def logits(self, x: torch.Tensor, params: List[torch.Tensor],
               groups: Optional[np.ndarray] = None,
               reduce: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
               ) -> torch.Tensor:
        """Eval-mode logits ``(Ga, n, R, C)`` of ``x (G, n, F)`` (host or device), in row
        chunks; ``groups``: the feature group of each stream (None: stream g = group g).

        ``reduce``: applied to each chunk's logits before the chunks are joined (e.g. the
        argmax over classes): what is kept is then the reduced ``(Ga, n, R, ...)``, never
        every logit at once (WordContent's 10,000 test rows x 32 models x 1,000 classes
        are 1.3 GB of float32)."""
        index = None if groups is None else torch.as_tensor(groups)
        parts = []
        for i in range(0, x.shape[1], _EVAL_CHUNK):
            chunk = x[:, i:i + _EVAL_CHUNK]
            if index is not None:
                chunk = chunk.index_select(0, index)
            z = self.forward(chunk.to(self.device), params)[0]
            parts.append(z if reduce is None else reduce(z))
        if not parts:
            n_rows = x.shape[0] if groups is None else len(groups)
            empty = torch.zeros((n_rows, 0, self.R, self.C), device=self.device)
            return empty if reduce is None else reduce(empty)
        return torch.cat(parts, dim=1)


class GradWorkspace:
    """One tensor that the first layer's weight gradient is written into at every step of a
    fit, kept while its shape holds (streams leave the program between rounds).

    Why: that gradient is the largest tensor a step makes (DC's MLP, 8 layer specs: 8 x
    2,000 x 2,304 floats, 147 MB; WordContent's 32 models: 49 MB), above the size at which
    the C allocator maps fresh pages for every request. A fresh one per step is a page
    fault per 4 KB that the kernel zero-fills before the product writes it: measured on one
    core, ``torch.bmm`` of DC's shape took 109 ms into a fresh tensor and 57 ms into a reused
    one, with the same bits (``bench/probe_step.py``, docs/probe.md)."""

    def __init__(self) -> None:
        self._out: Optional[torch.Tensor] = None

    def take(self, shape: Tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """The workspace as an uninitialised tensor of ``shape`` on ``like``'s device."""
        old = self._out
        if old is not None and tuple(old.shape) == tuple(shape) and old.device == like.device:
            return old
        self._out = old = None  # the old one is freed before the new one is allocated
        self._out = torch.empty(shape, dtype=like.dtype, device=like.device)
        return self._out


def _weight_grad(dt: torch.Tensor, x: torch.Tensor,
                 workspace: Optional[GradWorkspace]) -> torch.Tensor:
    """The first layer's weight gradient ``dt @ x`` (``(Ga, K, B) @ (Ga, B, F)``), into the
    ``workspace`` when one is given."""
    if workspace is None:
        return torch.bmm(dt, x)
    return torch.bmm(dt, x, out=workspace.take((dt.shape[0], dt.shape[1], x.shape[2]), dt))


#: dLoss/dlogits for a batch: (logits (Ga,B,R,C), batch targets (B,C) or (Ga,B,C), seed
#: segments) -> (Ga,B,R,C)
GradFn = Callable[[torch.Tensor, torch.Tensor, Optional[Sequence[Tuple[int, int]]]],
                  torch.Tensor]
#: dev score of every model: (dev logits (Ga,n,R,C), which dev examples they are: None for
#: all of them, else their indices into the dev data) -> (Ga,R) float64, higher is better
ScoreFn = Callable[[torch.Tensor, Optional[np.ndarray]], np.ndarray]


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


def cross_entropy_grad(z: torch.Tensor, onehot: torch.Tensor,
                        segments: Optional[Sequence[Tuple[int, int]]] = None) -> torch.Tensor:
    p = _softmax(z, segments)
    return p.sub_(_per_model(onehot)).div_(z.shape[1])


def soft_mse_grad(z: torch.Tensor, target: torch.Tensor,
                   segments: Optional[Sequence[Tuple[int, int]]] = None) -> torch.Tensor:
    """d/dz of mean((softmax(z) - target)^2) over the batch and the classes."""
    p = _softmax(z, segments)
    g = (p - _per_model(target)).mul_(2.0 / (z.shape[1] * z.shape[3]))
    return p * (g - (g * p).sum(dim=-1, keepdim=True))


class FitState:
    """Outcome of one batched fit: best parameters, dev scores and epochs per model."""

    def __init__(self, net: StackedNet, best: List[torch.Tensor], dev: np.ndarray,
                 epochs: np.ndarray) -> None:
        self.net, self.best, self.dev, self.epochs = net, best, dev, epochs


def train_stacked(net: StackedNet, x: torch.Tensor, targets: torch.Tensor, x_dev: torch.Tensor,
           l2: np.ndarray, *, grad_fn: GradFn, score_fn: ScoreFn, batch_size: int,
           epoch_size: int, max_epoch: int, tenacity: int, lr: float,
           subsets: Optional[Sequence[np.ndarray]] = None,
           dev_subsets: Optional[Sequence[np.ndarray]] = None,
           first_best: float = -1.0) -> FitState:
    """SentEval's fit loop, for all P x R models at once (see the module docstring).

    ``x (G, n, F)`` and ``x_dev`` are shared by every seed (each stream reads its own rows
    of them with ``subsets`` and ``dev_subsets``); ``l2 (P, R)``. Each step gathers
    every live stream's batch from its seed's example order. Models leave the program when
    they stop: after each round, the streams (rows) and L2 values (columns) with no active
    model left are dropped from every tensor.

    ``subsets`` (one index array per entry of ``net.seeds``, longest first): each of those
    streams trains on its own subset of the examples (MDL's block models,
    :mod:`estratos.probe.mdl`), a pass being a permutation of its subset; see
    :func:`_subset_pass`. ``dev_subsets`` (with ``subsets``, one index array into ``x_dev``
    per entry of ``net.seeds``): each of those streams early-stops on its own dev examples
    (the held-out folds of k-fold cross-validation, :meth:`SentEvalClassifier.fit_folds`).
    ``first_best``: the dev score a first round must beat (SentEval starts from -1; a
    log-likelihood score needs -inf).
    """
    P, R = l2.shape
    n = x.shape[1]
    device = net.device
    own_dev = _own_dev_sets(x_dev, subsets, dev_subsets)
    xt = x.transpose(0, 1).contiguous().to(device)  # (n, G, F): one example's groups side by side
    adam = StackedAdam(net.params, net.decay_tensors(torch.as_tensor(l2, dtype=torch.float32)), lr)
    stopping = _EarlyStopping(net, P, R, first_best, tenacity)
    nepoch = 0
    with _mask_feed(net, n, subsets) as feed:
        program = _Program(net, adam, xt, targets.to(device), grad_fn, batch_size, subsets,
                           feed, np.zeros(len(net.seeds), dtype=np.int64))
        while stopping.active.any() and nepoch <= max_epoch:
            layout = _round_layout(net, stopping.rows)
            program.train_round(layout, nepoch, epoch_size)
            nepoch += epoch_size
            scores = _dev_scores(net, x_dev, own_dev, dev_subsets, score_fn, layout)
            if not stopping.update(net, adam, scores, nepoch):
                break
    log.debug("trained %d x %d models for %d epochs", P, R, nepoch)
    net.R = R
    return FitState(net, stopping.best, stopping.score, stopping.epochs)


def _own_dev_sets(x_dev: torch.Tensor, subsets: Optional[Sequence[np.ndarray]],
                  dev_subsets: Optional[Sequence[np.ndarray]]) -> Optional[List[torch.Tensor]]:
    """Each seed's own dev examples ``(G, n_s, F)`` when streams early-stop on their own dev
    rows (k-fold's held-out folds), gathered once for the whole fit; None when every stream
    scores on all of ``x_dev``. Checked first: a dev set per training subset, or none."""
    if dev_subsets is not None and (subsets is None or len(dev_subsets) != len(subsets)):
        raise ValueError("dev_subsets needs one dev index array per training subset")
    if dev_subsets is None:
        return None
    return [x_dev[:, torch.as_tensor(np.asarray(d, dtype=np.int64))] for d in dev_subsets]


class _Layout(NamedTuple):
    """Where a round's live streams sit, computed once per round (streams only leave the
    program between rounds).

    ``rows``: the streams still in the program, seed-major; ``row_seed``/``row_group``: each
    one's seed index and feature group; ``live_seeds``: the seeds with a stream left;
    ``simple``: one seed and every group (each step's batch is one contiguous gather, the
    common case); ``g_index``/``s_pos``: each stream's group and position among the live seeds,
    on the device; ``segments``: each live seed's block of rows."""

    rows: np.ndarray
    row_seed: np.ndarray
    row_group: np.ndarray
    live_seeds: np.ndarray
    simple: bool
    g_index: torch.Tensor
    s_pos: torch.Tensor
    segments: List[Tuple[int, int]]


def _round_layout(net: StackedNet, rows: np.ndarray) -> _Layout:
    """The :class:`_Layout` of the streams ``rows`` (those with an active model)."""
    row_seed = net.stream_seed[rows]
    row_group = net.stream_group[rows]
    live_seeds = np.unique(row_seed)
    # rows stay seed-major: each live seed's streams are one contiguous block
    starts = np.searchsorted(row_seed, live_seeds)
    return _Layout(rows=rows, row_seed=row_seed, row_group=row_group, live_seeds=live_seeds,
                   simple=len(net.seeds) == 1 and len(rows) == net.G,
                   g_index=torch.as_tensor(row_group, device=net.device),
                   s_pos=torch.as_tensor(np.searchsorted(live_seeds, row_seed),
                                         device=net.device),
                   segments=list(zip(starts.tolist(), starts[1:].tolist() + [len(rows)])))


@dataclass
class _Program:
    """What every training pass of one fit reads: the net and its optimizer, the examples
    ``xt (n, G, F)`` and targets on the device, the loss gradient, the batch size, MDL's
    ``subsets`` (None: every stream passes over all examples), the pass-mask feed (None:
    masks drawn per step) and each seed's Adam step count (subset streams step on their own).
    Kept together so a round's passes are methods, not functions taking a dozen locals."""

    net: StackedNet
    adam: StackedAdam
    xt: torch.Tensor
    targets: torch.Tensor
    grad_fn: GradFn
    batch_size: int
    subsets: Optional[Sequence[np.ndarray]]
    feed: Optional["_MaskFeed"]
    steps_taken: np.ndarray
    workspace: GradWorkspace = field(default_factory=GradWorkspace)

    def train_round(self, layout: _Layout, first_pass: int, epoch_size: int) -> None:
        """The ``epoch_size`` passes of one round (passes ``first_pass`` onwards), before the
        round's dev evaluation."""
        last = first_pass + epoch_size
        for pass_index in range(first_pass, last):
            if self.subsets is not None:
                _subset_pass(self.net, self.adam, self.xt, self.targets, self.subsets,
                             pass_index, self.batch_size, layout.live_seeds, layout.row_seed,
                             layout.row_group, layout.segments, self.steps_taken, self.grad_fn)
            else:
                self.shared_pass(layout, pass_index, ahead=pass_index + 1 < last)

    def shared_pass(self, layout: _Layout, pass_index: int, ahead: bool) -> None:
        """One pass over all examples, every stream in its seed's order
        (:func:`pass_permutation`), one forward/backward and Adam step per batch;
        ``ahead``: the next pass is in the same round (the mask feed may draw it now)."""
        net, device, n = self.net, self.net.device, self.xt.shape[0]
        perms = torch.stack([torch.from_numpy(pass_permutation(n, net.seeds[s], pass_index))
                             for s in layout.live_seeds]).to(device)  # (S_live, n)
        masks = None
        if self.feed is not None:
            masks = self.feed.take(layout.live_seeds, pass_index, ahead=ahead)
        for start in range(0, n, self.batch_size):
            idx = perms[:, start:start + self.batch_size]  # (S_live, B)
            xb, tb = self.batch(layout, idx)
            mask = (net.draw_masks(layout.row_seed, idx.shape[1]) if self.feed is None else
                    net.step_mask(masks, layout.s_pos, start, idx.shape[1]))
            z, saved = net.forward(xb, mask=mask)
            grads = net.backward(self.grad_fn(z, tb, layout.segments), saved,
                                 workspace=self.workspace)
            self.adam.step(grads, layout.segments)

    def batch(self, layout: _Layout, idx: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The step's features ``(Ga, B, F)`` and targets of every live stream, from the live
        seeds' example indices ``idx (S_live, B)``: one contiguous gather when a single seed
        trains every group, else each stream's own rows of its own group."""
        xt, targets = self.xt, self.targets
        if layout.simple:
            return (xt.index_select(0, idx[0]).transpose(0, 1),
                    targets.index_select(0, idx[0]))
        rows_idx = idx.index_select(0, layout.s_pos)  # (Ga, B): each stream's examples
        xb = xt[rows_idx.t(), layout.g_index[None, :]].transpose(0, 1)
        tb = targets[rows_idx] if len(layout.live_seeds) > 1 else targets.index_select(0, idx[0])
        return xb, tb


def _dev_scores(net: StackedNet, x_dev: torch.Tensor, own_dev: Optional[List[torch.Tensor]],
                dev_subsets: Optional[Sequence[np.ndarray]], score_fn: ScoreFn,
                layout: _Layout) -> np.ndarray:
    """Every live model's dev score after a round ``(rows, cols)``: each stream on its own
    dev examples when it has them (one seed's rows are one contiguous block), else all of
    ``x_dev``."""
    if own_dev is not None and dev_subsets is not None:
        return np.concatenate([
            score_fn(net.logits(own_dev[s], [p[a:b] for p in net.params],
                                layout.row_group[a:b]),
                     np.asarray(dev_subsets[s]))
            for s, (a, b) in zip(layout.live_seeds, layout.segments)])
    return score_fn(net.logits(x_dev, net.params, None if layout.simple else layout.row_group),
                    None)


class _EarlyStopping:
    """SentEval's early stopping, kept for every one of the fit's ``P x R`` models: the best
    copy of its parameters, its best dev score, its cumulative non-improvement count, its
    epochs and whether it still trains (``active``); a stall once the count has reached
    ``tenacity`` stops it. ``rows``/``cols``: the streams and L2
    values still in the program (those with an active model), what the live tensors hold."""

    def __init__(self, net: StackedNet, P: int, R: int, first_best: float,
                 tenacity: int) -> None:
        self.tenacity = tenacity
        self.best = [p.clone() for p in net.params]
        self.score = np.full((P, R), float(first_best))  # SentEval starts from -1
        self.count = np.zeros((P, R), dtype=np.int64)
        self.epochs = np.zeros((P, R), dtype=np.int64)
        self.active = np.ones((P, R), dtype=bool)
        self.rows, self.cols = np.arange(P), np.arange(R)

    def update(self, net: StackedNet, adam: StackedAdam, scores: np.ndarray,
               nepoch: int) -> bool:
        """Take a round's dev ``scores`` of the live models: an improvement keeps a copy of
        the model; a stall past ``tenacity`` stops it. Then drop from the program the rows
        and columns with no active model left. False when no model is left."""
        act_after = self._record(net, scores, nepoch)
        keep_rows = act_after.any(axis=1)
        if not keep_rows.any():
            return False
        keep_cols = act_after[keep_rows].any(axis=0)
        if not (keep_rows.all() and keep_cols.all()):
            r_idx = torch.as_tensor(np.flatnonzero(keep_rows), device=net.device)
            c_idx = torch.as_tensor(np.flatnonzero(keep_cols), device=net.device)
            adam.keep(r_idx, c_idx, net.blocks)
            net.params = adam.params
            net.R = int(keep_cols.sum())
            self.rows, self.cols = self.rows[keep_rows], self.cols[keep_cols]
        return True

    def _record(self, net: StackedNet, scores: np.ndarray, nepoch: int) -> np.ndarray:
        """Update the best copies, scores, counts, epochs and active flags of the live
        models from ``scores``; returns which live models are still active."""
        rows, cols = self.rows, self.cols
        live = np.ix_(rows, cols)
        act = self.active[live]
        improved = act & (scores > self.score[live])
        stalled = act & ~improved
        for i, j in zip(*np.nonzero(improved)):
            for b, p, k in zip(self.best, net.params, net.blocks):
                _copy_model(b, p, k, int(rows[i]), int(cols[j]), int(i), int(j))
        sub = self.score[live]
        sub[improved] = scores[improved]
        self.score[live] = sub
        sub = self.count[live]
        stop = stalled & (sub >= self.tenacity)
        sub[stalled] += 1
        self.count[live] = sub
        act_after = act & ~stop
        self.active[live] = act_after
        sub = self.epochs[live]
        sub[act] = nepoch
        self.epochs[live] = sub
        return act_after


class _MaskFeed:
    """Dropout masks for a program on an accelerator, a pass at a time, drawn one pass ahead
    in a thread.

    Why: the masks come from each seed's CPU generator (so a model drops out the same way on
    every device), and drawing a (64 x 2,000) mask and copying it to the GPU at every step
    kept the GPU waiting on the host (DC's MLP: 3.9 ms a step on an H100). Drawn a pass at
    a time from the same generators they are the same numbers (:meth:`StackedNet.pass_masks`);
    drawn in a thread while the GPU trains the pass before, and sent in one copy, they cost
    the program nothing. The next pass is drawn ahead only within a round (its seeds are
    known then); a round's first pass is drawn when it starts."""

    @staticmethod
    def wanted(net: StackedNet) -> bool:
        return net.device.type in PASS_MASK_DEVICES and net.H > 0 and net.dropout > 0

    def __init__(self, net: StackedNet, n: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.net, self.n = net, n
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="estratos-masks")
        self.pending: Optional[Tuple[int, Any]] = None

    def _draw(self, live_seeds: np.ndarray) -> Optional[torch.Tensor]:
        masks = self.net.pass_masks(live_seeds, self.n)
        if masks is None or self.net.device.type != "cuda":
            return masks
        return masks.pin_memory()  # so that the copy to the GPU does not block the host

    def take(self, live_seeds: np.ndarray, pass_index: int, ahead: bool) -> Optional[torch.Tensor]:
        """Pass ``pass_index``'s masks on the device; ``ahead``: start drawing the next
        pass's (same seeds) now."""
        if self.pending is not None and self.pending[0] == pass_index:
            host = self.pending[1].result()
        else:
            host = self._draw(live_seeds)
        self.pending = None
        if ahead:
            self.pending = (pass_index + 1, self.pool.submit(self._draw, live_seeds.copy()))
        return None if host is None else host.to(self.net.device, non_blocking=True)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _mask_feed(net: StackedNet, n: int, subsets: Optional[Sequence[np.ndarray]]
               ) -> ContextManager[Optional["_MaskFeed"]]:
    """A :class:`_MaskFeed` for the program (closed when the fit ends) where its masks are
    drawn a pass at a time, else None (per-step draws: the CPU, or MDL's subsets)."""
    if subsets is None and _MaskFeed.wanted(net):
        return contextlib.closing(_MaskFeed(net, n))
    return contextlib.nullcontext()


def _subset_pass(net: StackedNet, adam: StackedAdam, xt: torch.Tensor, targets: torch.Tensor,
                 subsets: Sequence[np.ndarray], pass_index: int, batch_size: int,
                 live_seeds: np.ndarray, row_seed: np.ndarray, row_group: np.ndarray,
                 segments: Sequence[Tuple[int, int]], steps_taken: np.ndarray,
                 grad_fn: GradFn) -> None:
    """One training pass of streams that train on subsets of different sizes.

    Each subset is visited in the order ``pass_permutation(len(subset), seed, pass)`` in
    batches of ``batch_size``, as training it alone does, so a stream takes as many steps as
    its subset has batches. Subsets are sorted longest first, so the streams that still have
    a batch at a step are the first rows of the program, and their batch sizes do not grow
    down the rows: the streams of one batch size are one contiguous block, and each block is
    one forward/backward of exactly that many rows (a stream's loss is the mean over its own
    batch, with nothing padded, as when it trains alone). The blocks' gradients meet in one
    Adam step, which counts each stream's own steps.
    """
    device = xt.device
    seeds = net.seeds
    orders = [subsets[s][pass_permutation(len(subsets[s]), seeds[s], pass_index)]
              for s in live_seeds]
    lengths = np.array([len(o) for o in orders])
    s_pos = np.searchsorted(live_seeds, row_seed)
    for start in range(0, int(lengths.max(initial=0)), batch_size):
        k = int((lengths > start).sum())  # seeds with a batch now: the first k (longest)
        sizes = np.minimum(lengths[:k] - start, batch_size)
        parts = []
        first = 0
        while first < k:  # blocks of seeds with the same batch size
            last = first + int((sizes[first:] == sizes[first]).sum())
            B = int(sizes[first])
            a, b = segments[first][0], segments[last - 1][1]
            idx = np.stack([o[start:start + B] for o in orders[first:last]])  # (seeds, B)
            rows_idx = torch.as_tensor(idx[s_pos[a:b] - first], device=device)  # (b - a, B)
            # one gather of every seed's batch, (seeds, G, B, F); then each live stream's
            picked = xt.index_select(0, torch.as_tensor(idx.reshape(-1), device=device)).view(
                last - first, B, net.G, -1).transpose(1, 2)
            if b - a == (last - first) * net.G:  # every group of these seeds still training
                xb = picked.reshape(b - a, B, -1)
            else:
                xb = picked[torch.as_tensor(s_pos[a:b] - first, device=device),
                            torch.as_tensor(row_group[a:b], device=device)]
            views = [p[a:b] for p in net.params]
            z, saved = net.forward(xb, views, mask=net.draw_masks(row_seed[a:b], B))
            own = [(u - a, v - a) for u, v in segments[first:last]]
            parts.append(net.backward(grad_fn(z, targets[rows_idx], own), saved, views))
            first = last
        grads = parts[0] if len(parts) == 1 else [torch.cat(g) for g in zip(*parts)]
        steps_taken[live_seeds[:k]] += 1
        adam.step(grads, segments[:k], steps=steps_taken[live_seeds[:k]].tolist())


def seed_list(seed: Union[int, Sequence[int]]) -> List[int]:
    return [int(seed)] if isinstance(seed, (int, np.integer)) else [int(s) for s in seed]


def torch_device(device: Union[str, torch.device]) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(str(device))
