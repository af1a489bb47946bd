#!/usr/bin/env python3
"""docrun.py: runs the commands that README.md and docs/*.md show with their output, and
compares what they print now with what the page says (`make test-docs`), or writes what they
print into the page (`make docs`).

A code block opts in with a marker, an HTML comment on a line of its own before the block (blank
lines between are allowed; the comment does not show when the page is rendered):

    <!-- docrun -->                      run the block, compare every command's output
    <!-- docrun mask=float,pid -->       ... with the numbers that vary masked (below)
    <!-- docrun needs=peer -->           ... only where the peer is installed (else skipped);
                                         also ggml, llama (the build has that bridge), python
    <!-- docrun pre="import weightmap" -->  hidden code run first (shell, or Python for >>>)
    <!-- docrun skip: GPU only -->       never run; the reason is printed in every run

Every block that shows a prompt (`$ ` or `>>> `) must carry one of them: an unmarked one fails
the check, so no command in the docs shows output that nothing runs.

In a block, a line `$ CMD` is a shell command (a line ending in a backslash continues it; a
here-document continues to its end marker); the lines after it, to the next `$ `, are its
output (stdout and stderr together). A block of `>>> ` lines (`... ` continues a statement) is
a Python session. In the expected output a line `...` stands for any number of lines, and a line
ending in `...` for any line that starts with what comes before it. Whitespace runs compare as
one space. Commands run from the repository root with `build/` meaning the build under test
(--build) and `/tmp/` a fresh folder per page (the output's paths are written back as
`/tmp/`); the blocks of one page run in order, in one such folder, each block in one bash.

Masks (comma-separated, applied to the expected and the actual text alike):
    float   numbers with a fraction (times, rates, sizes like 1.1 MiB)
    int     every integer (use sparingly: a count that varies)
    pid     the number after "pid ", "process ", "thread "
    addr    hexadecimal addresses of 8 to 16 digits
    size    every size as the CLI prints it (0 B, 8.0 KiB, 1.1 MiB): footprints are page noise
    /RE/    a Python regular expression

Regenerating (--write) keeps a command whose output still matches; otherwise it aligns the
page's lines with the new output (each line takes one line, each `...` any run of them; lines
that still match, or begin with the same word, anchor it) and writes the new lines in their
place, keeping the page's `...` elisions and cutting prefix lines after as many words; where
fewer than half of the page's lines are still recognisable, it writes the whole output and says
so (shorten it by hand with `...` lines, then run it again: a matching page is left alone).

Usage: scripts/docrun.py [--write] [--build DIR] [--python PY] [--list] FILE.md...
Exit: 0 all match; 1 a block differs, failed to run, or lacks a marker; 2 usage.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^\s*<!--\s*docrun\b(.*?)-->\s*$")
SENTINEL = "\x1edocrun-cmd-%d\x1e"
MASKS = {
    "float": r"\d+\.\d+",
    "int": r"\d+",
    "pid": r"(?<=\bpid )\d+|(?<=\bprocess )\d+|(?<=\bthread )\d+",
    "addr": r"\b[0-9a-f]{8,16}\b",
    "size": r"(?:\b\d+(?:\.\d+)?|#) (?:B|KiB|MiB|GiB|TiB)\b",  # "#": a float mask came first
}
ELLIPSIS = "..."


class Block:
    def __init__(self, path, marker_line, attrs, start, end, lines, indent):
        self.path, self.marker_line, self.attrs = path, marker_line, attrs
        self.start, self.end = start, end  # line indexes of the block's text in the page
        self.lines, self.indent = lines, indent  # the block's lines, the indentation removed
        self.cmds = []  # (command text, expected lines, index of first expected line in lines)

    def where(self):
        return "%s:%d" % (os.path.relpath(self.path, ROOT), self.start + 1)


def parse_attrs(text):
    text = text.strip()
    if text.startswith("skip"):
        return {"skip": text[4:].lstrip(":").strip() or "skipped"}
    attrs = {}
    for tok in shlex.split(text):
        k, _, v = tok.partition("=")
        attrs[k] = v
    return attrs


def code_blocks(lines):
    """(start, end, indent, fenced) of each code block: 4-space indented after a blank line, or
    fenced with ```."""
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if line.lstrip().startswith("```"):
            ind = len(line) - len(line.lstrip())
            j = i + 1
            while j < n and not lines[j].lstrip().startswith("```"):
                j += 1
            yield i + 1, j, ind, True
            i = j + 1
            continue
        if line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < n and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while j > i and not lines[j - 1].strip():
                j -= 1
            yield i, j, 4, False
            i = j
            continue
        i += 1


