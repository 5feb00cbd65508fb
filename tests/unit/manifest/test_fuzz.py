"""Fuzzed manifests raise nothing but ManifestError (bounded hypothesis runs)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caramba.manifest import ManifestError, load_string

FRAGMENTS = [
    "variables:", "  n: 4", "  d: [1, 2]", "a: ${n}", "b: '${n * 2}'", "c: ${d.1}", "x: ${", "y: '${nope}'",
    "nodes:", "  - repeat: 3", "    template:", "      - {id: 'l${i}'}", "    index: j", "    offset: ${n}",
    "  - !include missing", "  - {include: a.b, variables: {k: 1}}", "k: &a [1, *a]", "m: {<<: {a: 1}, b: 2}",
    "z: !!binary aGk=", "'q': [", "]", "- 1", "  - {", "t: 2020-02-31", "f: 1e309", "e: $${x}", "w: ${n // 0}",
    "r: {repeat: 99999, template: [1]}", "o: {repeat: '${d}', template: [1]}", "\t", "  ", ":", "? [1]\n: 2",
    "u: ${a.b.c.d}", "v: '${n}${n}'", "s: ${n.0}", "g: !include ../x",
]


def _check(text: str) -> None:
    try:
        load_string(text, "fuzz.yml")
    except ManifestError as exc:
        assert exc.file is not None and exc.line is not None, f"error without a location: {exc}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    _check(text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=14))
def test_fragment_soup(lines):
    _check("\n".join(lines) + "\n")


@pytest.mark.parametrize("depth", [50, 300, 5000])
def test_deep_nesting(depth):
    _check("a: " + "[" * depth + "]" * depth + "\n")


def test_alias_bomb():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    with pytest.raises(ManifestError, match="more than 65536 nodes"):
        load_string("\n".join(lines) + "\n")
