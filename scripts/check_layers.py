#!/usr/bin/env python3
"""The layering check over the include graph of src/ (run by `make test` as test_check_layers).

    python3 scripts/check_layers.py [SRC_DIR]      (default: the src/ beside this script)

megadlm is three layers and a program on top: src/core (kernels, model, parallelism: no
command-line flags, no files a user names), src/training (arguments, checkpoints, logging, the
training loop, tokenizers), src/tools (the subcommands) and src/main.c. A file may include files
of its own layer or of the layers below it, never above; the build enforces the same order at link
time (megadlm_tools -> megadlm_training -> megadlm_core, CMakeLists.txt). Within the graph of
modules (a .c and its .h are one module) no include cycle is allowed either: a cycle means two
modules are one concept split in two files, or that a shared piece wants a file of its own.

The core knows no command-line flag: a string literal of a file under core/ that holds a flag
name ("--" and a letter) is a problem too. The core's messages describe the problem in its own
terms ("expected up to 3 comma-separated weights, found 'x'") and the layer that read the flag
prefixes its name ("--split: ..."). Comments may name flags (they explain where a value comes
from).

Every `#include "..."` is resolved against SRC_DIR first (the project's style), then against the
including file's directory; an include that resolves to no file under SRC_DIR (a generated header
of the build directory, such as event.pb-c.h) is not part of the graph. Exits 1 with one line per
upward edge, per cycle and per flag name in the core, naming the files; 0 when the tree is
layered; 2 on bad usage.
"""
import os
import re
import subprocess
import sys

LAYERS = ["core", "training", "tools", "main"]  # bottom to top
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# C's comments, string literals and character literals, in the order they start: a "//" in a
# string is part of the string, a quote in a comment or a character literal starts no string
C_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
FLAG_NAME = re.compile(r'--[A-Za-z]')


def layer_of(rel):
    """The layer of a file (path relative to SRC_DIR), or None when it belongs to none."""
    top = rel.split("/", 1)[0]
    if top in ("core", "training", "tools"):
        return top
    if rel == "main.c":
        return "main"
    return None


def module_of(rel, files):
    """A .c and its .h are one node of the graph: the path without its extension. A header
    without a .c of its own named after a sibling .c and a suffix (gpt_data_debug.h beside
    gpt_data.c, unicode_nfc_data.h beside unicode_nfc.c) is a second header of that module."""
    base = os.path.splitext(rel)[0]
    if rel.endswith(".c") or base + ".c" in files:
        return base
    head, name = os.path.split(base)
    owners = [os.path.splitext(f)[0] for f in files
              if f.endswith(".c") and os.path.dirname(f) == head
              and name.startswith(os.path.basename(os.path.splitext(f)[0]) + "_")]
    return max(owners, key=len) if owners else base


def source_files(src):
    out = []
    for root, _dirs, files in os.walk(src):
        for name in files:
            if name.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(root, name), src).replace(os.sep, "/"))
    return sorted(out)


def resolve(src, rel, inc):
    """The included file's path relative to SRC_DIR, or None when it is not in the tree."""
    for cand in (inc, os.path.join(os.path.dirname(rel), inc)):
        cand = os.path.normpath(cand).replace(os.sep, "/")
        if not cand.startswith("../") and os.path.isfile(os.path.join(src, cand)):
            return cand
    return None


def read_edges(src, files):
    """(including file, included file) pairs between files of the tree."""
    edges = []
    for rel in files:
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            target = resolve(src, rel, inc)
            if target is not None:
                edges.append((rel, target))
    return edges


