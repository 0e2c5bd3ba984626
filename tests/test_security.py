"""Attacks a hostile model endpoint or artifact can try, each contained (a real loopback server answers).

Each piece of assembly below is what a malicious endpoint could answer for ``saturating_add``: it does its harm,
then computes the right result, so only isolation (not the tests) stops it.
"""

import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from behavioral_pq.artifacts import check_replaceable, confined
from behavioral_pq.core.passes import optimize
from behavioral_pq.corpus import from_compile_commands
from behavioral_pq.errors import CorpusError, LLMError, LLMResponseError, LLMTimeoutError, PredictorError
from behavioral_pq.lowering.backends import LLMBackend, lower
from behavioral_pq.lowering.harness import TaskHarness, static_cost
from behavioral_pq.lowering.llm import ChatClient, LLMSettings, user
from behavioral_pq.lowering.sandbox import Sandbox, screen_assembly, scrub
from behavioral_pq.lowering.scripted import Reply, ScriptedServer
from behavioral_pq.lowering.tasks import load_tasks

HEADER = "\t.text\n\t.globl\tsaturating_add\n\t.type\tsaturating_add,@function\nsaturating_add:\n"
CORRECT = ("\tmovslq\t%edi, %rax\n\tmovslq\t%esi, %rcx\n\taddq\t%rcx, %rax\n"
           "\tmovl\t$2147483647, %ecx\n\tcmpq\t%rcx, %rax\n\tcmovgq\t%rcx, %rax\n"
           "\tmovq\t$-2147483648, %rcx\n\tcmpq\t%rcx, %rax\n\tcmovlq\t%rcx, %rax\n")


def calls_then_correct(calls: str, data: str) -> str:
    """saturating_add that first runs ``calls`` (AT&T, may clobber caller-saved registers), then computes the
    right answer from the saved arguments."""
    return ("\t.section\t.rodata\n" + data + HEADER
            + "\tpushq\t%rbx\n\tpushq\t%r12\n\tpushq\t%r13\n\tmovl\t%edi, %r12d\n\tmovl\t%esi, %r13d\n" + calls
            + "\tmovl\t%r12d, %edi\n\tmovl\t%r13d, %esi\n" + CORRECT
            + "\tpopq\t%r13\n\tpopq\t%r12\n\tpopq\t%rbx\n\tretq\n")


def fence(asm: str) -> str:
    return f"```asm\n{asm}```\n"


@pytest.fixture(scope="module")
def task():
    return load_tasks("functions", names=["saturating_add"])[0]


@pytest.fixture(scope="module")
def module(task):
    return optimize(task.module(), "Oz")


def settings(server, **kw):
    return LLMSettings(base_url=server.base_url, **{"retries": 0, "backoff": 0.0, "timeout": 10.0, **kw})


def test_model_code_cannot_write_outside_or_see_the_network(task, module, tmp_path):
    marker = tmp_path / "pwned"
    command = f"id > {marker}; ls /root > {marker}.2; exec 3<>/dev/tcp/127.0.0.1/22 && echo net > {marker}.3"
    asm = calls_then_correct("\tleaq\tcmd(%rip), %rdi\n\tcallq\tsystem@PLT\n",
                             f'cmd:\t.asciz\t"{command}"\n')
    with ScriptedServer([Reply(fence(asm))]) as server:
        result = lower(module, LLMBackend(settings(server)), task=task)
    assert result.verified          # the harm was attempted and the answer is still right, so only isolation helps
    assert not list(tmp_path.iterdir())


def test_background_processes_do_not_outlive_the_check(task, module):
    tag = "987654"
    command = f"(sleep {tag} &) ; true"
    asm = calls_then_correct("\tleaq\tcmd(%rip), %rdi\n\tcallq\tsystem@PLT\n", f'cmd:\t.asciz\t"{command}"\n')
    with ScriptedServer([Reply(fence(asm))]) as server:
        lower(module, LLMBackend(settings(server)), task=task)
    time.sleep(0.5)
    alive = subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True, text=True)
    assert alive.stdout.strip() == "", "a process forked by model code survived the check"


