"""Stage two: probes for every task x layer x seed from the cache alone; results and reports."""
