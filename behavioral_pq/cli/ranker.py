"""``bpq ranker measure|deepen|fit|show|behavior``: a learned ranker over pass pipelines, its training data,
what it would try first, and behavior models compared on held-out modules and pipelines; ``bpq optimize --auto
--ranker DIR`` spends the budget on its picks."""

from __future__ import annotations

import argparse

from behavioral_pq.cli.common import check_output_folder, print_json

RANKER_EPILOG = """\
example (training data from the train split's real programs, a ranker on the embedding, then its use):
  bpq corpus spectra store/ --split train --kind real        # embedding and spectrum rankers read them
  bpq ranker measure store/ --out ranker-data --kind real --max-instructions 50000
  bpq ranker deepen ranker-data --corpus store/ --out ranker-deep --programs 80 --max-instructions 3000
  bpq ranker fit ranker-deep --corpus store/ --representation embedding --out my-ranker
  bpq ranker show my-ranker --top 10
  bpq optimize prog.c --auto --budget 50 --ranker my-ranker

text size (rows of .text bytes of the train split's whole programs, built as bpq compile --whole-program builds them):
  bpq ranker measure store/ --objective text-size --whole-programs --max-instructions 50000 --out size-data
  bpq ranker deepen size-data --corpus store/ --whole-programs --out size-deep --programs 30 --budget 200
  bpq ranker fit size-deep --corpus store/ --representation none --out my-size-ranker
  bpq optimize prog.c --auto --objective text-size --budget 50 --ranker my-size-ranker

measure runs every pipeline of the pool (the generic pipelines, the library's coreset and programs' best
pipelines, -Oz followed by each catalog pass, random edits of the coreset: about 470) on each module of the split
and appends the rows to DATA as it goes: a killed run resumes, and another --seed or --programs adds modules to
the same rows. deepen searches some of those modules deeply (the no-module ranking, then local search), adds
their winners to the pool and writes the rows over the larger pool to a new folder (old columns copied);
--min-instructions and --search-max search only modules of that size, and on text-size rows of whole programs
(--whole-programs) the deep searches are text-size searches. measure --from OLD copies OLD's rows into a new
folder: cells of rows written before searches left -lowerinvoke and -loweratomic out are measured again there
(deepen does the same).
fit predicts each pipeline's gain over -Oz from the module's representation (a ridge per pipeline,
the penalty chosen by cross-validation over the store's split groups, so that a project is held out whole).
behavior trains a module x pipeline model per module tower (PQ-BERT, PQ-BERT and count tail, raw spectrum, count
tail, Autophase, none)
on rows of every split (measure --split train, valid and test into one DATA) and compares them on test modules
and pipelines none trained on:
  bpq corpus spectra store/
  for s in train valid test; do bpq ranker measure store/ --split $s --out ranker-data; done
  bpq ranker behavior ranker-data --corpus store/ --out behavior-report
prior reads the local search's edit prior off rows built for a target: for each catalog pass, how often -Oz
followed by it beat -Oz (the shipped prior, used when a search counts instructions for a target, is
behavioral_pq/data/edit-prior-host.json):
  bpq ranker measure store/ --target host --out host-rows && bpq ranker prior host-rows --out prior.json
"""


def _library(args):
    from behavioral_pq.tasks.guidance import default_library, load_library

    return default_library() if args.library in (None, "shipped") else load_library(args.library)


def _encoder(args):
    from behavioral_pq.embedding.encoder import load_encoder

    return load_encoder(args.checkpoint) if getattr(args, "checkpoint", None) else load_encoder()


#: What a ranker's gains and predicted ratios are, by objective, for people.
GAIN_WORDS = {"ir-count": "log IC_Oz / IC", "text-size": "log .text of -Oz / .text"}
RATIO_WORDS = {"ir-count": "IC_Oz / IC", "text-size": ".text of -Oz / .text"}
#: What each representation reads of a module, for people.
READS = {"embedding": "the embedding", "spectrum": "the spectrum and Autophase", "autophase": "Autophase",
         "none": "no module input (one ranking for every module)"}