def test_file_reading_directives_are_refused_before_assembling(task, module):
    secret = "/etc/hostname"
    include = HEADER + f'\t.include\t"{secret}"\n' + CORRECT + "\tretq\n"
    incbin = "\t.section\t.rodata\nblob:\n\t.incbin\t\"/etc/passwd\"\n" + HEADER + CORRECT + "\tretq\n"
    for asm in (include, incbin):
        assert "reads files" in screen_assembly(asm)
    hostname = Path(secret).read_text().strip()
    with ScriptedServer([Reply(fence(include)), Reply(fence(incbin)), Reply(fence(HEADER + CORRECT + "\tretq\n"))]
                        ) as server:
        result = lower(module, LLMBackend(settings(server), repairs=2), task=task)
        sent = json.dumps(server.requests)
    assert [a.stage for a in result.attempts] == ["assemble", "assemble", "ok"]
    assert "refused before assembling" in sent and (len(hostname) < 4 or hostname not in sent)
    with pytest.raises(Exception, match="reads files"):
        static_cost(include)
    assert "more than" in screen_assembly("nop\n" * 600_000)


def test_only_a_models_answers_are_bounded_in_size(task, module):
    """A model's answer past 2 MiB is refused; llc's own output is as trusted as the module and is not (a real
    program's -O0 assembly runs to several MiB)."""
    from behavioral_pq.lowering.harness import harness_for

    padded = HEADER + CORRECT + "\tretq\n" + "# padding\n" * 300_000     # 3 MB of comments
    with harness_for(module, task) as bounded, harness_for(module, task, max_assembly_bytes=None) as unbounded:
        assert bounded.check(padded).stage == "assemble" and "more than" in bounded.check(padded).message
        assert unbounded.check(padded).ok
    assert screen_assembly(padded, max_bytes=None) is None


def test_secrets_in_the_environment_never_reach_the_endpoint(task, module, monkeypatch):
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("BPQ_LLM_API_KEY_SHADOW", secret)
    # prints getenv() of the variable (NULL in the sandbox, so "(null)"), and answers wrong to get feedback
    wrong = ("\t.section\t.rodata\nname:\t.asciz\t\"BPQ_LLM_API_KEY_SHADOW\"\nfmt:\t.asciz\t\"%s\\n\"\n" + HEADER
             + "\tpushq\t%rbx\n\tleaq\tname(%rip), %rdi\n\tcallq\tgetenv@PLT\n\tmovq\t%rax, %rsi\n"
             "\tleaq\tfmt(%rip), %rdi\n\txorl\t%eax, %eax\n\tcallq\tprintf@PLT\n\tmovl\t$7, %eax\n\tpopq\t%rbx\n"
             "\tretq\n")
    with ScriptedServer([Reply(fence(wrong)), Reply(fence(HEADER + CORRECT + "\tretq\n"))]) as server:
        lower(module, LLMBackend(settings(server, api_key=secret), repairs=1), task=task)
        sent = json.dumps(server.requests)
    assert len(server.requests) == 2 and secret not in sent
    assert scrub(f"key {secret} in /home/me/.ssh/id_rsa") == "key <redacted> in <path>"


def test_a_huge_answer_is_refused_with_bounded_memory():
    with ScriptedServer([Reply(raw=b"x" * (3 << 20))]) as server:
        client = ChatClient(settings(server, max_response_bytes=1 << 20))
        with pytest.raises(LLMResponseError, match="larger than"):
            client.complete([user("hi")])


class _Drip(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            for _ in range(60):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.4)
        except OSError:
            pass


class _Redirect(BaseHTTPRequestHandler):
    target = ""

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.send_response(307)
        self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Recorder(BaseHTTPRequestHandler):
    seen = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        type(self).seen.append(dict(self.headers))
        self.send_response(200)
        self.end_headers()


def serve(handler, host="127.0.0.1"):
    server = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_slow_drip_is_cut_at_the_total_deadline():
    server = serve(_Drip)
    try:
        client = ChatClient(LLMSettings(base_url=f"http://127.0.0.1:{server.server_port}/v1", timeout=2.0,
                                        retries=0))
        start = time.monotonic()
        with pytest.raises(LLMTimeoutError):
            client.complete([user("hi")])
        assert time.monotonic() - start < 4.0
    finally:
        server.shutdown()
        server.server_close()


def test_redirects_are_not_followed_and_the_key_stays_home():
    other = serve(_Recorder, host="127.0.0.2")     # another host, on loopback
    _Redirect.target = f"http://127.0.0.2:{other.server_port}/v1/chat/completions"
    first = serve(_Redirect)
    try:
        client = ChatClient(LLMSettings(base_url=f"http://127.0.0.1:{first.server_port}/v1", api_key="sk-secret",
                                        retries=0, timeout=5.0))
        with pytest.raises(LLMError, match="redirect .* not followed"):
            client.complete([user("hi")])
        assert _Recorder.seen == []
    finally:
        first.shutdown()
        first.server_close()
        other.shutdown()
        other.server_close()


