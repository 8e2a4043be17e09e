"""vLLM's `vllm serve` grammar, read from the data vLLM itself gave (recipes/vllm/<version>.json,
written by `build.py vllm-spec`), and the argv operations built on it: parse, dedupe by
destination, secrets, effective values.

vLLM's parser is argparse behind `FlexibleArgumentParser`: in a long option's name `_` and `-`
are the same (up to the first `.`), `--opt=value` is one token, `--opt.key value` sets one key of
a JSON option (several accumulate), a unique prefix of a long option is that option
(argparse's allow_abbrev), `-tp` and friends are aliases of one destination, `append` options
accumulate and `nargs` options take a whole list. Reads only the grammar files of the data
directory (`core/data/datadir.py`: KIMI_RECIPES_DIR, else the checkout's or the package's), cached per
directory.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError
from entrypoint.core.data.datadir import default_recipes_dir
from entrypoint.core.data.recipe import load_section, read_data_file, RecipeDataError
from entrypoint.core.data.versions import version_key

Tagged = List[Tuple[str, str]]  # (token, source)
_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_NAME = re.compile(r"(?<=--)[^.]*")
_ACCUMULATE = ("append", "append_const", "count")
NO_VALUE_KINDS = ("store_true", "store_false", "store_const", "append_const", "count", "boolean_optional",
                  "help", "version")


@dataclass(frozen=True)
class Option:
    dest: str
    strings: tuple  # every option string (`--tensor-parallel-size`, `-tp`)
    kind: str  # store | append | store_true | boolean_optional | ... (argparse's action)
    nargs: object  # None (one value) | "?" | "*" | "+" | an int
    choices: Optional[tuple] = None
    choice_key: Optional[str] = None  # how vLLM normalises a value before its choices check
    secret: bool = False
    negative: tuple = ()  # the strings of a boolean pair that set it False (`--no-x`, `--disable-x`)

    @property
    def takes_value(self) -> bool:
        return self.kind not in NO_VALUE_KINDS and self.nargs != 0

    @property
    def accumulates(self) -> bool:
        return self.kind in _ACCUMULATE

    @property
    def name(self) -> str:
        """The option's longest positive string (`--enable-expert-parallel`, never its `--no-` form)."""
        return max((s for s in self.strings if s not in self.negative) or self.strings, key=len)

    def normalised(self, value: str) -> str:
        if self.choice_key == "lower_underscore":
            return value.lower().replace("-", "_")
        if self.choice_key == "lower":
            return value.lower()
        return value


@dataclass(frozen=True)
class Spec:
    """One vLLM version's `serve` grammar and environment variable names."""

    version: str
    package: str
    options: Dict[str, Option]  # option string -> Option
    env: FrozenSet[str]
    allow_abbrev: bool = True
    provenance: str = ""

    def lookup(self, name: str) -> Tuple[Optional[Option], List[str]]:
        """(the option `name` spells, or None; the candidates when an abbreviation is ambiguous)."""
        if name.startswith("--"):
            name = _NAME.sub(lambda m: m.group(0).replace("_", "-"), name, count=1)
        if name in self.options:
            return self.options[name], []
        if self.allow_abbrev and name.startswith("--") and len(name) > 2:
            hits = {o.dest: o for s, o in self.options.items() if s.startswith(name)}
            if len(hits) == 1:
                return next(iter(hits.values())), []
            return None, sorted(s for s in self.options if s.startswith(name))
        return None, []

    def suggest(self, name: str) -> str:
        longs = [s for s in self.options if s.startswith("--")]
        close = difflib.get_close_matches(name.split("=", 1)[0].replace("_", "-"), longs, n=1, cutoff=0.6)
        return f" Did you mean {close[0]}?" if close else ""


def specs_dir() -> Path:
    return default_recipes_dir() / "vllm"


def available_versions() -> Tuple[str, ...]:
    """The vLLM releases whose grammar the data directory holds (KIMI_RECIPES_DIR moves it)."""
    return _versions_in(str(specs_dir()))


@lru_cache(maxsize=8)
def _versions_in(directory: str) -> Tuple[str, ...]:
    return tuple(sorted((p.stem for p in Path(directory).glob("*.json")), key=version_key))


def load_spec(version: str) -> Spec:
    return _load_spec(str(specs_dir()), version)


