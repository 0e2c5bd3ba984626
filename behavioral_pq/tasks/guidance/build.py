"""Building a program library offline: generic pipelines and genetic searches per training program.
"""


from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.artifacts import atomic_path, check_replaceable, encoder_identity, read_json_bounded
from behavioral_pq.core.catalog import PASSES, steps_pipeline
from behavioral_pq.core.engine import default_engine
from behavioral_pq.core.features import AUTOPHASE_FEATURES, autophase
from behavioral_pq.core.module import Module
from behavioral_pq.core.target import Target
from behavioral_pq.corpus.programs import split_whole_programs
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.encoder import SAMPLE_ABOVE, load_encoder
from behavioral_pq.embedding.spectrum import spectra
from behavioral_pq.errors import BPQError, CorpusError, LibraryError, RankerError
from behavioral_pq.tasks.guidance.library import (
    FORMAT,
    GENERIC,
    OZ,
    LibraryProgram,
    ProgramLibrary,
    Steps,
    decode_steps,
    encode_steps,
    merge_results,
)
from behavioral_pq.tasks.guidance.ranker import (
    REPRESENTATIONS,
    PipelineRanker,
    load_ranker_data,
    measure_pool_rows,
    representation_rows,
)
from behavioral_pq.tasks.guidance.recommend import SIZE_SEEDS, _local_search, _search
from behavioral_pq.tasks.guidance.trials import Trials, check_objective
from behavioral_pq.training.genetic import FitnessCache, GAConfig, genetic_search

logger = logging.getLogger(__name__)

# -- building a library ------------------------------------------------------------------------------------------

#: The per-program genetic search of :func:`build_library` (two runs: from the module and after -Oz).
LIBRARY_GA = dict(length=30, population=16, generations=8)

#: Text-size libraries: compilations of the local search in bytes after the instruction-count candidates.
TEXT_SIZE_LOCAL = 16

#: :func:`deepen_pool`: compilations of each deep search, and the winners of each kept for the pool.
DEEPEN_BUDGET = 300
DEEPEN_KEEP = 3


def search_program(module, engine, *, ga: Optional[dict] = None, keep: int = 4, seed: int = 0,
                   objective: str = "ir-count", target=None, local: int = TEXT_SIZE_LOCAL) -> Dict[Steps, int]:
    """Good pipelines for one module: the :data:`GENERIC` ones and -Oz, and the ``keep`` best of two genetic
    searches (catalog sequences from the module as built, and after -Oz). Returns {pipeline: instruction count}.

    With ``objective="text-size"`` the values are ``.text`` bytes in target mode (``target``: default as
    :class:`Trials`): -Os, then every pipeline above (the genetic searches count instructions, which is fast),
    each compiled, then ``local`` random edits of the smallest so far, as the recommendation's local search
    makes them. Bytes and instructions disagree often enough that the ranking must be the bytes'.
    """
    check_objective(objective)
    results = _instruction_count_search(module, engine, ga=ga, keep=keep, seed=seed)
    if objective == "ir-count":
        return results
    trials = Trials(module, engine, 1 + len(results) + local, objective="text-size", target=target)
    trials.run([SIZE_SEEDS], "-Os")
    trials.run(sorted(results, key=lambda s: (results[s], len(s))), "instruction-count search")
    vocabulary = sorted({flag for steps in results for flag in steps if flag != OZ})
    _local_search(trials, trials.best()[0], random.Random(f"{seed}:{module.sha256}"), vocabulary)
    return {(OZ,): trials.oz_count, **trials.measured()}


def _instruction_count_search(module, engine, *, ga: Optional[dict], keep: int, seed: int) -> Dict[Steps, int]:
    config = GAConfig(seed=seed, **(ga or LIBRARY_GA))
    trials = Trials(module, engine, len(GENERIC))
    trials.run(GENERIC, "generic")
    results = {(OZ,): trials.oz_count, **trials.measured()}
    after_oz = Module(engine.run_pipeline(module.bitcode, steps_pipeline((OZ,)), name=module.name), name=module.name)
    for prefix, start in (((), module), ((OZ,), after_oz)):
        cache = FitnessCache([start], engine)
        found = genetic_search(cache, config).ranked[:keep]
        counts = cache.counts([seq for seq, _ in found])[:, 0]
        for (seq, _), count in zip(found, counts):
            results[prefix + tuple(PASSES[i].flag for i in seq)] = int(count)
    return results


