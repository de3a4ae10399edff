#!/usr/bin/env python3
"""Checks the shape of the source tree (docs/architecture.md, "Layers").

Two checks, each run on a source root (default: this checkout):

  layering   Every #include "..." that resolves inside the tree is followed,
             transitively, and each rule below must hold for what a file
             reaches. A rule names the files it governs and the files they
             must not reach:
               * passes/ and dialects/ never reach lib/Pipelines or
                 lib/Import (include/loom/Pipelines.h, InitAll.h, Import.h);
               * lib/CostModel and include/loom/CostModel.h reach no MLIR
                 header and no IR (dialects/, passes/, include/loom/Passes);
               * the loomrt transforms (passes/LoomRT, loom/Passes/LoomRT.h)
                 reach neither the conversion nor the loom transforms, and the
                 conversion (passes/LoomToLoomRT) does not reach the loom
                 transforms (passes/Loom, loom/Passes/Loom.h);
               * dialects/ reach no pass;
               * the compiler (dialects, passes, lib, tools, include/loom)
                 includes nothing private to the runtime (runtime/ outside
                 runtime/include); the runtime's own tools (RUNTIME_TOOLS:
                 no LLVM) may.
  size       No source file over --max-lines (1200) lines and no function
             over --max-function (150) lines, except the debts listed in
             DEBTS below, each with the size it may not exceed: a debt can
             shrink (lower its number or delete its line), never grow.
             Functions are found by braces after a parameter list, with
             comments and strings removed (lambdas inside a function count
             towards it; a lambda at namespace scope is a function).

  check-layering.py layering [--root DIR]
  check-layering.py size [--root DIR] [--no-debts]
Prints one line per finding and a summary; exit status 1 on any finding.
"""
import argparse
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpp_text import strip  # noqa: E402

SOURCE_SUFFIXES = (".cpp", ".h", ".cu", ".inc.h")
SOURCE_DIRS = ("dialects", "passes", "lib", "include", "tools", "runtime", "test/Unit",
               "test/Fuzz")
INCLUDE_ROOTS = ("", "include", "runtime/include", "runtime")

# The tools built on the runtime alone (no LLVM/MLIR).
RUNTIME_TOOLS = ("tools/loom-calibrate/", "tools/loom-graphgen/")

# (name, governs(path), forbidden(path), what the rule says)
RULES = [
    ("passes-dialects-below-pipelines",
     lambda p: p.startswith(("passes/", "dialects/")),
     lambda p: p.startswith(("lib/Pipelines/", "lib/Import/"))
     or p in ("include/loom/Pipelines.h", "include/loom/InitAll.h", "include/loom/Import.h"),
     "passes and dialects may not use lib/Pipelines or lib/Import"),
    ("costmodel-without-ir",
     lambda p: p.startswith("lib/CostModel/") or p == "include/loom/CostModel.h",
     lambda p: p.startswith(("mlir/", "dialects/", "passes/", "include/loom/Passes/"))
     or p == "include/loom/StepSimulation.h",
     "lib/CostModel holds the hardware description and formulas: no MLIR, no IR"),
    ("loomrt-transforms-alone",
     lambda p: p.startswith("passes/LoomRT/") or p == "include/loom/Passes/LoomRT.h",
     lambda p: p.startswith(("passes/Loom/", "passes/LoomToLoomRT/"))
     or p in ("include/loom/Passes/Loom.h", "include/loom/Passes/LoomToLoomRT.h"),
     "loomrt transforms see loomrt IR only"),
    ("conversion-below-loom-transforms",
     lambda p: p.startswith("passes/LoomToLoomRT/") or p == "include/loom/Passes/LoomToLoomRT.h",
     lambda p: p.startswith("passes/Loom/") or p == "include/loom/Passes/Loom.h",
     "the conversion does not use the loom transforms"),
    ("dialects-without-passes",
     lambda p: p.startswith("dialects/"),
     lambda p: p.startswith(("passes/", "include/loom/Passes/")),
     "the dialects hold the IR only"),
    # (loom-calibrate and loom-graphgen are the runtime's own tools: they
    # link no LLVM, build on GPU hosts from runtime/ and bench/, and share
    # the training binary's command-line parser, runtime/common/cli.h.)
    ("runtime-private",
     lambda p: p.startswith(("dialects/", "passes/", "lib/", "tools/", "include/loom/"))
     and not p.startswith(RUNTIME_TOOLS),
     lambda p: p.startswith("runtime/") and not p.startswith("runtime/include/"),
     "the compiler shares only the runtime's public headers (runtime/include)"),
]

