"""The suite's own layout: every test module sits in a lane folder (unit, integration, slow), opens
with a docstring and has a name no other lane uses; no test, app or helper names a shared Redis
database or RabbitMQ's default vhost (they take the test kit's ``redis_url``/``amqp_url``); and
every ``pg_stat_activity`` read is limited to the test's own database."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LANES = ("unit", "integration", "slow")
SOURCES = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
# A broker on this machine's shared ports: Redis 6379 (a database), RabbitMQ 5672 (a vhost).
SHARED_BROKER = re.compile(
    r"redis://([^\s\"'@/]*@)?(127\.0\.0\.1|localhost):6379/\d"
    r"|amqp://([^\s\"'@/]*@)?(127\.0\.0\.1|localhost):5672/"
)
# Strings that are data, never connected to: a stored label, a masked label, a parser's input.
KNOWN_LABELS = (
    'broker="redis://localhost:6379/9"',
    '"amqp://guest:****@127.0.0.1:5672//"',
    'vhost_of("amqp://guest:guest@127.0.0.1:5672//")',
)


def test_every_test_module_is_in_a_lane_and_opens_with_a_docstring() -> None:
    stray = [p.name for p in TESTS.glob("test_*.py")]
    assert stray == [], f"test modules outside tests/unit, tests/integration, tests/slow: {stray}"
    names: dict[str, str] = {}
    for lane in LANES:
        for path in sorted((TESTS / lane).glob("test_*.py")):
            assert path.name not in names, f"{path.name} is in {names[path.name]} and {lane}"
            names[path.name] = lane
            assert ast.get_docstring(ast.parse(path.read_text())), f"{lane}/{path.name}"
    assert set(names.values()) == set(LANES)


def test_no_test_names_a_shared_broker() -> None:
    found = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SHARED_BROKER.search(line) and not any(label in line for label in KNOWN_LABELS):
                found.append(f"{path.relative_to(TESTS)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_every_pg_stat_activity_read_is_limited_to_the_tests_database() -> None:
    unfiltered = []
    for path in SOURCES:
        text = path.read_text()
        for match in re.finditer(r"from pg_stat_activity", text):
            statement = text[match.start() : match.start() + 200]
            if "datname" not in statement:
                line = text.count("\n", 0, match.start()) + 1
                unfiltered.append(f"{path.relative_to(TESTS)}:{line}")
    assert unfiltered == [], unfiltered
