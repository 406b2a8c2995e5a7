#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the conventions of gfa's public API (issue 29): `make check-api`.

Usage: tools/check_api.py [--map MAP] [--count] [--list] HEADER... [--lines FILE...]

The HEADERs are libgfa's public headers (include/gfa/{allocator,numa,vmm,gfa}.h); every
gfa_* prototype in them is an export.  Each problem is one "file:line: what" line, and
the exit status is 1 when there is one.  The rules:

  doc       every public function has a kernel-doc block right above it: "/**", then
            "name() - summary", a "Context:" line, and a "Return:" line unless the
            function returns void;
  reserved  a struct a caller allocates (one a public function takes a pointer to and
            none returns, not an ops table, not an array of ranges) ends in reserved
            words (uint64_t reserved[N]: docs/decisions.md, entry 18);
  errno     an errno is written as its GFA_E* name: a raw one (-EINVAL, EINVAL) may
            stand only in a GFA_E* #define and in the error table at the head of
            gfa/allocator.h (" *   GFA_EXXX  -EXXX  meaning");
  map       MAP names every export once, under a version node GFA_<major>.<minor> no
            newer than gfa/gfa.h's version, with no wildcard in a global: list, and
            names no function the headers do not declare;
  columns   no line of a HEADER or a --lines FILE is over 100 columns (a tab counts to
            the next multiple of 8, as checkpatch counts).

--count prints the number of problems of each rule (for the issue's before/after
figures) on standard error; --list prints the public functions, one a line, and checks
nothing (the library test compares them with what libgfa.so exports).
"""
import errno
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_null_calls import doc_of, parse_params, prototypes  # noqa: E402

MAX_COLUMNS = 100
ERRNO_NAMES = set(errno.errorcode.values())
RAW_ERRNO = re.compile(r"(?<![\w-])-?(E[A-Z0-9]+)\b")
ERRNO_TABLE_LINE = re.compile(r"^\s*\*\s+GFA_E[A-Z0-9]+\s+-E[A-Z0-9]+\s")
ERRNO_DEFINE_LINE = re.compile(r"^#define\s+GFA_E[A-Z0-9]+\s")
COUNT_NAMES = re.compile(r"^(n|nr|nr_\w+|len|count|max)$")



class Problems:
    def __init__(self):
        self.items = []

    def add(self, rule, path, line, what):
        self.items.append((rule, "%s:%d: %s: %s" % (path, line, rule, what)))


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def proto_line(text, name):
    m = re.search(r"^[A-Za-z_][\w \t\*]*\b" + name + r"\s*\(", text, flags=re.M)
    return line_of(text, m.start()) if m else 1


def check_doc(path, text, ret, name, probs):
    doc = doc_of(text, name)
    where = proto_line(text, name)
    if not doc.startswith("/**"):
        probs.add("doc", path, where, "%s() has no kernel-doc block" % name)
        return
    first = re.sub(r"^/\*\*\s*\n?\s*\*?\s*", "", doc).split("\n")[0].strip()
    if not re.match(re.escape(name) + r"\(\) - \S", first):
        probs.add("doc", path, where, "%s(): the block does not open with '%s() - summary'"
                  % (name, name))
    if not re.search(r"^\s*\*\s*Context:", doc, flags=re.M):
        probs.add("doc", path, where, "%s(): no 'Context:' line" % name)
    if ret != "void" and not re.search(r"^\s*\*\s*Return:", doc, flags=re.M):
        probs.add("doc", path, where, "%s(): returns %s but has no 'Return:' line"
                  % (name, ret))


def struct_bodies(text):
    """{name: (line, body)} of the struct definitions of a header."""
    out = {}
    for m in re.finditer(r"^struct (gfa_\w+) \{(.*?)^\};", text, flags=re.M | re.S):
        out[m.group(1)] = (line_of(text, m.start()), m.group(2))
    return out


def caller_allocated(protos):
    """Structs some call takes a pointer to (not as an array) and no call returns."""
    taken, returned = set(), set()
    for ret, _, params in protos:
        m = re.match(r"(?:const )?struct (gfa_\w+) \*$", ret)
        if m:
            returned.add(m.group(1))
        plist = parse_params(params)
        for i, (ptype, _) in enumerate(plist):
            m = re.match(r"(?:const )?struct (gfa_\w+) \*$", ptype)
            if not m:
                continue
            nxt = plist[i + 1][1] if i + 1 < len(plist) else ""
            if not COUNT_NAMES.match(nxt):
                taken.add(m.group(1))
    return {s for s in taken - returned if not s.endswith("_ops")}


def check_reserved(texts, protos, probs):
    bodies = {}
    for path, text in texts:
        for name, (line, body) in struct_bodies(text).items():
            bodies[name] = (path, line, body)
    for name in sorted(caller_allocated(protos)):
        if name not in bodies:
            continue
        path, line, body = bodies[name]
        if not re.search(r"\buint64_t\s+reserved\w*\s*\[[^\]]+\]\s*;", body):
            probs.add("reserved", path, line,
                      "struct %s is allocated by callers and has no uint64_t reserved[N]"
                      % name)


def check_errnos(path, text, probs):
    for n, line in enumerate(text.split("\n"), 1):
        if ERRNO_TABLE_LINE.match(line) or ERRNO_DEFINE_LINE.match(line):
            continue
        for m in RAW_ERRNO.finditer(line):
            if m.group(1) in ERRNO_NAMES:
                probs.add("errno", path, n, "raw errno %s: write its GFA_E* name"
                          % m.group(0))


def read_map(path, probs):
    """{symbol: node} of the map's global: lists."""
    text = open(path).read()
    body = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    out = {}
    for m in re.finditer(r"([\w.]+)\s*\{(.*?)\}\s*([\w.]*)\s*;", body, flags=re.S):
        node, inner = m.group(1), m.group(2)
        glob = re.search(r"global:(.*?)(?:local:|$)", inner, flags=re.S)
        for sym in re.findall(r"([^\s;]+)\s*;", glob.group(1) if glob else ""):
            if re.search(r"[*?\[]", sym):
                probs.add("map", path, line_of(text, text.find(sym)),
                          "wildcard '%s' in %s's global: list" % (sym, node))
            elif sym in out:
                probs.add("map", path, line_of(text, text.find(sym)),
                          "%s is named twice (%s and %s)" % (sym, out[sym], node))
            else:
                out[sym] = node
    if not out and not probs.items:
        probs.add("map", path, 1, "no version node with a global: list")
    return out


