#!/usr/bin/env python3
"""pyiceberg's own integration suite against lh, beside pyiceberg's own SqlCatalog.

The suite is apache/iceberg-python's `tests/integration` as released in pyiceberg
0.12.0's source distribution on PyPI (fetched once, its sha256 checked). Nothing of it
is changed but where it connects (`lh_conftest.py`, written next to its tests):

- `session_catalog`, the catalog nearly every test uses, is lh's REST catalog on the
  ref `main` (with the S3 endpoint and key the tests' own fixture passes for its MinIO),
  or, for the reference run, pyiceberg's SqlCatalog (SQLite) on the same S3 bucket;
- `test_catalog.py`'s REST variant (`rest_test_catalog`) is lh, chosen the way upstream
  means it to be (`PYICEBERG_TEST_CATALOG` and `PYICEBERG_CATALOG__LH__*`); its
  reference is the same test on the SqlCatalog (`sqlite_catalog_file`);
- the Hive catalog and the localhost:8181 REST fixture are left out of both runs, and
  tests that need Spark are left out unless `--spark` gives a local Spark session
  (Spark 3.5 with Iceberg's runtime from PyPI) on lh's REST catalog.

Both runs write JUnit XML; a test that passes on the reference and not on lh fails
this script unless `known.txt` names it with its cause (lh's, to fix), and a test
`known.txt` names that passes now fails it too (the list only shrinks).

Usage: run.py --rest-uri URI --token TOKEN --s3-endpoint URL --s3-key ID
       --s3-secret KEY --s3-region R --bucket NAME --work DIR [--spark] [-k EXPR]
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDIST = "pyiceberg-0.12.0.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/85/08/"
    "bde71e0bbcf1a62c92d7fa457b508691596c65fa7e52c1982c78c461cd1c/" + SDIST
)
# Fewer passes than this on the reference means the suite itself did not run.
MIN_REFERENCE_PASSES = 100
SDIST_SHA256 = "19f165d298054f9436108691098b60fa0fa99d0eff5fb884700c43b29334a39d"


def fetch(cache: Path) -> Path:
    """The source distribution, downloaded once into `cache` and checked."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / SDIST
    if not path.exists():
        tmp = path.with_suffix(".part")
        with urllib.request.urlopen(SDIST_URL, timeout=120) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f)
        tmp.rename(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        path.unlink()
        sys.exit(f"{SDIST}: sha256 {digest}, expected {SDIST_SHA256}")
    return path


def unpack(sdist: Path, work: Path) -> Path:
    """The suite's tests (and its pyproject.toml: pytest's settings), fresh in `work`."""
    root = work / "suite"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    with tarfile.open(sdist) as t:
        top = t.getmembers()[0].name.split("/")[0]
        wanted = [
            m for m in t.getmembers()
            if m.name.startswith((f"{top}/tests/", f"{top}/pyproject.toml"))
        ]
        t.extractall(work / "unpacked", members=wanted, filter="data")
    src = work / "unpacked" / top
    shutil.copytree(src / "tests", root / "tests")
    shutil.copy(src / "pyproject.toml", root / "pyproject.toml")
    shutil.rmtree(work / "unpacked")
    shutil.copy(HERE / "lh_conftest.py", root / "tests" / "integration" / "conftest.py")
    connect(root / "tests" / "integration")
    return root


# The suite's REST fixtures of its own modules: a catalog at localhost:8181 with the
# S3 endpoint and key of upstream's MinIO (test_rest_manifest.py,
# test_rest_scan_planning_integration.py, test_rest_schema.py).
REST_FIXTURE = re.compile(
    r'load_catalog\(\s*"local",\s*\*\*\{\s*"type": "rest",\s*'
    r'"uri": "http://localhost:8181",[^}]*\},?\s*\)'
)
SUITE_CATALOG = '__import__("tests.integration.conftest", fromlist=["x"]).suite_catalog()'
REST_FIXTURE_MODULES = 3


def connect(integration: Path) -> None:
    """Points the suite's own REST fixtures at the catalog under test: the one change to
    its files, and only to where they connect."""
    patched = 0
    for path in sorted(integration.glob("test_*.py")):
        text = path.read_text()
        new, n = REST_FIXTURE.subn(SUITE_CATALOG, text)
        if n:
            path.write_text(new)
            patched += 1
    if patched != REST_FIXTURE_MODULES:
        sys.exit(f"suite: expected {REST_FIXTURE_MODULES} modules with a REST fixture at "
                 f"localhost:8181, found {patched}: the suite changed")


def run(root: Path, target: str, args, xml: Path) -> None:
    env = dict(os.environ)
    env.update({
        "LH_SUITE_TARGET": target,
        "LH_SUITE_REST_URI": args.rest_uri,
        "LH_SUITE_TOKEN": args.token,
        "LH_SUITE_S3_ENDPOINT": args.s3_endpoint or "",
        "LH_SUITE_S3_KEY": args.s3_key or "",
        "LH_SUITE_S3_SECRET": args.s3_secret or "",
        "LH_SUITE_S3_REGION": args.s3_region or "",
        "LH_SUITE_BUCKET": args.bucket or "",
        "LH_SUITE_WORK": str(args.work),
        "LH_SUITE_PREFIX": f"reference-{os.getpid()}-{int(time.time())}",
        "LH_SUITE_SPARK": "1" if args.spark else "",
    })
    if target == "lh":
        # test_catalog.py's REST variant, as upstream points it at a catalog.
        env.update({
            "PYICEBERG_TEST_CATALOG": "lh",
            "PYICEBERG_CATALOG__LH__TYPE": "rest",
            "PYICEBERG_CATALOG__LH__URI": args.rest_uri,
            "PYICEBERG_CATALOG__LH__TOKEN": args.token,
            "PYICEBERG_CATALOG__LH__WAREHOUSE": "main",
        })
        if args.bucket:
            env.update({
                "PYICEBERG_CATALOG__LH__S3__ENDPOINT": args.s3_endpoint,
                "PYICEBERG_CATALOG__LH__S3__ACCESS_KEY_ID": args.s3_key,
                "PYICEBERG_CATALOG__LH__S3__SECRET_ACCESS_KEY": args.s3_secret,
                "PYICEBERG_CATALOG__LH__S3__REGION": args.s3_region,
                "PYICEBERG_CATALOG__LH__S3__FORCE_VIRTUAL_ADDRESSING": "false",
            })
        skip = "not memory_catalog and not sqlite_catalog"
    else:
        env.pop("PYICEBERG_TEST_CATALOG", None)
        skip = "not rest_test_catalog"
    # The Hive catalog and the fixed localhost:8181 REST fixture: in neither run.
    expr = f"not hive and not rest_catalog and {skip}"
    if args.k:
        expr = f"({expr}) and ({args.k})"
    cmd = [
        sys.executable, "-m", "pytest", "tests/integration", "-p", "no:cacheprovider",
        "-q", "-rN", "--tb=line", "-k", expr, f"--junitxml={xml}",
        "-o", "junit_family=xunit2",
    ]
    (args.work / "reference.db").unlink(missing_ok=True)
    print(f"suite: {target}: {' '.join(cmd[2:])}", flush=True)
    log = open(args.work / f"{target}.log", "w")
    subprocess.run(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)


def outcomes(xml: Path) -> dict:
    """Each test's outcome: passed, failed, error or skipped."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kids = {c.tag for c in case}
        if "failure" in kids:
            out[name] = "failed"
        elif "error" in kids:
            out[name] = "error"
        elif "skipped" in kids:
            out[name] = "skipped"
        else:
            out[name] = "passed"
    return out


def known_failures(warehouse: str) -> dict:
    """known.txt: a test's name, then after `#` what in lh makes it fail; a line that
    starts with `[s3]` or `[local]` holds on that warehouse only."""
    known = {}
    for line in (HERE / "known.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for kind in ("s3", "local"):
            if line.startswith(f"[{kind}]"):
                if kind != warehouse:
                    line = ""
                line = line[len(kind) + 2:].strip()
        if not line:
            continue
        name, _, why = line.partition("#")
        known[name.strip()] = why.strip()
    return known


def reference_name(name: str) -> str:
    """The reference run's name for a test of lh's run (test_catalog's REST variant is
    compared with its SqlCatalog variant)."""
    return name.replace("rest_test_catalog", "sqlite_catalog_file")


def main() -> int:
    p = argparse.ArgumentParser()
    for a in ("rest-uri", "token"):
        p.add_argument(f"--{a}", required=True)
    # Without a bucket, lh's warehouse is a folder and the reference's is one too.
    for a in ("s3-endpoint", "s3-key", "s3-secret", "s3-region", "bucket"):
        p.add_argument(f"--{a}")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--cache", type=Path,
                   default=Path(os.environ.get("LH_CACHE_DIR", Path.home() / ".cache/lh")))
    p.add_argument("--spark", action="store_true")
    p.add_argument("-k", default="")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    root = unpack(fetch(args.cache / "pyiceberg-suite"), args.work)
    results = {}
    for target in ("reference", "lh"):
        xml = args.work / f"{target}.xml"
        run(root, target, args, xml)
        if not xml.exists():
            print(f"suite: the {target} run wrote no results; see {args.work}/{target}.log")
            return 1
        results[target] = outcomes(xml)
    ref, lh = results["reference"], results["lh"]
    # A suite that did not run (a missing package, a collection error) is a failure,
    # not an empty comparison.
    if sum(1 for v in ref.values() if v == "passed") < MIN_REFERENCE_PASSES:
        print(f"suite: the reference run passed fewer than {MIN_REFERENCE_PASSES} tests; "
              f"see {args.work}/reference.log")
        return 1
    known = known_failures("s3" if args.bucket else "local")
    compared = {n: reference_name(n) for n in lh if reference_name(n) in ref}
    passed_ref = [n for n, r in compared.items() if ref[r] == "passed"]
    worse = sorted(n for n in passed_ref if lh[n] != "passed")
    unexpected = [n for n in worse if n not in known]
    stale = sorted(n for n in known if lh.get(n) == "passed")
    counts = lambda o: {k: sum(1 for v in o.values() if v == k)
                        for k in ("passed", "failed", "error", "skipped")}
    summary = {
        "reference": counts(ref),
        "lh": counts(lh),
        "passed_on_reference": len(passed_ref),
        "of_those_passed_on_lh": len(passed_ref) - len(worse),
        "passed_on_lh_only": sum(1 for n, r in compared.items()
                                 if lh[n] == "passed" and ref[r] != "passed"),
        "known_failures": len([n for n in worse if n in known]),
        "unexpected_failures": unexpected,
        "known_but_passing": stale,
    }
    (args.work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    if unexpected:
        print(f"suite: {len(unexpected)} tests pass on pyiceberg's SqlCatalog and fail on lh "
              f"(not in known.txt); the lh run's log: {args.work}/lh.log")
    if stale:
        print(f"suite: {len(stale)} tests in known.txt pass now: take them out of it")
    return 1 if unexpected or stale else 0


if __name__ == "__main__":
    sys.exit(main())
