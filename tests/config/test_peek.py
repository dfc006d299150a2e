"""The line reader of company.yaml's top level (``companyd.config.peek_top_level``): where it
answers, it answers what PyYAML reads; where it cannot be sure, it says so (None) and the
caller reads the file with PyYAML (issue 31: the CLI finds the daemon without PyYAML).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from companyd.config import UNUSUAL, peek_nested, peek_or_load, peek_top_level

REPO = Path(__file__).resolve().parents[2]
WANTED = ("state_dir", "state")


def _yaml_view(text: str) -> dict[str, object] | None:
    """What PyYAML says of the same keys, in the peek's terms."""
    try:
        doc = yaml.safe_load(text)
    except Exception:  # YAMLError, or the KeyError/ValueError of a bad tag or date
        return None
    if not isinstance(doc, dict):
        return None
    out: dict[str, object] = {}
    for key, value in doc.items():
        if key in WANTED:
            out[key] = UNUSUAL if isinstance(value, dict | list) else value
        else:
            out[key] = None
    return out


def _every_yaml_in_the_repository() -> list[Path]:
    paths = [REPO / "company.yaml", REPO / "src/companyd/starter.yaml"]
    for folder in ("tests", "docs", "examples"):
        if (REPO / folder).is_dir():
            paths += sorted((REPO / folder).rglob("*.yaml"))
    return paths


@pytest.mark.parametrize("path", _every_yaml_in_the_repository(), ids=lambda p: p.name)
def test_where_the_peek_answers_it_agrees_with_pyyaml(path: Path) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return  # not UTF-8: peek_or_load declines it before the peek
    peeked = peek_top_level(text, WANTED)
    read = _yaml_view(text)
    if peeked is None or read is None:
        # declined: the caller asks PyYAML; or PyYAML refuses a file the peek still reads
        # (a control character deep in a value): the daemon may be running an older,
        # valid version of it, and `status` must still find its state directory
        return
    assert peeked == read


def test_the_example_and_the_starter_are_read_without_pyyaml() -> None:
    # the files founders start from: the fast path must be the usual path
    for path in (REPO / "company.yaml", REPO / "src/companyd/starter.yaml"):
        assert peek_top_level(path.read_text(encoding="utf-8"), WANTED) is not None, path


AGREES = {
    "plain": "schema: companyd/v1\nstate_dir: /var/lib/acme  # where\ncompany:\n  name: A\n",
    "relative": "state_dir: data/state\n",
    "double quoted": 'state_dir: "my state"\n',
    "single quoted": "state_dir: 'it''s here'\n",
    "null": "state_dir: ~\nagents: {}\n",
    "empty": "state_dir:\nagents:\n  a:\n    title: A\n",
    "document start": "---\n# comment\nstate_dir: s\n",
    "nested state": "state:\n  backend: postgres\n  dsn_env: PG\n",
    "block scalar with column-0-looking text": (
        "agents:\n  a:\n    instructions: |\n      state_dir: nope\n      x: 'y\n"
        "state_dir: yes-this\n"
    ),
    "nested key called state_dir": "company:\n  state_dir: nested\n",
    "quoted value with a colon": "company:\n  name: 'A: B'\nstate_dir: s2\n",
    "list of mappings": "routines:\n  - name: r\n    cron: '0 9 * * *'\nstate_dir: s3\n",
    "flow list on one line": "alerts:\n  warn_at: [0.5, 0.8]\nstate_dir: s4\n",
}


@pytest.mark.parametrize("text", AGREES.values(), ids=AGREES.keys())
def test_the_usual_shapes_are_read_as_pyyaml_reads_them(text: str) -> None:
    peeked = peek_top_level(text, WANTED)
    assert peeked is not None
    assert peeked == _yaml_view(text)


DECLINED = {
    # a quoted scalar over two lines hides a column-0 "state_dir:" inside it
    "open double quote": 'company:\n  name: "A\nstate_dir: inside"\nstate_dir: real\n',
    "open single quote": "company:\n  name: 'A\nstate_dir: inside'\n",
    "open flow list": "alerts:\n  warn_at: [0.5,\nstate_dir: x]\n",
    "flow mapping document": "{state_dir: s}\n",
    "tab indentation": "company:\n\tname: A\n",
    "alias": "base: &b s\nstate_dir: *b\n",
    "tag": "state_dir: !!str 123\n",
    "number": "state_dir: 123\n",
    "boolean": "state_dir: yes\n",
    "duplicate key": "state_dir: a\nstate_dir: b\n",
    "second document": "state_dir: a\n---\nstate_dir: b\n",
    "directive": "%YAML 1.1\n---\nstate_dir: a\n",
    "merge key": "<<: {state_dir: a}\n",
    "list document": "- state_dir: a\n",
    "plain scalar over lines": "state_dir: my\n  state\n",
    "escape in double quotes": 'state_dir: "a\\tb"\n',
    "colon at the end": "state_dir: a:\n",
    "sequence indicator": "state_dir: - a\n",
    "empty file": "",
    "comments only": "# nothing\n",
    "unicode line separator": "state_dir: a\u2028b\n",
}


