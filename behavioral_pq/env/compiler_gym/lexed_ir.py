"""CompilerGym's ``LexedIr`` observation: the tokens of a module's textual IR, as four parallel lists
(``token_id``, ``token_kind``, ``token_category``, ``token_value``). The lexer follows LLVM's ``LLLexer`` token
classes (keywords, types, global and local variables, labels, integer/float/string constants, metadata,
attribute groups, punctuation); ids are this lexer's own (LLVM's enum numbering changes between releases)."""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple

#: (kind, category, pattern), tried in order at each position.
_TOKENS = [
    ("comment", None, r";[^\n]*"),
    ("whitespace", None, r"\s+"),
    ("StringConstant", "literal_value", r'c?"[^"]*"'),
    ("LabelStr", "label", r'[-a-zA-Z$._0-9]+:|"[^"]*":'),
    ("GlobalVar", "variable", r'@(?:[-a-zA-Z$._][-a-zA-Z$._0-9]*|"[^"]*"|\d+)'),
    ("LocalVar", "variable", r'%(?:[-a-zA-Z$._][-a-zA-Z$._0-9]*|"[^"]*"|\d+)'),
    ("MetadataVar", "metadata", r'!(?:[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+)?'),
    ("AttrGrpID", "attribute", r"#\d+"),
    ("ComdatVar", "variable", r"\$[-a-zA-Z$._0-9]+"),
    ("Type", "type", r"(?:i\d+|half|bfloat|float|double|x86_fp80|fp128|ppc_fp128|void|label|metadata|ptr|"
                     r"x86_amx|token)\b"),
    ("APFloat", "literal_value", r"[-+]?\d+\.\d*(?:[eE][-+]?\d+)?|0x[KLMHR]?[0-9A-Fa-f]+"),
    ("APSInt", "literal_value", r"[-+]?\d+"),
    ("Keyword", "keyword", r"[a-zA-Z_][a-zA-Z_0-9.]*"),
    ("dotdotdot", "punctuation", r"\.\.\."),
    ("Punctuation", "punctuation", r"[=,*\[\]{}()<>!|:]"),
]
_PATTERN = re.compile("|".join(f"(?P<t{i}>{p})" for i, (_, _, p) in enumerate(_TOKENS)))
_IDS = {kind: i for i, (kind, _, _) in enumerate(_TOKENS)}


class LexedToken(NamedTuple):
    ID: int
    kind: str
    category: str
    value: str


def lex_ir(ir: str) -> Dict[str, List]:
    """The tokens of ``ir`` (comments and whitespace dropped); an unknown character is an ``Error`` token."""
    ids: List[int] = []
    kinds: List[str] = []
    categories: List[str] = []
    values: List[str] = []
    position = 0
    while position < len(ir):
        match = _PATTERN.match(ir, position)
        if match is None:
            ids.append(len(_TOKENS))
            kinds.append("Error")
            categories.append("error")
            values.append(ir[position])
            position += 1
            continue
        kind, category, _ = _TOKENS[int(match.lastgroup[1:])]
        if category is not None:
            ids.append(_IDS[kind])
            kinds.append(kind)
            categories.append(category)
            values.append(match.group())
        position = match.end()
    return {"token_id": ids, "token_kind": kinds, "token_category": categories, "token_value": values}


def lexed_tokens(lexed: Dict[str, List]) -> List[LexedToken]:
    """``LexedIrTuple``: the same tokens as named tuples."""
    return [LexedToken(*row) for row in zip(lexed["token_id"], lexed["token_kind"], lexed["token_category"],
                                            lexed["token_value"])]


__all__ = ["LexedToken", "lex_ir", "lexed_tokens"]
