"""The compiler substrate: LLVM 19 in-process (native core, crash-contained engine), modules, the pass catalog,
pass pipelines and static features (Autophase, InstCount). Imports nothing above it."""
