"""estratos: what each layer of a sentence encoder knows.

Two stages meet at an HDF5 file: ``estratos.encode`` runs a model once and stores every
hidden state's pooled vectors in a cache (``estratos.cache``); ``estratos.probe`` trains
light classifiers from that cache for every task x layer x seed (tasks in ``estratos.tasks``).
"""

__version__ = "0.1.0"