def test_sandbox_limits_and_refusal_without_bubblewrap(tmp_path, monkeypatch):
    box = Sandbox(tmp_path)
    done = box.run(["/bin/sh", "-c", "echo \"[$HOME][$BPQ_LLM_API_KEY]\"; cat /etc/passwd; pwd"], timeout=10)
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0 and lines[0] == "[][]" and lines[-1] == str(tmp_path.resolve())
    assert b"No such file" in done.stderr                       # /etc/passwd is not there to read
    slow = box.run(["/bin/sh", "-c", "sleep 30"], timeout=1)
    assert slow.timed_out and slow.seconds < 5
    (tmp_path / "run").mkdir()
    inside = box.run(["/bin/sh", "-c", "pwd"], timeout=10, cwd=tmp_path / "run")
    assert inside.stdout.decode().strip() == str((tmp_path / "run").resolve())
    with pytest.raises(ValueError, match="runs inside"):                # a working folder outside the work folder
        box.run(["/bin/true"], timeout=5, cwd=tmp_path.parent)
    import behavioral_pq.lowering.sandbox as sandbox

    monkeypatch.setattr(sandbox, "bubblewrap", lambda: None)
    from behavioral_pq.errors import SandboxError

    with pytest.raises(SandboxError, match="--unsafe-run"):
        Sandbox(tmp_path, unsafe=False).run(["/bin/true"], timeout=5)
    assert Sandbox(tmp_path, unsafe=True).run(["/bin/true"], timeout=5).returncode == 0


def test_manifest_paths_stay_inside_the_store(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "victim").write_text("keep me")
    for name in ("../victim", str(tmp_path / "victim"), ""):
        with pytest.raises(CorpusError, match="outside"):
            confined(tmp_path / "store", name, CorpusError)
    os.symlink(tmp_path / "victim", tmp_path / "store" / "link")
    with pytest.raises(CorpusError, match="leads outside"):
        confined(tmp_path / "store", "link", CorpusError)
    assert (tmp_path / "victim").read_text() == "keep me"


def test_out_folders_are_not_wiped_by_mistake(tmp_path):
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.tex").write_text("years of work")
    with pytest.raises(PredictorError, match="refusing to replace"):
        check_replaceable(mine, config="predictor.json", format="behavioral_pq.predictor", overwrite=False,
                          error=PredictorError, what="a predictor")
    check_replaceable(mine, config="predictor.json", format="behavioral_pq.predictor", overwrite=True,
                      error=PredictorError, what="a predictor")
    ok = tmp_path / "old-predictor"
    ok.mkdir()
    (ok / "predictor.json").write_text(json.dumps({"format": "behavioral_pq.predictor"}))
    check_replaceable(ok, config="predictor.json", format="behavioral_pq.predictor", overwrite=False,
                      error=PredictorError, what="a predictor")


def test_compile_commands_cannot_load_plugins(tmp_path):
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    for flags, named, reason in ((["-fplugin=/tmp/evil.so"], "-fplugin=/tmp/evil.so", "loads code"),
                                 (["-Xclang", "-load", "-Xclang", "/tmp/evil.so"], "-Xclang -load", "unchecked"),
                                 (["-fpass-plugin=/tmp/evil.so"], "-fpass-plugin=/tmp/evil.so", "loads code"),
                                 (["-B/tmp/evil"], "-B/tmp/evil", "run other programs")):
        db = tmp_path / "compile_commands.json"
        db.write_text(json.dumps([{"directory": str(tmp_path), "file": "a.c",
                                   "arguments": ["cc", *flags, "-c", "a.c"]}]))
        with pytest.raises(ValueError, match=f"entry 0 \\(a.c\\): refused flag '{named}'.* {reason}"):
            list(from_compile_commands(db))
        assert len(list(from_compile_commands(db, allow_plugins=True))) == 1


def test_harness_runs_the_checked_program_in_the_sandbox(task, tmp_path):
    with TaskHarness(task) as harness:
        assert harness.sandbox.isolated
        verdict = harness.check(HEADER + CORRECT + "\tretq\n")
        assert verdict.ok, verdict.message
