#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Check libtpu_user's layers; print TAP.

lib/ has one folder per layer.  A file may include (#include "...") the
headers of its own folder by bare name, and the one header of each folder
its layer may call, by "folder/header.h"; nothing else of lib/.  lib/internal.h
is for tests outside lib/ and no file of lib/ includes it.

Also checked: lib/Makefile builds exactly the .c files of the folders, and
the file lists of README.md (Layout) and Documentation/design.rst (The
library's layers) name exactly the folders and files in the tree.

  scripts/check-layers.py [TOP]      (TOP: the repository, default: ..)
"""
import os
import re
import sys

# Each layer, lowest first: its header, and the layers it may call.
LAYERS = {
    "base":      ("base.h",          []),
    "cuda":      ("cuda.h",          ["base"]),
    "dev":       ("dev.h",           ["base"]),
    "ctx":       ("ctx.h",           ["base", "dev"]),
    "rdv":       ("rdv.h",           ["base", "cuda", "dev", "ctx"]),
    "transport": ("xport.h",         ["base", "dev", "ctx"]),
    "channel":   ("channel.h",       ["base", "cuda", "dev", "ctx", "rdv", "transport"]),
    "pipe":      ("pipe_internal.h", ["base", "cuda", "dev", "ctx", "rdv", "transport",
                                      "channel"]),
    "remote":    ("remote.h",        ["base", "dev", "ctx", "rdv"]),
    "xfer":      ("xfer.h",          ["base", "cuda", "dev", "ctx", "pipe"]),
    "coll":      ("coll.h",          ["base", "dev", "ctx", "rdv", "remote"]),
    "boot":      ("boot.h",          ["base", "dev", "ctx", "coll"]),
}
# Headers from outside lib/ that any file may include.
PUBLIC = {"tpu_user.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

top = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                      os.path.join(os.path.dirname(__file__), ".."))
lib = os.path.join(top, "lib")
results = []                  # (ok, description, [diagnostics])


def files_of(folder):
    d = os.path.join(lib, folder)
    return sorted(f for f in os.listdir(d) if f.endswith((".c", ".h")))


def check_folder(layer):
    header, calls = LAYERS[layer]
    own = set(files_of(layer))
    allowed = {f"{l}/{LAYERS[l][0]}" for l in calls}
    bad = []
    if header not in own:
        bad.append(f"lib/{layer}/{header} is missing")
    for f in sorted(own):
        path = os.path.join(lib, layer, f)
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                if inc in PUBLIC or inc in own or inc in allowed:
                    continue
                where = f"lib/{layer}/{f}:{n}"
                parts = inc.split("/")
                if len(parts) == 2 and parts[0] in LAYERS:
                    other = parts[0]
                    if other == layer:
                        why = "its own folder's headers go by bare name"
                    elif other in calls:
                        why = f"only {other}/{LAYERS[other][0]} of {other}/ may be included"
                    else:
                        why = f"{layer}/ may not call {other}/ (up or sideways)"
                else:
                    why = "not a header of this folder or of a layer below"
                bad.append(f'{where}: #include "{inc}": {why}')
    below = ", ".join(calls) if calls else "nothing else"
    results.append((not bad, f"lib/{layer}/ includes only itself and {below}", bad))


def check_root():
    bad = []
    extra = sorted(f for f in os.listdir(lib)
                   if os.path.isdir(os.path.join(lib, f)) and f not in LAYERS)
    extra = [f for f in extra if not f.startswith(".")]
    for f in extra:
        if any(n.endswith((".c", ".h")) for n in os.listdir(os.path.join(lib, f))):
            bad.append(f"lib/{f}/ has sources but is not a layer")
    loose = sorted(f for f in os.listdir(lib)
                   if f.endswith(".c") or (f.endswith(".h") and f != "internal.h"))
    bad += [f"lib/{f}: sources live in a layer's folder" for f in loose]
    for layer in LAYERS:
        for f in files_of(layer):
            with open(os.path.join(lib, layer, f), encoding="utf-8") as fh:
                if any(INCLUDE.match(l) and INCLUDE.match(l).group(1).endswith("internal.h")
                       and INCLUDE.match(l).group(1).split("/")[-1] != "pipe_internal.h"
                       for l in fh):
                    bad.append(f"lib/{layer}/{f} includes lib/internal.h (for tests only)")
    results.append((not bad, "lib/ holds only the layer folders (and internal.h for tests)",
                    bad))


def check_makefile():
    with open(os.path.join(lib, "Makefile"), encoding="utf-8") as fh:
        text = fh.read().replace("\\\n", " ")
    bad = []
    m = re.search(r"^LAYERS\s*:=\s*(.*)$", text, re.M)
    order = m.group(1).split() if m else []
    if order != list(LAYERS):
        bad.append(f"LAYERS in lib/Makefile is {order}, the layers are {list(LAYERS)}")
    for layer in LAYERS:
        m = re.search(rf"^{layer}\s*:=\s*(.*)$", text, re.M)
        listed = set(m.group(1).split()) if m else set()
        tree = {f for f in files_of(layer) if f.endswith(".c")}
        for f in sorted(tree - listed):
            bad.append(f"lib/{layer}/{f} is not built by lib/Makefile")
        for f in sorted(listed - tree):
            bad.append(f"lib/Makefile builds lib/{layer}/{f}, which does not exist")
    results.append((not bad, "lib/Makefile builds every .c of every layer, in layer order",
                    bad))


def listed_in(text, begin, end):
    """Names like lib/x/ and file.c between two markers."""
    i = text.find(begin)
    j = text.find(end, i + 1)
    if i < 0 or j < 0:
        return None
    return text[i:j]


def check_doc(rel, begin, end):
    path = os.path.join(top, rel)
    with open(path, encoding="utf-8") as fh:
        block = listed_in(fh.read(), begin, end)
    bad = []
    if block is None:
        bad.append(f"{rel}: no block between '{begin}' and '{end}'")
    else:
        for layer in LAYERS:
            m = re.search(rf"lib/{layer}/((?:.|\n)*?)(?=lib/\w+/|\Z)", block)
            if not m:
                bad.append(f"{rel}: lib/{layer}/ is not listed")
                continue
            named = set(re.findall(r"[\w.-]+\.[ch]\b", m.group(1)))
            tree = set(files_of(layer))
            for f in sorted(tree - named):
                bad.append(f"{rel}: lib/{layer}/{f} is in the tree but not listed")
            for f in sorted(named - tree):
                bad.append(f"{rel}: lib/{layer}/{f} is listed but not in the tree")
    results.append((not bad, f"{rel} lists the files of every layer", bad))


for layer in LAYERS:
    check_folder(layer)
check_root()
check_makefile()
check_doc("README.md", "<!-- lib layout begin -->", "<!-- lib layout end -->")
check_doc("Documentation/design.rst", ".. lib layout begin", ".. lib layout end")

failed = 0
for n, (ok, what, bad) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {n} - {what}")
    for b in bad:
        print(f"#   {b}")
    failed += not ok
print(f"1..{len(results)}")
sys.exit(1 if failed else 0)
