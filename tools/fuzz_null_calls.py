#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate the fuzz target's table of NULL calls from the public headers.

Usage: tools/fuzz_null_calls.py OUT.h HEADER.h...

Every public function (gfa_* prototypes of the headers named) is listed with its
pointer parameters; each pointer parameter that is neither optional nor opaque gets one
case: the call with that argument NULL and every other argument valid (a handle the fuzz
target supplies, a zeroed scratch buffer, 0 for scalars).  What the case must give comes
from the convention at the head of gfa/allocator.h and from the words of each function's
own comment:

  - "@p: ... NULL is a no-op" (or "A NULL @p ... is a no-op"), or a void function:
    nothing happens (an int result is 0);
  - "Return: ... V for a NULL @p": V (0, false or NULL);
  - "@p: ... may be NULL when @len is 0" (any size argument): a success (>= 0), for
    every scalar argument is 0 here;
  - "@p: ... may be NULL", "or NULL", "if not NULL", "if non-NULL": NULL is a value of
    the parameter (a config's defaults, the zone path, an output not wanted): no case;
  - void *ctx, *cookie and *arg are the caller's, never read by gfa: no case;
  - otherwise an int or int64_t result is -EFAULT, a pointer result NULL with errno
    EFAULT, counted in the err_* counters of the first argument's pool when the first
    argument is a handle that has one and is not the NULL one.

A result of another type with none of these words, a handle type the table does not
know, or a parameter it cannot supply stops the build: a new call is covered, or the
build says why it is not.
"""
import re
import sys

# Handle types (structs some public call returns a pointer to) and whether the err_*
# counters of a pool are at hand through them.  A new handle type stops the build until
# it is listed here.
POOL_HANDLES = {"gfa_pool", "gfa_pcp", "gfa_backing", "gfa_guest", "gfa_numa_pool",
                "gfa_host_return", "gfa_free_report"}
OTHER_HANDLES = {"gfa_numa_topology", "gfa_release_engine", "gfa_hostpool"}
OPAQUE_NAMES = {"ctx", "cookie", "arg"}
INT_RESULTS = {"int", "int64_t"}
OPTIONAL_WORDS = ("may be NULL", "or NULL", "if not NULL", "if non-NULL")


def fail(msg):
    sys.exit("fuzz_null_calls: " + msg)


def strip_for_prototypes(text):
    """The header without comments, preprocessor lines and struct/enum/union bodies."""
    s = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    s = re.sub(r"//[^\n]*", "", s)
    s = re.sub(r"^\s*#[^\n]*(\\\n[^\n]*)*", "", s, flags=re.M)
    s = s.replace('extern "C" {', "")
    s = re.sub(r"^\}\s*$", "", s, flags=re.M)
    prev = None
    while prev != s:
        prev = s
        s = re.sub(r"\{[^{}]*\}", "", s)
    return s


def prototypes(text):
    for stmt in strip_for_prototypes(text).split(";"):
        t = " ".join(stmt.split())
        if "typedef" in t or "(" not in t:
            continue
        m = re.match(r"(.*?)\b(gfa_\w+)\s*\((.*)\)$", t)
        if m:
            yield ctype(m.group(1)), m.group(2), m.group(3).strip()


def fn_typedefs(text):
    return set(re.findall(r"typedef\s+[\w\s\*]+\(\s*\*\s*(gfa_\w+)\s*\)", text))


def doc_of(text, name):
    """The comment right above the prototype of name ('' when there is none)."""
    m = re.search(r"^[A-Za-z_][\w \t\*]*\b" + name + r"\s*\(", text, flags=re.M)
    if not m:
        fail("no prototype line for " + name)
    before = text[:m.start()].rstrip()
    if not before.endswith("*/"):
        return ""
    return before[before.rindex("/*"):]


def doc_lines(doc):
    return [re.sub(r"^\s*/?\*+/?\s?", "", line).rstrip() for line in doc.split("\n")]


def param_doc(doc, pname):
    """The words of '@pname: ...' up to the next @ or blank line."""
    out, on = [], False
    for line in doc_lines(doc):
        if on and (not line or re.match(r"@\w+:", line) or line.startswith(("Return:", "Context:"))):
            break
        if on:
            out.append(line)
        m = re.match(r"@" + pname + r":\s*(.*)", line)
        if m:
            on = True
            out.append(m.group(1))
    return " ".join(out)


def return_doc(doc):
    out, on = [], False
    for line in doc_lines(doc):
        if on and (not line or line.startswith("Context:")):
            break
        if line.startswith("Return:"):
            on = True
        if on:
            out.append(line)
    return " ".join(out)


def parse_params(params):
    if params in ("", "void"):
        return []
    out = []
    for p in params.split(","):
        p = p.strip()
        m = re.match(r"(.*?)(\w+)$", p)
        if not m:
            fail("cannot read parameter '%s'" % p)
        out.append((ctype(m.group(1)), m.group(2)))
    return out


def ctype(t):
    """A type in one spelling: words one space apart, stars together after a space."""
    t = re.sub(r"\s*\*", "*", " ".join(t.split()))
    return re.sub(r"(\w)\*", r"\1 *", t)


def handle_kind(ptype):
    m = re.match(r"(?:const )?struct (gfa_\w+) \*$", ptype)
    return m.group(1) if m else None


def classify(ret, name, ptype, pname, doc, fnptrs):
    """(expect, value) for NULL in pname, or (None, why) when there is no case."""
    words = param_doc(doc, pname)
    if ptype.replace(" ", "") == "void*" and pname in OPAQUE_NAMES:
        return None, "opaque"
    if re.search(r"NULL when @\w+ is 0", words):
        return "FZN_OK", 0
    if "NULL is a no-op" in words or re.search(r"A NULL @" + pname + r"\b[^.]*no-op", doc):
        return "FZN_NOOP", 0
    if any(w in words for w in OPTIONAL_WORDS):
        return None, "optional"
    if ret == "void":
        return "FZN_NOOP", 0
    m = re.search(r"(\S+) for a NULL @" + pname + r"\b", return_doc(doc))
    if m:
        v = m.group(1).strip(",;")
        if v in ("NULL", "false", "0"):
            return "FZN_NULL_ANY" if v == "NULL" else "FZN_VALUE", 0
        fail("%s: NULL @%s gives '%s', which the table cannot check" % (name, pname, v))
    if ret in INT_RESULTS:
        return "FZN_EFAULT", 0
    if ret.endswith("*"):
        return "FZN_NULL", 0
    fail("%s returns %s: say what a NULL @%s gives (\"... 0 for a NULL @%s\")"
         % (name, ret, pname, pname))


def argument(ptype, pname, fnptrs, handles, needs):
    k = handle_kind(ptype)
    if k in handles:
        needs.add(k)
        return "a->h_%s" % k
    if ptype in fnptrs:
        return "a->fn_%s" % ptype
    if "*" in ptype:
        return "(%s)a->scratch" % ptype
    return "0"


def result(ret, call):
    if ret == "void":
        return "\t%s;\n\treturn 0;" % call
    if ret.endswith("*"):
        return "\treturn (int64_t)(intptr_t)%s;" % call
    return "\treturn (int64_t)%s;" % call


def main():
    if len(sys.argv) < 3:
        fail("usage: fuzz_null_calls.py OUT.h HEADER.h...")
    texts = [(h, open(h).read()) for h in sys.argv[2:]]
    alltext = "\n".join(t for _, t in texts)
    fnptrs = fn_typedefs(alltext)
    handles = POOL_HANDLES | OTHER_HANDLES
    for _, t in texts:
        for ret, name, _ in prototypes(t):
            k = handle_kind(ret)
            if k and k not in handles:
                fail("new handle type struct %s (returned by %s): list it in POOL_HANDLES "
                     "or OTHER_HANDLES" % (k, name))
    cases, wrappers, uncovered, nfn = [], [], [], 0
    for hdr, t in texts:
        for ret, name, params in prototypes(t):
            nfn += 1
            doc = doc_of(t, name)
            plist = parse_params(params)
            skipped = []
            first = handle_kind(plist[0][0]) if plist else None
            first = first if first in handles else None
            for i, (ptype, pname) in enumerate(plist):
                if "*" not in ptype and ptype not in fnptrs:
                    continue
                expect, value = classify(ret, name, ptype, pname, doc, fnptrs)
                if expect is None:
                    skipped.append("%s %s" % (value, pname))
                    continue
                needs = set()
                args = []
                for j, (qt, qn) in enumerate(plist):
                    args.append("NULL" if j == i else argument(qt, qn, fnptrs, handles, needs))
                fn = "fzn_%s_%d" % (name, i)
                wrappers.append("static int64_t %s(const struct fzn_args *a)\n{\n\t(void)a;\n%s\n}\n"
                                % (fn, result(ret, "%s(%s)" % (name, ", ".join(args)))))
                counted = (expect in ("FZN_EFAULT", "FZN_NULL") and i != 0 and
                           first in POOL_HANDLES)
                need = " | ".join("FZN_NEED(%s)" % k for k in sorted(needs)) or "0"
                cases.append('\t{ "%s", "%s", %s, %d, %s, %s, %s },'
                             % (name, pname, expect, value, need,
                                "true" if counted else "false", fn))
            if not any(c.startswith('\t{ "%s",' % name) for c in cases):
                why = ", ".join(skipped) if skipped else "no pointer parameter"
                uncovered.append("%s (%s: %s)" % (name, hdr.split("/")[-1], why))
    kinds = sorted(handles)
    with open(sys.argv[1], "w") as out:
        out.write("/* Generated by tools/fuzz_null_calls.py from %s: do not edit. */\n"
                  % " ".join(h for h, _ in texts))
        out.write("/* %d public functions, %d NULL cases.  Not covered:\n" % (nfn, len(cases)))
        for u in uncovered:
            out.write(" *   %s\n" % u)
        out.write(" */\n")
        out.write("enum fzn_kind {\n%s\n};\n" % "\n".join("\tFZN_K_%s," % k for k in kinds))
        out.write("#define FZN_NEED(k) (1U << FZN_K_##k)\n")
        out.write("static const char *const fzn_kind_name[] = {\n%s\n};\n"
                  % "\n".join('\t"%s",' % k for k in kinds))
        out.write("\n".join(wrappers))
        out.write("\nstatic const struct fzn_case fzn_cases[] = {\n%s\n};\n" % "\n".join(cases))
        out.write("static const char *const fzn_uncovered[] = {\n%s\n};\n"
                  % "\n".join('\t"%s",' % u for u in uncovered))
    print("fuzz_null_calls: %d public functions, %d NULL cases, %d not covered"
          % (nfn, len(cases), len(uncovered)))


if __name__ == "__main__":
    main()
