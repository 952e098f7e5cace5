"""Where pyiceberg's integration suite connects, for lh's run of it (tests/pyiceberg/
run.py copies this file to the suite's tests/integration/conftest.py). Fixtures here
override the suite's own of the same name; nothing else of the suite changes.

LH_SUITE_TARGET is `lh` (lh's REST catalog on the ref main) or `reference` (pyiceberg's
own SqlCatalog on SQLite), both on the same S3 bucket, or both on local folders.
"""

import os

import pytest

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog


def _s3() -> dict:
    if not os.environ.get("LH_SUITE_BUCKET"):
        return {}
    return {
        "s3.endpoint": os.environ["LH_SUITE_S3_ENDPOINT"],
        "s3.access-key-id": os.environ["LH_SUITE_S3_KEY"],
        "s3.secret-access-key": os.environ["LH_SUITE_S3_SECRET"],
        "s3.region": os.environ["LH_SUITE_S3_REGION"],
        "s3.force-virtual-addressing": "false",
    }


@pytest.fixture(scope="session")
def session_catalog() -> Catalog:
    return suite_catalog()


@pytest.fixture(scope="session", autouse=True)
def default_namespace() -> None:
    """The namespace upstream's environment makes before its tests (dev/provision.py,
    with Spark): many tests write their tables there."""
    suite_catalog().create_namespace_if_not_exists("default")


def suite_catalog() -> Catalog:
    """The catalog under test: the suite's own REST fixtures (its `session_catalog`, and
    the `catalog` fixtures of test_rest_*.py, all at localhost:8181 with MinIO's key)
    are pointed here by run.py."""
    if os.environ["LH_SUITE_TARGET"] == "lh":
        return load_catalog(
            "local",
            **{
                "type": "rest",
                "uri": os.environ["LH_SUITE_REST_URI"],
                "token": os.environ["LH_SUITE_TOKEN"],
                "warehouse": "main",
                **_s3(),
            },
        )
    work = os.environ["LH_SUITE_WORK"]
    bucket = os.environ.get("LH_SUITE_BUCKET")
    return SqlCatalog(
        "local",
        uri=f"sqlite:///{work}/reference.db",
        warehouse=f"s3://{bucket}/{os.environ['LH_SUITE_PREFIX']}" if bucket else f"file://{work}/reference-warehouse",
        **_s3(),
    )


@pytest.fixture(scope="session")
def session_catalog_hive() -> Catalog:
    pytest.skip("no Hive metastore: the Hive variants run on neither side")


def pytest_collection_modifyitems(config, items):
    """Without --spark, the tests that need Spark run on neither side."""
    if os.environ.get("LH_SUITE_SPARK"):
        return
    skip = pytest.mark.skip(reason="needs Spark (run.py --spark)")
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)
