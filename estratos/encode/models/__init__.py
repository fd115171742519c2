"""Model adapters: from sentences to a model's pooled hidden states.

What is here: which encoder a run uses (:mod:`.factory`), the Hugging Face encoder with its
poolings, prompts and precisions (:mod:`.hf`, :mod:`.pooling`), the adapter for a
SentEval-style ``batcher`` function (:mod:`.batcher`), tokenization and token-budget batches
(:mod:`.tokens`, :mod:`.token_batches`), where a model comes from (:mod:`.hub`) and the
devices it runs on (:mod:`.devices`). The run around them (inputs, keys, the pipeline, the
cache writes, the summary) is one level up, in :mod:`estratos.encode`.
"""