def build_library(store: Union[str, os.PathLike], out: Union[str, os.PathLike], programs: Sequence[str], *,
                  encoder=None, engine=None, ga: Optional[dict] = None, keep: int = 4, seed: int = 0,
                  progress: bool = False, overwrite: bool = False, objective: str = "ir-count",
                  target=None) -> ProgramLibrary:
    """Search good pipelines for the store's ``programs`` (module hashes) and save a library to ``out``.

    ``objective``: what the library counts, IR instructions (``"ir-count"``) or ``.text`` bytes in target mode
    for ``target`` (``"text-size"``, see :func:`search_program`; default target: the host triple with each
    function's own CPU, what ``bpq compile`` builds for size).

    Resumable: each program's results go to ``OUT.search.jsonl`` as soon as it is done, and a rerun with the same
    settings skips them. A program that fails is logged there with its error and left out. Embeddings come from
    the store's spectra for the encoder's probe set, or are measured for programs without them.
    """
    from tqdm import tqdm

    check_replaceable(out, config="library.json", format=FORMAT, overwrite=overwrite, error=LibraryError,
                      what="a program library")
    encoder = encoder or load_encoder()
    engine = engine or default_engine()
    corpus = Corpus(store)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log = Path(str(out) + ".search.jsonl")
    check_objective(objective)
    settings = {"ga": dict(ga or LIBRARY_GA), "keep": keep, "seed": seed, "generic": len(GENERIC),
                "store": str(Path(store).resolve()), "programs": len(programs)}
    if objective != "ir-count":          # libraries of instruction counts keep the settings they always had
        target = target or Target.module_cpus()
        settings.update(objective=objective, local=TEXT_SIZE_LOCAL, target=target.to_dict())
    done: Dict[str, dict] = {}
    if log.exists():
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        if lines and lines[0].get("settings", {}) | {"programs": 0} != settings | {"programs": 0}:
            raise LibraryError(f"{log}: made with other settings ({lines[0].get('settings')}); remove it to restart")
        done = {row["program"]: row for row in lines[1:]}
    else:
        log.write_text(json.dumps({"settings": settings}) + "\n")
    todo = set(programs) - set(done)
    with log.open("a") as sink, tqdm(total=len(todo), disable=not progress, desc="library", unit="program") as bar:
        for module in corpus.iter_modules(only=todo):
            try:
                results = search_program(module, engine, ga=ga, keep=keep, seed=seed, objective=objective,
                                         target=target)
                row = {"program": module.sha256, "name": module.name, "instruction_count": module.instruction_count,
                       "results": [[encode_steps(s), c] for s, c in results.items()]}
            except BPQError as exc:
                row = {"program": module.sha256, "name": module.name, "error": f"{type(exc).__name__}: {exc}"}
                logger.warning("library: %s failed: %s", module.name, exc)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            done[module.sha256] = row
            bar.update()
    rows = [done[p] for p in programs if p in done and "error" not in done[p]]
    if not rows:
        raise LibraryError(f"{store}: no program could be searched")
    shas = [r["program"] for r in rows]
    embeddings = stored_embeddings(corpus, encoder, shas)
    missing = [s for s in shas if s not in embeddings]
    if missing:
        modules = {m.sha256: m for m in corpus.iter_modules(only=set(missing))}
        vectors = encoder.embed_many([modules[s] for s in missing], progress=progress)
        embeddings.update({s: v for s, v in zip(missing, vectors) if np.isfinite(v).all()})
    entries, matrix = [], []
    for row in rows:
        if row["program"] not in embeddings:
            continue
        results = {decode_steps(s): int(c) for s, c in row["results"]}
        entry = LibraryProgram(row["program"], row["name"], int(row["instruction_count"]), results.pop((OZ,)))
        merge_results(entry, results, keep * 2)
        entries.append(entry)
        matrix.append(embeddings[row["program"]])
    library = ProgramLibrary(entries, np.stack(matrix), encoder_identity(encoder), settings=settings)
    library.save(out, overwrite=overwrite)
    return library


