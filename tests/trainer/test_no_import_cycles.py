"""The trainer's modules import each other one way only, counting the imports placed inside
functions (a cycle hidden that way still makes a reader hold both modules at once), and the
package's docstring maps every module it has."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import skyhub.trainer

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from import_graph import cycles, import_graph

TRAINER = Path(skyhub.trainer.__file__).parent


def test_no_trainer_module_imports_one_that_imports_it_back():
    graph = import_graph(TRAINER, "skyhub.trainer")
    assert "skyhub.trainer.loop" in graph and "skyhub.trainer.inference.vllm" in graph
    found = cycles(graph)
    assert found == [], "import cycles (a -> b -> ... -> a):\n" + "\n".join(
        " -> ".join([*c, c[0]]) for c in found)


def test_the_checker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """The check above could pass by not seeing the imports that hide a cycle: here each
    cycle is made only of an import inside a function, or of a relative one."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import thing\n    return thing\n")
    (pkg / "c.py").write_text("from .sub import d\n")
    (pkg / "sub" / "d.py").write_text("class K:\n    def m(self):\n        from .. import c\n")
    (pkg / "e.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from pkg import a\nimport os\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.e"] == {"typing", "os"}  # annotations-only imports never run
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d"]]


def test_the_package_docstring_maps_every_module():
    listed = set(re.findall(r"^\s+(\w+(?:\.py|/))\s", skyhub.trainer.__doc__, re.M))
    present = {p.name for p in TRAINER.glob("*.py") if p.name != "__init__.py"} | {
        p.name + "/" for p in TRAINER.iterdir() if (p / "__init__.py").is_file()}
    assert present - listed == set(), "trainer/__init__.py's map omits these"
    assert listed - present == set(), "trainer/__init__.py's map names modules that are gone"