# Known debts of issue 42's size limits: path or path:function -> the most
# lines it may have. Delete a line when the debt is paid.
DEBTS = {
}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def sources(root, dirs=SOURCE_DIRS):
    out = []
    for d in dirs:
        base = root / d
        if base.is_dir():
            out += [p for p in base.rglob("*") if p.is_file() and p.name.endswith(SOURCE_SUFFIXES)]
    return sorted(out)


def rel(root, p):
    return p.relative_to(root).as_posix()


def resolve(root, here, name):
    """The tree path an #include "name" in `here` reaches, or None (MLIR,
    LLVM and generated .inc files are outside the tree: named as written)."""
    for cand in [here.parent / name] + [root / r / name for r in INCLUDE_ROOTS]:
        if cand.is_file():
            return rel(root, cand.resolve()) if root in cand.resolve().parents else None
    return name if name.startswith(("mlir/", "llvm/")) else None


def layering(root):
    graph = {}
    for p in sources(root):
        text = p.read_text(errors="replace")
        graph[rel(root, p)] = [r for r in (resolve(root, p, n) for n in INCLUDE.findall(text)) if r]
    findings = []
    for name, governs, forbidden, why in RULES:
        for src in sorted(graph):
            if not governs(src):
                continue
            seen, stack, via = {src}, [src], {src: None}
            while stack:
                cur = stack.pop()
                for nxt in graph.get(cur, []):
                    if nxt in seen:
                        continue
                    seen.add(nxt)
                    via[nxt] = cur
                    if forbidden(nxt):
                        chain = [nxt]
                        while via[chain[-1]] is not None:
                            chain.append(via[chain[-1]])
                        findings.append(f"{src}: reaches {nxt} (via {' -> '.join(reversed(chain))}): "
                                        f"{why} [{name}]")
                        continue
                    if nxt in graph:
                        stack.append(nxt)
    return findings, len(graph)


FUNC_HEAD = re.compile(r"\)\s*(?:const|override|noexcept|final|mutable|->\s*[\w:<>&*, ]+|\s)*$")
INIT_LIST = re.compile(r"\)\s*:[^;]*[)}]\s*$")
CONTROL = re.compile(r"(?:^|[^\w])(?:if|for|while|switch|catch)\s*\(")


def functions(text):
    """(first line, lines, head) of each outermost function body."""
    s = strip(text)
    stack, found, last = [], [], 0
    for i, c in enumerate(s):
        if c == "{":
            head = re.sub(r"\s+", " ", s[last:i]).strip()
            inside = any(f for _, f, _ in stack)
            is_fn = not inside and (FUNC_HEAD.search(head) or INIT_LIST.search(head)) and \
                not CONTROL.match(head) and not head.startswith(("if", "for", "while", "switch"))
            stack.append((i, bool(is_fn), head))
            last = i + 1
        elif c == "}":
            if stack:
                start, is_fn, head = stack.pop()
                if is_fn:
                    l0 = s.count("\n", 0, start) + 1
                    found.append((l0, s.count("\n", 0, i) + 2 - l0, head))
            last = i + 1
        elif c == ";":
            last = i + 1
    return found


def size(root, max_lines, max_function, debts):
    findings, files, debts_seen = [], 0, set()
    for p in sources(root):
        r = rel(root, p)
        text = p.read_text(errors="replace")
        files += 1
        n = text.count("\n")
        allowed = debts.get(r, max_lines)
        if r in debts:
            debts_seen.add(r)
        if n > allowed:
            findings.append(f"{r}: {n} lines (at most {allowed})")
        for l0, lines, head in functions(text):
            key = f"{r}:{l0}"
            name = re.match(r"[^(]*?([~\w]+)\s*\(", head)
            fkey = f"{r}:{name.group(1) if name else '?'}"
            allowed = debts.get(fkey, max_function)
            if fkey in debts:
                debts_seen.add(fkey)
            if lines > allowed:
                findings.append(f"{key}: function {fkey.split(':')[1]} has {lines} lines (at most {allowed})")
    for stale in sorted(set(debts) - debts_seen):
        findings.append(f"{stale}: listed in DEBTS but not found (paid? delete the line)")
    return findings, files


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("check", choices=["layering", "size"])
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    ap.add_argument("--max-lines", type=int, default=1200)
    ap.add_argument("--max-function", type=int, default=150)
    ap.add_argument("--no-debts", action="store_true", help="size: hold every file to the limits")
    a = ap.parse_args()
    root = pathlib.Path(a.root).resolve()
    if a.check == "layering":
        findings, n = layering(root)
    else:
        findings, n = size(root, a.max_lines, a.max_function, {} if a.no_debts else DEBTS)
    for f in findings:
        print(f)
    print(f"check-layering {a.check}: {n} files, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
