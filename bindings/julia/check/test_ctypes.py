#!/usr/bin/env python3
"""test_ctypes.py — the Julia package's view of libflashbwd, exercised through ctypes.

Julia cannot run on the CI machines, so this stands in for it (Python 3 standard library
only, no numpy):
  - the Julia structs and constants, read from the .jl files with tree-sitter, against the
    header's fields and #defines and the library's flashbwd_struct_size();
  - the loading scheme of FlashBwd.__init__ (open FLASHBWD_LIB by path, then call by SONAME);
  - the README example, run on the CPU backend with the README's sizes, the memory layout of
    the Julia arrays and the strides set_tensor! passes (Julia's own, reversed), compared
    with an independent float64 reference; plus a strided-view/bf16 case and a
    variable-length case the same way; and the README's error message;
  - the workspace of ABI 1.1 the way FlashBwd.Workspace uses it (workspace.jl): the README's
    plan example on memory from flashbwd_workspace_alloc, bound, executed and compared with
    the same reference, then freed once by flashbwd_workspace_free, which refuses a second
    free (what destroy! and the finalizer rely on) and memory it never gave.

    FLASHBWD_LIB=build/libflashbwd.so.1 python3 test_ctypes.py -v
"""
import array
import ctypes
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
import abi_model  # noqa: E402

LIB_PATH = os.environ.get("FLASHBWD_LIB", "")
README = os.path.join(abi_model.ROOT, "bindings", "julia", "README.md")

SEED = int.from_bytes(os.urandom(4), "little")
print(f"test_ctypes.py: random seed {SEED}", file=sys.stderr)


def setUpModule():
    global LIB, HEADER, C_CONST, J_DECLS, J_CONST, Problem, PlanInfo
    if not LIB_PATH or not os.path.exists(LIB_PATH):
        raise RuntimeError("set FLASHBWD_LIB to the built libflashbwd.so.1")
    HEADER = abi_model.read_header()
    C_CONST = abi_model.c_constants(HEADER)
    J_DECLS = abi_model.julia_decls()
    J_CONST = abi_model.julia_constants(J_DECLS["consts"])
    Problem = ctypes_struct("Problem", J_DECLS["structs"]["Problem"])
    PlanInfo = ctypes_struct("PlanInfo", J_DECLS["structs"]["PlanInfo"])
    LIB = ctypes.CDLL(LIB_PATH)
    declare(LIB)


def ctypes_struct(name, julia_fields):
    """The ctypes twin of a Julia struct: same names, types and order, hence C's layout."""
    fields = [(f, abi_model.ctypes_of(*abi_model.julia_field(t))) for f, t in julia_fields]
    return type(name, (ctypes.Structure,), {"_fields_": fields})


def signatures():
    """The ctypes prototype of every function this test calls (checked against the header
    by TestMirror.test_ctypes_declarations_match_the_header)."""
    c = ctypes
    return {
        "flashbwd_version": (c.c_uint32, []),
        "flashbwd_status_name": (c.c_char_p, [c.c_int32]),
        "flashbwd_status_string": (c.c_char_p, [c.c_int32]),
        "flashbwd_plan_create": (c.c_int32, [c.POINTER(Problem), c.POINTER(c.c_void_p)]),
        "flashbwd_plan_destroy": (None, [c.c_void_p]),
        "flashbwd_plan_get_info": (c.c_int32, [c.c_void_p, c.POINTER(PlanInfo)]),
        "flashbwd_plan_set_tensor": (c.c_int32, [c.c_void_p, c.c_int32, c.c_void_p,
                                                 c.POINTER(c.c_int64), c.c_int32]),
        "flashbwd_plan_workspace_size": (c.c_int32, [c.c_void_p, c.POINTER(c.c_size_t)]),
        "flashbwd_plan_set_workspace": (c.c_int32, [c.c_void_p, c.c_void_p, c.c_size_t]),
        "flashbwd_execute": (c.c_int32, [c.c_void_p, c.c_void_p]),
        "flashbwd_plan_last_error": (c.c_char_p, [c.c_void_p]),
        "flashbwd_last_error": (c.c_char_p, []),
        "flashbwd_struct_size": (c.c_size_t, [c.c_int32]),
        # Since 1.1
        "flashbwd_workspace_alloc": (c.c_int32, [c.c_void_p, c.POINTER(c.c_void_p),
                                                 c.POINTER(c.c_size_t), c.POINTER(c.c_int32)]),
        "flashbwd_workspace_free": (c.c_int32, [c.c_void_p]),
    }


def declare(lib):
    for name, (res, args) in signatures().items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


