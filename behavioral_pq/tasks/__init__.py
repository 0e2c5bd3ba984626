"""What users do with embeddings: labelled datasets, estimators (MLP heads), saved predictors (best pass, -Oz
benefit) and pipeline guidance (``tasks.guidance``). Built on everything below it, never on ``reports`` or
``cli``."""