def choose_library_programs(store: Union[str, os.PathLike], count: int, *, encoder=None, split: str = "train",
                            seed: int = 0, kind: Optional[str] = None,
                            max_instructions: Optional[int] = None) -> List[str]:
    """``count`` module hashes drawn (seeded) from the store's ``split`` (every module when the store has no
    splits), preferring modules whose spectra for the encoder's probe set are already measured. ``kind``
    ("small" or "real") and ``max_instructions`` narrow the pool."""
    encoder = encoder or load_encoder()
    corpus = Corpus(store)
    pool = corpus.split(split) or corpus.records(["sha256"]).column("sha256").to_pylist()
    pool = corpus.narrow(pool, kind=kind, max_instructions=max_instructions)
    try:
        have = {s for shas, _ in corpus.iter_spectra(encoder.probe_set, batch_size=4096) for s in shas}
        pool = sorted(set(pool) & have) or sorted(pool)
    except CorpusError:
        pool = sorted(pool)
    rng = np.random.default_rng(seed)
    return rng.choice(pool, min(count, len(pool)), replace=False).tolist()


def stored_embeddings(corpus, encoder, shas) -> dict:
    """sha256 -> float32 (D,) embedding of the modules among ``shas`` whose spectra for the encoder's probe set are
    in the store (the others are left out); reads the modules' own Autophase too when the encoder needs it."""
    try:
        found, values = corpus.spectra(encoder.probe_set, shas=shas)
    except CorpusError:
        return {}
    if not found:
        return {}
    original = None
    if encoder.reaction != "log-relative":     # such encoders also read the modules' own Autophase
        table = corpus.modules(["sha256", "autophase"]).to_pydict()
        by_sha = dict(zip(table["sha256"], table["autophase"]))
        original = np.array([by_sha[s] for s in found], np.int64)
    return dict(zip(found, encoder.embed_spectra(values, original, batch_size=128)))


def stored_representation(corpus, representation: str, shas: Sequence[str], encoder=None
                          ) -> Tuple[List[str], np.ndarray]:
    """A pipeline ranker's input rows for the modules among ``shas`` that the store can give them for: (their
    hashes, in the order of ``shas``; float32 (N, D), see
    :func:`~behavioral_pq.tasks.guidance.ranker.representation_rows`). ``embedding`` and ``spectrum`` read the
    stored spectra for ``encoder``'s probe set (default: the shipped encoder's) and leave out the modules without
    them; ``autophase`` reads the modules' own Autophase rows; ``none`` gives (N, 0) for every module."""
    if representation not in REPRESENTATIONS:
        raise ValueError(f"representation must be one of {', '.join(REPRESENTATIONS)}, got {representation!r}")
    shas = list(shas)
    if representation == "none":
        return shas, np.zeros((len(shas), 0), np.float32)
    encoder = encoder or (load_encoder() if representation in ("embedding", "spectrum") else None)
    if representation == "embedding":
        stored = stored_embeddings(corpus, encoder, shas)
        kept = [s for s in shas if s in stored]
        return kept, (np.stack([stored[s] for s in kept]).astype(np.float32) if kept
                      else np.zeros((0, encoder.dim), np.float32))
    table = corpus.modules(["sha256", "autophase"]).to_pydict()
    by_sha = dict(zip(table["sha256"], table["autophase"]))
    if representation == "autophase":
        kept = [s for s in shas if s in by_sha]
        rows = np.array([by_sha[s] for s in kept], np.int64).reshape(-1, len(AUTOPHASE_FEATURES))
        return kept, representation_rows("autophase", autophase=rows)
    try:
        kept, values = corpus.spectra(encoder.probe_set, shas=[s for s in shas if s in by_sha])
    except CorpusError:
        kept, values = [], np.zeros((0, encoder.probe_set.num_probes, 56), np.float32)
    rows = np.array([by_sha[s] for s in kept], np.int64).reshape(-1, len(AUTOPHASE_FEATURES))
    return kept, representation_rows("spectrum", spectra=values, autophase=rows)


