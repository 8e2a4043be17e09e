"""`verify --replica` / `--fleet` (docs/fleet.md) against stand-ins (tests/verify/standin_server.py): every
check runs against the fleet's address and against each copy, and one failing copy fails the run.
The real router in front of real engines: tests/live/test_fleet.py."""

import json

from click.testing import CliRunner
from standin_server import SERVED_NAME

from entrypoint.cli.verify import command

FEATURES = "tool_calling,reasoning"


def verify(url: str, *args: str):
    result = CliRunner().invoke(command, ["--url", url, "--expect-model", SERVED_NAME, "--features", FEATURES,
                                          "--format", "json", "--timeout", "20", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout


def test_every_check_runs_against_the_fleet_and_each_copy(standin):
    fleet, one, two = standin("ok"), standin("ok"), standin("ok")
    code, out = verify(fleet.url, "--replica", one.url, "--replica", two.url)
    report = json.loads(out)
    assert code == 0 and report["ok"] is True
    assert [(t["name"], t["url"]) for t in report["targets"]] == [
        ("fleet", fleet.url), ("replica 1", one.url), ("replica 2", two.url)]
    assert all({c["status"] for c in t["checks"]} == {"pass"} for t in report["targets"])


def test_one_failing_copy_fails_the_run(standin, closed_port_url):
    code, out = verify(standin("ok").url, "--replica", closed_port_url)
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert [t["ok"] for t in report["targets"]] == [True, False]


def test_a_replica_that_is_no_url_is_a_usage_error(standin):
    result = CliRunner().invoke(command, ["--url", standin("ok").url, "--replica", "not a url"])
    assert result.exit_code == 2 and "--replica" in result.output


def test_fleet_without_a_configured_fleet_says_what_to_set(monkeypatch):
    monkeypatch.setenv("KIMI_HARDWARE", "h200")
    result = CliRunner().invoke(command, ["--fleet"])
    assert result.exit_code == 2 and "KIMI_REPLICA_ADDRS" in result.output
