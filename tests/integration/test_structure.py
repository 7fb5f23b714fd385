#!/usr/bin/env python3
"""test_structure.py - checks of the source tree's shape (issues 13 and 33), run by `make test`:

  1. layers point one way. LAYERS below ranks every source folder, bottom (core/, which uses nothing
     of ours) to top (server/main.c); docs/ARCHITECTURE.md's layer table must list the same folders
     in the same order. A file may include only files of its own layer or a lower one (kernels/ never
     includes server/, core/ includes only core/). A file's layer is its folder's; a public header in
     include/attnd/ belongs to the folder of the module that implements it: the .c that includes it
     first (each .c includes its own header first), else the .c of the same base name, else (a header
     of declarations only) the lowest layer of the files that include it.
  2. no #include cycle between modules. A module is a .c file and the header of the same base name
     (wherever each lives: include/attnd/gguf.h belongs with server/gguf/gguf.c), plus its private
     header X_internal.h or X_impl.h if it has one; a header with no .c of its name is a module of
     its own. A cycle is a strongly connected component of two or more modules in the graph of
     #include "..." lines (system and generated headers are not followed).
  3. no function longer than 80 lines: C (signature to closing brace) outside the SIMD kernels
     (*_avx2.c, *_avx512.c), tests/ and bench/; Python (def to its last line) outside tests/.

Prints every offender (the file, the line it includes, the layers), then exits 1 if there is any,
else 0. The C function finder reads the project's layout (clang-format, function braces at column
0): a definition starts at a column-0 line that is not a comment, preprocessor line or declaration,
and runs to the next line that is exactly "}". Python functions are found with the ast module.
"""
import ast
import os
import re
import sys

