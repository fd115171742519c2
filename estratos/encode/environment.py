"""What a cache records about the software that wrote it (``library_versions``)."""

from __future__ import annotations

import platform
from typing import Dict

import numpy as np


def library_versions() -> Dict[str, str]:
    """Versions of the libraries that shaped the vectors (recorded, never compared)."""
    import h5py
    import torch
    import transformers

    return {"python": platform.python_version(), "numpy": np.__version__,
            "h5py": h5py.version.version, "hdf5": h5py.version.hdf5_version,
            "torch": torch.__version__, "transformers": transformers.__version__}
