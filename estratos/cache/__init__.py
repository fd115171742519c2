"""The HDF5 sentence -> per-layer vectors store: schema, writer, reader, merge, verify."""