@lru_cache(maxsize=32)
def _load_spec(directory: str, version: str) -> Spec:
    path = Path(directory) / f"{version}.json"
    raw = read_data_file(path)  # the one bounded reader: a FIFO or a device is refused, not waited on
    try:
        return _spec_of(raw)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise RecipeDataError(f"recipe data {path}: not a vLLM grammar ({type(exc).__name__}: {exc})") from None


def _option(o: dict) -> Option:
    """One grammar entry as an Option: its fields set directly, as the frozen dataclass's __init__
    would set them, without that __init__'s call per field (every start reads three grammars of
    ~300 options each: the launched release's, and all of them for masking)."""
    opt = object.__new__(Option)
    opt.__dict__.update(dest=o["dest"], strings=tuple(o["options"]), kind=o["kind"], nargs=o["nargs"],
                        choices=tuple(o["choices"]) if o.get("choices") is not None else None,
                        choice_key=o.get("choice_key"), secret=bool(o.get("secret")),
                        negative=tuple(o.get("negative", ())))
    return opt


def _spec_of(raw: dict) -> Spec:
    options: Dict[str, Option] = {}
    for o in raw["options"]:
        opt = _option(o)
        for s in opt.strings:
            options[s] = opt
    prov = raw.get("provenance", {})
    return Spec(version=raw["vllm_version"], package=raw.get("package", "vllm"), options=options,
                env=frozenset(raw["env"]), allow_abbrev=raw.get("allow_abbrev", True),
                provenance=f"{prov.get('package', '')} {prov.get('version', '')} ({prov.get('date', '')})")


def spec_for(version: str) -> Spec:
    """The grammar of `version`: its own file, else the nearest recorded one (`grammar_version`)."""
    return load_spec(grammar_version(version))


def grammar_version(version: str) -> str:
    """The recorded release whose grammar judges `version`: its own, else the newest recorded one
    not newer than it (the oldest one for a version below all of them)."""
    known = available_versions()
    if version in known:
        return version
    older = [v for v in known if version_key(v) <= version_key(version)]
    return older[-1] if older else known[0]


def unrecorded_note(version: str) -> Optional[str]:
    """One line for a release with no grammar of its own in recipes/vllm (never judged silently by
    another's), or None for a recorded one."""
    judge = grammar_version(version)
    if judge == version:
        return None
    known = available_versions()
    why = ("the newest recorded release before it" if version_key(judge) < version_key(version)
           else "the oldest recorded release: nothing older is recorded")
    newer = " (newer than every recorded release: options it added are unknown here)" \
        if version_key(version) > version_key(known[-1]) else ""
    return (f"vLLM {version} is not a recorded release (recorded: {', '.join(known)}): its launch is judged by "
            f"vLLM {judge}'s grammar, {why}{newer}. Record its own with `python build.py vllm-spec --python "
            f"<venv with vllm=={version}>/bin/python`, or set KIMI_VLLM_VERSION to a recorded release.")


def newest_version() -> str:
    return available_versions()[-1]


# ---------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Unit:
    """One option with its values (or one positional), as written."""

    tokens: Tagged
    option: Optional[Option]  # None for a positional
    values: tuple = ()
    dotted: bool = False  # `--opt.key value`: one key of a JSON option

    @property
    def source(self) -> str:
        return self.tokens[0][1]


def looks_like_flag(token: str) -> bool:
    """argparse takes such a token for an option, never for a value."""
    return token.startswith("-") and token != "-" and not _NUMBER.match(token)


def _error(what: str, source: str) -> KimiError:
    where = {"user": " (in KIMI_EXTRA_ARGS or the container arguments)", "settings": " (from a KIMI_* setting)"}
    return KimiError(E.INVALID_VALUE, what + where.get(source, f" (from the recipe: {source})"))


