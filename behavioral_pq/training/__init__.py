"""Offline searches and training that produce the shipped artifacts: the genetic pass-sequence search, the probe
search (clusters + GA) and masked-LM pretraining of PQ-BERT. Built on ``core``, ``embedding`` and ``corpus``."""