# ======================================================================================
# Julia arrays in Python: column-major storage, strides in elements
# ======================================================================================

def column_major_strides(dims):
    strides, s = [], 1
    for d in dims:
        strides.append(s)
        s *= d
    return strides


def c_strides(julia_strides, dims):
    """What FlashBwd.c_strides passes to flashbwd_plan_set_tensor: Julia's strides reversed,
    the innermost forced to 1 when that dimension has length 1."""
    c = list(reversed(julia_strides))
    if dims[0] <= 1:
        c[-1] = 1
    return c


class JuliaArray:
    """A Julia array: `dims`, `strides` (Julia order) and a flat buffer of `size` elements.
    kind: 'fp16', 'bf16' (stored as uint16 bits), 'f32' or 'i32'."""

    def __init__(self, kind, dims, strides=None, size=None):
        self.kind, self.dims = kind, tuple(dims)
        self.strides = strides or column_major_strides(dims)
        size = size or math.prod(dims)
        code = {"fp16": "H", "bf16": "H", "f32": "f", "i32": "i"}[kind]
        self.buf = array.array(code, [0]) * size
        assert self.buf.itemsize == {"H": 2, "f": 4, "i": 4}[code]

    def offset(self, idx):
        return sum(i * s for i, s in zip(idx, self.strides))

    def __getitem__(self, idx):
        raw = self.buf[self.offset(idx)]
        if self.kind == "fp16":
            return struct.unpack("<e", struct.pack("<H", raw))[0]
        if self.kind == "bf16":
            return struct.unpack("<f", struct.pack("<I", raw << 16))[0]
        return raw

    def __setitem__(self, idx, value):
        self.buf[self.offset(idx)] = self.encode(value)

    def encode(self, value):
        if self.kind == "fp16":
            return struct.unpack("<H", struct.pack("<e", value))[0]
        if self.kind == "bf16":
            if math.isnan(value):
                return 0x7FC0
            u = struct.unpack("<I", struct.pack("<f", value))[0]
            return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF   # nearest even
        if self.kind == "f32":
            return struct.unpack("<f", struct.pack("<f", value))[0]
        return int(value)

    def poison(self):
        """Fill with NaN, so an element the library never writes shows up."""
        for i in range(len(self.buf)):
            self.buf[i] = {"fp16": 0x7E00, "bf16": 0x7FC0}[self.kind]

    def pointer(self):
        return self.buf.buffer_info()[0]


def permuted(parent, perm):
    """PermutedDimsArray(parent, perm): the same buffer read through permuted dims."""
    view = JuliaArray.__new__(JuliaArray)
    view.kind, view.buf = parent.kind, parent.buf
    view.dims = tuple(parent.dims[p] for p in perm)
    view.strides = [parent.strides[p] for p in perm]
    return view


def indices(dims):
    if not dims:
        yield ()
        return
    for rest in indices(dims[1:]):
        for i in range(dims[0]):
            yield (i,) + rest


# ======================================================================================
# Independent float64 reference: forward (to make O and LSE) and backward
# ======================================================================================

