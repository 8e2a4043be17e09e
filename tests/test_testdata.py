"""tests/data is complete and unchanged: every file is in SHA256SUMS (with its checksum) and in
PROVENANCE.md, and no test reads facts from outside the repository."""

import hashlib
import re

from tests.testdata import DATA, SUMS

META = {"SHA256SUMS", "PROVENANCE.md"}
TESTS = DATA.parent


def _files():
    return sorted(p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file() and p.name not in META
                  and "__pycache__" not in p.parts)


def _sums():
    out = {}
    for line in SUMS.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        out[name.lstrip("*")] = digest
    return out


def test_every_data_file_has_its_checksum():
    sums = _sums()
    assert sorted(sums) == _files(), "SHA256SUMS lists exactly the files of tests/data"
    for name, digest in sums.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, f"{name} changed: see PROVENANCE.md"


def test_every_data_file_has_its_provenance():
    note = (DATA / "PROVENANCE.md").read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", note, flags=re.M))
    assert listed == set(_files()), "PROVENANCE.md has one row per file of tests/data"
    for row in re.findall(r"^\| `[^`]+` \|.*$", note, flags=re.M):
        assert len([c for c in row.split("|")[1:-1] if c.strip()]) == 5, f"source, snapshot and date for: {row}"


def test_no_test_reads_the_shared_folder_beside_the_checkout():
    """The reference folder beside a working copy is not in a clone: tests read tests/data."""
    pattern = re.compile(r"""(\.\./shared|["']shared["']|/work/shared)""")
    offenders = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*.py")
                 if p.name != "test_testdata.py" and pattern.search(p.read_text())]
    assert not offenders, f"read tests/data (tests/testdata.py) instead of ../shared: {offenders}"