def parse(tokens: Tagged, spec: Spec, strict: bool = True) -> List[Unit]:
    """Split vLLM serve arguments into units the way vLLM's parser does. `strict`: an unknown
    option, a bad choice or a missing value is a KimiError (exit 2) naming the vLLM version;
    otherwise such tokens become lone units (for masking and display of anything)."""
    out: List[Unit] = []
    i = 0
    while i < len(tokens):
        tok, source = tokens[i]
        if not looks_like_flag(tok):
            out.append(Unit(tokens=tokens[i:i + 1], option=None, values=(tok,)))
            i += 1
            continue
        if tok.startswith("-O") and tok != "-O":
            tok = "--optimization-level=" + (tok[3:] if tok[2:3] == "=" else tok[2:])  # vLLM's -O3 / -O=3
        elif tok == "-O":
            tok = "--optimization-level"
        name, eq, inline = tok.partition("=")
        dotted = name.startswith("--") and "." in name
        base = name.split(".", 1)[0] if dotted else name
        opt, ambiguous = spec.lookup(base)
        if opt is None:
            if strict:
                why = (f"is ambiguous in vLLM {spec.version}: it could be {', '.join(ambiguous[:5])}" if ambiguous
                       else f"is not an option of `vllm serve` in vLLM {spec.version}.{spec.suggest(base)}")
                raise _error(f"{base} {why}", source)
            out.append(Unit(tokens=tokens[i:i + 1], option=None, values=()))
            i += 1
            continue
        if dotted or (eq and opt.takes_value):
            if dotted and not eq:
                if i + 1 >= len(tokens) and strict:
                    raise _error(f"{name} needs a value in vLLM {spec.version}", source)
                unit = tokens[i:i + 2]
            else:
                unit = tokens[i:i + 1]
            values = (inline,) if eq else tuple(t for t, _ in unit[1:])
            out.append(Unit(tokens=unit, option=opt, values=values, dotted=dotted))
            i += len(unit)
            continue
        if eq and strict:
            raise _error(f"{name} takes no value in vLLM {spec.version}, but got {tok!r}", source)
        j = i + 1
        if opt.takes_value:
            if opt.nargs in (None, "?") or isinstance(opt.nargs, int):
                want = opt.nargs if isinstance(opt.nargs, int) else 1
                while j < len(tokens) and j - i - 1 < want and not looks_like_flag(tokens[j][0]):
                    j += 1
            else:  # "*" / "+": everything up to the next option
                while j < len(tokens) and not looks_like_flag(tokens[j][0]):
                    j += 1
            got = j - i - 1
            needed = 0 if opt.nargs in ("?", "*") else (opt.nargs if isinstance(opt.nargs, int) else 1)
            if got < needed and strict:
                nxt = tokens[j][0] if j < len(tokens) else None
                tail = (f"; {nxt!r} looks like an option, not a value" if nxt is not None else "")
                raise _error(f"{name} needs a value in vLLM {spec.version}{tail}", source)
        unit = tokens[i:j]
        out.append(Unit(tokens=unit, option=opt, values=tuple(t for t, _ in unit[1:])))
        i = j
    if strict:
        for u in out:
            _check_choices(u, spec)
    return out


def _check_choices(unit: Unit, spec: Spec) -> None:
    opt = unit.option
    if opt is None or not opt.choices or unit.dotted:
        return
    for value in unit.values:
        if opt.normalised(value) not in opt.choices:
            close = difflib.get_close_matches(opt.normalised(value), list(opt.choices), n=1)
            hint = f" Did you mean {close[0]}?" if close else ""
            raise _error(f"{opt.name} {value!r} is not accepted by vLLM {spec.version}; it takes one of: "
                         f"{', '.join(opt.choices)}.{hint}", unit.source)


def check(tokens: Tagged, spec: Spec) -> List[Unit]:
    """`tokens` as vLLM's parser reads them, or the KimiError (exit 2) it would stop with: an
    unknown option, a bad choice, a missing value, a stray positional."""
    units = parse(tokens, spec)
    for unit in units:  # the model is vLLM's one positional and it is not among these args
        if unit.option is None:
            raise _error(f"{unit.tokens[0][0]!r} is neither an option of `vllm serve` nor the value of one in vLLM "
                         f"{spec.version} (vLLM would stop: unrecognized arguments)", unit.source)
    return units


def dedupe(tokens: Tagged, spec: Spec) -> Tagged:
    """The last unit of each destination wins, in its position: `-tp 4` replaces
    `--tensor-parallel-size 8`, `--no-enable-prefix-caching` replaces `--enable-prefix-caching`, a
    list option's new list replaces the old one whole. Repeatable options (`append`) and
    `--opt.key` settings accumulate; positionals are kept."""
    units = check(tokens, spec)
    last: Dict[str, int] = {}
    for idx, unit in enumerate(units):
        if unit.option is not None and not unit.option.accumulates and not unit.dotted:
            last[unit.option.dest] = idx
    return [pair for idx, unit in enumerate(units)
            if unit.option is None or unit.option.accumulates or unit.dotted or last[unit.option.dest] == idx
            for pair in unit.tokens]


