#!/usr/bin/env python3
"""test_project.py — the FlashBwd package's files hang together the way Pkg expects.

Julia cannot run here, so this checks what Pkg and `using FlashBwd` would read first:
Project.toml (name, UUID, Julia compat, weak dependencies and the extensions they load),
that each extension file defines the module its name promises, and that src/FlashBwd.jl
includes every source file and only existing ones. Python 3.11 standard library only.

    python3 test_project.py -v
"""
import os
import re
import sys
import tomllib
import unittest
import uuid

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
import abi_model  # noqa: E402

PKG = abi_model.PACKAGE

# Registered UUIDs of the packages FlashBwd names (from the General registry).
KNOWN = {
    "Libdl": "8f399da3-3557-5675-b5ff-fb832c97cbdb",
    "CUDA": "052768ef-5323-5732-b1bb-66c8b64840ba",
    "BFloat16s": "ab4f0b2a-ad5b-11e8-123f-65d77653426b",
}


def read(path):
    with open(os.path.join(PKG, path)) as f:
        return f.read()


class TestProject(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(PKG, "Project.toml"), "rb") as f:
            cls.project = tomllib.load(f)

    def test_name_uuid_version_and_julia_compat(self):
        p = self.project
        self.assertEqual(p["name"], "FlashBwd")
        self.assertEqual(uuid.UUID(p["uuid"]).version, 4)
        self.assertRegex(p["version"], r"^\d+\.\d+\.\d+$")
        self.assertEqual(p["compat"]["julia"], "1.9")

    def test_dependencies_have_their_registered_uuids_and_compat(self):
        p = self.project
        for section in ("deps", "weakdeps"):
            for name, u in p.get(section, {}).items():
                self.assertEqual(u, KNOWN.get(name), f"[{section}] {name}")
                self.assertIn(name, p["compat"], f"no [compat] entry for {name}")
        self.assertEqual(set(p["weakdeps"]), {"CUDA", "BFloat16s"})

    def test_each_extension_is_a_file_defining_its_module_and_using_its_trigger(self):
        exts = self.project["extensions"]
        self.assertEqual(exts, {"FlashBwdCUDAExt": "CUDA", "FlashBwdBFloat16sExt": "BFloat16s"})
        for name, trigger in exts.items():
            text = read(os.path.join("ext", name + ".jl"))
            self.assertRegex(text, rf"(?m)^module {name}$")
            self.assertRegex(text, rf"(?m)^using {trigger}\b")
            self.assertRegex(text, r"(?m)^using FlashBwd\b")

    def test_module_includes_every_source_file_once(self):
        text = read(os.path.join("src", "FlashBwd.jl"))
        self.assertRegex(text, r"(?m)^module FlashBwd$")
        included = re.findall(r'(?m)^include\("([^"]+)"\)$', text)
        self.assertEqual(len(included), len(set(included)))
        present = {f for f in os.listdir(os.path.join(PKG, "src")) if f.endswith(".jl")}
        self.assertEqual(set(included), present - {"FlashBwd.jl"})

    def test_exported_names_are_defined(self):
        text = "".join(read(os.path.join("src", f)) for f in os.listdir(os.path.join(PKG, "src")))
        export = re.search(r"(?s)^export (.*?)\n\n", text, flags=re.M)
        names = [n.strip() for n in export.group(1).replace("\n", " ").split(",")]
        self.assertIn("backward!", names)
        for name in names:
            pattern = (rf"(?m)^(function |struct |mutable struct |const )?"
                       rf"{re.escape(name)}(?=[\s({{])")
            self.assertTrue(re.search(pattern, text), f"exported {name} is not defined")


if __name__ == "__main__":
    unittest.main()
