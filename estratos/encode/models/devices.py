"""Where the encoder runs and in which precision.

CUDA runs under autocast (bfloat16 where the GPU supports it, else float16): the pooled
vectors are stored in float16 anyway, and autocast keeps LayerNorm/softmax in float32. On CPU
the model stays float32 (CPU half precision is slow and inexact) and torch uses every core
this process may run on, unless told otherwise (``threads``, or ``OMP_NUM_THREADS`` in the
environment: on a busy shared machine, fewer threads than cores avoids OpenMP threads spinning
against each other, which can make small models many times slower).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import ContextManager, Optional

import torch

from estratos.devices import available_cores
from estratos.errors import OptionError

log = logging.getLogger(__name__)


#: cores this process may run on (respects taskset / cgroup affinity)
usable_cores = available_cores


def autocast_dtype(device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype for ``device`` (None: run in float32)."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def autocast(device: torch.device) -> ContextManager:
    """Autocast context for the forward pass on ``device`` (a no-op off CUDA)."""
    dtype = autocast_dtype(device)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)


def compute_label(device: torch.device) -> str:
    """How vectors were computed, recorded in the cache (e.g. ``cpu/float32``)."""
    dtype = autocast_dtype(device)
    return f"{device.type}/{'float32' if dtype is None else str(dtype).replace('torch.', '')}"


def cpu_threads(threads: Optional[int] = None) -> int:
    """Threads to use: ``threads``, else ``OMP_NUM_THREADS`` when set, else all usable cores."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise OptionError(f"--threads: must be a positive integer, got {threads!r}")
        return threads
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return usable_cores()


def prepare_cpu_threads(device: torch.device, threads: Optional[int] = None) -> None:
    """On CPU, set torch's thread count (:func:`cpu_threads`; some launchers default to fewer)."""
    if device.type == "cpu":
        n = cpu_threads(threads)
        if torch.get_num_threads() != n:
            log.info("using %d CPU threads", n)
            torch.set_num_threads(n)


#: ``--batch-tokens auto`` off CUDA: the largest budget (small models get it whole)
CPU_BATCH_TOKENS = 8192
#: ...and the smallest (a budget below it would make batches of one or two sentences)
CPU_MIN_BATCH_TOKENS = 256
#: off CUDA, the hidden states a batch keeps may add at most this share to what a plain
#: forward pass of the same batch holds (the weights and one layer's transients), so that
#: encode's peak memory stays within 1.3 times a plain forward's (bench/encode_memory.py)
CPU_STATES_SHARE = 0.3
#: share of the GPU's free memory (after loading the model) that batches may fill
GPU_MEMORY_SHARE = 0.5
#: bounds of the GPU budget (a power of two in between)
GPU_BATCH_TOKENS = (8192, 262144)
#: padded length the per-token attention estimate assumes (longer batches are bounded by the
#: quadratic rule of :mod:`estratos.encode.models.token_batches`, which uses the same span)
_SPAN = 128


def activation_bytes_per_token(config: object, act_bytes: int = 2) -> int:
    """Rough peak memory per token of a forward pass keeping every hidden state: the states
    themselves, one layer's transients (q/k/v, feed-forward, attention scores at
    :data:`_SPAN` tokens) and the float32 pooling temporaries."""
    dim = int(getattr(config, "hidden_size", 1024))
    layers = int(getattr(config, "num_hidden_layers", 24))
    ffn = int(getattr(config, "intermediate_size", 4 * dim) or 4 * dim)
    heads = int(getattr(config, "num_attention_heads", 16))
    states = act_bytes * (layers + 1) * dim
    transient = act_bytes * (4 * dim + 2 * ffn) + heads * _SPAN * (act_bytes + 4)
    pooling = 2 * 4 * dim
    return states + transient + pooling


def cpu_batch_tokens(config: object, weights_bytes: int) -> int:
    """``--batch-tokens auto`` on CPU: the largest power of two of tokens, within
    [:data:`CPU_MIN_BATCH_TOKENS`, :data:`CPU_BATCH_TOKENS`], whose hidden states (every
    state is kept by the forward pass, whatever ``--states`` stores: layers + 1 x width x 4
    bytes a token, float32 on CPU) stay within :data:`CPU_STATES_SHARE` of what a plain
    forward pass of the batch holds (the weights, ``weights_bytes``, and one layer's
    transients). Scaling with layers x width keeps a deep, wide model's batches small
    enough, while a small model keeps the full budget."""
    dim = int(getattr(config, "hidden_size", 1024))
    layers = int(getattr(config, "num_hidden_layers", 24))
    ffn = int(getattr(config, "intermediate_size", 4 * dim) or 4 * dim)
    heads = int(getattr(config, "num_attention_heads", 16))
    states = 4 * (layers + 1) * dim
    transient = 4 * (4 * dim + 2 * ffn) + heads * _SPAN * 8
    over = states - CPU_STATES_SHARE * transient
    if over <= 0:
        return CPU_BATCH_TOKENS
    fit = int(CPU_STATES_SHARE * weights_bytes / over)
    if fit < CPU_MIN_BATCH_TOKENS:
        return CPU_MIN_BATCH_TOKENS
    return min(CPU_BATCH_TOKENS, 1 << (fit.bit_length() - 1))


def batch_tokens_for_memory(free_bytes: int, config: object) -> int:
    """The largest power of two of tokens whose activations fill :data:`GPU_MEMORY_SHARE` of
    ``free_bytes``, within :data:`GPU_BATCH_TOKENS`."""
    low, high = GPU_BATCH_TOKENS
    fit = int(GPU_MEMORY_SHARE * free_bytes) // activation_bytes_per_token(config)
    if fit < low:
        return low
    return min(high, 1 << (fit.bit_length() - 1))


def auto_batch_tokens(device: torch.device, config: object,
                      weights_bytes: Optional[int] = None) -> int:
    """``--batch-tokens auto``: on CUDA from the free memory after the model was loaded,
    elsewhere from the model's shape and weights (:func:`cpu_batch_tokens`; without
    ``weights_bytes``, :data:`CPU_BATCH_TOKENS`)."""
    if device.type != "cuda":
        if weights_bytes is None:
            return CPU_BATCH_TOKENS
        budget = cpu_batch_tokens(config, weights_bytes)
        log.info("--batch-tokens auto: %d (%d layers x %s dims, %.2f GB of weights)", budget,
                 int(getattr(config, "num_hidden_layers", 0)),
                 getattr(config, "hidden_size", "?"), weights_bytes / 1e9)
        return budget
    free, _ = torch.cuda.mem_get_info(device)
    budget = batch_tokens_for_memory(free, config)
    log.info("--batch-tokens auto: %d (%.1f GB free on %s)", budget, free / 1e9, device)
    return budget