def values(argv: Sequence[str], spec: Spec) -> Dict[str, object]:
    """The effective value of every destination the argv sets: a string (last wins), True for a
    flag, False for its `--no-` form, a list for accumulating/list options."""
    out: Dict[str, object] = {}
    dotted: Dict[str, dict] = {}
    for unit in parse([(t, "") for t in argv], spec, strict=False):
        opt = unit.option
        if opt is None:
            continue
        if unit.dotted:  # `--opt.key value`: vLLM gathers the keys and appends `--opt '<json>'` last
            keys = unit.tokens[0][0].split("=", 1)[0].split(".")[1:]
            _set_key(dotted.setdefault(opt.dest, {}), keys, unit.values[0] if unit.values else "")
            continue
        if opt.kind == "boolean_optional":
            out[opt.dest] = _canonical(unit.tokens[0][0], spec) not in opt.negative
        elif opt.kind == "store_false":
            out[opt.dest] = False
        elif not opt.takes_value:
            out[opt.dest] = True
        elif opt.accumulates:
            out.setdefault(opt.dest, [])
            out[opt.dest] = list(out[opt.dest]) + list(unit.values)  # type: ignore[call-overload]
        elif opt.nargs in ("*", "+") or isinstance(opt.nargs, int):
            out[opt.dest] = list(unit.values)
        else:
            out[opt.dest] = unit.values[0] if unit.values else ""
    for dest, config in dotted.items():  # the gathered keys replace the option's whole value
        out[dest] = json.dumps(config, separators=(",", ":"))
    return out


def _set_key(config: dict, keys: List[str], raw: str) -> None:
    """One `--opt.a.b value` key into the dict vLLM builds from them (a value JSON reads is that value)."""
    try:
        value: object = json.loads(raw)
    except ValueError:
        value = raw
    for key in keys[:-1]:
        inner = config.get(key)
        config = config.setdefault(key, {}) if isinstance(inner, dict) or inner is None else config
    if keys:
        config[keys[-1]] = value


def _canonical(token: str, spec: Spec) -> str:
    """The option string a token spells (`--no_enable_x` -> `--no-enable-x`, abbreviations expanded)."""
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        name = _NAME.sub(lambda m: m.group(0).replace("_", "-"), name, count=1)
    if name in spec.options:
        return name
    hits = [s for s in spec.options if s.startswith(name)]
    return hits[0] if len(hits) == 1 else name


def int_value(found: Dict[str, object], dest: str, default: int) -> int:
    value = found.get(dest)
    try:
        return int(value) if value not in (None, "") else default  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default


# ---------------------------------------------------------------- secrets


def secret_spec() -> Spec:
    """Every option of every checked-in version, so that masking knows a secret whatever the
    version (a secret is masked even where a version no longer knows the option)."""
    return _union_spec(str(specs_dir()))


@lru_cache(maxsize=8)
def _union_spec(directory: str) -> Spec:
    options: Dict[str, Option] = {}
    env: set = set()
    for version in _versions_in(directory):
        try:
            spec = _load_spec(directory, version)
        except RecipeDataError:  # masking never fails: the broken grammar is reported by its reader
            continue
        options.update(spec.options)
        env |= spec.env
    return Spec(version="any", package="vllm", options=options, env=frozenset(env))


def is_secret_option(token: str, spec: Optional[Spec] = None) -> bool:
    """Whether an option token (`--api-key`, `--api_key=x`, `--api-k`, `--hf_tok`) names a
    credential in any checked-in vLLM: exactly, or as an abbreviation that could be one (an
    abbreviation ambiguous across versions may be unique in the one that runs)."""
    spec = spec or secret_spec()
    if not looks_like_flag(token):
        return False
    name = token.split("=", 1)[0].split(".", 1)[0]
    opt, candidates = spec.lookup(name)
    if opt is not None:
        return opt.secret
    return any(spec.options[c].secret for c in candidates)


