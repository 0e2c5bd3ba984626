"""``observation_spaces`` and ``reward_spaces``: the enums that CompilerGym 0.2.5's ``compiler_gym.envs.llvm``
exports (generated there from its service's spaces), with the same member names, values and order; the
observation enum ends with this package's Spectrum, Codes and Embedding."""

from __future__ import annotations

from enum import Enum

#: CompilerGym 0.2.5's observation spaces, in the order of its ``specs.observation_spaces``.
COMPILER_GYM_OBSERVATION_SPACES = (
    "Ir", "IrSha1", "Bitcode", "BitcodeFile", "InstCount", "Autophase", "Programl", "ProgramlJson", "CpuInfo",
    "IrInstructionCount", "IrInstructionCountO0", "IrInstructionCountO3", "IrInstructionCountOz",
    "ObjectTextSizeBytes", "ObjectTextSizeO0", "ObjectTextSizeO3", "ObjectTextSizeOz", "TextSizeBytes",
    "TextSizeO0", "TextSizeO3", "TextSizeOz", "IsBuildable", "IsRunnable", "Runtime", "Buildtime",
    "Inst2vecPreprocessedText", "Inst2vecEmbeddingIndices", "Inst2vec", "InstCountDict", "InstCountNorm",
    "InstCountNormDict", "AutophaseDict", "LexedIr",
)

#: CompilerGym 0.2.5's reward spaces, in the order of its ``specs.reward_spaces``.
COMPILER_GYM_REWARD_SPACES = (
    "IrInstructionCount", "IrInstructionCountNorm", "IrInstructionCountO3", "IrInstructionCountOz",
    "ObjectTextSizeBytes", "ObjectTextSizeNorm", "ObjectTextSizeO3", "ObjectTextSizeOz",
    "TextSizeBytes", "TextSizeNorm", "TextSizeO3", "TextSizeOz",
)

observation_spaces = Enum("observation_spaces", [(name, name) for name in (
    *COMPILER_GYM_OBSERVATION_SPACES, "Spectrum", "Codes", "Embedding")], module=__name__)
reward_spaces = Enum("reward_spaces", [(name, name) for name in COMPILER_GYM_REWARD_SPACES], module=__name__)

__all__ = ["COMPILER_GYM_OBSERVATION_SPACES", "COMPILER_GYM_REWARD_SPACES", "observation_spaces", "reward_spaces"]