def split_commands(block):
    """Fills block.cmds; returns 'sh', 'py' or None (no prompt)."""
    lines, kind, i = block.lines, None, 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("$ ") or ln == "$":
            kind = kind or "sh"
            cmd = [ln[2:]]
            i += 1
            heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", cmd[0])
            while cmd[-1].endswith("\\") and i < len(lines):
                cmd.append(lines[i])
                i += 1
            if heredoc:
                while i < len(lines):
                    cmd.append(lines[i])
                    i += 1
                    if cmd[-1].strip() == heredoc.group(1):
                        break
            first = i
            while i < len(lines) and not lines[i].startswith("$ ") and lines[i] != "$":
                i += 1
            block.cmds.append(("\n".join(cmd), lines[first:i], first))
        elif ln.startswith(">>> "):
            kind = kind or "py"
            cmd = [ln[4:]]
            i += 1
            while i < len(lines) and (lines[i].startswith("... ") or lines[i] == "..."):
                if lines[i] == "...":  # "..." alone ends a compound statement
                    i += 1
                    break
                cmd.append(lines[i][4:])
                i += 1
            first = i
            while i < len(lines) and not lines[i].startswith(">>> "):
                i += 1
            block.cmds.append(("\n".join(cmd), lines[first:i], first))
        else:
            i += 1
    return kind


