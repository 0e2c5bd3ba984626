"""The ``bpq`` command: argparse and printing only, one module per command group; ``cli.main`` is the entry
point. Every computation it runs is a library function a Python user can call."""
