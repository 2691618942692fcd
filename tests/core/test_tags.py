"""The tolerant tag parser: what a messy model turn parses to, and that nothing ever raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhub.tags import (
    TagMatch,
    count,
    extract,
    find_all,
    find_code_block,
    find_tag,
    first_of,
    truncate_after,
)

FUZZ = settings(max_examples=400, deadline=None, database=None)


# ----------------------------------------------------------------------------- find / extract
def test_extract_returns_first_match_by_default_and_last_on_request() -> None:
    text = "<answer>1</answer> then <answer>2</answer> finally <answer>3</answer>"
    assert extract(text, "answer") == "1"
    assert extract(text, "answer", which="last") == "3"


def test_find_all_lists_every_element_in_order_with_spans() -> None:
    text = "a <sql>x</sql> b <sql>y</sql>"
    found = find_all(text, "sql")
    assert [m.content for m in found] == ["x", "y"]
    assert all(m.closed for m in found)
    assert [text[m.start:m.end] for m in found] == ["<sql>x</sql>", "<sql>y</sql>"]


def test_extract_strips_content_unless_asked_not_to() -> None:
    assert extract("<answer>\n  42 \n</answer>", "answer") == "42"
    assert extract("<answer>\n  42 \n</answer>", "answer", strip=False) == "\n  42 \n"


def test_missing_tag_gives_none() -> None:
    assert extract("no tags here", "answer") is None
    assert find_tag("<other>1</other>", "answer") is None
    assert find_all("", "answer") == []


def test_unclosed_tag_runs_to_end_of_text_and_is_marked_open() -> None:
    text = "thinking... <sql>SELECT *\nFROM t"
    m = find_tag(text, "sql")
    assert m == TagMatch("sql", "SELECT *\nFROM t", text.index("<sql>"), len(text), closed=False)


def test_unclosed_tag_is_ignored_when_not_allowed() -> None:
    assert find_tag("<sql>SELECT 1", "sql", allow_unclosed=False) is None
    assert extract("<a>1</a><a>2", "a", which="last", allow_unclosed=False) == "1"


def test_unclosed_last_element_follows_closed_ones() -> None:
    found = find_all("<a>1</a><a>2", "a")
    assert [(m.content, m.closed) for m in found] == [("1", True), ("2", False)]


def test_nested_same_name_tags_belong_to_the_outermost_element() -> None:
    found = find_all("<a>x<a>y</a>z</a> <a>w</a>", "a")
    assert [m.content for m in found] == ["x<a>y</a>z", "w"]


def test_nested_unclosed_outer_element_keeps_inner_element_in_content() -> None:
    m = find_tag("<a>x<a>y</a> tail", "a")
    assert m is not None
    assert (m.content, m.closed) == ("x<a>y</a> tail", False)


def test_stray_closing_tags_are_ignored() -> None:
    text = "</answer> oops </answer><answer>7</answer></answer>"
    found = find_all(text, "answer")
    assert [m.content for m in found] == ["7"]
    assert found[0].start == text.index("<answer>")


def test_tags_match_case_insensitively_and_with_attributes_and_spaces() -> None:
    assert extract("<ANSWER>1</Answer>", "answer") == "1"
    assert extract('<answer type="int" id=3>2</answer>', "answer") == "2"
    assert extract("< answer >3</ answer >", "answer") == "3"
    m = find_tag("<Answer>4</ANSWER>", "answer")
    assert m is not None and m.tag == "answer"


def test_tag_name_must_match_whole_word() -> None:
    assert find_tag("<answers>no</answers>", "answer") is None
    assert find_tag("<sqlite>no</sqlite>", "sql") is None
    assert extract("<sqlite>no</sqlite><sql>yes</sql>", "sql") == "yes"


def test_regex_metacharacters_in_tag_names_are_literal() -> None:
    assert extract("<a.b>1</a.b>", "a.b") == "1"
    assert find_tag("<axb>1</axb>", "a.b") is None
    assert extract("<c++>ok</c++>", "c++") == "ok"


def test_bytes_input_is_decoded_as_utf8() -> None:
    assert extract("<answer>é中</answer>".encode(), "answer") == "é中"
    assert extract(bytearray(b"<answer>\xff1</answer>"), "answer") == "\ufffd1"


def test_none_input_gives_no_match() -> None:
    assert extract(None, "answer") is None
    assert find_all(None, "answer") == []
    assert count(None, "answer") == (0, 0)
    assert truncate_after(None, "</a>") == ""
    assert find_code_block(None) is None


# ----------------------------------------------------------------------------- first_of
def test_first_of_picks_the_tag_that_opens_earliest() -> None:
    text = "<solution>done</solution> and <sql>SELECT 1</sql>"
    m = first_of(text, ("sql", "solution"))
    assert m is not None and (m.tag, m.content) == ("solution", "done")
    m = first_of("<sql>SELECT 1</sql><solution>done</solution>", ["solution", "sql"])
    assert m is not None and m.tag == "sql"


def test_first_of_considers_unclosed_tags_and_returns_none_without_any() -> None:
    m = first_of("<lookup>k1", ("answer", "lookup"))
    assert m is not None and (m.tag, m.content, m.closed) == ("lookup", "k1", False)
    assert first_of("plain prose", ("answer", "lookup")) is None
    assert first_of("<lookup>k1", ("answer", "lookup"), allow_unclosed=False) is None


# ----------------------------------------------------------------------------- count
@pytest.mark.parametrize(("text", "expected"), [
    ("", (0, 0)),
    ("<a>1</a>", (1, 1)),
    ("<a>1</a><A x=1>2", (2, 1)),
    ("</a></a> <a>", (1, 2)),
    ("<ab>1</ab>", (0, 0)),
])
def test_count_reports_opening_and_closing_tags(text: str, expected: tuple[int, int]) -> None:
    assert count(text, "a") == expected


# ----------------------------------------------------------------------------- truncate_after
def test_truncate_after_cuts_right_after_first_stop_string() -> None:
    assert truncate_after("<sql>x</sql> more <sql>y</sql>", "</sql>") == "<sql>x</sql>"
    assert truncate_after("no stop here", "</sql>") == "no stop here"
    assert truncate_after(b"<a>1</a>tail", "</a>") == "<a>1</a>"


# ----------------------------------------------------------------------------- code blocks
def test_find_code_block_returns_fenced_body() -> None:
    text = "Here:\n```python\nprint(1)\n```\nDone."
    assert find_code_block(text) == "print(1)\n"


def test_find_code_block_returns_last_block_by_default_and_first_on_request() -> None:
    text = "```\nfirst\n```\nand\n```\nsecond\n```"
    assert find_code_block(text) == "second\n"
    assert find_code_block(text, which="first") == "first\n"


def test_find_code_block_filters_by_language_case_insensitively() -> None:
    text = "```sql\nSELECT 1\n```\n```Python\nx = 1\n```\n```sql\nSELECT 2\n```"
    assert find_code_block(text, "python") == "x = 1\n"
    assert find_code_block(text, "SQL", which="first") == "SELECT 1\n"
    assert find_code_block(text, "sql") == "SELECT 2\n"
    assert find_code_block(text, "bash") is None


def test_find_code_block_language_must_match_exactly() -> None:
    assert find_code_block("```python3\nx\n```", "python") is None
    assert find_code_block("```python extra words\nx\n```", "python") == "x\n"


def test_unterminated_code_block_runs_to_end_of_text() -> None:
    assert find_code_block("Sure:\n```python\nimport os\nprint(os.getcwd())") == \
        "import os\nprint(os.getcwd())"


def test_no_code_block_gives_none() -> None:
    assert find_code_block("just `inline` code") is None


# ----------------------------------------------------------------------------- never raises
_PIECES = st.sampled_from([
    "<a>", "</a>", "<A>", "</ A >", "<a x='1'>", "<a", "a>", "<", ">", "/", "<b>", "</b>",
    "<answer>", "</answer>", "```", "```py\n", "```sql\n", "\n", " ", "\\", "(", "[", "*",
])
_SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
_TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=5), _SURROGATES), max_size=30).map("".join)
_ANY_INPUT = st.one_of(
    st.none(), _TEXT, st.text(), st.binary(), st.binary().map(bytearray),
    st.integers(), st.floats(allow_nan=True), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_TAGS = st.one_of(st.sampled_from(["a", "b", "answer", "A", "a.b", "c++", "x y"]),
                  st.text(min_size=1, max_size=6), _SURROGATES)


@FUZZ
@given(text=_ANY_INPUT, tag=_TAGS, which=st.sampled_from(["first", "last"]),
       allow_unclosed=st.booleans())
def test_tag_functions_never_raise_on_arbitrary_input(text: object, tag: str, which: str,
                                                      allow_unclosed: bool) -> None:
    found = find_all(text, tag, allow_unclosed=allow_unclosed)
    assert isinstance(found, list)
    for m in found:
        assert 0 <= m.start <= m.end
        assert allow_unclosed or m.closed
    assert isinstance(count(text, tag), tuple)
    for m in (find_tag(text, tag, which=which, allow_unclosed=allow_unclosed),
              first_of(text, (tag, "answer"), allow_unclosed=allow_unclosed)):
        assert m is None or isinstance(m, TagMatch)
    value = extract(text, tag, which=which, allow_unclosed=allow_unclosed)
    assert value is None or isinstance(value, str)


@FUZZ
@given(text=_ANY_INPUT, stop=st.one_of(_TEXT.filter(bool), _SURROGATES),
       lang=st.one_of(st.none(), st.text(max_size=5), _SURROGATES),
       which=st.sampled_from(["first", "last"]))
def test_text_functions_never_raise_on_arbitrary_input(text: object, stop: str,
                                                       lang: str | None, which: str) -> None:
    cut = truncate_after(text, stop)
    assert isinstance(cut, str)
    block = find_code_block(text, lang, which=which)
    assert block is None or isinstance(block, str)


@FUZZ
@given(text=_TEXT)
def test_string_matches_are_spans_of_the_input(text: str) -> None:
    for m in find_all(text, "a"):
        element = text[m.start:m.end]
        assert element.lower().lstrip("< ").startswith("a")
        assert m.content in element
        if not m.closed:
            assert m.end == len(text)
    opens, closes = count(text, "a")
    assert len(find_all(text, "a", allow_unclosed=False)) <= min(opens, closes)
    cut = truncate_after(text, "</a>")
    assert text.startswith(cut)
    assert cut == text or cut.endswith("</a>")
