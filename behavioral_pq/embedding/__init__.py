"""From a module to a vector: probe sets, the spectrum (P x 56 reactions), the product quantizer (P x 8 codes),
the PQ-BERT model, encoder checkpoints and the ``Encoder`` that ties them together. Built on ``core``."""