class Attention:
    """One problem in index space: sequences[s] = (query rows, key rows, q0, k0) where rows
    are addressed through the accessors below, so padded and packed layouts share the math."""

    def __init__(self, d, hq, hkv, scale, causal=False, window=None):
        self.d, self.hq, self.hkv, self.scale = d, hq, hkv, scale
        self.causal, self.window = causal, window

    def visible(self, i, j, sq, sk):
        diag = i + sk - sq
        if self.causal and j > diag:
            return False
        if self.window is not None:
            left, right = self.window
            if left >= 0 and j < diag - left:
                return False
            if right >= 0 and j > diag + right:
                return False
        return True

    def forward(self, seqs, Q, K, V, O, LSE):
        """Q(s, h, i) -> vector, K/V(s, h, j) -> vector; stores O(s, h, i) and LSE(s, h, i)."""
        for s, (sq, sk) in enumerate(seqs):
            for h in range(self.hq):
                hk = h // (self.hq // self.hkv)
                for i in range(sq):
                    q = Q(s, h, i)
                    keys = [j for j in range(sk) if self.visible(i, j, sq, sk)]
                    if not keys:
                        LSE(s, h, i, -math.inf)
                        O(s, h, i, [0.0] * self.d)
                        continue
                    scores = [self.scale * dot(q, K(s, hk, j)) for j in keys]
                    m = max(scores)
                    p = [math.exp(x - m) for x in scores]
                    total = sum(p)
                    LSE(s, h, i, m + math.log(total))
                    out = [0.0] * self.d
                    for pj, j in zip(p, keys):
                        vj = V(s, hk, j)
                        for x in range(self.d):
                            out[x] += pj / total * vj[x]
                    O(s, h, i, out)

    def backward(self, seqs, Q, K, V, O, DO, LSE):
        """dQ, dK, dV as dicts {(s, h, row): vector} from the given (rounded) inputs."""
        d = self.d
        dq, dk, dv = {}, {}, {}
        for s, (sq, sk) in enumerate(seqs):
            for hk in range(self.hkv):
                for j in range(sk):
                    dk[s, hk, j], dv[s, hk, j] = [0.0] * d, [0.0] * d
            for h in range(self.hq):
                hk = h // (self.hq // self.hkv)
                for i in range(sq):
                    q, do, lse = Q(s, h, i), DO(s, h, i), LSE(s, h, i)
                    dq[s, h, i] = [0.0] * d
                    if lse == -math.inf:
                        continue
                    big_d = dot(do, O(s, h, i))
                    for j in range(sk):
                        if not self.visible(i, j, sq, sk):
                            continue
                        k, v = K(s, hk, j), V(s, hk, j)
                        p = math.exp(self.scale * dot(q, k) - lse)
                        ds = p * (dot(do, v) - big_d)
                        for x in range(d):
                            dv[s, hk, j][x] += p * do[x]
                            dk[s, hk, j][x] += self.scale * ds * q[x]
                            dq[s, h, i][x] += self.scale * ds * k[x]
        return dq, dk, dv


def dot(a, b):
    return math.fsum(x * y for x, y in zip(a, b))


def rel_frobenius(got, want):
    num = math.fsum((g - w) ** 2 for g, w in zip(got, want))
    den = math.fsum(w * w for w in want)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


# ======================================================================================
# The library driven the way FlashBwd.backward! drives it
# ======================================================================================

def make_problem(problem_fields):
    """A Problem built like FlashBwd.Problem(; ...)."""
    p = Problem()   # zeroed, like the keyword constructor's defaults
    p.struct_size = J_CONST["FLASHBWD_PROBLEM_STRUCT_SIZE"]
    known = {f for f, _ in Problem._fields_}
    for name, value in problem_fields.items():
        assert name in known, f"Problem has no field {name}"
        setattr(p, name, value)
    return p


def library_workspace(plan):
    """FlashBwd.Workspace(plan) for a CPU plan (workspace.jl): flashbwd_workspace_alloc with
    the out-arguments as the Julia Refs pass them. Returns (status, record); the record has
    the memory's ptr (an int, 0 for NULL), bytes and compressed."""
    ptr, nbytes = ctypes.c_void_p(0x5A5A), ctypes.c_size_t(12345)
    compressed = ctypes.c_int32(7)   # not 0 or 1: the library must write it
    status = LIB.flashbwd_workspace_alloc(plan, ctypes.byref(ptr), ctypes.byref(nbytes),
                                          ctypes.byref(compressed))
    return status, dict(ptr=ptr.value or 0, bytes=nbytes.value, compressed=compressed.value)


