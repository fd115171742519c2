"""Stage one: run an encoder once over unique sentences and write the HDF5 cache."""
