#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fail when the given C files call or include one another in a loop.

    check_layers.py [--unit GLOB]... FILE.c...

File A depends on file B when A names a function that B defines without `static`, or
includes a header of B's (one whose functions B defines, all of them).  The files must form layers: no loop, so that a
lower file (vmm/backing.c) knows none of its users and reaches them only through the
hooks they hand it.  A --unit glob names files that are one object split by job (the
guest's vmm/guest*.c): a loop inside it is allowed, a loop through it is not.

Read as text: comments and strings are dropped, a definition is a name and its
parameters at the start of a line with its body's `{` at the start of the next.
Exit 1 and each loop as a chain of files with the names that tie them.
"""
import fnmatch
import os
import re
import sys

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
DEFINITION = re.compile(r"^(?!static\b|typedef\b|extern\b)[A-Za-z_][\w \t*]*?\b(\w+)\("
                        r"[^;{}]*\)[ \t]*\n\{", re.M)
DECLARATION = re.compile(r"^(?!static\b|typedef\b|#)[A-Za-z_][\w \t*]*?\b(\w+)\([^;{}]*\);",
                         re.M)
INCLUDE = re.compile(r'^#include\s+"([^"]+)"', re.M)
WORD = re.compile(r"\b[A-Za-z_]\w*\b")
TAG = re.compile(r"\b(?:struct|union|enum)\s+\w+")  # a type, even of a function's name


def text_of(path):
    with open(path) as f:
        raw = f.read()
    return raw, COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), raw)


def header_path(src, inc):
    """The file `#include "inc"` in src names, if it is there: beside src or from the
    tree's top (the build's -I.)."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(src)))
    for d in (os.path.dirname(os.path.abspath(src)), top):
        p = os.path.normpath(os.path.join(d, inc))
        if os.path.exists(p):
            return p
    return None


def graph(files):
    """{file: {other file: set of names}} for the files given."""
    texts = {f: text_of(f) for f in files}
    owner = {}
    for f, (raw, code) in texts.items():
        for name in DEFINITION.findall(code):
            owner.setdefault(name, f)
    edges = {f: {} for f in files}
    for f, (raw, code) in texts.items():
        for word in set(WORD.findall(TAG.sub(" ", code))):
            g = owner.get(word)
            if g and g != f:
                edges[f].setdefault(g, set()).add(word)
        for inc in INCLUDE.findall(raw):
            h = header_path(f, inc)
            owners = {owner.get(n) for n in DECLARATION.findall(text_of(h)[1])} if h else set()
            owners.discard(None)
            if len(owners) == 1 and f not in owners:
                edges[f].setdefault(owners.pop(), set()).add(os.path.basename(h))
    return edges


def loops(edges):
    """The strongly connected sets of more than one file (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def in_unit(path, units):
    return any(fnmatch.fnmatch(os.path.normpath(path), u) for u in units)


def main(argv):
    units, files = [], []
    it = iter(argv)
    for a in it:
        if a == "--unit":
            units.append(os.path.normpath(next(it)))
        else:
            files.append(a)
    if not files:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    edges = graph(files)
    bad = [s for s in loops(edges) if not all(in_unit(f, units) for f in s)]
    for scc in bad:
        print("check_layers: %d files call or include one another in a loop:" % len(scc))
        for f in scc:
            for g in sorted(set(edges[f]) & set(scc)):
                names = sorted(edges[f][g])
                print("  %s -> %s: %s%s" % (f, g, ", ".join(names[:6]),
                                            ", ..." if len(names) > 6 else ""))
    if bad:
        return 1
    print("check_layers: %d files, no loop" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
