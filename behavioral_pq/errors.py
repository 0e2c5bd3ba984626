"""Typed errors. Each subclasses a built-in so callers can catch broadly (``ValueError``) or precisely."""

from __future__ import annotations

from typing import Optional


class BPQError(Exception):
    """Base class of every error raised by behavioral_pq."""


class InvalidIRError(BPQError, ValueError):
    """The input is not a valid LLVM module (parse or verifier failure, unreadable bitcode)."""


class UnknownPassError(BPQError, ValueError):
    """A pass flag or index that is not in the catalog."""


class PipelineError(BPQError, ValueError):
    """A raw new-pass-manager pipeline string that LLVM cannot parse."""


class ProbeSetError(BPQError, ValueError):
    """A probe-set file that is missing, malformed or made for another LLVM version."""


class ToolError(BPQError, RuntimeError):
    """An external tool (clang, llvm-link, ...) failed; the message carries its stderr."""


class CompileError(ToolError):
    """A C/C++ source did not compile to LLVM IR."""


class ToolNotFoundError(BPQError, FileNotFoundError):
    """An external tool is not installed."""


class ToolTimeoutError(BPQError, TimeoutError):
    """An external tool ran past its timeout and was killed."""


class EngineError(BPQError, RuntimeError):
    """Pass execution failed for one module (base of the crash and timeout errors)."""

    def __init__(self, message: str, *, module: Optional[str] = None, pipeline: Optional[str] = None,
                 pipeline_index: Optional[int] = None, detail: str = ""):
        super().__init__(message)
        self.module = module
        self.pipeline = pipeline
        self.pipeline_index = pipeline_index
        self.detail = detail

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), self.module, self.pipeline, self.pipeline_index, self.detail))


def _rebuild(cls, message, module, pipeline, pipeline_index, detail):
    return cls(message, module=module, pipeline=pipeline, pipeline_index=pipeline_index, detail=detail)


class PassCrashError(EngineError):
    """LLVM aborted (report_fatal_error, a signal) while running a pipeline on a module."""


class PassTimeoutError(EngineError, TimeoutError):
    """A pipeline ran past the per-module timeout on a module; the worker running it was killed."""


class OutputPathError(BPQError, PermissionError):
    """An output path that must not be written: a symbolic link (unless overwriting is asked for), a device, a
    FIFO or a socket."""


class DeadlineError(BPQError, TimeoutError):
    """A call's deadline (``deadline=``, a ``time.monotonic()`` value) passed before its work was done: the work
    left was dropped and the workers running it were replaced."""


class CorpusError(BPQError, ValueError):
    """A corpus store is missing, corrupt (a shard that fails its checksum) or from another LLVM version."""


class CompileCommandsError(CorpusError):
    """A ``compile_commands.json`` that is refused: malformed, too large or too deep, an entry whose folder does not
    exist, or a flag that is not on the allow-list of flags taken from a build file (the message names the entry,
    the file and the flag, never the content of a file the flag points to)."""


class LoweringError(BPQError, RuntimeError):
    """No verified assembly came out of a back end (the LLM's last verdict is in the message; ``result`` holds
    the whole trace)."""

    def __init__(self, message: str, result=None):
        super().__init__(message)
        self.result = result


class ReferenceRunError(LoweringError):
    """The reference build of a checked program did not run as it must (an exit status other than the expected
    one, a signal, a timeout, its stdin unread), so comparing other builds with it would prove nothing.
    ``status`` is its exit status (None when killed), ``stderr`` the head of its standard error."""

    def __init__(self, message: str, status: Optional[int] = None, stderr: str = ""):
        super().__init__(message)
        self.status = status
        self.stderr = stderr


class VerificationError(LoweringError):
    """A build failed its check (its verdict is in the message and in ``verdict``): it is not written, since a
    build that computes something else than the program is no build of it."""

    def __init__(self, message: str, verdict=None):
        super().__init__(message)
        self.verdict = verdict


class SandboxError(BPQError, RuntimeError):
    """Code from a model endpoint cannot be run safely here (bubblewrap is missing or not allowed) and the user
    did not opt in to running it unprotected."""


class LLMError(BPQError, RuntimeError):
    """An LLM endpoint failed: not configured, unreachable, or an HTTP error that retries did not cure."""


class LLMNotConfiguredError(LLMError, ValueError):
    """No LLM endpoint is configured (no base URL or model in the environment or settings file)."""


class LLMTimeoutError(LLMError, TimeoutError):
    """An LLM endpoint did not answer within the timeout, on every try."""


class LLMResponseError(LLMError, ValueError):
    """An LLM endpoint answered with something that is not a chat completion (bad JSON, no choices)."""


class PretrainError(BPQError, RuntimeError):
    """Pretraining cannot go on: no spectra, an output folder from another configuration, a bad batch size."""


class LibraryError(BPQError, ValueError):
    """A program library that cannot be used: missing, corrupt, another format, or tied to another encoder."""


class RankerError(BPQError, ValueError):
    """A pipeline ranker or its training data that cannot be used: missing, corrupt, another format, or unfit."""


class PredictorError(BPQError, ValueError):
    """A predictor folder that cannot be used: missing, corrupt, another format, or tied to another encoder."""


class CheckpointError(BPQError, ValueError):
    """A checkpoint that is missing, corrupt, or made for another LLVM version, feature schema or probe set."""


class QuantizerError(BPQError, ValueError):
    """A quantizer file that is missing, corrupt or of another format; or data a quantizer cannot take."""


class MalformedAnswer(BPQError, ValueError):
    """A model answer with no assembly in it."""


class TaskError(BPQError, ValueError):
    """A task file or signature that cannot be used (unknown type, wrong case arity, missing source)."""


class ConfigError(BPQError, ValueError):
    """A configuration file that is missing, not TOML, or has unknown or ill-typed keys; or a setting from the
    environment (``BPQ_TIMEOUT`` and the like) that is not a number it may be."""


class UnknownBenchmarkError(BPQError, LookupError):
    """A benchmark URI or path that no dataset, file, store or generator provides."""


class UnknownSpaceError(BPQError, KeyError, ValueError):
    """An observation or reward space name that the environment does not have (a KeyError, as a missing key of
    ``env.observation.spaces`` is, and a ValueError, as the core environment's unknown names are)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnsupportedSpaceError(UnknownSpaceError):
    """An observation space of CompilerGym that this package cannot compute (see
    ``behavioral_pq.env.compiler_gym.observations.UNSUPPORTED``)."""


class HostCompilerFailure(BPQError, OSError):
    """The host C++ compiler could not be run or its include search list not read (CompilerGym's error of the same
    name)."""


class UnableToParseHostCompilerOutput(HostCompilerFailure):
    """The host C++ compiler ran but printed no ``#include <...>`` search list."""


class BenchmarkInitError(BPQError, OSError):
    """A CompilerGym benchmark could not be made or built: a compilation job, the link of its units or its build
    command failed (CompilerGym's error of the same name, an OSError as there); the message carries the stderr."""