def load_checked_ranker(path, encoder=None, objective=None, why=""):
    """The ranker folder ``path`` (:func:`~behavioral_pq.tasks.guidance.ranker.load_ranker`) and the encoder its
    search needs (``encoder``, or the shipped one for an embedding or spectrum ranker; None for the others),
    checked to fit each other, and the ranker to be trained for ``objective`` when one is given (``why``: what to
    do otherwise, for the message)."""
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.guidance.ranker import check_ranker, load_ranker

    ranker = load_ranker(path)
    if objective is not None and ranker.objective != objective:
        raise ValueError(f"--ranker {path} is trained for the {ranker.objective} objective, this search is for "
                         f"{objective}: " + (why or f"give a ranker of {objective} rows (bpq ranker measure "
                                                   f"--objective {objective})"))
    if ranker.representation in ("embedding", "spectrum"):
        encoder = encoder or load_encoder()
        check_ranker(ranker, encoder)
    return ranker, encoder


def _rows_target(args, known):
    """Where ``bpq ranker measure`` builds its rows: measure mode by default, or ``--target``/``--cpu`` for
    instruction counts; the rows of ``--from`` must be of the same target."""
    from behavioral_pq.cli.common import cli_target

    if args.target is None and args.cpu is None:
        target = known.target if known is not None else None
    elif args.objective == "text-size":
        raise ValueError("--target and --cpu are for instruction-count rows; text-size rows are compiled as a "
                         "text-size search compiles them (the host's triple, each function's own CPU)")
    else:
        target = cli_target(args)
    if known is not None and known.target != target:
        held = "in measure mode" if known.target is None else f"for {known.target}"
        raise ValueError(f"--from {args.source} holds rows built {held}, these are "
                         + ("in measure mode" if target is None else f"for {target}"))
    return target


def cmd_measure(args) -> int:
    import numpy as np

    from behavioral_pq.corpus.programs import split_whole_programs
    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.tasks.guidance.ranker import (load_ranker, load_ranker_data, measure_pool_rows,
                                                    open_ranker_data, ranker_pool, text_size_pool)

    if args.programs is not None and args.programs < 1:
        raise ValueError(f"--programs must be >= 1, got {args.programs}")
    if args.max_instructions is not None and args.max_instructions < 1:
        raise ValueError(f"--max-instructions must be >= 1, got {args.max_instructions}")
    if args.whole_programs and args.kind == "small":
        raise ValueError("--whole-programs are the real projects' programs; --kind small has none")
    out = check_output_folder(args.out)
    if out.is_dir() and any(out.iterdir()) and not (out / "pool.json").exists():
        raise ValueError(f"{out}: exists and holds no ranker training data (pool.json); choose another folder")
    known = None
    if args.source is not None:      # rows measured before: copied, only what they lack or hold stale is measured
        if args.library is not None:
            raise ValueError("--from measures DATA's own pool; --library chooses the pool of a new folder: give one")
        known = load_ranker_data(args.source, None)
        if args.objective is not None and args.objective != known.objective:
            raise ValueError(f"--from {args.source} holds {known.objective} rows, not --objective {args.objective}")
    args.objective = args.objective or (known.objective if known is not None else "ir-count")
    target = _rows_target(args, known)
    if args.pool is not None and (args.library is not None or known is not None):
        raise ValueError("--pool takes a ranker's pool; --library and --from choose the pool another way: give one")
    corpus = Corpus(args.store)
    if args.whole_programs:
        programs = list(split_whole_programs(args.store, args.split, max_instructions=args.max_instructions))
        if not programs:
            raise ValueError(f"{args.store}: no whole programs of two units or more in split {args.split!r}"
                             + (f" of at most {args.max_instructions} instructions" if args.max_instructions
                                else ""))
        if args.programs is not None and args.programs < len(programs):
            keep = sorted(np.random.default_rng(args.seed).choice(len(programs), args.programs, replace=False))
            programs = [programs[i] for i in keep]
        modules, total = [p.module for p in programs], len(programs)
    else:
        shas = corpus.narrow(corpus.split(args.split), kind=None if args.kind == "all" else args.kind,
                             max_instructions=args.max_instructions)
        if not shas:
            raise ValueError(f"{args.store}: no {'' if args.kind == 'all' else args.kind + ' '}modules in split "
                             f"{args.split!r}" + (f" of at most {args.max_instructions} instructions"
                                                  if args.max_instructions else ""))
        if args.programs is not None and args.programs < len(shas):
            shas = sorted(np.random.default_rng(args.seed).choice(shas, args.programs, replace=False).tolist())
        modules, total = corpus.iter_modules(only=set(shas)), len(shas)
    if (out / "pool.json").exists() and args.library is None and args.pool is None:
        pool = open_ranker_data(out, objective=args.objective)  # resumed or extended: the folder's pool
    elif args.pool is not None:
        ranker = load_ranker(args.pool)
        if ranker.objective != args.objective:
            raise ValueError(f"--pool {args.pool}: a ranker of {ranker.objective}, these rows count {args.objective}")
        pool = ranker.pool
    elif known is not None:
        pool = known.pool
    elif args.objective == "text-size":
        pool = text_size_pool()
    else:
        pool = ranker_pool(_library(args))  # a new folder; or the library's pool, checked against the folder's
    written, failures = measure_pool_rows(modules, out, pool, objective=args.objective, target=target,
                                          progress=not args.json, total=total, known=known)
    rows = len(load_ranker_data(out, args.objective).shas)
    if args.json:
        print_json({"data": str(out), "modules": total, "written": written, "rows": rows, "pool": len(pool),
                    "failures": failures})
    else:
        print(f"{out}: {written} rows written ({rows} in all; {total} modules asked for, a pool of {len(pool)} "
              f"pipelines), {len(failures)} failed")
        for failure in failures:
            print(f"  failed {failure['program'][:12]}: {failure['error']}")
    return 1 if failures and not written else 0