def strongly_connected(graph):
    """Tarjan's strongly connected components of {node: set(successors)} (iterative, so a deep
    tree cannot reach Python's recursion limit)."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, succ = work[-1]
            advanced = False
            for nxt in succ:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                comps.append(sorted(comp))
    return comps


def cycle_in(graph, comp):
    """One cycle through the first module of a strongly connected component, as a module list
    that starts and ends with that module (breadth-first, so it is a shortest one)."""
    members = set(comp)
    start = comp[0]
    parent = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node]):
            if nxt == start:
                path = [node]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if nxt in members and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return comp + [start]


def object_files(build, files):
    """{source path relative to SRC_DIR: object file} for the objects under BUILD whose path
    ends in src/<a source of the tree>.o (CMake's CMakeFiles/<target>.dir/src/core/x.c.o), the
    newest one where several are (a test tool compiles a source again, or a target that no
    longer builds it left a stale one); objects of sources no longer in the tree are left out."""
    out = {}
    for root, _dirs, names in os.walk(build):
        for name in names:
            if not name.endswith(".o"):
                continue
            path = os.path.join(root, name).replace(os.sep, "/")
            if "/src/" not in path:
                continue
            rel = path.rsplit("/src/", 1)[1][:-2]
            if not rel.endswith(".c"):
                rel += ".c"
            if rel in files and (rel not in out or
                                 os.path.getmtime(path) > os.path.getmtime(out[rel])):
                out[rel] = path
    return out


def read_symbol_edges(build, files):
    """(file that uses a symbol, file that defines it, symbol) for the external symbols the
    objects of the tree's .c files define and use (nm)."""
    objects = object_files(build, files)
    defined, used = {}, {}
    for rel, path in sorted(objects.items()):
        out = subprocess.run(["nm", "-P", path], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind == "U":
                used.setdefault(rel, set()).add(sym)
            elif kind in "TDBRCGSVW":
                defined.setdefault(sym, rel)
    edges = []
    for rel in sorted(used):
        for sym in sorted(used[rel]):
            if sym in defined and defined[sym] != rel:
                edges.append((rel, defined[sym], sym))
    return len(objects), edges


def flag_literals(src, files):
    """A problem line for every string literal of a core/ file that names a flag."""
    problems = []
    for rel in files:
        if layer_of(rel) != "core":
            continue
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in C_TOKEN.finditer(text):
            lit = m.group(0)
            if lit.startswith('"') and FLAG_NAME.search(lit):
                problems.append("flag name in the core: %s:%d: %s (the core describes the "
                                "problem; the layer that reads the flag names it)"
                                % (rel, text.count("\n", 0, m.start()) + 1, lit))
    return problems


def layer_problem(a, b, how):
    la, lb = layer_of(a), layer_of(b)
    rank = {name: i for i, name in enumerate(LAYERS)}
    if la is None or lb is None:
        return ("unlayered file: %s %s %s (every file of the tree belongs to core/, training/, "
                "tools/ or is main.c)" % (a, how, b))
    if rank[lb] > rank[la]:
        return "upward %s: %s (%s) %s %s (%s)" % (
            "include" if how == "includes" else "call", a, la, how, b, lb)
    return None


def check(src, build=None):
    files = source_files(src)
    fileset = set(files)
    edges = [(a, b, "includes") for a, b in read_edges(src, files)]
    nobjects = 0
    if build is not None:
        nobjects, sym_edges = read_symbol_edges(build, fileset)
        edges += [(a, b, "uses %s of" % sym) for a, b, sym in sym_edges]
    problems = []
    for a, b, how in edges:
        p = layer_problem(a, b, how)
        if p and p not in problems:
            problems.append(p)
    graph = {module_of(f, fileset): set() for f in files}
    witness = {}
    for a, b, how in edges:
        ma, mb = module_of(a, fileset), module_of(b, fileset)
        if ma != mb:
            graph[ma].add(mb)
            witness.setdefault((ma, mb), "%s %s %s" % (a, how, b))
    for comp in strongly_connected(graph):
        if len(comp) < 2:
            continue
        cyc = cycle_in(graph, comp)
        steps = [witness[(cyc[i], cyc[i + 1])] for i in range(len(cyc) - 1)]
        more = "" if len(comp) == len(cyc) - 1 else "; the cycles join %s" % ", ".join(comp)
        problems.append("cycle: %s (%s%s)" % (" -> ".join(cyc), "; ".join(steps), more))
    problems += flag_literals(src, files)
    return len(files), nobjects, len(edges), problems


def main(argv):
    args = argv[1:]
    build = None
    if len(args) >= 2 and args[0] == "--objects":
        build = args[1]
        args = args[2:]
    if len(args) > 1 or (args and args[0].startswith("-")):
        sys.stderr.write("usage: check_layers.py [--objects BUILD_DIR] [SRC_DIR]\n")
        return 2
    src = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                             "src")
    for d in [src] + ([build] if build else []):
        if not os.path.isdir(d):
            sys.stderr.write("check_layers.py: %s is not a directory\n" % d)
            return 2
    nfiles, nobjects, nedges, problems = check(src, build)
    if build is not None and nobjects == 0:
        problems.append("no object file of the tree under %s (build first)" % build)
    for p in problems:
        print("check_layers: " + p)
    what = "%d files%s, %d edges" % (nfiles, ", %d objects" % nobjects if build else "", nedges)
    if problems:
        print("check_layers: %d problem(s) in %s (layers, bottom to top: %s)"
              % (len(problems), what, " < ".join(LAYERS)))
        return 1
    print("check_layers: %s: no upward edge, no cycle, no flag name in the core" % what)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