def run_backward(problem_fields, bound, workspace="array"):
    """plan_create with a Problem built like FlashBwd.Problem(; ...), set_tensor! for every
    (id, JuliaArray) in bound, workspace, execute, destroy.
    workspace="array": a caller-allocated buffer bound when the plan needs one, as backward!
    does; "library": Workspace(plan) then set_workspace!(plan, ws), left allocated (the
    caller frees it, after the plan is gone: the memory is not the plan's).
    Returns (status, message, (info, workspace_size, library_workspace_record or None))."""
    p = make_problem(problem_fields)
    plan = ctypes.c_void_p()
    status = LIB.flashbwd_plan_create(ctypes.byref(p), ctypes.byref(plan))
    if status != 0:
        return status, LIB.flashbwd_last_error().decode(), None
    try:
        for tensor_id, A in bound.items():
            strides = c_strides(A.strides, A.dims)
            s = (ctypes.c_int64 * len(strides))(*strides)
            status = LIB.flashbwd_plan_set_tensor(plan, tensor_id, A.pointer(), s, len(strides))
            if status != 0:
                return status, LIB.flashbwd_plan_last_error(plan).decode(), None
        size = ctypes.c_size_t()
        assert LIB.flashbwd_plan_workspace_size(plan, ctypes.byref(size)) == 0
        record = None
        if workspace == "library":
            status, record = library_workspace(plan)
            if status != 0:
                return status, LIB.flashbwd_plan_last_error(plan).decode(), None
            # set_workspace!(plan, ws) binds even a NULL, 0-byte workspace
            status = LIB.flashbwd_plan_set_workspace(plan, record["ptr"], record["bytes"])
            if status != 0:
                LIB.flashbwd_workspace_free(record["ptr"])
                return status, LIB.flashbwd_plan_last_error(plan).decode(), None
        else:
            buf = (ctypes.c_float * max(1, (size.value + 3) // 4))()
            if size.value:
                assert LIB.flashbwd_plan_set_workspace(plan, buf, size.value) == 0
        status = LIB.flashbwd_execute(plan, None)
        if status != 0:
            if record:
                LIB.flashbwd_workspace_free(record["ptr"])
            return status, LIB.flashbwd_plan_last_error(plan).decode(), None
        info = PlanInfo()
        info.struct_size = J_CONST["FLASHBWD_PLAN_INFO_STRUCT_SIZE"]
        assert LIB.flashbwd_plan_get_info(plan, ctypes.byref(info)) == 0
        return 0, "", (info, size.value, record)
    finally:
        LIB.flashbwd_plan_destroy(plan)


def randn_array(rng, kind, dims, strides=None, size=None):
    A = JuliaArray(kind, dims, strides, size)
    for idx in indices(A.dims):
        A[idx] = rng.gauss(0.0, 1.0)
    return A


def readme_example():
    """The sizes and mask of the README's Julia example, read from README.md."""
    with open(README) as f:
        text = f.read()
    m = re.search(r"^d, hq, hkv, sq, sk, b = (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)", text,
                  flags=re.M)
    call = re.search(r"^backward!\(dq, dk, dv, q, k, v, o, dout, lse; causal=(true|false)\)",
                     text, flags=re.M)
    error = re.search(r"^julia> backward!\(.*softmax_scale=(-?\d+)\)\n"
                      r"ERROR: FlashBwdError: (\w+) \((\d+)\): (.*)$", text, flags=re.M)
    if not (m and call and error):
        raise AssertionError("README.md no longer has the example this test runs")
    return [int(x) for x in m.groups()], call.group(1) == "true", error.groups()


# ======================================================================================
# Tests
# ======================================================================================

class TestMirror(unittest.TestCase):
    """The Julia declarations against the header and the library."""

    def test_julia_struct_fields_match_header_names_types_and_order(self):
        c_structs = abi_model.c_structs(HEADER)
        for julia, c in (("Problem", "flashbwd_problem"), ("PlanInfo", "flashbwd_plan_info")):
            jl = [(f,) + abi_model.julia_field(t) for f, t in J_DECLS["structs"][julia]]
            self.assertEqual(jl, c_structs[c], f"Julia {julia} vs C {c}")

    def test_struct_sizes_match_header_constants_and_library(self):
        for T, sid, const in ((Problem, "FLASHBWD_STRUCT_PROBLEM", "FLASHBWD_PROBLEM_STRUCT_SIZE"),
                              (PlanInfo, "FLASHBWD_STRUCT_PLAN_INFO",
                               "FLASHBWD_PLAN_INFO_STRUCT_SIZE")):
            last = T._fields_[-1][0]
            used = getattr(T, last).offset + getattr(T, last).size
            # what FlashBwd.check_layout computes and compares in __init__
            self.assertEqual(used, C_CONST[const], f"{T.__name__}: bytes of fields vs header")
            self.assertEqual(ctypes.sizeof(T), C_CONST[const], f"sizeof {T.__name__}")
            self.assertEqual(J_CONST[const], C_CONST[const], f"Julia {const}")
            self.assertEqual(LIB.flashbwd_struct_size(J_CONST[sid]), ctypes.sizeof(T),
                             f"flashbwd_struct_size({sid})")
        self.assertEqual(LIB.flashbwd_struct_size(999), 0)

    def test_julia_constructors_pass_fields_in_struct_order(self):
        # Julia's default constructor is positional, so an argument out of order would put a
        # value in the wrong field without any error; read the source to rule that out.
        with open(os.path.join(abi_model.PACKAGE, "src", "libflashbwd.jl")) as f:
            text = f.read()
        fields = [f for f, _ in J_DECLS["structs"]["Problem"]]
        kw = re.search(r"function Problem\(;(.*?)\)\n", text, flags=re.S).group(1)
        keywords = [k.split("=")[0].strip() for k in kw.split(",")]
        self.assertEqual(keywords, fields[:-1], "Problem keywords vs fields")
        call = re.search(r"return Problem\((.*?)\)\nend", text, flags=re.S).group(1)
        args = [a.strip() for a in call.split(",")]
        self.assertEqual(args, fields[:-1] + ["0"], "Problem positional arguments vs fields")

        info = [t for _, t in J_DECLS["structs"]["PlanInfo"]]
        zeros = int(re.search(r"ntuple\(_ -> Int32\(0\), (\d+)\)\.\.\.", text).group(1))
        self.assertEqual(info, ["Csize_t"] + ["Int32"] * zeros +
                         ["NTuple{4,NTuple{3,Int32}}"] * 2 + ["Csize_t"],
                         "PlanInfo() zero constructor vs fields")

    def test_every_header_constant_is_mirrored_with_its_value(self):
        self.assertEqual(sorted(J_CONST), sorted(C_CONST), "constant names differ")
        for name, value in C_CONST.items():
            self.assertEqual(J_CONST[name], value, name)

    def test_runtime_version_passes_the_init_check(self):
        runtime, compiled = LIB.flashbwd_version(), J_CONST["FLASHBWD_VERSION"]
        self.assertEqual(runtime // 10000, compiled // 10000)
        self.assertGreaterEqual(runtime, compiled)

    def test_ctypes_declarations_match_the_header(self):
        # This test stands in for the Julia ccalls, so its own prototypes must be the header's
        # (check_ccalls.py holds the Julia ones to the same standard), for every function.
        protos = abi_model.c_prototypes(HEADER)
        sigs = signatures()
        self.assertEqual(sorted(sigs), sorted(protos), "functions declared here vs header")
        for name, (res, args) in sigs.items():
            ret, params = protos[name]
            self.assertTrue(abi_model.c_matches_julia(ret, ctypes_meaning(res)),
                            f"{name}: returns {res}, header {ret}")
            self.assertEqual(len(args), len(params), f"{name}: argument count")
            for i, (arg, param) in enumerate(zip(args, params), start=1):
                self.assertTrue(abi_model.c_matches_julia(param, ctypes_meaning(arg)),
                                f"{name}: argument {i} is {arg}, header {param}")

    def test_status_names_match_the_julia_constant_names(self):
        for name, value in J_CONST.items():
            if name.startswith("FLASHBWD_ERR_") or name == "FLASHBWD_OK":
                self.assertEqual(LIB.flashbwd_status_name(value).decode(), name)


def ctypes_meaning(t):
    """('C base', pointer_depth) of a ctypes type, as abi_model.julia_type gives for Julia."""
    c = ctypes
    if t is None:
        return ("void", 0)
    if t is c.c_void_p:
        return ("void", 1)
    if t is c.c_char_p:
        return ("char", 1)
    if isinstance(t, type) and issubclass(t, c._Pointer):
        base, depth = ctypes_meaning(t._type_)
        return (base, depth + 1)
    bases = {c.c_int32: "int32_t", c.c_uint32: "uint32_t", c.c_int64: "int64_t",
             c.c_size_t: "size_t", Problem: "flashbwd_problem", PlanInfo: "flashbwd_plan_info"}
    return (bases[t], 0)


class TestLoading(unittest.TestCase):
    """FlashBwd.__init__ opens FLASHBWD_LIB by path, then every @ccall names the SONAME."""

    def test_soname_resolves_to_the_library_opened_by_path(self):
        with tempfile.TemporaryDirectory() as tmp:
            renamed = os.path.join(tmp, "renamed-flashbwd.so")   # not the SONAME
            shutil.copy(LIB_PATH, renamed)
            probe = (
                "import ctypes, sys\n"
                "name = sys.argv[2]\n"
                "try:\n"
                "    ctypes.CDLL(name)\n"
                "    found_before = True\n"
                "except OSError:\n"
                "    found_before = False\n"
                "by_path = ctypes.CDLL(sys.argv[1])\n"
                "by_name = ctypes.CDLL(name)\n"
                "same = ctypes.cast(by_path.flashbwd_version, ctypes.c_void_p).value == "
                "ctypes.cast(by_name.flashbwd_version, ctypes.c_void_p).value\n"
                "print(found_before, same)\n")
            env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
            out = subprocess.run([sys.executable, "-c", probe, renamed,
                                  J_DECLS["consts"]["libflashbwd"].strip('"')],
                                 capture_output=True, text=True, env=env, cwd=tmp)
            self.assertEqual(out.returncode, 0, out.stderr)
            found_before, same = out.stdout.split()
            self.assertEqual(same, "True", "the SONAME resolved to another library")
            if found_before == "True":
                self.skipTest("libflashbwd.so.1 is installed system-wide; the SONAME match "
                              "was not the only way to find it")


class BackwardCase:
    """run_case: one backward pass through the library checked against the reference."""

    def run_case(self, kind, d, hq, hkv, seqs, varlen, causal=False, window=None, scale=0.0,
                 permute=False, tol=None, workspace_kind="array"):
        """Returns run_backward's library workspace record (workspace_kind="library"), still
        allocated, after the comparison."""
        rng = random.Random(SEED + d * 1000 + hq)
        b = len(seqs)
        sq = max(s for s, _ in seqs)
        sk = max(k for _, k in seqs)
        eff_scale = scale or 1.0 / math.sqrt(d)
        att = Attention(d, hq, hkv, eff_scale, causal, window)

        # Julia arrays exactly as backward! receives them.
        if varlen:
            tq, tk = sum(s for s, _ in seqs), sum(k for _, k in seqs)
            qd, kd, lsed = (d, hq, tq), (d, hkv, tk), (tq, hq)
        else:
            qd, kd, lsed = (d, hq, sq, b), (d, hkv, sk, b), (sq, hq, b)

        def make(dims):
            if permute:   # PermutedDimsArray(A, (1, 3, 2, 4)) of A of size (d, s, h, b)
                parent = JuliaArray(kind, (dims[0], dims[2], dims[1], dims[3]))
                return permuted(parent, (0, 2, 1, 3))
            return JuliaArray(kind, dims)

        q, k, v, dout = make(qd), make(kd), make(kd), make(qd)
        o, dq, dk, dv = make(qd), make(qd), make(kd), make(kd)
        lse = JuliaArray("f32", lsed)
        for A in (q, k, v, dout):
            for idx in indices(A.dims):
                A[idx] = rng.gauss(0.0, 1.0)
        for A in (dq, dk, dv):
            A.poison()

        q_off = [sum(s for s, _ in seqs[:i]) for i in range(b)]
        k_off = [sum(k for _, k in seqs[:i]) for i in range(b)]

        def at(s, h, r, off):   # Julia index of (sequence s, head h, row r)
            return (h, off[s] + r) if varlen else (h, r, s)

        def vec(A, off):
            return lambda s, h, r: [A[(x,) + at(s, h, r, off)] for x in range(d)]

        def store_vec(A, off):
            def put(s, h, r, values):
                for x in range(d):
                    A[(x,) + at(s, h, r, off)] = values[x]
            return put

        def lse_at(s, h, i):
            return (q_off[s] + i, h) if varlen else (i, h, s)

        def put_lse(s, h, i, value):
            lse[lse_at(s, h, i)] = value

        att.forward(seqs, vec(q, q_off), vec(k, k_off), vec(v, k_off), store_vec(o, q_off),
                    put_lse)

        bound = {J_CONST["FLASHBWD_TENSOR_Q"]: q, J_CONST["FLASHBWD_TENSOR_K"]: k,
                 J_CONST["FLASHBWD_TENSOR_V"]: v, J_CONST["FLASHBWD_TENSOR_O"]: o,
                 J_CONST["FLASHBWD_TENSOR_DO"]: dout, J_CONST["FLASHBWD_TENSOR_LSE"]: lse,
                 J_CONST["FLASHBWD_TENSOR_DQ"]: dq, J_CONST["FLASHBWD_TENSOR_DK"]: dk,
                 J_CONST["FLASHBWD_TENSOR_DV"]: dv}
        fields = dict(backend=J_CONST["FLASHBWD_BACKEND_CPU"],
                      dtype=J_CONST["FLASHBWD_DTYPE_FP16" if kind == "fp16" else "FLASHBWD_DTYPE_BF16"],
                      head_dim=d, batch=b, heads_q=hq, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk,
                      softmax_scale=scale, causal=int(causal), varlen=int(varlen))
        if window is not None:
            fields.update(use_window=1, window_left=window[0], window_right=window[1])
        if varlen:
            cu_q, cu_k = JuliaArray("i32", (b + 1,)), JuliaArray("i32", (b + 1,))
            for i in range(b + 1):
                cu_q[(i,)] = sum(s for s, _ in seqs[:i])
                cu_k[(i,)] = sum(k for _, k in seqs[:i])
            bound[J_CONST["FLASHBWD_TENSOR_CU_SEQLENS_Q"]] = cu_q
            bound[J_CONST["FLASHBWD_TENSOR_CU_SEQLENS_K"]] = cu_k
            fields.update(total_q=qd[2], total_k=kd[2])

        status, message, result = run_backward(fields, bound, workspace_kind)
        self.assertEqual(status, 0, message)
        info, workspace, record = result
        # PlanInfo read through the Julia layout: fields land where the library wrote them.
        self.assertEqual(info.struct_size, J_CONST["FLASHBWD_PLAN_INFO_STRUCT_SIZE"])
        self.assertEqual(info.backend, J_CONST["FLASHBWD_BACKEND_CPU"])
        self.assertEqual(info.workspace_bytes, workspace)
        self.assertGreater(workspace, 0)

        want = att.backward(seqs, vec(q, q_off), vec(k, k_off), vec(v, k_off), vec(o, q_off),
                            vec(dout, q_off), lambda s, h, i: lse[lse_at(s, h, i)])
        tol = tol or (3e-3 if kind == "fp16" else 1e-2)   # design.md's bound against fp64
        for name, got, ref, off in (("dq", dq, want[0], q_off), ("dk", dk, want[1], k_off),
                                    ("dv", dv, want[2], k_off)):
            g, w = [], []
            for (s, h, r), values in ref.items():
                g += vec(got, off)(s, h, r)
                w += values
            self.assertEqual(len(g), math.prod(got.dims), f"{name}: not every element compared")
            self.assertTrue(all(math.isfinite(x) for x in g), f"{name}: NaN/Inf or unwritten")
            err = rel_frobenius(g, w)
            self.assertLess(err, tol, f"{name}: relative Frobenius error {err:.2e}")
        return record


class TestExamples(BackwardCase, unittest.TestCase):

    def test_readme_example_matches_float64_reference(self):
        (d, hq, hkv, sq, sk, b), causal, _ = readme_example()
        self.run_case("fp16", d, hq, hkv, [(sq, sk)] * b, varlen=False, causal=causal)

    def test_permuted_view_bf16_window_and_scale(self):
        self.run_case("bf16", 16, 2, 1, [(9, 7)] * 2, varlen=False, window=(3, 1), scale=0.3,
                      permute=True)

    def test_variable_length_batch(self):
        self.run_case("fp16", 8, 2, 2, [(5, 4), (3, 6)], varlen=True, causal=True)

    def test_readme_error_message_is_the_library_message(self):
        (d, hq, hkv, sq, sk, b), _, (scale, name, status, message) = readme_example()
        got_status, got_message, _ = run_backward(
            dict(backend=J_CONST["FLASHBWD_BACKEND_CPU"], dtype=J_CONST["FLASHBWD_DTYPE_FP16"],
                 head_dim=d, batch=b, heads_q=hq, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk,
                 softmax_scale=float(scale)), {})
        self.assertEqual(got_status, int(status))
        self.assertEqual(LIB.flashbwd_status_name(got_status).decode(), name)
        # FlashBwdError keeps the library's message minus its "NAME: " prefix (errors.jl).
        self.assertEqual(got_message, f"{name}: {message}")



class TestWorkspace(BackwardCase, unittest.TestCase):
    """ABI 1.1 as FlashBwd.Workspace drives it (workspace.jl), on the CPU backend:
    Workspace(plan), set_workspace!(plan, ws), execute!(plan), destroy!(ws)."""

    def cpu_plan(self, **fields):
        (d, hq, hkv, sq, sk, b), causal, _ = readme_example()
        base = dict(backend=J_CONST["FLASHBWD_BACKEND_CPU"], dtype=J_CONST["FLASHBWD_DTYPE_FP16"],
                    head_dim=d, batch=b, heads_q=hq, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk,
                    causal=int(causal))
        base.update(fields)
        p = make_problem(base)
        plan = ctypes.c_void_p()
        status = LIB.flashbwd_plan_create(ctypes.byref(p), ctypes.byref(plan))
        self.assertEqual(status, 0, LIB.flashbwd_last_error().decode())
        self.addCleanup(LIB.flashbwd_plan_destroy, plan)
        return plan

    def workspace_size(self, plan):
        size = ctypes.c_size_t()
        self.assertEqual(LIB.flashbwd_plan_workspace_size(plan, ctypes.byref(size)), 0)
        return size.value

    def assert_refused_free(self, ptr):
        """flashbwd_workspace_free(ptr) for memory that is not (or no longer) the library's:
        FLASHBWD_ERR_INVALID_VALUE, with a thread message naming the pointer."""
        status = LIB.flashbwd_workspace_free(ptr)
        self.assertEqual(status, J_CONST["FLASHBWD_ERR_INVALID_VALUE"])
        self.assertEqual(status, 3)
        message = LIB.flashbwd_last_error().decode()
        self.assertTrue(message.startswith("FLASHBWD_ERR_INVALID_VALUE: "), message)
        self.assertIn(hex(ptr), message, "the message does not name the pointer")   # %p

    def test_readme_plan_example_uses_a_library_workspace(self):
        with open(README) as f:
            text = f.read()
        self.assertRegex(text, r"(?m)^ws = Workspace\(plan\).*\n"
                               r"set_workspace!\(plan, ws\).*\n"
                               r"execute!\(plan\).*\n(?:.*\n)*?destroy!\(ws\)",
                         "README's plan example no longer runs the sequence tested here")

    def test_readme_example_on_a_library_workspace_then_free_once(self):
        (d, hq, hkv, sq, sk, b), causal, _ = readme_example()
        # Allocate for the plan, bind, execute, compare with the float64 reference; the plan
        # is destroyed by then, and the memory is still the caller's.
        ws = self.run_case("fp16", d, hq, hkv, [(sq, sk)] * b, varlen=False, causal=causal,
                           workspace_kind="library")
        plan = self.cpu_plan()
        size = self.workspace_size(plan)
        self.assertGreater(size, 0)
        self.assertNotEqual(ws["ptr"], 0)
        self.assertGreaterEqual(ws["bytes"], size, "smaller than flashbwd_plan_workspace_size")
        self.assertEqual(ws["compressed"], 0, "host memory is never compressible")
        self.assertEqual(ws["ptr"] % 256, 0, "CPU workspace not 256-byte aligned")
        # destroy!(ws): freed once ...
        self.assertEqual(LIB.flashbwd_workspace_free(ws["ptr"]), J_CONST["FLASHBWD_OK"])
        # ... and a second free is refused rather than freeing again.
        self.assert_refused_free(ws["ptr"])

    def test_memory_outlives_its_plan_and_fits_another_plan_of_the_problem(self):
        # backward!(...; workspace=ws) binds a Workspace to a fresh plan of the same problem.
        first = self.cpu_plan()
        status, ws = library_workspace(first)
        self.assertEqual(status, 0, LIB.flashbwd_plan_last_error(first).decode())
        self.assertEqual(LIB.flashbwd_plan_last_error(first).decode(), "")
        LIB.flashbwd_plan_destroy(first)   # the cleanup's destroy is then a second, of a
        first.value = None                 # NULL plan: a no-op
        second = self.cpu_plan()
        self.assertEqual(LIB.flashbwd_plan_set_workspace(second, ws["ptr"], ws["bytes"]), 0,
                         LIB.flashbwd_plan_last_error(second).decode())
        self.assertEqual(LIB.flashbwd_plan_set_workspace(second, None, 0), 0)   # unbind
        self.assertEqual(LIB.flashbwd_workspace_free(ws["ptr"]), 0)

    def test_compressed_may_be_null(self):
        # the raw wrapper flashbwd_workspace_alloc passes `compressed` as a Ptr{Int32}
        plan = self.cpu_plan()
        ptr, nbytes = ctypes.c_void_p(), ctypes.c_size_t()
        self.assertEqual(LIB.flashbwd_workspace_alloc(plan, ctypes.byref(ptr),
                                                      ctypes.byref(nbytes), None), 0)
        self.assertGreaterEqual(nbytes.value, self.workspace_size(plan))
        self.assertEqual(LIB.flashbwd_workspace_free(ptr.value), 0)

    def test_free_of_null_is_a_no_op(self):
        # destroy! of a Workspace whose plan needed no memory (ptr NULL, bytes 0)
        self.assertEqual(LIB.flashbwd_workspace_free(None), J_CONST["FLASHBWD_OK"])

    def test_free_refuses_memory_the_library_did_not_allocate(self):
        buf = (ctypes.c_float * 64)(*range(64))
        self.assert_refused_free(ctypes.addressof(buf))
        self.assertEqual(list(buf), [float(i) for i in range(64)], "foreign memory touched")

    def test_failed_allocation_names_the_null_argument_and_gives_nothing(self):
        plan = self.cpu_plan()
        ptr = ctypes.c_void_p(0x5A5A)
        status = LIB.flashbwd_workspace_alloc(plan, ctypes.byref(ptr), None, None)
        self.assertEqual(status, J_CONST["FLASHBWD_ERR_NULL_ARGUMENT"])
        self.assertIsNone(ptr.value, "*ptr must be NULL on failure")
        # Workspace(plan) reports failures through check(plan, status): the plan's message
        self.assertIn("bytes is NULL", LIB.flashbwd_plan_last_error(plan).decode())


if __name__ == "__main__":
    unittest.main()
