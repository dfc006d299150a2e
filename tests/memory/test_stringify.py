"""Our line writer is byte-identical to JavaScript's JSON.stringify (what the official
server writes). Needs node only.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from companyd.memory._codec import encode_entity
from companyd.memory._graph import Entity

pytestmark = [pytest.mark.node]

_STRINGIFY = r"""
const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', (line) => {
  const [name, type, obs] = JSON.parse(line);
  const entity = {type: "entity", name, entityType: type, observations: obs};
  process.stdout.write(JSON.stringify(entity) + "\n");
});
"""


@pytest.fixture(scope="module")
def node_stringify() -> Iterator[subprocess.Popen[bytes]]:
    if shutil.which("node") is None:
        print("skipping JSON.stringify comparison: node is not installed")
        pytest.skip("node is not installed")
    proc = subprocess.Popen(
        ["node", "-e", _STRINGIFY], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    yield proc
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.wait(timeout=10)
    proc.stdout.close()


def test_entity_lines_are_byte_identical_to_json_stringify(
    node_stringify: subprocess.Popen[bytes],
) -> None:
    rng = random.Random(4)
    alphabet = [chr(c) for c in range(0, 0x80)] + list("éü東京🙂\u2028\u2029\ud800\udfff\ufeff\x85")
    assert node_stringify.stdin is not None and node_stringify.stdout is not None
    for _ in range(300):
        name = "".join(rng.choices(alphabet, k=rng.randint(0, 12)))
        obs = [
            "".join(rng.choices(alphabet, k=rng.randint(0, 20))) for _ in range(rng.randint(0, 3))
        ]
        node_stringify.stdin.write(json.dumps([name, "tÿpe", obs]).encode() + b"\n")
        node_stringify.stdin.flush()
        theirs = node_stringify.stdout.readline().rstrip(b"\n")
        assert encode_entity(Entity(name, "tÿpe", obs)) == theirs, (name, obs)


_PRETTY = r"""
const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', (line) => {
  process.stdout.write(JSON.stringify(JSON.stringify(JSON.parse(line), null, 2)) + "\n");
});
"""


def test_tool_result_text_is_json_stringify_pretty() -> None:
    """``pretty`` (the text content of every tool result, on its fast encoder) writes what
    ``JSON.stringify(value, null, 2)`` writes, for the shapes tool results have.
    """
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    from companyd.memory._tools import pretty

    rng = random.Random(7)
    alphabet = [chr(c) for c in range(0, 0x80)] + list("éü東京🙂\u2028\u2029\ud800\udfff\ufeff\x85")

    def text() -> str:
        return "".join(rng.choices(alphabet, k=rng.randint(0, 12)))

    values: list[object] = [[], {}, {"entities": [], "relations": []}, {"success": True}]
    for _ in range(200):
        entities = [
            {"name": text(), "entityType": text(), "observations": [text() for _ in range(2)]}
            for _ in range(rng.randint(0, 3))
        ]
        values.append(entities)
        values.append({"entities": entities, "relations": [{text(): text()}], "ok": False})
    proc = subprocess.run(
        ["node", "-e", _PRETTY],
        input=b"".join(json.dumps(v).encode() + b"\n" for v in values),
        capture_output=True,
        check=True,
        timeout=60,
    )
    theirs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(theirs) == len(values)
    for value, expected in zip(values, theirs, strict=True):
        assert pretty(value) == expected, value