@pytest.mark.parametrize("text", DECLINED.values(), ids=DECLINED.keys())
def test_anything_unusual_is_left_to_pyyaml(text: str) -> None:
    assert peek_top_level(text, WANTED) is None


def test_peek_or_load_falls_back_to_pyyaml_for_the_unusual() -> None:
    # read by PyYAML (the anchor), reduced to the wanted keys
    assert peek_or_load(b"base: &b s\nstate_dir: *b\n", WANTED) == {
        "base": None,
        "state_dir": "s",
    }
    assert peek_or_load(b"state_dir: 123\n", WANTED) == {"state_dir": 123}
    assert peek_or_load(b"- a\n- b\n", WANTED) == {}  # YAML, not a mapping
    assert peek_or_load(b"a: [\n", WANTED) is None  # YAML refuses it
    assert peek_or_load(b"\xff\xfe", WANTED) is None  # not UTF-8
    assert peek_or_load("\ufeffstate_dir: s\n".encode(), WANTED) == {"state_dir": "s"}


def _yaml_zone(text: str) -> object:
    """What PyYAML says ``company.timezone`` is (None: absent or null; a mapping or list as
    :data:`UNUSUAL`); :data:`UNUSUAL` when PyYAML refuses the file.
    """
    try:
        doc = yaml.safe_load(text)
    except Exception:
        return UNUSUAL
    company = doc.get("company") if isinstance(doc, dict) else None
    if not isinstance(company, dict):
        return None
    value = company.get("timezone")
    return UNUSUAL if isinstance(value, dict | list) else value


@pytest.mark.parametrize("path", _every_yaml_in_the_repository(), ids=lambda p: p.name)
def test_where_the_zone_peek_answers_it_agrees_with_pyyaml(path: Path) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return
    peeked = peek_nested(text, "company", "timezone")
    try:
        yaml.safe_load(text)
    except Exception:
        return  # PyYAML refuses it (as test_where_the_peek_answers_it_agrees_with_pyyaml)
    if peeked != UNUSUAL:
        assert peeked == _yaml_zone(text), path


ZONES = {
    "the example": ((REPO / "company.yaml").read_text(encoding="utf-8"), "UTC"),
    "first company": ("company:\n  name: A\n  timezone: Europe/Berlin  # here\n", "Europe/Berlin"),
    "quoted": ("company:\n  timezone: 'Asia/Kolkata'\nagents: {}\n", "Asia/Kolkata"),
    "after a block": (
        "company:\n  context: |\n    timezone: no\n  budget:\n    timezone: no\n"
        "  timezone: America/New_York\n",
        "America/New_York",
    ),
    "absent": ("company:\n  name: A\nroutines:\n  r:\n    timezone: X/Y\n", None),
    "no company": ("agents: {}\n", None),
    "another section's": ("alerts:\n  timezone: X/Y\ncompany:\n  name: A\n", None),
}


@pytest.mark.parametrize(("text", "zone"), ZONES.values(), ids=ZONES.keys())
def test_the_company_zone_is_read_as_pyyaml_reads_it(text: str, zone: str | None) -> None:
    assert peek_nested(text, "company", "timezone") == zone == _yaml_zone(text)


@pytest.mark.parametrize(
    "text",
    [
        "company:\n  timezone: a\n  timezone: b\n",  # a duplicate
        "company:\n  timezone: Europe/\n    Berlin\n",  # a plain scalar over lines
        "company:\n  timezone:\n    x: y\n",  # a mapping
        "company:\n  timezone: [a]\n",  # a flow list
        "company:\n  - timezone: a\n",  # a list
        "company: {timezone: a}\n",  # a flow mapping
        "company:\n  timezone: 5\n",  # a number
        "company:\n  name: 'A\ncompany: x'\n",  # not the plain shape at all
    ],
)
def test_an_unusual_company_zone_is_left_to_pyyaml(text: str) -> None:
    assert peek_nested(text, "company", "timezone") == UNUSUAL
