"""One side of bench/env/graph_observations.py, run in its own process (pinned by the caller): times the
``ProgramlJson`` and ``Programl`` observations of one environment on a list of bitcode files and keeps what the
comparison needs. Runs under CompilerGym 0.2.5's venv (``compiler_gym``) or this package's (``shim``). Reads a
JSON request on stdin, prints a JSON reply on stdout.

Request: {"side", "programs": [{"name", "bitcode" (path), "dump" (path)}], "repeat" (int)}.
Reply: {name: {"ProgramlJson_s": [...], "Programl_s": [...], "graph_nodes", "graph_edges" (of the networkx graph)}}
and, for ``compiler_gym``, "Ir" (the module's text), "Inst2vecEmbeddingIndices" and "Inst2vecPreprocessedText"
(or "inst2vec_error"); for ``shim``, "programl_json_s" and "programl_graph_s" (the package's functions called on
a loaded module, without an environment). Each program's ProgramlJson is written as JSON to its "dump" path.

One environment serves every program (``reset(benchmark=...)``, a benchmark URI per program); a first
ProgramlJson after each reset is not timed, then each observation is asked ``repeat`` times in turn.
"""

import json
import sys
import time


def _compiler_gym_env():
    import compiler_gym
    from compiler_gym.datasets import Benchmark

    env = None

    def reset(name, path):
        nonlocal env
        with open(path, "rb") as f:
            benchmark = Benchmark.from_file_contents(f"benchmark://file-v0/{name}", f.read())
        if env is None:
            env = compiler_gym.make("llvm-v0", benchmark=benchmark)
            env.reset()
        else:
            env.reset(benchmark=benchmark)
        return env

    return reset, lambda: env and env.close()


def _shim_env():
    import behavioral_pq.env.compiler_gym as compiler_gym

    env = None

    def reset(name, path):
        nonlocal env
        if env is None:
            env = compiler_gym.make("llvm-v0", benchmark=path)
            env.reset()
        else:
            env.reset(benchmark=path)
        return env

    return reset, lambda: env and env.close()


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    request = json.loads(sys.stdin.read())
    side, repeat = request["side"], request["repeat"]
    reset, close = _compiler_gym_env() if side == "compiler_gym" else _shim_env()
    reply = {}
    try:
        for program in request["programs"]:
            env = reset(program["name"], program["bitcode"])
            data = env.observation["ProgramlJson"]      # the first one after a reset: not timed
            with open(program["dump"], "w") as f:
                json.dump(data, f)
            row = {"ProgramlJson_s": [], "Programl_s": []}
            for _ in range(repeat):
                for space in ("ProgramlJson", "Programl"):
                    elapsed, value = _timed(lambda: env.observation[space])
                    row[f"{space}_s"].append(elapsed)
            row["graph_nodes"], row["graph_edges"] = value.number_of_nodes(), value.number_of_edges()
            if side == "compiler_gym":
                row["Ir"] = env.observation["Ir"]
                try:
                    row["Inst2vecPreprocessedText"] = list(env.observation["Inst2vecPreprocessedText"])
                    row["Inst2vecEmbeddingIndices"] = [int(i) for i in env.observation["Inst2vecEmbeddingIndices"]]
                except Exception as exc:    # its preprocessor's own failures are a result, not a crash
                    row["inst2vec_error"] = f"{type(exc).__name__}: {exc}"[:300]
            else:
                import behavioral_pq as bpq
                from behavioral_pq.core.programl import programl_graph, programl_json

                module = bpq.load_module(program["bitcode"])
                programl_json(module)
                row["programl_json_s"] = [_timed(lambda: programl_json(module))[0] for _ in range(repeat)]
                row["programl_graph_s"] = [_timed(lambda: programl_graph(module))[0] for _ in range(repeat)]
            reply[program["name"]] = row
    finally:
        close()
    json.dump(reply, sys.stdout)


if __name__ == "__main__":
    main()