def whole_program_representation(store, split: str, representation: str, shas: Sequence[str], encoder=None,
                                 names: Optional[Sequence[str]] = None) -> Tuple[List[str], np.ndarray]:
    """A pipeline ranker's input rows for the modules among ``shas`` that are whole programs of the store's
    ``split`` (linked and internalized as :func:`~behavioral_pq.corpus.programs.split_whole_programs` gives them,
    which ``bpq ranker measure --whole-programs`` measured): (their hashes in the order of ``shas``; float32
    (N, D), see :func:`~behavioral_pq.tasks.guidance.ranker.representation_rows`). Their Autophase, spectra and
    embeddings are computed (the store keeps none for them). ``names`` (``project/program``, as the rows keep
    them): link only these."""
    if representation not in REPRESENTATIONS:
        raise ValueError(f"representation must be one of {', '.join(REPRESENTATIONS)}, got {representation!r}")
    wanted = set(shas)
    found = {p.module.sha256: p.module for p in split_whole_programs(store, split, names=names)
             if p.module.sha256 in wanted}
    kept = [s for s in shas if s in found]
    modules = [found[s] for s in kept]
    if representation == "none":
        return kept, np.zeros((len(kept), 0), np.float32)
    if representation == "autophase":
        rows = np.stack([autophase(m) for m in modules]) if modules else np.zeros((0, len(AUTOPHASE_FEATURES)))
        return kept, representation_rows("autophase", autophase=rows)
    encoder = encoder or load_encoder()
    batch = spectra(modules, encoder.probe_set, sample_above=SAMPLE_ABOVE)
    batch.raise_first()
    if representation == "spectrum":
        return kept, representation_rows("spectrum", spectra=batch.spectra, autophase=batch.autophase[:, 0])
    return kept, encoder.embed_spectra(batch.spectra, batch.autophase[:, 0]).astype(np.float32)


def deepen_pool(data: Union[str, os.PathLike], out: Union[str, os.PathLike], searched: Sequence[Module],
                rows: Sequence[Module], *, budget: int = DEEPEN_BUDGET, keep: int = DEEPEN_KEEP, engine=None,
                seed: int = 0, progress: bool = False) -> Tuple[int, int, List[dict]]:
    """A larger pool from deep searches: each module of ``searched`` is searched with ``budget`` compilations
    (the no-module ranking of the rows in ``data``, then local search); the ``keep`` best pipelines that beat -Oz on
    it join the pool, and the rows of ``rows`` (modules of ``data``) are written to ``out`` over the new pool, the
    old columns copied and only the new ones measured. Resumable: the searches' winners are kept in
    ``out/deep.json``, and rows already in ``out`` are skipped.

    The searches and the rows are of the objective and target ``data`` holds: IR instructions (in measure mode or
    built for a target), or .text bytes (each search then the text-size search, its winners those smaller than
    -Oz's .text).

    On 40 real valid modules (<= 5,000 instructions), 80 deep searches at budget 300 on train modules of <= 3,000
    instructions added 116 pipelines to the 473, and the no-module ranker at budget 50 went from 1.0206 to 1.0225
    (geomean IC_Oz / IC).

    Returns (pipelines added, rows written, failures).
    """
    from tqdm import tqdm

    engine = engine or default_engine()
    base = load_ranker_data(data, None)
    objective = base.objective
    found_file = Path(out) / "deep.json"
    if found_file.is_file() and not found_file.is_symlink():
        found = [decode_steps(s) for s in read_json_bounded(found_file, what="deep-search winners",
                                                             error=RankerError)["found"]]
    else:
        ranker = PipelineRanker.fit(np.zeros((len(base.shas), 0), np.float32), base.gains, base.pool, "none",
                                    objective=objective)
        winners: Dict[Steps, None] = {}
        for module in tqdm(searched, disable=not progress, desc="deep searches", unit="module"):
            found_here, _ = _search(module, budget, ranker=ranker, engine=engine, seed=seed, objective=objective,
                                    target=base.target)
            oz = found_here.oz_text_size if objective == "text-size" else found_here.oz_count
            good = sorted(((c, s) for s, c in found_here.tried if c is not None and c < oz),
                          key=lambda cs: (cs[0], len(cs[1])))
            winners.update(dict.fromkeys(s for _, s in good[:keep]))
        found = list(winners)
        Path(out).mkdir(parents=True, exist_ok=True)
        with atomic_path(found_file) as tmp:
            tmp.write_text(json.dumps({"budget": budget, "keep": keep, "searched": [m.sha256 for m in searched],
                                       "found": [encode_steps(s) for s in found]}) + "\n")
    new = [s for s in dict.fromkeys(found) if s not in set(base.pool)]
    written, failures = measure_pool_rows(rows, out, base.pool + new, engine=engine, objective=objective,
                                          target=base.target, progress=progress, total=len(rows), known=base)
    return len(new), written, failures
