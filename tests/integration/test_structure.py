#!/usr/bin/env python3
"""test_structure.py - two checks of the source tree's shape (issue 13), run by `make test`:

  1. no #include cycle between modules. A module is a .c file and the header of the same base name
     (wherever each lives: include/attnd/gguf.h belongs with server/gguf/gguf.c), plus its private
     header X_internal.h or X_impl.h if it has one; a header with no .c of its name is a module of
     its own. A cycle is a strongly connected component of two or
     more modules in the graph of #include "..." lines (system headers are not followed).
  2. no function longer than 80 lines (signature to closing brace) outside the SIMD kernels
     (*_avx2.c, *_avx512.c), tests/ and bench/.

Prints every offender of both checks, then exits 1 if there is any, else 0.
The function finder reads the project's layout (clang-format, function braces at column 0):
a definition starts at a column-0 line that is not a comment, preprocessor line or declaration,
and runs to the next line that is exactly "}".
"""
import os
import re
import sys

MAX_LINES = 80
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SOURCE_DIRS = ("server", "kernels", "include")
EXEMPT_FUNC = re.compile(r"(_avx2|_avx512)\.c$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def source_files():
    out = []
    for d in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, d)):
            out += [os.path.relpath(os.path.join(dirpath, n), ROOT) for n in names if n.endswith((".c", ".h"))]
    return sorted(out)


def resolve(inc, src):
    """The tree path an #include "inc" in file src names, or None (generated or system header)."""
    for base in (os.path.dirname(src), ".", "include"):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(ROOT, p)):
            return p
    return None


def module_of(path):
    """A private header X_internal.h or X_impl.h belongs to module X (shared by X's .c files)."""
    return re.sub(r"_(internal|impl)$", "", os.path.splitext(os.path.basename(path))[0])


def include_cycles(files):
    edges = {}
    for f in files:
        m = module_of(f)
        edges.setdefault(m, set())
        with open(os.path.join(ROOT, f), errors="replace") as fh:
            for line in fh:
                mt = INCLUDE.match(line)
                target = mt and resolve(mt.group(1), f)
                if target and module_of(target) != m:
                    edges[m].add((module_of(target), f, target))
    graph = {m: {t for t, _, _ in e} for m, e in edges.items()}
    # Tarjan's strongly connected components, iteratively
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))
    problems = []
    for comp in sccs:
        inside = set(comp)
        lines = [f"    {f} includes {t}" for m in comp for (tm, f, t) in sorted(edges[m]) if tm in inside]
        problems.append("include cycle between modules " + ", ".join(comp) + ":\n" + "\n".join(lines))
    return problems


DECL_START = re.compile(r"^(static\s+|extern\s+|inline\s+|const\s+|unsigned\s+|signed\s+|struct\s+|enum\s+|union\s+)*"
                        r"[A-Za-z_][A-Za-z0-9_\s\*]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def long_functions(path):
    with open(os.path.join(ROOT, path), errors="replace") as fh:
        lines = fh.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = DECL_START.match(line)
        if not m or line.startswith(("typedef", "#")) or line.rstrip().endswith(";"):
            i += 1
            continue
        # the body's opening brace: at the end of the signature (possibly continued) or alone below it
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith(("{", ";", "}")) and j - i < 10:
            j += 1
        if j >= len(lines) or not lines[j].rstrip().endswith("{") or "=" in lines[j].split("(")[0]:
            i += 1
            continue
        k = j + 1
        while k < len(lines) and lines[k].rstrip() != "}":
            k += 1
        n = k - i + 1
        if n > MAX_LINES:
            out.append(f"{path}:{i + 1}: {m.group(2)}() is {n} lines (limit {MAX_LINES})")
        i = k + 1
    return out


def main():
    files = source_files()
    problems = include_cycles(files)
    longs = [p for f in files if f.endswith(".c") and not EXEMPT_FUNC.search(f) for p in long_functions(f)]
    for p in problems:
        print("FAIL " + p)
    for p in longs:
        print("FAIL " + p)
    print(f"test_structure: {len(files)} files, {len(problems)} include cycles, {len(longs)} functions over "
          f"{MAX_LINES} lines")
    return 1 if problems or longs else 0


if __name__ == "__main__":
    sys.exit(main())