def read_page(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, unmarked = [], []
    for start, end, ind, fenced in code_blocks(lines):
        body = [ln[ind:] if ln.startswith(" " * ind) else ln.lstrip() for ln in lines[start:end]]
        # the marker: the last non-blank line before the block (before its fence when fenced)
        k = start - (2 if fenced else 1)
        while k >= 0 and not lines[k].strip():
            k -= 1
        m = MARKER.match(lines[k]) if k >= 0 else None
        b = Block(path, k, parse_attrs(m.group(1)) if m else None, start, end, body, ind)
        b.kind = split_commands(b)
        if b.kind is None:
            continue
        if m is None:
            unmarked.append(b)
        else:
            blocks.append(b)
    return lines, blocks, unmarked


def compile_masks(spec):
    out = []
    for name in filter(None, (spec or "").split(",")):
        if name.startswith("/") and name.endswith("/") and len(name) > 1:
            out.append(re.compile(name[1:-1]))
        elif name in MASKS:
            out.append(re.compile(MASKS[name]))
        else:
            raise SystemExit("docrun: unknown mask '%s' (%s or /REGEX/)" % (name, ", ".join(MASKS)))
    return out


def norm(line, masks):
    for m in masks:
        line = m.sub("#", line)
    return " ".join(line.split())


def is_ellipsis(line):
    return line.strip() == ELLIPSIS


def is_prefix(line):
    s = line.rstrip()
    return s.endswith(ELLIPSIS) and not is_ellipsis(line)


def line_matches(exp, act, masks, loose):
    if is_prefix(exp):
        e = norm(exp.rstrip()[: -len(ELLIPSIS)], masks)
        a = norm(act, masks)
        if loose:
            return (e.split() or [""])[0] == (a.split() or [""])[0]
        return a.startswith(e)
    e, a = norm(exp, masks), norm(act, masks)
    if loose:
        return (e.split() or [""])[0] == (a.split() or [""])[0]
    return e == a


def align(exp, act, masks, loose):
    """For each expected line, the index of the actual line it matched (None for `...`), or None
    when the expected lines do not match the actual ones."""
    ne, na = len(exp), len(act)
    memo = {}

    def go(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == ne:
            r = [] if j == na else None
        elif is_ellipsis(exp[i]):
            r = None
            for k in range(j, na + 1):
                sub = go(i + 1, k)
                if sub is not None:
                    r = [None] + sub
                    break
        elif j < na and line_matches(exp[i], act[j], masks, loose):
            sub = go(i + 1, j + 1)
            r = None if sub is None else [j] + sub
        else:
            r = None
        memo[(i, j)] = r
        return r

    sys.setrecursionlimit(max(10000, 4 * (ne + na) + 100))
    return go(0, 0)


def cut_like(exp, act):
    """The actual line cut after as many words as the page's prefix line has, then `...`."""
    words = exp.rstrip()[: -len(ELLIPSIS)].split()
    m = list(re.finditer(r"\S+", act))
    if len(m) <= len(words):
        return act
    lead = exp[: len(exp) - len(exp.lstrip())]
    return lead + act.strip()[: m[len(words) - 1].end() - m[0].start()] + " " + ELLIPSIS


def best_alignment(exp, act, masks):
    """The alignment of the page's lines with the actual ones that keeps the page's shape: each
    literal line takes one actual line, each `...` any run of them, scored 2 for a line that
    matches, 1 for one with the same first word; the best score, or None when no alignment
    covers the actual lines."""
    ne, na, NEG = len(exp), len(act), float("-inf")
    f = [[NEG] * (na + 1) for _ in range(ne + 1)]
    f[ne][na] = 0
    for i in range(ne - 1, -1, -1):
        if is_ellipsis(exp[i]):
            best = NEG
            for j in range(na, -1, -1):
                best = max(best, f[i + 1][j])
                f[i][j] = best
        else:
            for j in range(na - 1, -1, -1):
                if f[i + 1][j + 1] > NEG:
                    s = 2 if line_matches(exp[i], act[j], masks, False) else \
                        1 if line_matches(exp[i], act[j], masks, True) else 0
                    f[i][j] = s + f[i + 1][j + 1]
    if f[0][0] == NEG:
        return None, 0
    pos, j = [], 0
    for i in range(ne):
        if is_ellipsis(exp[i]):
            k = j
            while f[i + 1][k] != f[i][j]:
                k += 1
            pos.append(None)
            j = k
        else:
            pos.append(j)
            j += 1
    return pos, f[0][0]


def regenerate(exp, act, masks):
    """New expected lines for a command whose output no longer matches, and whether the page's
    shape was kept (else the whole output is written)."""
    pos, score = best_alignment(exp, act, masks)
    literal = sum(1 for e in exp if not is_ellipsis(e))
    if pos is None or score < literal:  # fewer than half the lines still recognisable
        return list(act), False
    out = []
    for e, j in zip(exp, pos):
        if j is None:
            out.append(e)
        elif is_prefix(e):
            out.append(cut_like(e, act[j]))
        else:
            out.append(act[j])
    return out, True


# ---- running ----

def which_needs(attrs, env):
    """The first need of a block this run cannot meet, or None."""
    for need in filter(None, attrs.get("needs", "").split(",")):
        if need == "peer":
            r = subprocess.run([os.path.join(ROOT, "scripts/peer.sh")], capture_output=True, text=True)
            if r.returncode != 0:
                return "the llama.cpp peer is not installed (scripts/peer.sh)"
        elif need == "ggml":
            if not os.path.exists(os.path.join(env["WM_DOCS_BUILD"], "ggml_stories")):
                return "the build has no ggml bridge (scripts/ggml.sh, then configure again)"
        elif need == "llama":
            if not os.path.exists(os.path.join(env["WM_DOCS_BUILD"], "libweightmap_llama.so")):
                return "the build has no llama.cpp bridge (scripts/llama.sh, then configure again)"
        elif need == "python":
            if not env.get("WM_DOCS_PYTHONPATH"):
                return "no Python extension given (--pythonpath; make test-docs gives build-py's)"
        elif need == "gpu":
            return "GPU only"
        else:
            raise ValueError("unknown need '%s' (peer, ggml, llama, python, gpu)" % need)
    return None


def subst_cmd(text, build, tmp):
    # /tmp/ first: the build folder's own path may lie under /tmp (a clone in /tmp/ci-check),
    # and must not be sent to the scratch folder.
    text = re.sub(r"(?<![\w.-])/tmp/", tmp + "/", text)
    return re.sub(r"(?<![\w./-])build/", build.rstrip("/") + "/", text)


def subst_out(text, build, tmp):
    text = text.replace(build.rstrip("/") + "/", "build/")
    return text.replace(tmp + "/", "/tmp/").replace(tmp, "/tmp")


PY_RUNNER = r"""
import code, contextlib, io, sys
stmts = sys.stdin.read().split("\x1fSTMT\x1f")
interp = code.InteractiveInterpreter()
for i, s in enumerate(stmts):
    if i:
        sys.__stdout__.write("\x1edocrun-cmd-%d\x1e" % (i - 1))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        src = s if "\n" not in s else s + "\n"
        if interp.runsource(src, "<stdin>", "single" if "\n" not in s else "exec"):
            print("docrun: incomplete statement", file=sys.stderr)
    sys.__stdout__.write(buf.getvalue())
    sys.__stdout__.flush()
"""


def run_block(b, env, tmp):
    build = env["WM_DOCS_BUILD"]
    pre = b.attrs.get("pre", "")
    if b.kind == "sh":
        script = ["cd %s" % shlex.quote(ROOT)]
        if pre:
            script.append(subst_cmd(pre, build, tmp) + " >/dev/null 2>&1")
        for i, (cmd, _, _) in enumerate(b.cmds):
            script.append("printf '%s'" % SENTINEL % i)
            script.append(subst_cmd(cmd, build, tmp))
        r = subprocess.run(["bash", "-c", "\n".join(script) + "\n"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, env=env, timeout=600, cwd=ROOT)
    else:
        stmts = [pre] + [subst_cmd(c, build, tmp) for c, _, _ in b.cmds]
        r = subprocess.run([env["WM_DOCS_PYTHON"], "-c", PY_RUNNER], input="\x1fSTMT\x1f".join(stmts).encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=600, cwd=ROOT)
    text = subst_out(r.stdout.decode("utf-8", "replace"), build, tmp)
    outs = []
    for i in range(len(b.cmds)):
        s = SENTINEL % i
        if s not in text:
            raise RuntimeError("the block stopped before command %d:\n%s" % (i + 1, text))
        text = text.split(s, 1)[1]
        nxt = SENTINEL % (i + 1)
        chunk = text.split(nxt, 1)[0] if i + 1 < len(b.cmds) else text
        outs.append(chunk.split("\n")[:-1] if chunk.endswith("\n") else chunk.split("\n") if chunk else [])
    return outs


def diff(exp, act, masks):
    import difflib
    return "\n".join(difflib.unified_diff([norm(x, masks) for x in exp], [norm(x, masks) for x in act],
                                          "page", "now", lineterm="", n=2))


def process(path, args, env, report):
    lines, blocks, unmarked = read_page(path)
    ok, changed = True, False
    for b in unmarked:
        report.append("%s: a block with a prompt has no <!-- docrun --> marker (or <!-- docrun skip: WHY -->)" % b.where())
        ok = False
    tmp = tempfile.mkdtemp(prefix="docrun.")
    try:
        edits = []
        for b in blocks:
            if "skip" in b.attrs:
                report.append("%s: skipped: %s" % (b.where(), b.attrs["skip"]))
                continue
            try:
                why = which_needs(b.attrs, env)
            except ValueError as e:
                report.append("%s: %s" % (b.where(), e))
                ok = False
                continue
            if why:
                report.append("%s: skipped: %s" % (b.where(), why))
                continue
            masks = compile_masks(b.attrs.get("mask"))
            try:
                outs = run_block(b, env, tmp)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                report.append("%s: %s" % (b.where(), e))
                ok = False
                continue
            new_body = list(b.lines)
            for (cmd, exp, first), act in reversed(list(zip(b.cmds, outs))):
                if align(exp, act, masks, loose=False) is not None:
                    continue
                if args.write:
                    new, kept = regenerate(exp, act, masks)
                    new_body[first:first + len(exp)] = new
                    report.append("%s: `%s`: regenerated%s" % (b.where(), cmd.split("\n")[0],
                                  "" if kept else " in full (its shape changed: shorten it with ... lines)"))
                else:
                    ok = False
                    report.append("%s: `%s` prints something else now (make docs regenerates):\n%s"
                                  % (b.where(), cmd.split("\n")[0], diff(exp, act, masks)))
            if new_body != b.lines:
                edits.append((b, new_body))
            elif args.list:
                report.append("%s: ok (%d commands)" % (b.where(), len(b.cmds)))
        for b, body in reversed(edits):
            pad = " " * b.indent
            lines[b.start:b.end] = [(pad + x) if x else "" for x in body]
            changed = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if changed:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--write", action="store_true", help="write the outputs into the pages")
    ap.add_argument("--build", default="build-test", help="the build folder `build/` means")
    ap.add_argument("--python", default="/usr/bin/python3", help="the python of >>> blocks and python3")
    ap.add_argument("--pythonpath", default="", help="where the weightmap package is (needs=python)")
    ap.add_argument("--list", action="store_true", help="also name every block that matches")
    args = ap.parse_args()
    build = os.path.abspath(os.path.join(ROOT, args.build))
    if not os.path.exists(os.path.join(build, "weightmap")):
        print("docrun: %s/weightmap is not built" % build, file=sys.stderr)
        return 2
    env = dict(os.environ, WM_DOCS_BUILD=build, WM_DOCS_PYTHON=args.python, LC_ALL="C.UTF-8",
               COLUMNS="100")
    env.pop("WM_FIXTURES", None)
    if args.pythonpath:
        pp = os.path.abspath(os.path.join(ROOT, args.pythonpath))
        env["WM_DOCS_PYTHONPATH"] = env["PYTHONPATH"] = pp
        bindir = tempfile.mkdtemp(prefix="docrun-bin.")
        os.symlink(args.python, os.path.join(bindir, "python3"))
        env["PATH"] = bindir + os.pathsep + env["PATH"]
    report, ok = [], True
    for f in args.files:
        ok = process(os.path.abspath(f), args, env, report) and ok
    for r in report:
        print("docrun: " + r)
    print("docrun: %s" % ("every documented output matches" if ok else "the docs and the commands disagree"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
