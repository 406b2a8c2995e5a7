#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Section 3 man pages from the kernel-doc of gfa's public headers.

Usage: tools/kernel_doc_man.py OUTDIR VERSION HEADER...

One page, OUTDIR/<function>.3, per gfa_* prototype of the HEADERs: NAME (the block's
"name() - summary" line), SYNOPSIS (the #include and the prototype), ARGUMENTS (the
@param lines), DESCRIPTION, RETURN VALUE and CONTEXT.  `make check-api` holds every
public function to such a block; a function without one gets a page saying so.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_null_calls import doc_lines, doc_of, prototypes  # noqa: E402


def roff(text):
    """Text safe for roff: backslashes doubled, no line opening with . or '."""
    text = text.replace("\\", "\\e")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def sections(doc):
    """(summary, [(param, text)], description, return, context) of a kernel-doc block."""
    lines = doc_lines(doc)[1:]
    if lines and lines[-1] == "":
        lines = lines[:-1]
    summary = lines[0].split(" - ", 1)[1] if lines and " - " in lines[0] else ""
    params, desc, ret, ctx, cur = [], [], [], [], None
    for line in lines[1:]:
        m = re.match(r"@(\w+):\s*(.*)", line)
        if m and cur in (None, "param"):
            params.append([m.group(1), m.group(2)])
            cur = "param"
        elif line.startswith("Return:"):
            ret.append(line[len("Return:"):].strip())
            cur = "ret"
        elif line.startswith("Context:"):
            ctx.append(line[len("Context:"):].strip())
            cur = "ctx"
        elif cur == "param" and line:
            params[-1][1] += " " + line.strip()
        elif cur == "param":
            cur = "desc"
        elif cur == "ret":
            ret.append(line)
        elif cur == "ctx":
            ctx.append(line)
        else:
            desc.append(line)
            cur = "desc"
    return summary, params, "\n".join(desc).strip(), "\n".join(ret).strip(), \
        "\n".join(ctx).strip()


def paragraphs(text):
    return "\n.PP\n".join(roff(p.strip()) for p in re.split(r"\n\s*\n", text) if p.strip())


def page(name, ret, params, header, doc, version):
    summary, args, desc, retv, ctx = sections(doc) if doc.startswith("/**") else \
        ("(no kernel-doc)", [], "", "", "")
    sep = "" if ret.endswith("*") else " "
    out = ['.TH %s 3 "" "gfa %s" "gfa Manual"' % (name.upper(), version),
           ".SH NAME", "%s \\- %s" % (name, roff(summary)),
           ".SH SYNOPSIS", ".nf", "#include <gfa/%s>" % os.path.basename(header), "",
           roff("%s%s%s(%s);" % (ret, sep, name, params or "void")), ".fi"]
    if args:
        out.append(".SH ARGUMENTS")
        for p, text in args:
            out += [".TP", ".I %s" % p, roff(text)]
    if desc:
        out += [".SH DESCRIPTION", paragraphs(desc)]
    if retv:
        out += [".SH RETURN VALUE", paragraphs(retv)]
    if ctx:
        out += [".SH CONTEXT", paragraphs(ctx)]
    out += [".SH SEE ALSO", "gfa_strerror(3)"]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: kernel_doc_man.py OUTDIR VERSION HEADER...")
    outdir, version = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    n = 0
    for header in sys.argv[3:]:
        text = open(header).read()
        for ret, name, params in prototypes(text):
            with open(os.path.join(outdir, name + ".3"), "w") as f:
                f.write(page(name, ret, params, header, doc_of(text, name), version))
            n += 1
    print("kernel_doc_man: %d pages in %s" % (n, outdir))


if __name__ == "__main__":
    main()
