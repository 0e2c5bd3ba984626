"""Where passes run: *measure* mode or *target* mode.

- **measure** (``target=None``): no TargetMachine, generic TTI. Results do not depend on the machine, which is
  what spectra, labels, Autophase and the probe search need. Every measurement in the package runs this way.
- **target** (a :class:`Target`): a TargetMachine for a triple and CPU, so TTI-driven passes (the loop and SLP
  vectorizers, unrolling, inlining costs) see real registers and costs, and every function definition is
  compiled for that CPU (``"target-cpu"``/``"target-features"`` attributes, as ``clang -march=CPU`` writes
  them; ``llc`` reads them). This is for code a user will run: ``bpq optimize``, ``lower`` and ``compile``
  use the host unless told otherwise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Union

from behavioral_pq.core._native_loader import native


#: What :attr:`Target.size` may be: no marking, or clang -Oz's / -Os's marks on every definition.
SIZE_LEVELS = ("", "Oz", "Os")


@dataclass(frozen=True)
class Target:
    """A code-generation target.

    Attributes:
        triple: e.g. ``"x86_64-pc-linux-gnu"``.
        cpu: an LLVM CPU name (``"znver4"``, ``"skylake"``, ``"x86-64-v3"``, ``"generic"``), or ``""`` to keep
            the CPU each function was compiled for (its ``"target-cpu"`` attribute: what clang -O3 of the same
            source would target).
        features: extra ``+feature,-feature`` list on top of the CPU's own ("" for none).
        size: ``"Oz"`` or ``"Os"`` to compile every function definition as clang -Oz / -Os compiles it, whatever
            the pipeline: marked ``minsize``/``optsize`` (Oz) or ``optsize`` (Os) before the first pass, as
            clang's front end marks them (passes and the code generator read the marks). ``""`` (default): only
            a ``default<Oz>`` / ``default<Os>`` pipeline marks them.
    """

    triple: str
    cpu: str = "generic"
    features: str = ""
    size: str = ""

    def __post_init__(self):
        if self.size not in SIZE_LEVELS:
            raise ValueError(f"target size must be one of {SIZE_LEVELS}, got {self.size!r}")

    @classmethod
    def host(cls) -> "Target":
        """This machine, as ``clang -march=native`` sees it."""
        triple, cpu, features = native.host_target()
        return cls(triple, cpu, features)

    @classmethod
    def module_cpus(cls) -> "Target":
        """The host's triple, keeping the CPU each function was compiled for (``cpu=""``): what size builds use,
        since the host's widest vector encodings are longer (47 shipped tasks: .text 1.002x clang -Oz's this way,
        1.012x for the host CPU)."""
        return cls(native.host_target()[0], "", "")

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        """For people: ``x86_64-pc-linux-gnu, CPU znver4`` (features left out; their count said when given)."""
        cpu = f"CPU {self.cpu}" if self.cpu else "each function's own CPU"
        features = f" with {len(self.features.split(','))} features" if self.features else ""
        size = f", marked for -{self.size}" if self.size else ""
        return f"{self.triple}, {cpu}{features}{size}"


TargetLike = Union[None, str, Target]


def resolve_target(target: TargetLike = "host", cpu: Optional[str] = None) -> Optional[Target]:
    """``None`` or ``"measure"``: measure mode (returns None). ``"host"``: this machine (``cpu`` overrides its CPU,
    then with that CPU's own features only; ``cpu=""`` keeps the CPU each function was compiled for). A triple
    string: that triple with ``cpu`` (default ``"generic"``). A :class:`Target` is returned as it is."""
    if target is None or target == "measure":
        return None
    if isinstance(target, Target):
        return target
    if not isinstance(target, str) or not target:
        raise ValueError(f"target must be 'host', 'measure', a target triple or a Target, got {target!r}")
    if target == "host":
        host = Target.host()
        return host if cpu is None else Target(host.triple, cpu)
    return Target(target, "generic" if cpu is None else cpu)
