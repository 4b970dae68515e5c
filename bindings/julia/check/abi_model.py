"""abi_model.py — abi/flashbwd.h and the Julia mirror of it, read into plain Python values.

The C side is parsed with regular expressions, which is enough for a header written in one
style (flashbwd.h: one #define per constant, `FLASHBWD_API ret name(params);` prototypes,
`typedef struct name { type field; ... } name;`). The Julia side is read by tree-sitter
(check.mjs decls), the same parser as the syntax check. Python 3 standard library only.
"""
import ast
import json
import os
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
HEADER = os.path.join(ROOT, "abi", "flashbwd.h")
PACKAGE = os.path.join(ROOT, "bindings", "julia", "FlashBwd")


def julia_files():
    out = []
    for sub in ("src", "ext"):
        d = os.path.join(PACKAGE, sub)
        out += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jl"))
    return out


# ======================================================================================
# Arithmetic of constant expressions: integers, + - * // and names defined earlier
# ======================================================================================

def evaluate(text, env):
    """Value of an integer expression such as `8 + 4 * 4` or `MAJOR * 10000 + MINOR`."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ValueError(f"unknown name {node.id} in {text!r}")
            return env[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
        raise ValueError(f"cannot evaluate {text!r}")
    return ev(ast.parse(text.strip(), mode="eval"))


# ======================================================================================
# C header
# ======================================================================================

def read_header(path=HEADER):
    with open(path) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return text.replace("\\\n", " ")


def c_constants(text):
    """{name: int} for every valued #define FLASHBWD_* (the include guard and the export
    macro have no integer value and are left out)."""
    env = {}
    for m in re.finditer(r"^\s*#\s*define\s+(FLASHBWD_\w+)[ \t]+([^\n]+)$", text, flags=re.M):
        name, value = m.group(1), m.group(2).strip()
        if "__" in value or "visibility" in value:
            continue  # FLASHBWD_API
        value = re.sub(r"\(\s*(size_t|int32_t|int64_t|uint32_t)\s*\)", "", value)
        env[name] = evaluate(value, env)
    return env


def c_type(text):
    """('base', pointer_depth) of a C type such as `const flashbwd_problem *`."""
    text = text.replace("const", " ")
    depth = text.count("*")
    base = " ".join(text.replace("*", " ").split())
    return base, depth


def c_prototypes(text):
    """{name: (return_type, [param_type, ...])} of every FLASHBWD_API function."""
    protos = {}
    for m in re.finditer(r"FLASHBWD_API\s+([^;{}]*?)\b(flashbwd_\w+)\s*\(([^)]*)\)\s*;", text):
        ret, name, params = m.group(1), m.group(2), m.group(3).strip()
        types = []
        if params != "void":
            for p in params.split(","):
                p = p.strip()
                pm = re.match(r"^(.*?)(\w+)$", p, flags=re.S)
                types.append(c_type(pm.group(1)))
        protos[name] = (c_type(ret), types)
    return protos


def c_since(path=HEADER):
    """{name: (major, minor)} from the "Since: X.Y" in the doc comment directly above each
    FLASHBWD_API prototype (read from the raw header, comments kept); None where there is
    none."""
    with open(path) as f:
        raw = f.read()
    since = {}
    for m in re.finditer(r"(?:/\*((?:(?!\*/).)*)\*/\s*)?FLASHBWD_API\s+[^;{}()]*?\b(flashbwd_\w+)\s*\(",
                         raw, flags=re.S):
        s = re.search(r"\bSince:\s*(\d+)\.(\d+)", m.group(1) or "")
        since[m.group(2)] = (int(s.group(1)), int(s.group(2))) if s else None
    return since


def c_structs(text):
    """{c_name: [(field, base, dims)]} with dims the array extents, e.g. (4, 3)."""
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        fields = []
        for decl in m.group(2).split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            fm = re.match(r"^(\w+)\s+(\w+)((?:\[\d+\])*)$", decl)
            if not fm:
                raise ValueError(f"unexpected field declaration {decl!r} in {m.group(1)}")
            dims = tuple(int(d) for d in re.findall(r"\[(\d+)\]", fm.group(3)))
            fields.append((fm.group(2), fm.group(1), dims))
        structs[m.group(3)] = fields
    return structs


# ======================================================================================
# Julia mirror
# ======================================================================================

def julia_decls(files=None):
    """{'consts': {name: value_text}, 'structs': {name: [(field, type_text)]}} from check.mjs."""
    files = files or julia_files()
    out = subprocess.run(["node", os.path.join(HERE, "check.mjs"), "decls", *files],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("node check.mjs decls failed (run `npm ci --ignore-scripts` in "
                           f"bindings/julia/check first):\n{out.stderr}")
    data = json.loads(out.stdout)
    return {"consts": data["consts"],
            "structs": {k: [tuple(f) for f in v] for k, v in data["structs"].items()}}


JULIA_CONVERSIONS = ("Int32", "UInt32", "Int64", "Csize_t", "UInt", "Cint")


def julia_constants(consts):
    """{name: int} of the FLASHBWD_* constants; `Int32(expr)`-style wrappers are dropped."""
    env = {}
    for name, text in consts.items():
        if not name.startswith("FLASHBWD_"):
            continue
        inner = text
        m = re.match(r"^(\w+)\((.*)\)$", text, flags=re.S)
        if m and m.group(1) in JULIA_CONVERSIONS:
            inner = m.group(2)
        env[name] = evaluate(inner, env)
    return env


# Julia element types and the C types they are.
JULIA_BASES = {
    "Cvoid": "void", "Nothing": "void",
    "Int32": "int32_t", "Cint": "int32_t",
    "UInt32": "uint32_t", "Cuint": "uint32_t",
    "Int64": "int64_t", "Clonglong": "int64_t",
    "Csize_t": "size_t", "UInt": "size_t", "UInt64": "size_t",
    "Float32": "float", "Cfloat": "float",
    "UInt8": "char", "Cchar": "char",
    "Problem": "flashbwd_problem", "PlanInfo": "flashbwd_plan_info",
}


def julia_type(text):
    """('C base', pointer_depth) of a Julia ccall type such as `Ref{Ptr{Cvoid}}`; None when
    the type has no C meaning here."""
    m = re.match(r"^(Ptr|Ref|CuPtr)\{(.*)\}$", text)
    if m:
        inner = julia_type(m.group(2))
        return None if inner is None else (inner[0], inner[1] + 1)
    if text == "Cstring":
        return ("char", 1)
    if text in ("CUstream", "CUDA.CUstream"):
        return ("void", 1)   # Ptr to CUDA's opaque stream struct: C's `void *stream`
    base = JULIA_BASES.get(text)
    return None if base is None else (base, 0)


def c_matches_julia(c, jl):
    """Same C meaning: the opaque flashbwd_plan travels as Ptr{Cvoid}."""
    base, depth = c
    if base == "flashbwd_plan":
        base = "void"
    return jl is not None and (base, depth) == jl


# ctypes equivalents of the struct field types, for layout checks.
def ctypes_of(base, dims=()):
    import ctypes
    t = {"size_t": ctypes.c_size_t, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
         "float": ctypes.c_float, "uint32_t": ctypes.c_uint32}[base]
    for d in reversed(dims):
        t = t * d
    return t


def julia_field(text):
    """(C base, dims) of a Julia struct field type: `Int32`, `NTuple{4,NTuple{3,Int32}}`."""
    m = re.match(r"^NTuple\{(\d+),(.*)\}$", text)
    if m:
        base, dims = julia_field(m.group(2))
        return base, (int(m.group(1)),) + dims
    base = JULIA_BASES.get(text)
    if base is None:
        raise ValueError(f"Julia field type {text} has no C equivalent here")
    return base, ()
