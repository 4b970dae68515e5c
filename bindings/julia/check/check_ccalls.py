#!/usr/bin/env python3
"""check_ccalls.py — do the Julia package's ccalls match the library and its header?

    node check.mjs ccalls FILE.jl... > ccalls.json
    python3 check_ccalls.py --library BUILD/libflashbwd.so.1 ccalls.json

For every @ccall/ccall found by tree-sitter (check.mjs), checks that
  - it names the library constant `libflashbwd`, whose value is the built library's SONAME;
  - its symbol is exported by the library (nm -D --defined-only);
  - its symbol has a prototype in abi/flashbwd.h, with as many parameters as the call has
    arguments, and every argument and the return type have the C type's meaning
    (Int32 for int32_t, Ref{Problem} for const flashbwd_problem *, ...);
  - the library exports it in the version node its header comment's "Since: X.Y" names
    (FLASHBWD_X.Y), and X.Y is not newer than the header version the package mirrors
    (FLASHBWD_VERSION_MAJOR/MINOR in the Julia package): FlashBwd.__init__ accepts any
    library of that version or newer, so a newer symbol could be missing at run time;
and that every function of the header is wrapped by at least one call (unless --partial).
Prints one line per problem and exits 1 if there is any. Python 3 standard library only.
"""
import argparse
import json
import re
import subprocess
import sys

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
import abi_model  # noqa: E402


def exported_symbols(library):
    """{name: version node or None} of the library's defined dynamic functions; the node of
    `name@@FLASHBWD_1.1` (the default version, what dlsym and ccall bind to) is
    FLASHBWD_1.1."""
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True,
                         text=True, check=True).stdout
    names = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWi":
            name, _, node = parts[2].partition("@@")
            if node or "@" not in name:
                names[name] = node or None
    return names


def soname(library):
    out = subprocess.run(["readelf", "-d", library], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)
    return m.group(1) if m else None


def check(calls, library, header_path, partial, lib_constant, package_version):
    problems = []
    protos = abi_model.c_prototypes(abi_model.read_header(header_path))
    since = abi_model.c_since(header_path)
    exported = exported_symbols(library)
    name = soname(library)
    if lib_constant != name:
        problems.append(f"libflashbwd = {lib_constant!r} in the Julia package, but the "
                        f"library's SONAME is {name!r}")
    for c in calls:
        at = f"{c['file']}:{c['line']}: {c['symbol']}"
        if c["library"] != "libflashbwd":
            problems.append(f"{at}: calls into {c['library']}, not libflashbwd")
        if c["symbol"] not in exported:
            problems.append(f"{at}: not exported by {library}")
        if c["symbol"] not in protos:
            problems.append(f"{at}: no prototype in {header_path}")
            continue
        version = since.get(c["symbol"])
        if version is None:
            problems.append(f"{at}: no \"Since: X.Y\" in its comment in {header_path}")
        else:
            node = "FLASHBWD_%d.%d" % version
            got = exported.get(c["symbol"], node)
            if got != node:
                problems.append(f"{at}: exported "
                                f"{'in version node ' + got if got else 'without a version node'}"
                                f", but the header says Since: {version[0]}.{version[1]} "
                                f"({node})")
            if version > package_version:
                problems.append(f"{at}: since {version[0]}.{version[1]}, but the package "
                                f"mirrors header {package_version[0]}.{package_version[1]} "
                                f"and so loads libraries that lack it; raise "
                                f"FLASHBWD_VERSION_MINOR")
        (ret, params) = protos[c["symbol"]]
        if len(c["args"]) != len(params):
            problems.append(f"{at}: {len(c['args'])} arguments, but the header declares "
                            f"{len(params)}")
            continue
        for i, (arg, param) in enumerate(zip(c["args"], params), start=1):
            if not abi_model.c_matches_julia(param, abi_model.julia_type(arg["type"])):
                problems.append(f"{at}: argument {i} ({arg['name']}) is {arg['type']}, but "
                                f"the header's parameter is {describe(param)}")
        if not abi_model.c_matches_julia(ret, abi_model.julia_type(c["ret"])):
            problems.append(f"{at}: returns {c['ret']}, but the header returns {describe(ret)}")
    if not partial:
        wrapped = {c["symbol"] for c in calls}
        for missing in sorted(set(protos) - wrapped):
            problems.append(f"{missing}: declared in {header_path} but never called from Julia")
    return problems


def describe(c):
    base, depth = c
    return base + " " + "*" * depth if depth else base


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", required=True, help="the built libflashbwd.so.1")
    ap.add_argument("--header", default=abi_model.HEADER)
    ap.add_argument("--partial", action="store_true",
                    help="do not require a wrapper for every header function")
    ap.add_argument("--lib-constant", default=None,
                    help="value of the Julia constant libflashbwd (default: read the package)")
    ap.add_argument("--package-version", default=None,
                    help="MAJOR.MINOR of the header the package mirrors (default: read "
                         "FLASHBWD_VERSION_MAJOR/MINOR from the package)")
    ap.add_argument("ccalls", help="JSON from `node check.mjs ccalls`")
    args = ap.parse_args()
    with open(args.ccalls) as f:
        calls = json.load(f)
    decls = None
    lib_constant = args.lib_constant
    if lib_constant is None:
        decls = decls or abi_model.julia_decls()
        lib_constant = ast_string(decls["consts"].get("libflashbwd", ""))
    if args.package_version is None:
        decls = decls or abi_model.julia_decls()
        consts = abi_model.julia_constants(decls["consts"])
        package_version = (consts["FLASHBWD_VERSION_MAJOR"], consts["FLASHBWD_VERSION_MINOR"])
    else:
        package_version = tuple(int(x) for x in args.package_version.split("."))
    problems = check(calls, args.library, args.header, args.partial, lib_constant,
                     package_version)
    for p in problems:
        print(p)
    symbols = sorted({c["symbol"] for c in calls})
    print(f"{len(calls)} ccalls of {len(symbols)} symbols checked against {args.header} and "
          f"{args.library}: {'FAILED' if problems else 'ok'}")
    return 1 if problems else 0


def ast_string(text):
    m = re.match(r'^"([^"\\]*)"$', text)
    return m.group(1) if m else text


if __name__ == "__main__":
    sys.exit(main())