def header_version(texts):
    """(major, minor) of gfa/gfa.h's GFA_VERSION_MAJOR/MINOR, or None."""
    v = {}
    for _, text in texts:
        for m in re.finditer(r"^#define GFA_VERSION_(MAJOR|MINOR)\s+(\d+)", text, flags=re.M):
            v[m.group(1)] = int(m.group(2))
    return (v["MAJOR"], v["MINOR"]) if len(v) == 2 else None


def check_map(path, declared, version, probs):
    text = open(path).read()
    exported = read_map(path, probs)
    for node in sorted(set(exported.values())):
        m = re.match(r"GFA_(\d+)\.(\d+)$", node)
        if not m:
            probs.add("map", path, line_of(text, text.find(node)),
                      "version node %s is not GFA_<major>.<minor>" % node)
        elif version and (int(m.group(1)), int(m.group(2))) > version:
            probs.add("map", path, line_of(text, text.find(node)),
                      "version node %s is newer than gfa/gfa.h's version %d.%d"
                      % ((node,) + version))
    for name, where in sorted(declared.items()):
        if name not in exported:
            probs.add("map", where[0], where[1], "%s is declared but %s does not export it"
                      % (name, path))
    for name in sorted(set(exported) - set(declared)):
        probs.add("map", path, line_of(text, text.find(name)),
                  "%s is exported but no header declares it" % name)


def check_columns(path, probs):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            width = len(line.rstrip("\n").expandtabs(8))
            if width > MAX_COLUMNS:
                probs.add("columns", path, n, "%d columns (at most %d)" % (width, MAX_COLUMNS))


def parse_args(argv):
    """(headers, map, files for the column rule, count)."""
    headers, mapfile, files, count, listing, mode = [], None, [], False, False, "headers"
    it = iter(argv)
    for a in it:
        if a == "--map":
            mapfile = next(it, None)
        elif a == "--lines":
            mode = "lines"
        elif a == "--headers":
            mode = "headers"
        elif a == "--count":
            count = True
        elif a == "--list":
            listing = True
        elif mode == "lines":
            files.append(a)
        else:
            headers.append(a)
    return headers, mapfile, files, count, listing


def run(headers, mapfile, files, count, listing=False):
    probs = Problems()
    texts = [(h, open(h).read()) for h in headers]
    if listing:
        for _, text in texts:
            for _, name, _ in prototypes(text):
                print(name)
        return 0
    protos, declared = [], {}
    for path, text in texts:
        for ret, name, params in prototypes(text):
            protos.append((ret, name, params))
            declared[name] = (path, proto_line(text, name))
            check_doc(path, text, ret, name, probs)
        check_errnos(path, text, probs)
    check_reserved(texts, protos, probs)
    if mapfile:
        check_map(mapfile, declared, header_version(texts), probs)
    for path in sorted(set(headers) | set(files)):
        check_columns(path, probs)
    for _, msg in probs.items:
        print(msg)
    if count:
        for rule in ("doc", "reserved", "errno", "map", "columns"):
            n = sum(1 for r, _ in probs.items if r == rule)
            sys.stderr.write("check_api: %-8s %d\n" % (rule, n))
    if probs.items:
        sys.stderr.write("check_api: %d problems in %d public functions\n"
                         % (len(probs.items), len(declared)))
        return 1
    print("check_api: %d public functions, conventions kept" % len(declared))
    return 0


if __name__ == "__main__":
    h, m, f, c, ls = parse_args(sys.argv[1:])
    if not h:
        sys.exit("usage: check_api.py [--map MAP] [--count] [--list] HEADER... [--lines FILE...]")
    sys.exit(run(h, m, f, c, ls))