def secret_positions(argv: Sequence[str], spec: Optional[Spec] = None) -> List[int]:
    """Indices of argv tokens that carry a secret value (the value tokens, or `--opt=value`)."""
    spec = spec or secret_spec()
    hidden: List[int] = []
    i = 0
    units = parse([(t, "") for t in argv], spec, strict=False)
    for k, unit in enumerate(units):
        n = len(unit.tokens)
        first = unit.tokens[0][0]
        secret = unit.option.secret if unit.option is not None else \
            (not unit.values and is_secret_option(first))  # an abbreviation ambiguous across versions
        if secret:
            if "=" in first:
                hidden.append(i)
            hidden += list(range(i + 1, i + n))
            if unit.option is None and "=" not in first and k + 1 < len(units) and units[k + 1].option is None \
                    and units[k + 1].values:
                hidden.append(i + n)  # its value became a lone positional
        i += n
    return hidden


# ---------------------------------------------------------------- a vLLM process's effective arguments


# The destinations the plan reads out of a process's arguments to draw its deployment (GPUs per
# pod, ports, probes, grace period, served name, ...): every `EngineArgs` fact below declares what
# it reads with `_reads`, and the typed setting that sets it. The user's vLLM arguments may not set
# them (placement.check_user_args): a deployment's shape comes from typed settings only, which
# every rendering (the Helm chart's values included) has.
SHAPE_DESTS: Dict[str, str] = {}  # destination -> the setting(s) that own it, in words
_PARALLEL = ("KIMI_STRATEGY (`kimi-serve list` names the layouts: TP, TEP, DEP, TP x PP over KIMI_NODES), "
             "KIMI_PREFILL_PARALLELISM / KIMI_DECODE_PARALLELISM for a PD cluster's pools")


def _reads(*dests: str, setting: str):
    """A fact the renderings read: its destinations join SHAPE_DESTS, owned by `setting`."""
    def wrap(fn):
        for dest in dests:
            SHAPE_DESTS[dest] = setting
        return property(fn)
    return wrap


def refused_dests() -> Dict[str, Tuple[Optional[str], Optional[str]]]:
    """Every destination the user's vLLM arguments may not set -> (the setting that owns it, or
    None; why, or None): what the renderings read (SHAPE_DESTS) and what recipes/vllm/wiring.yaml
    records as changing the world size, the processes, the ports or the wiring."""
    return _refused(str(default_recipes_dir()))


@lru_cache(maxsize=8)
def _refused(directory: str) -> Dict[str, Tuple[Optional[str], Optional[str]]]:
    found: Dict[str, Tuple[Optional[str], Optional[str]]] = {d: (s, None) for d, s in SHAPE_DESTS.items()}
    for dest, entry in load_section("wiring", directory).refused.items():
        found.setdefault(dest, (entry.setting, entry.why))
    return found


def refusal(dest: str, name: str, where: str = "from the vLLM arguments") -> str:
    """The end of a refusal of `name` (an option of `dest`): the setting to use instead, or why none is
    drawn, and the way out."""
    setting, why = refused_dests().get(dest, (None, None))
    reason = f" ({why})" if why and setting else f": {why}" if why else ""
    if setting:
        return f"{reason}: set {setting} instead, and remove {name} (in any spelling) {where}."
    return f"{reason}. Remove {name} (in any spelling) {where}."


