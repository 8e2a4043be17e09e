"""`kimi-serve verify`: prove that a running server answers the way users need."""

from __future__ import annotations

import json
import sys

import click

from entrypoint.cli._context import check_timeout, echo, guarded, not_empty
from entrypoint.cli._fleet import fleet_urls, targets, with_fleet
from entrypoint.core.base import limits
from entrypoint.core.base.errors import INVALID_VALUE, KimiError
from entrypoint.core.compose import select
from entrypoint.core.data.recipe import load_catalog, with_recipe
from entrypoint.verify.run import run_verify


def _recipe():
    """The recipe KIMI_RECIPE names (the default one when unset)."""
    import os

    from entrypoint.core.compose.settings import read_settings

    return with_recipe(load_catalog(), read_settings(os.environ).recipe).recipe


def parse_features(text: str) -> frozenset[str]:
    """A comma list of the recipe's feature ids ("" for none), read like KIMI_FEATURES."""
    recipe = _recipe()
    return frozenset(select.parse_features(text, (), recipe.features, label="--features",
                                           owner=f"The {recipe.title} recipe"))


def _settings(url: str | None, replicas: tuple, fleet: bool, expect_model: str | None, features: str | None):
    """URL, the fleet's copies, expected served name, features and the recipe's chat facts: the
    options, else the configured service and fleet (one launch, app/verify.py)."""
    from entrypoint.verify.checks import ChatFacts

    chat = expected = None
    needed = (url is None and not fleet) or expect_model is None or features is None
    if needed or fleet:
        from entrypoint.app.verify import verify_targets

        found = verify_targets(expected=needed, fleet=fleet)
        url, replicas = with_fleet(url, replicas, found.fleet)
        expected = found.expected
    if expected is not None:
        url = expected.url if url is None else url
        expect_model = expected.served_model_name if expect_model is None else expect_model
        chosen = expected.features if features is None else parse_features(features)
        chat = getattr(expected, "chat", None)
    else:
        chosen = parse_features(features)
    from entrypoint.core.base.bounded import parse_url

    try:
        parse_url(url)
    except ValueError as exc:
        raise KimiError(INVALID_VALUE, f"--url: {exc}. Give the server root, e.g. http://127.0.0.1:8000 "
                        "(IPv6 in brackets: http://[::1]:8000).") from None
    return url, replicas, expect_model, chosen, chat or ChatFacts.of(_recipe())


@click.command("verify", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", callback=not_empty, help="Server root URL.  [default: the configured host and port]")
@click.option("--model", callback=not_empty, help="Model name to send.  [default: the one id /v1/models lists]")
@click.option("--expect-model", callback=not_empty, help="Served model name the server must list.  [default: the configured one]")
@click.option("--features", help="Comma list of enabled feature ids.  [default: the configured ones]")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--timeout",
    type=float,
    callback=check_timeout,
    default=300.0,
    show_default=True,
    help="Seconds each check may take in all (its requests and the model's generation).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, limits.MAX_VERIFY_CONCURRENCY),
    default=1,
    show_default=True,
    help="Also run the tool-call, thinking and streaming checks this many streams at once (load_* checks).",
)
@click.option("--replica", "replicas", multiple=True, callback=fleet_urls,
              help="A fleet's copy (its API root; repeatable): every check also runs against it, and --url is the "
                   "fleet's address (its router). docs/fleet.md")
@click.option("--fleet", is_flag=True, help="Check the configured fleet: its router and each copy (KIMI_REPLICA_ADDRS).")
@guarded
def command(url, model, expect_model, features, output_format, timeout, concurrency, replicas, fleet):
    """Check health, model name, chat, reasoning, tools, images and streaming of a running server;
    with --concurrency N, also N concurrent streams of each that must reassemble exactly; with
    --replica (or --fleet), the same checks through a fleet's router and against each of its copies.

    Exit code 0 when every check passes or is skipped, 1 when any fails, 2 on bad settings.
    """
    url, replicas, expect_model, chosen, chat = _settings(url, replicas, fleet, expect_model, features)
    reports = [(name, target, run_verify(target, model=model, expected_model=expect_model, features=chosen,
                                         timeout=timeout, chat=chat, concurrency=concurrency))
               for name, target in targets(url, replicas)]
    if not replicas:
        report = reports[0][2]
        echo(json.dumps(report.to_json(), indent=2) if output_format == "json" else report.to_text())
        sys.exit(0 if report.ok else 1)
    ok = all(r.ok for _, _, r in reports)
    if output_format == "json":
        echo(json.dumps({"ok": ok, "targets": [{"name": n, "url": u, **r.to_json()} for n, u, r in reports]},
                        indent=2))
    else:
        echo("\n\n".join(f"== {n}: {u}\n{r.to_text()}" for n, u, r in reports))
    sys.exit(0 if ok else 1)
