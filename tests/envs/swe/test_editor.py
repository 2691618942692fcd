"""The file editor's commands and refusals, on files in a real (local) sandbox."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import skyhub
from skyhub.envs.swe.editor import MAX_OUTPUT, Editor, EditorError

SRC = "def f(x):\n\treturn x + 1\n\n\ndef g(x):\n    return x + 1\n"


@pytest.fixture(scope="module")
def sandbox(local_backend: str) -> Iterator[Any]:
    with skyhub.sandbox.create(backend=local_backend, workdir="/testbed") as sb:
        yield sb


@pytest.fixture
def ed(sandbox: Any) -> Editor:
    sandbox.exec("rm -rf /testbed/* /testbed/.hidden && mkdir -p /testbed/pkg/sub/deep "
                 "/testbed/.hidden")
    sandbox.write_file("/testbed/pkg/mod.py", SRC)
    return Editor(sandbox)


def test_view_numbers_lines_like_cat_n(ed: Editor, sandbox: Any) -> None:
    out = ed("view", "/testbed/pkg/mod.py")
    cat = sandbox.exec("cat -n /testbed/pkg/mod.py | expand").stdout
    body = out.split("\n", 1)[1]
    # cat -n numbers the same lines (it leaves the final newline's empty line out)
    assert [line.split("\t", 1)[0] for line in body.splitlines()[:6]] == \
        [line.expandtabs().split()[0].rjust(6) for line in cat.splitlines()]
    assert "     2\t        return x + 1" in out  # the tab expanded
    part = ed("view", "/testbed/pkg/mod.py", view_range=[5, -1])
    assert "     5\tdef g(x):" in part and "def f" not in part
    assert ed("view", "/testbed/pkg/mod.py", view_range=[2, 2]).count("\n") == 2
    for bad, why in (([0, 3], "between 1 and 7"), ([2, 99], "has 7 lines"),
                     ([4, 2], "before the first"), ([1], "two integers")):
        with pytest.raises(EditorError, match=why):
            ed("view", "/testbed/pkg/mod.py", view_range=bad)


def test_view_of_a_directory_two_levels_no_hidden(ed: Editor) -> None:
    out = ed("view", "/testbed")
    assert "/testbed/pkg/mod.py" in out and "/testbed/pkg/sub" in out
    assert "/testbed/pkg/sub/deep" not in out and ".hidden" not in out
    with pytest.raises(EditorError, match="files only"):
        ed("view", "/testbed/pkg", view_range=[1, 2])


def test_str_replace_once_and_only_once(ed: Editor, sandbox: Any) -> None:
    with pytest.raises(EditorError, match=r"occurs 2 times .*lines \[2, 6\]"):
        ed("str_replace", "/testbed/pkg/mod.py", old_str="return x + 1", new_str="return x")
    with pytest.raises(EditorError, match="did not occur verbatim"):
        ed("str_replace", "/testbed/pkg/mod.py", old_str="return y", new_str="return x")
    with pytest.raises(EditorError, match="the same as old_str"):
        ed("str_replace", "/testbed/pkg/mod.py", old_str="def g", new_str="def g")
    assert sandbox.read_file("/testbed/pkg/mod.py").decode() == SRC  # nothing written
    out = ed("str_replace", "/testbed/pkg/mod.py", old_str="def g(x):\n    return x + 1",
             new_str="def g(x):\n    return x - 1")
    assert "     6\t    return x - 1" in out and out.startswith("Edited /testbed/pkg/mod.py")
    assert "     2\t" in out  # four lines of context above the edit
    assert sandbox.read_file("/testbed/pkg/mod.py").decode().endswith("return x - 1\n")
    # deleting: no new_str
    ed("str_replace", "/testbed/pkg/mod.py", old_str="\n\ndef g(x):\n    return x - 1")
    assert "def g" not in sandbox.read_file("/testbed/pkg/mod.py").decode()


def test_insert_create_and_undo(ed: Editor, sandbox: Any) -> None:
    read = lambda: sandbox.read_file("/testbed/pkg/mod.py").decode()  # noqa: E731
    ed("insert", "/testbed/pkg/mod.py", insert_line=0, new_str="import os")
    assert read().startswith("import os\ndef f(x):")
    ed("insert", "/testbed/pkg/mod.py", insert_line=7, new_str="# end")
    assert read().endswith("return x + 1\n# end\n")
    with pytest.raises(EditorError, match="0 \\(the top\\) to 9"):
        ed("insert", "/testbed/pkg/mod.py", insert_line=10, new_str="x")
    assert ed("undo_edit", "/testbed/pkg/mod.py").startswith("Undid")
    assert read() == "import os\n" + SRC.expandtabs()  # tabs expanded, as the reference does
    ed("undo_edit", "/testbed/pkg/mod.py")
    assert read() == SRC.expandtabs()
    with pytest.raises(EditorError, match="No edit of"):
        ed("undo_edit", "/testbed/pkg/mod.py")

    assert ed("create", "/testbed/pkg/new.py", file_text="X = 1\n") == \
        "Created /testbed/pkg/new.py."
    with pytest.raises(EditorError, match="never overwrites"):
        ed("create", "/testbed/pkg/new.py", file_text="X = 2\n")
    with pytest.raises(EditorError, match="mkdir -p /testbed/nope"):
        ed("create", "/testbed/nope/new.py", file_text="")


def test_refusals_are_messages_that_say_what_to_do(ed: Editor) -> None:
    cases = [
        (("edit", "/testbed/pkg/mod.py"), {}, "use one of view, create"),
        (("view", "pkg/mod.py"), {}, "e.g. /testbed/pkg/mod.py"),
        (("view", "/testbed/missing.py"), {}, "does not exist"),
        (("str_replace", "/testbed/pkg"), {"old_str": "a"}, "only `view`"),
        (("str_replace", "/testbed/pkg/mod.py"), {}, "needs old_str"),
        (("insert", "/testbed/pkg/mod.py"), {"new_str": "x"}, "needs insert_line"),
        (("create", "/testbed/pkg/x.py"), {}, "needs file_text"),
    ]
    for args, kwargs, why in cases:
        with pytest.raises(EditorError, match=why):
            ed(*args, **kwargs)


def test_long_views_are_clipped(ed: Editor, sandbox: Any) -> None:
    sandbox.write_file("/testbed/big.txt", "y" * 50 + "\n" + "z" * (2 * MAX_OUTPUT))
    out = ed("view", "/testbed/big.txt")
    assert "output clipped" in out and len(out) < MAX_OUTPUT + 400


def test_paths_cannot_leave_the_sandbox(ed: Editor, tmp_path: Any) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only\n")
    with pytest.raises(EditorError, match="does not exist"):
        ed("view", str(secret))
