"""Reference implementations that tests and benchmarks compare the pipeline against.

Nothing here produces results: :mod:`estratos.testing.reference` is SentEval's fit loop
written the plain way (one ``torch.nn`` model, ``torch.optim.Adam``), the yardstick of the
batched trainer.
"""