MAX_LINES = 80
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SOURCE_DIRS = ("core", "kernels", "server", "include")
EXEMPT_FUNC = re.compile(r"(_avx2|_avx512)\.c$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
PUBLIC = "include/attnd"
# Python is checked for function length everywhere but these top-level folders (tests/ is exempt, as
# for C) and these folders anywhere
PY_SKIP_TOP = {"tests", "build"}
PY_SKIP_ANY = {"node_modules", "__pycache__"}

# The layers, bottom to top: a file may include its own layer's files and lower ones only.
# docs/ARCHITECTURE.md's layer table shows the same folders, top to bottom.
LAYERS = [
    "core",              # status, log, check, utf8, the tensor type table: uses nothing of ours
    "kernels/cpu",       # SIMD kernels and their scalar references, the type table's kernels
    "kernels/vulkan",    # the Vulkan device layer (takes FA2's parameters from kernels/cpu)
    "server/gguf",       # the file format
    "server/tokenizer",  # text <-> token ids (reads the vocabulary from a GGUF)
    "server/engine",     # the model and its scheduling
    "server/api",        # the HTTP front end
    "server/cmd",        # the subcommands
    "server/main.c",     # the entry point
]
RANK = {name: i for i, name in enumerate(LAYERS)}


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


def read_includes(files):
    """{file: [(line number, the #include line, resolved path), ...]} for the includes that resolve."""
    out = {}
    for f in files:
        incs = []
        with open(os.path.join(ROOT, f), errors="replace") as fh:
            for no, line in enumerate(fh, 1):
                mt = INCLUDE.match(line)
                target = mt and resolve(mt.group(1), f)
                if target:
                    incs.append((no, line.strip(), target))
        out[f] = incs
    return out


def module_of(path):
    """A private header X_internal.h or X_impl.h belongs to module X (shared by X's .c files)."""
    return re.sub(r"_(internal|impl)$", "", os.path.splitext(os.path.basename(path))[0])


# ---------------------------------------------------------------- 1. layers


def folder_layer(path):
    """The layer name of a file outside include/attnd, or None if its folder is in no layer."""
    if path in RANK:
        return path
    d = os.path.dirname(path)
    return d if d in RANK else None


def public_homes(files, incs):
    """{public header: layer} by the rules of the docstring (headers nobody includes are left out)."""
    cs = [f for f in files if f.endswith(".c") and folder_layer(f)]
    headers = [f for f in files if os.path.dirname(f) == PUBLIC]
    homes = {}
    for h in headers:
        first = {folder_layer(c) for c in cs if incs[c] and incs[c][0][2] == h}
        same = {folder_layer(c) for c in cs if os.path.basename(c)[:-2] == os.path.basename(h)[:-2]}
        if first or same:
            homes[h] = min(first or same, key=RANK.get)
    users = {h: [f for f in files if any(t == h for _, _, t in incs[f])] for h in headers if h not in homes}
    changed = True
    while changed:  # declaration-only headers: the lowest layer that includes them (only ever lowers: ends)
        changed = False
        for h, fs in users.items():
            found = {layer_of(f, homes) for f in fs} - {None}
            low = min(found, key=RANK.get) if found else None
            if low is not None and homes.get(h) != low:
                homes[h] = low
                changed = True
    return homes


def layer_of(path, homes):
    if os.path.dirname(path) == PUBLIC:
        return homes.get(path)
    return folder_layer(path)


def layer_problems(files, incs):
    homes = public_homes(files, incs)
    problems = []
    for f in files:
        if os.path.dirname(f) != PUBLIC and folder_layer(f) is None:
            problems.append(f"{f}: its folder is in no layer; add it to LAYERS here and to docs/ARCHITECTURE.md")
            continue
        lf = layer_of(f, homes)
        if lf is None:
            continue  # a public header nothing includes yet
        for no, line, target in incs[f]:
            lt = layer_of(target, homes)
            if lt is not None and RANK[lt] > RANK[lf]:
                problems.append(f"{f}:{no}: `{line}` reaches up from layer {lf} ({RANK[lf]}) to {target} in "
                                f"layer {lt} ({RANK[lt]}); move what both need down, or the include up")
    return problems


def doc_layers():
    """The folders of docs/ARCHITECTURE.md's layer table, top to bottom (repeated rows merged)."""
    out, in_table = [], False
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md")) as fh:
        for line in fh:
            if line.startswith("## "):
                in_table = line.startswith("## Layers")
                continue
            m = in_table and re.match(r"\|\s*`([^`]+)`", line)
            if m:
                name = m.group(1).rstrip("/")
                if not out or out[-1] != name:
                    out.append(name)
    return out


def doc_problems():
    want = list(reversed(LAYERS))
    got = doc_layers()
    if got == want:
        return []
    return [f"docs/ARCHITECTURE.md's layer table lists {got} (top to bottom); LAYERS here is {want}"]


# ---------------------------------------------------------------- 2. include cycles


def include_cycles(files, incs):
    edges = {}
    for f in files:
        m = module_of(f)
        edges.setdefault(m, set())
        for _, _, target in incs[f]:
            if module_of(target) != m:
                edges[m].add((module_of(target), f, target))
    graph = {m: {t for t, _, _ in e} for m, e in edges.items()}
    problems = []
    for comp in strongly_connected(graph):
        inside = set(comp)
        lines = [f"    {f} includes {t}" for m in comp for (tm, f, t) in sorted(edges[m]) if tm in inside]
        problems.append("include cycle between modules " + ", ".join(comp) + ":\n" + "\n".join(lines))
    return problems


def strongly_connected(graph):
    """Tarjan's strongly connected components of two or more nodes, iteratively."""
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        return (v, iter(sorted(graph[v])))

    for root in graph:
        if root in index:
            continue
        work = [visit(root)]
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    work.append(visit(nxt))
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
    return sccs


# ---------------------------------------------------------------- 3. function length

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


def python_files():
    """The repository's Python files outside tests/ (and build outputs, hidden folders, node_modules)."""
    out = []
    for dirpath, dirs, names in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in PY_SKIP_ANY
                         and not (rel == "." and d in PY_SKIP_TOP))
        out += [os.path.normpath(os.path.join(rel, n)) for n in names if n.endswith(".py")]
    return sorted(out)


def long_python_functions(path):
    with open(os.path.join(ROOT, path)) as fh:
        tree = ast.parse(fh.read(), path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_LINES:
                out.append(f"{path}:{node.lineno}: {node.name}() is {n} lines (limit {MAX_LINES})")
    return out


def main():
    files = source_files()
    incs = read_includes(files)
    layers = doc_problems() + layer_problems(files, incs)
    cycles = include_cycles(files, incs)
    pys = python_files()
    longs = [p for f in files if f.endswith(".c") and not EXEMPT_FUNC.search(f) for p in long_functions(f)]
    longs += [p for f in pys for p in long_python_functions(f)]
    for p in layers + cycles + longs:
        print("FAIL " + p)
    print(f"test_structure: {len(files)} C files in {len(LAYERS)} layers, {len(layers)} layer violations, "
          f"{len(cycles)} include cycles; {len(files) + len(pys)} C and Python files ({len(pys)} Python), "
          f"{len(longs)} functions over {MAX_LINES} lines")
    return 1 if layers or cycles or longs else 0


if __name__ == "__main__":
    sys.exit(main())