def cmd_deepen(args) -> int:
    import math

    import numpy as np

    from behavioral_pq.corpus.programs import split_whole_programs
    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.tasks.guidance.build import deepen_pool
    from behavioral_pq.tasks.guidance.ranker import load_ranker_data

    for name in ("programs", "budget", "keep"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
    for name in ("min_instructions", "max_instructions", "search_max"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    out = check_output_folder(args.out)
    if out.is_dir() and any(out.iterdir()) and not (out / "pool.json").exists():
        raise ValueError(f"{out}: exists and holds no ranker training data (pool.json); choose another folder")
    base = load_ranker_data(args.data, None)
    measured = set(base.shas)
    if args.whole_programs:     # rows of whole programs (measure --whole-programs): linked again to be searched
        programs = split_whole_programs(args.corpus, args.split, max_instructions=args.max_instructions,
                                        names=[n for n in base.names or () if n] or None)
        sized = [(p.module, p.instruction_count) for p in programs if p.module.sha256 in measured]
    else:
        corpus = Corpus(args.corpus)
        sizes = dict(zip(*corpus.modules(["sha256", "instruction_count"]).to_pydict().values()))
        shas = {s for s in measured if s in sizes and sizes[s] <= (args.max_instructions or sizes[s])}
        sized = [(m, sizes[m.sha256]) for m in corpus.iter_modules(only=shas)]
    bound = f" of at most {args.max_instructions} instructions" if args.max_instructions else ""
    if not sized:
        raise ValueError(f"{args.data}: no rows of " + (f"whole programs of split {args.split!r} of {args.corpus}"
                         if args.whole_programs else f"modules in {args.corpus}") + bound)
    modules = [m for m, _ in sized]
    upper = min(n for n in (args.max_instructions, args.search_max, math.inf) if n is not None)
    wanted = {m.sha256 for m, n in sized if (args.min_instructions or 0) <= n <= upper}   # rows keep every size
    searchable = [s for s in base.shas if s in wanted]                             # drawn in the rows' order
    if not searchable:
        raise ValueError(f"{args.data}: no rows of modules of at least {args.min_instructions or 1} instructions"
                         + (f" and at most {upper}" if upper < math.inf else ""))
    searched = set(np.random.default_rng(args.seed).choice(searchable, min(args.programs, len(searchable)),
                                                           replace=False).tolist())
    added, written, failures = deepen_pool(args.data, out, [m for m in modules if m.sha256 in searched], modules,
                                           budget=args.budget, keep=args.keep, seed=args.seed,
                                           progress=not args.json)
    rows = len(load_ranker_data(out, None).shas)
    if args.json:
        print_json({"data": str(out), "objective": base.objective, "searched": len(searched), "added": added,
                    "pool": len(base.pool) + added, "written": written, "rows": rows, "failures": failures})
    else:
        print(f"{out}: {added} pipelines from {len(searched)} deep searches ({base.objective}) join the "
              f"{len(base.pool)}; {written} rows written ({rows} in all), {len(failures)} failed")
    return 1 if failures and not written else 0


def cmd_fit(args) -> int:
    from behavioral_pq.artifacts import check_replaceable
    from behavioral_pq.core.catalog import MEANING_CHANGING
    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.tasks.guidance.build import stored_representation, whole_program_representation
    from behavioral_pq.tasks.guidance.ranker import (FORMAT, PipelineRanker, RankerError, load_ranker_data,
                                                    ranker_identity)

    data = load_ranker_data(args.data, None)
    if not data.shas:
        raise RankerError(f"{args.data}: no measured rows yet (run: bpq ranker measure STORE --out {args.data})")
    check_replaceable(args.out, config="ranker.json", format=FORMAT, overwrite=args.overwrite, error=RankerError,
                      what="a pipeline ranker")     # before the work; saving checks again
    corpus = Corpus(args.corpus)
    if args.max_instructions is not None:       # a ranking for the smaller modules, from a pool of every size
        if args.max_instructions < 1:
            raise ValueError(f"--max-instructions must be >= 1, got {args.max_instructions}")
        if args.whole_programs:
            raise ValueError("--max-instructions narrows rows of the store's modules; whole programs' rows are "
                             "narrowed when measured (bpq ranker measure --whole-programs --max-instructions)")
        small = corpus.narrow(data.shas, max_instructions=args.max_instructions)
        if not small:
            raise RankerError(f"{args.data}: no rows of modules of at most {args.max_instructions} instructions in "
                              f"{args.corpus}")
        data = data.subset(small)
    encoder = _encoder(args) if args.representation in ("embedding", "spectrum") else None
    if args.whole_programs:     # the rows' modules are the split's whole programs, linked again to be read
        kept, rows = whole_program_representation(args.corpus, args.split, args.representation, data.shas, encoder,
                                                  names=[n for n in data.names or () if n] or None)
    else:
        kept, rows = stored_representation(corpus, args.representation, data.shas, encoder)
    left_out = len(data.shas) - len(kept)
    if len(kept) < 2:
        needs = ("a whole program of its split in this store" if args.whole_programs
                 else f"spectra for probe set {encoder.probe_set.hash[:12]} (run: bpq corpus spectra {args.corpus})"
                 if encoder is not None else "modules in this store (whole programs: give --whole-programs)")
        raise RankerError(f"{args.corpus}: {len(kept)} of the {len(data.shas)} measured modules have {needs}; "
                          "a ranker needs at least 2")
    data = data.subset(kept)
    split_groups = corpus.split_groups()
    # a module outside the split (a whole program, named project/program): its project's group, else its own
    names = dict(zip(data.shas, data.names or [""] * len(data.shas)))
    groups = [split_groups.get(s) or (names[s].split("/")[0] if "/" in names[s] else s) for s in kept]
    notes = [f"{left_out} of the {len(kept) + left_out} measured modules left out: "
             + ("not a whole program of the split" if args.whole_programs
                else "no spectra for the encoder's probe set" if encoder is not None else "not in this store")] \
        if left_out else []
    if data.stale_columns():
        notes.append(f"{len(data.stale_columns())} of the {len(data.pool)} pipelines were measured with "
                     f"{' or '.join(MEANING_CHANGING)}, which searches leave out: on modules with exceptions or "
                     f"atomics their gains are what those passes did (measure again: bpq ranker measure "
                     f"{args.corpus} --from {args.data} --out NEW)")
    if len(set(groups)) < 2:                              # one project: nothing to hold out whole
        notes.append(f"the {len(kept)} modules are all in split group {groups[0]!r}: cross-validation holds out "
                     "modules instead")
        groups = list(kept)
    ranker = PipelineRanker.fit(rows, data.gains, data.pool, args.representation, groups=groups,
                                identity=ranker_identity(args.representation, encoder), seed=args.seed,
                                objective=data.objective)
    ranker.training.update(data=str(args.data), store=str(args.corpus), groups=len(set(groups)),
                           left_out=left_out, notes=notes, max_instructions=args.max_instructions,
                           target=None if data.target is None else data.target.to_dict())
    ranker.save(args.out, overwrite=args.overwrite)
    training = ranker.training
    if args.json:
        print_json({"ranker": str(args.out), "representation": ranker.representation, "dim": ranker.dim,
                    "pool": len(ranker.pool), **training})
        return 0
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {args.out}: a ranker over {len(ranker.pool)} pipelines reading {READS[ranker.representation]} "
          f"({ranker.dim} inputs), fitted on {training['modules']} modules in {training['groups']} groups")
    print(f"  {training['folds']}-fold cross-validation over groups: ridge alpha {training['alpha']:g}; the best of "
          f"its top {training['cv_top']} picks gains {training['cv_gain']:+.4f} ({GAIN_WORDS[ranker.objective]}, at "
          "least -Oz's 0) on held-out modules")
    return 0


def cmd_prior(args) -> int:
    from behavioral_pq.cli.common import check_output
    from behavioral_pq.tasks.guidance.edits import edit_weights, save_edit_prior
    from behavioral_pq.tasks.guidance.ranker import load_ranker_data

    out = check_output(args.out, overwrite=args.overwrite)
    data = load_ranker_data(args.data)
    if not data.shas:
        raise ValueError(f"{args.data}: holds no rows yet (bpq ranker measure)")
    weights = edit_weights(data, args.floor)
    save_edit_prior(out, weights, modules=len(data.shas), target=data.target, floor=args.floor)
    top = sorted(weights.items(), key=lambda kv: -kv[1])[:8]
    if args.json:
        print_json({"prior": str(out), "modules": len(data.shas), "floor": args.floor,
                    "top": [{"pass": f, "weight": w} for f, w in top]})
        return 0
    where = "in measure mode" if data.target is None else f"built for {data.target}"
    print(f"wrote {out}: an edit prior over {len(weights)} passes from {len(data.shas)} modules' rows {where}")
    print("  most weight: " + ", ".join(f"{f} {w:.3f}" for f, w in top))
    return 0


def cmd_show(args) -> int:
    import math

    from behavioral_pq.tasks.guidance import describe_steps
    from behavioral_pq.tasks.guidance.ranker import load_ranker

    if args.top < 1:
        raise ValueError(f"--top must be >= 1, got {args.top}")
    ranker = load_ranker(args.ranker)
    predicted = ranker.scores(None)
    index = {steps: i for i, steps in enumerate(ranker.pool)}
    top = [(steps, float(predicted[index[steps]])) for steps in ranker.choose(None, args.top)]
    if args.json:
        print_json({"ranker": str(args.ranker), "representation": ranker.representation, "dim": ranker.dim,
                    "pool": len(ranker.pool), "alpha": ranker.alpha, "identity": ranker.identity,
                    "training": ranker.training,
                    "top": [{"steps": list(s), "predicted_gain": g} for s, g in top]})
        return 0
    training = ranker.training
    print(f"{args.ranker}: a ranker over {len(ranker.pool)} pipelines reading {READS[ranker.representation]} "
          f"({ranker.dim} inputs)")
    if training:
        print(f"  fitted on {training.get('modules')} modules ({training.get('folds')}-fold cross-validation over "
              f"groups): ridge alpha {ranker.alpha:g}, held-out gain of the best of its top "
              f"{training.get('cv_top')} picks {training.get('cv_gain', float('nan')):+.4f}")
    if ranker.identity:
        print("  inputs from " + ", ".join(f"{k} {str(v)[:12]}" for k, v in ranker.identity.items()))
    print(f"first {len(top)} without module input (a coverage choice; predicted {RATIO_WORDS[ranker.objective]}):")
    for i, (steps, gain) in enumerate(top, 1):
        print(f"  {i:>3}. {math.exp(gain):.4f}  {describe_steps(steps)}")
    return 0


def cmd_behavior(args) -> int:
    import json

    import torch

    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.tasks.guidance.behavior import (PQBERT_OBJECTIVES, TOWERS, behavior_markdown,
                                                      evaluate_towers, plot_curves)
    from behavioral_pq.tasks.guidance.ranker import RankerError, load_ranker_data

    towers = args.towers.split(",") if args.towers else list(TOWERS)
    known = tuple(dict.fromkeys(TOWERS + PQBERT_OBJECTIVES))
    unknown = [t for t in towers if t not in known]
    if unknown:
        raise ValueError(f"unknown tower(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    if args.device and args.device != "cpu" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: no CUDA device is visible to torch here")
    if args.epochs < 1 or args.steps < 1:
        raise ValueError("--epochs and --steps must be >= 1")
    if args.searches < 0:
        raise ValueError(f"--searches must be >= 0, got {args.searches}")
    if not 0 < args.held_out < 1:
        raise ValueError(f"--held-out must be between 0 and 1, got {args.held_out}")
    out = check_output_folder(args.out)
    data = load_ranker_data(args.data, args.objective)
    if not data.shas:
        raise RankerError(f"{args.data}: no measured rows yet (run: bpq ranker measure STORE --out {args.data})")
    if args.threads:
        torch.set_num_threads(args.threads)
    report = evaluate_towers(data, Corpus(args.corpus), _encoder(args), towers=towers, held_out=args.held_out,
                             seed=args.seed, epochs=args.epochs, steps_per_epoch=args.steps,
                             searches=args.searches, device=args.device, progress=not args.json)
    report.update(data=str(args.data), store=str(args.corpus), objective=data.objective)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(behavior_markdown(report))
    plot_curves(report, out / "curves.png")
    if args.json:
        print_json({k: v for k, v in report.items() if k != "towers"} | {"towers": {
            t: {k: v for k, v in r.items() if k != "history"} for t, r in report["towers"].items()}})
    else:
        print(behavior_markdown(report))
        print(f"wrote {out}/report.md, report.json and curves.png")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("ranker", help="a learned ranker over pass pipelines: measure, deepen, fit, show",
                       description="Train a ranker that predicts each pipeline's gain over -Oz from a module's "
                                   "representation, and spends a search budget on its picks "
                                   "(bpq optimize --auto --ranker DIR).",
                       epilog=RANKER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    rsub = p.add_subparsers(dest="ranker_command", metavar="ACTION")
    rsub.required = True

    m = rsub.add_parser("measure", help="measure every pool pipeline on a split's modules (resumable)",
                        epilog=RANKER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("store", metavar="STORE", help="corpus store with a split (bpq corpus build, bpq corpus split)")
    m.add_argument("--out", required=True, metavar="DATA", help="training-data folder (created or resumed)")
    m.add_argument("--split", default="train", help="split to draw modules from (default train)")
    m.add_argument("--kind", choices=("all", "small", "real"), default="all",
                   help="only small programs or only real programs (default all)")
    m.add_argument("--max-instructions", type=int, metavar="N", help="leave out modules larger than N")
    m.add_argument("--programs", type=int, metavar="N", help="a random sample of N modules (default: all)")
    m.add_argument("--seed", type=int, default=0, help="seed of the --programs sample (the pool does not change)")
    m.add_argument("--library", metavar="DIR",
                   help="program library whose coreset and best pipelines join the pool of a new folder (default: "
                        "the shipped one; a folder that holds rows keeps its own pool, deepened or not)")
    m.add_argument("--from", dest="source", metavar="DATA",
                   help="rows measured before (another training-data folder): the new folder takes DATA's pool and "
                        "objective, copies the rows of the modules measured there and measures only what they lack. "
                        "Rows written before searches left -lowerinvoke and -loweratomic out credit pipelines with "
                        "what those passes did; such cells are measured again")
    m.add_argument("--objective", choices=("ir-count", "text-size"), default=None,
                   help="what the rows count: IR instructions in measure mode (default), or .text bytes of llc's "
                        "object, each pipeline compiled for the host as a text-size search compiles it (a new "
                        "folder's pool is then the text-size pool: -Oz, -Os and -Oz with the IR outliner, each "
                        "followed by one pass, and the shipped ranker's first choices)")
    m.add_argument("--whole-programs", action="store_true",
                   help="measure the split's whole programs (each unit defining main linked with the units it needs, "
                        "every definition but main made internal, as bpq compile --whole-program builds them) "
                        "instead of its modules")
    m.add_argument("--pool", metavar="RANKER",
                   help="measure the pool of this ranker folder (e.g. checkpoints/ranker-none-real-s0, the shipped "
                        "ranker's pool, deepened) instead of building one from the library")
    m.add_argument("--target", default=None, metavar="TRIPLE",
                   help="instruction-count rows built and counted as a search for this target counts its candidates "
                        "(bpq optimize --auto searches for the host): 'host', a triple such as x86_64-pc-linux-gnu, "
                        "or 'measure' (default: measure mode, as labels and spectra are made)")
    m.add_argument("--cpu", metavar="NAME", help="CPU of --target (default: the host's with --target host, else "
                                                 "generic), e.g. x86-64-v3, znver4")
    m.add_argument("--json", action="store_true", help="machine-readable summary (no progress bar)")
    m.set_defaults(func=cmd_measure)

    d = rsub.add_parser("deepen", help="add the winners of deep searches on measured modules to the pool",
                        epilog=RANKER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("data", metavar="DATA", help="training-data folder (bpq ranker measure)")
    d.add_argument("--corpus", required=True, metavar="STORE", help="the store the rows were measured on")
    d.add_argument("--out", required=True, metavar="DATA2", help="training-data folder of the larger pool "
                                                                    "(created or resumed)")
    d.add_argument("--programs", type=int, default=80, metavar="N", help="modules searched deeply (default 80)")
    d.add_argument("--budget", type=int, default=300, metavar="N",
                   help="compilations of each deep search (default 300)")
    d.add_argument("--keep", type=int, default=3, metavar="K",
                   help="best pipelines of each search that join the pool (default 3)")
    d.add_argument("--max-instructions", type=int, metavar="N",
                   help="search, and keep rows of, modules of at most N instructions only")
    d.add_argument("--min-instructions", type=int, metavar="N",
                   help="search modules of at least N instructions only (the rows keep every size): winners for the "
                        "larger modules, which a pool deepened on small ones misses")
    d.add_argument("--search-max", type=int, metavar="N",
                   help="search modules of at most N instructions only (the rows keep every size, unlike "
                        "--max-instructions): with --min-instructions, one size band")
    d.add_argument("--whole-programs", action="store_true",
                   help="the rows are whole programs (measure --whole-programs): link them again from --split")
    d.add_argument("--split", default="train", help="with --whole-programs: the split they were linked from "
                   "(default train)")
    d.add_argument("--seed", type=int, default=1, help="seed of the searched sample and the searches (default 1)")
    d.add_argument("--json", action="store_true", help="machine-readable summary (no progress bar)")
    d.set_defaults(func=cmd_deepen)

    f = rsub.add_parser("fit", help="fit a ranker on measured rows and the store's module representations",
                        epilog=RANKER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("data", metavar="DATA", help="training-data folder (bpq ranker measure)")
    f.add_argument("--corpus", required=True, metavar="STORE", help="the store the rows were measured on")
    f.add_argument("--representation", required=True, choices=("embedding", "spectrum", "autophase", "none"),
                   help="what the ranker reads of a module: the encoder's embedding, the raw spectrum of its probe "
                        "set with the module's Autophase, Autophase, or none (one ranking for every module)")
    f.add_argument("--out", required=True, metavar="RANKER", help="ranker folder to write")
    f.add_argument("--max-instructions", type=int, metavar="N",
                   help="fit on the rows of modules of at most N instructions only (a ranking for the smaller "
                        "modules over a pool deepened on every size)")
    f.add_argument("--whole-programs", action="store_true",
                   help="the rows are of the --split's whole programs (bpq ranker measure --whole-programs): link them "
                        "again to read their representation (Autophase, spectrum, embedding: computed, not stored)")
    f.add_argument("--split", default="train", help="with --whole-programs: the split the rows were measured on "
                                                     "(default train)")
    f.add_argument("--checkpoint", metavar="DIR", help="encoder for embedding and spectrum (default: the shipped one)")
    f.add_argument("--seed", type=int, default=0, help="seed of the scenario sample (default 0)")
    f.add_argument("--overwrite", action="store_true",
                   help="replace --out even when it holds something else than a pipeline ranker")
    f.add_argument("--json", action="store_true", help="machine-readable summary")
    f.set_defaults(func=cmd_fit)

    b = rsub.add_parser("behavior", help="compare behavior models (module x pipeline) per module tower on held-out "
                                         "modules and pipelines", epilog=RANKER_EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("data", metavar="DATA", help="training-data folder with rows of the train, valid and test splits")
    b.add_argument("--corpus", required=True, metavar="STORE", help="the store the rows were measured on (its "
                                                                       "splits and spectra)")
    b.add_argument("--out", required=True, metavar="DIR", help="report folder (report.md, report.json, curves.png)")
    b.add_argument("--towers", metavar="LIST", help="comma-separated module towers (default: all of "
                                                   "pqbert,pqbert+counts,spectrum,counts,autophase,none); "
                                                   "PQ-BERT by pretraining objective: pqbert-frozen (masked codes "
                                                   "only), pqbert (masked, then behavior), pqbert-scratch "
                                                   "(behavior only), pqbert-joint (masked and behavior together)")
    b.add_argument("--objective", choices=("ir-count", "text-size"), default=None,
                   help="the objective the rows must be of (default: whichever they are of)")
    b.add_argument("--held-out", type=float, default=0.2, metavar="SHARE",
                   help="share of the pool's pipelines never trained on (default 0.2)")
    b.add_argument("--epochs", type=int, default=30, help="training epochs per tower (default 30)")
    b.add_argument("--steps", type=int, default=60, help="optimizer steps per epoch (default 60)")
    b.add_argument("--searches", type=int, default=0, metavar="N",
                   help="also run real searches (budgets 10 and 50) on N test modules with the tower best on valid: "
                        "its picks then random or model-guided local search, against the global ranking's picks "
                        "then random local search (default 0: none)")
    b.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    b.add_argument("--device", default=None, help="where the towers train, e.g. cuda (default: the CPU)")
    b.add_argument("--checkpoint", metavar="DIR", help="encoder: its probe set's spectra, its PQ-BERT for the pqbert "
                                                       "tower (default: the shipped one)")
    b.add_argument("--seed", type=int, default=0, help="seed of the held-out pipelines and the training (default 0)")
    b.add_argument("--json", action="store_true", help="machine-readable summary (no progress bar)")
    b.set_defaults(func=cmd_behavior)

    pr = rsub.add_parser("prior", help="the local search's edit prior, read off rows: which passes beat -Oz after it",
                         epilog=RANKER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("data", metavar="DATA", help="training-data folder (bpq ranker measure; -Oz followed by each "
                                                 "catalog pass is in the default pool)")
    pr.add_argument("--out", required=True, metavar="FILE.json", help="the edit-prior file to write")
    pr.add_argument("--floor", type=float, default=0.02,
                    help="weight of a pass that never beat -Oz, against 1 for one that always did (default 0.02)")
    pr.add_argument("--overwrite", action="store_true", help="write through FILE.json when it is a symbolic link")
    pr.add_argument("--json", action="store_true", help="machine-readable summary")
    pr.set_defaults(func=cmd_prior)

    s = rsub.add_parser("show", help="what a ranker was fitted on and what it tries first without module input",
                        epilog=RANKER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("ranker", metavar="RANKER", help="ranker folder (bpq ranker fit)")
    s.add_argument("--top", type=int, default=10, metavar="K", help="pipelines to list (default 10)")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_show)