@dataclass(frozen=True)
class EngineArgs:
    """What vLLM itself reads from one process's `serve` arguments, parsed once by its grammar
    (the user's own arguments included, in any spelling vLLM accepts: `-tp 4`,
    `--tensor-parallel-size=4`, `--tensor_parallel_size 4`, an unambiguous abbreviation)."""

    version: str  # the vLLM release whose grammar read them
    found: Dict[str, object]  # destination -> effective value (`values`)

    def get(self, dest: str, default: object = None) -> object:
        return self.found.get(dest, default)

    def number(self, dest: str, default: int) -> int:
        return int_value(self.found, dest, default)

    def text(self, dest: str) -> Optional[str]:
        value = self.found.get(dest)
        if value is None or value is False:
            return None
        if value is True:
            return ""
        return " ".join(map(str, value)) if isinstance(value, list) else str(value)

    def shape_given(self) -> List[str]:
        """The refused destinations these arguments give (`refused_dests`: what the renderings read,
        and what changes the world size, processes, ports or wiring): any value, the negative form of
        a flag (`--no-enable-expert-parallel` turns a strategy's EP off) and dotted keys included."""
        return [dest for dest in refused_dests() if dest in self.found]

    @_reads("tensor_parallel_size", setting=_PARALLEL)
    def tensor_parallel(self) -> int:
        return self.number("tensor_parallel_size", 1)

    @_reads("pipeline_parallel_size", setting=_PARALLEL)
    def pipeline_parallel(self) -> int:
        return self.number("pipeline_parallel_size", 1)

    @_reads("data_parallel_size", setting=_PARALLEL)
    def data_parallel(self) -> int:
        return self.number("data_parallel_size", 1)

    @_reads("data_parallel_size_local", setting=_PARALLEL)
    def data_parallel_local(self) -> int:
        """Data-parallel ranks on this node (vLLM: --data-parallel-size-local, else all of them)."""
        return self.number("data_parallel_size_local", 0) or self.data_parallel

    @_reads("enable_expert_parallel", setting=_PARALLEL)
    def expert_parallel(self) -> bool:
        return bool(self.found.get("enable_expert_parallel"))

    @_reads("nnodes", setting="KIMI_NODES")
    def nnodes(self) -> int:
        return max(1, self.number("nnodes", 1))

    @_reads("headless", setting="KIMI_STRATEGY (which node serves the API is the strategy's)")
    def headless(self) -> bool:
        return bool(self.found.get("headless"))

    @_reads("port", setting="KIMI_PORT")
    def port(self) -> int:
        return self.number("port", 8000)

    @_reads("host", setting="KIMI_HOST")
    def host(self) -> Optional[str]:
        return self.text("host")

    @_reads("data_parallel_rpc_port", setting="KIMI_PREFILL_DP_RPC_PORT / KIMI_DECODE_DP_RPC_PORT")
    def data_parallel_rpc_port(self) -> Optional[int]:
        value = self.text("data_parallel_rpc_port")
        return int(value) if value and value.isascii() and value.isdigit() else None

    @_reads("load_format", setting="KIMI_LOAD_FORMAT (docs/cold-start.md)")
    def load_format(self) -> Optional[str]:
        return self.text("load_format")

    @_reads("kv_transfer_config", setting="KIMI_KV_OFFLOAD (docs/kv-cache.md), or KIMI_STRATEGY=pd_cluster")
    def kv_transfer_config(self) -> Optional[str]:
        return self.text("kv_transfer_config")

    @_reads("served_model_name", setting="KIMI_SERVED_MODEL_NAME")
    def served_name(self) -> Optional[str]:
        """The first --served-model-name (the name the server answers to), or None."""
        names = self.found.get("served_model_name")
        if isinstance(names, list):
            return str(names[0]) if names else None
        return str(names) if isinstance(names, str) and names else None

    @_reads("model", setting="KIMI_MODEL")
    def model(self) -> Optional[str]:
        """--model among the arguments (vLLM would keep the positional model and ignore it)."""
        return self.text("model")

    @_reads("revision", setting="KIMI_MODEL_REVISION (the download step fetches that revision)")
    def revision(self) -> Optional[str]:
        return self.text("revision")

    @_reads("shutdown_timeout", setting="KIMI_DRAIN_TIMEOUT (inside KIMI_STOP_GRACE: docs/day2.md)")
    def drain_s(self) -> int:
        return self.number("shutdown_timeout", 0)

    @property
    def trust_remote_code(self) -> bool:
        return bool(self.found.get("trust_remote_code"))

    @property
    def world_size(self) -> int:
        """GPUs the vLLM deployment spans: TP x PP x DP."""
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def gpus_needed(self) -> int:
        """GPUs this process needs visible on its node: TP x PP x local DP, split over --nnodes."""
        return max(1, self.tensor_parallel * self.pipeline_parallel * self.data_parallel_local // self.nnodes)


def engine_args(args: Sequence[str], spec: Spec) -> EngineArgs:
    """`args` (a vLLM process's arguments after `vllm serve <model>`) read by `spec`'s grammar."""
    return EngineArgs(version=spec.version, found=values(list(args), spec))


def flag_value(argv: Sequence[str], flag: str) -> Optional[str]:
    """The value vLLM's grammar (the newest checked-in release) gives the destination of `flag` in
    `argv`, whatever the spelling used (`-tp`, `--x_y`, `--x=v`): "" for a flag without a value, the
    values joined by spaces for a list option, None when absent."""
    spec = load_spec(newest_version())
    option = spec.lookup(flag)[0]
    if option is None:
        return None
    found = values(list(argv), spec).get(option.dest)
    if found is None or found is False:
        return None
    if found is True:
        return ""
    return " ".join(found) if isinstance(found, list) else str(found)
