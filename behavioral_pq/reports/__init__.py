"""Experiment reports (Markdown + JSON + figures): downstream tasks, guidance, pretraining, probe sets and
lowering. They compose the library's layers and are composed only by the CLI."""
