"""Apache Spark against an lh server's Iceberg REST catalog, driven by tests/e2e/rest.rs.

    python rest_spark.py URI BRANCH READ_ONLY_REF

One Spark session (local, one core) with two catalogs configured as the README says:
`lh` on BRANCH (read-write) and `frozen` on READ_ONLY_REF (a tag or `branch@commit`).
On the branch it reads a table lh imported (`shop.people`, ids 1 and 2), appends to it,
creates a table, evolves its schema, and deletes, updates and merges rows (Spark's
copy-on-write rewrites), renames and adds nested fields of a third, then deletes and
updates rows of another table merge-on-read (position delete files), and tries the
maintenance that would delete files (expire_snapshots, DROP TABLE ... PURGE); on the read-only ref it reads, and tries a write that must be
refused. It prints one JSON document of what it saw.

The Iceberg runtime for Spark 3.5 comes from PyPI (the `snowpark-connect-deps-iceberg`
wheel redistributes Apache Iceberg's `iceberg-spark-runtime` jar), as Maven Central is
out of reach here; pyspark brings Spark itself; Java comes from Debian.
"""

import glob
import json
import os
import sys


def runtime_jar():
    import snowpark_connect_deps_iceberg as deps

    jars = glob.glob(os.path.join(os.path.dirname(deps.__file__), "jars",
                                  "iceberg-spark-runtime-3.5_2.12-*.jar"))
    if len(jars) != 1:
        sys.exit(f"expected one iceberg-spark-runtime-3.5_2.12 jar, found {jars}")
    return jars[0]


def session(uri, branch, frozen):
    # Loopback only: Spark's driver would otherwise bind to the machine's outer address.
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master("local[1]").appName("lh-rest-spark")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.jars", runtime_jar())
         .config("spark.sql.extensions",
                 "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "1"))
    for name, warehouse in (("lh", branch), ("frozen", frozen)):
        b = (b.config(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
             .config(f"spark.sql.catalog.{name}.type", "rest")
             .config(f"spark.sql.catalog.{name}.uri", uri)
             .config(f"spark.sql.catalog.{name}.warehouse", warehouse)
             .config(f"spark.sql.catalog.{name}.token", os.environ["LH_TEST_TOKEN"]))
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


def refused(s, out, key, sql):
    """Runs a statement that should fail; records the Java exception's class and message."""
    try:
        s.sql(sql).collect()
        out[key] = "accepted"
    except Exception as e:  # noqa: BLE001 - the refusal is what the test looks at
        java = getattr(e, "java_exception", None)
        out[key] = str(java.getClass().getName()) if java is not None else type(e).__name__
        out[f"{key}_message"] = str(java.getMessage()) if java is not None else str(e)


def rows(s, sql):
    return [r.asDict() for r in s.sql(sql).collect()]


def main(uri, branch, frozen):
    s = session(uri, branch, frozen)
    out = {}
    out["namespaces"] = sorted(r["namespace"] for r in rows(s, "SHOW NAMESPACES IN lh"))
    out["imported"] = rows(s, "SELECT id, name FROM lh.shop.people ORDER BY id")

    # Append to the table lh imported.
    s.sql("INSERT INTO lh.shop.people VALUES (3, 'carol')")

    # A table of Spark's own, evolved and rewritten.
    s.sql("CREATE TABLE lh.shop.scores (id bigint, score double, player string) USING iceberg")
    s.sql("INSERT INTO lh.shop.scores VALUES (1, 1.5, 'a'), (2, 2.5, 'b'), (3, 3.5, 'c')")
    s.sql("ALTER TABLE lh.shop.scores ADD COLUMN bonus int")
    s.sql("ALTER TABLE lh.shop.scores RENAME COLUMN score TO points")
    s.sql("INSERT INTO lh.shop.scores VALUES (4, 4.5, 'd', 10)")
    s.sql("DELETE FROM lh.shop.scores WHERE id = 2")
    s.sql("UPDATE lh.shop.scores SET bonus = 1 WHERE id = 1")
    s.sql("CREATE OR REPLACE TEMPORARY VIEW changes AS "
          "SELECT * FROM VALUES (3, 30.0), (5, 50.0) AS t(id, points)")
    s.sql("MERGE INTO lh.shop.scores t USING changes c ON t.id = c.id "
          "WHEN MATCHED THEN UPDATE SET t.points = c.points "
          "WHEN NOT MATCHED THEN INSERT (id, points, player, bonus) VALUES (c.id, c.points, 'e', 0)")
    out["scores"] = rows(s, "SELECT id, points, player, bonus FROM lh.shop.scores ORDER BY id")
    out["people"] = rows(s, "SELECT id, name FROM lh.shop.people ORDER BY id")
    out["scores_snapshots"] = [
        r["operation"] for r in rows(
            s, "SELECT operation FROM lh.shop.scores.snapshots ORDER BY committed_at")
    ]
    # Expiring snapshots would have Spark delete files older lh commits still read.
    refused(s, out, "expire", "CALL lh.system.expire_snapshots(table => 'shop.scores', "
            "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)")
    first = rows(s, "SELECT snapshot_id FROM lh.shop.scores.snapshots ORDER BY committed_at LIMIT 1")
    out["scores_first_snapshot"] = rows(
        s, f"SELECT id FROM lh.shop.scores VERSION AS OF {first[0]['snapshot_id']} ORDER BY id")

    # Nested fields renamed and added after rows were written (field ids keep them apart).
    s.sql("CREATE TABLE lh.shop.profiles (id bigint, info struct<a: int, b: string>, "
          "tags array<struct<k: string>>, attrs map<string, struct<z: int>>, seen timestamp) "
          "USING iceberg")
    s.sql("INSERT INTO lh.shop.profiles VALUES (1, named_struct('a', 1, 'b', 'x'), "
          "array(named_struct('k', 'p'), named_struct('k', 'q')), map('m', named_struct('z', 7)), "
          "TIMESTAMP'2026-01-02 03:04:05'), (2, NULL, NULL, NULL, NULL)")
    s.sql("ALTER TABLE lh.shop.profiles RENAME COLUMN info.b TO bee")
    s.sql("ALTER TABLE lh.shop.profiles RENAME COLUMN tags.element.k TO tag")
    s.sql("ALTER TABLE lh.shop.profiles RENAME COLUMN attrs.value.z TO zz")
    s.sql("ALTER TABLE lh.shop.profiles ADD COLUMN info.c double")
    s.sql("INSERT INTO lh.shop.profiles VALUES (3, named_struct('a', 2, 'bee', 'y', 'c', 0.5), "
          "array(), map(), NULL)")
    out["profiles"] = [
        r.asDict(recursive=True) for r in
        s.sql("SELECT id, info, tags, attrs FROM lh.shop.profiles ORDER BY id").collect()
    ]

    # A partitioned table (lh reads it; lh's own writes refuse it).
    s.sql("CREATE TABLE lh.shop.visits (id bigint, at timestamp, page string) USING iceberg "
          "PARTITIONED BY (days(at), bucket(4, id))")
    s.sql("INSERT INTO lh.shop.visits SELECT id, "
          "timestamp_seconds(1767225600 + (id % 3) * 86400 + id), concat('p', id % 5) "
          "FROM range(0, 300)")
    out["visits"] = rows(s, "SELECT string(date(at)) AS day, count(*) AS n, sum(id) AS ids "
                            "FROM lh.shop.visits GROUP BY 1 ORDER BY 1")
    out["visits_files"] = rows(s, "SELECT count(*) AS n FROM lh.shop.visits.files")[0]["n"]

    # A purge would have Spark delete every file of the table, which older commits read.
    refused(s, out, "purge", "DROP TABLE lh.shop.visits PURGE")

    # Merge-on-read: DELETE and UPDATE write position delete files, not new data files.
    s.sql("CREATE TABLE lh.shop.events (id bigint, kind string) USING iceberg TBLPROPERTIES ("
          "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')")
    s.sql("INSERT INTO lh.shop.events SELECT id, "
          "CASE WHEN id % 3 = 0 THEN 'click' ELSE 'view' END FROM range(1, 1001)")
    s.sql("DELETE FROM lh.shop.events WHERE id % 10 = 0")
    s.sql("UPDATE lh.shop.events SET kind = 'buy' WHERE id IN (7, 11)")
    out["events_by_kind"] = rows(
        s, "SELECT kind, count(*) AS n, sum(id) AS ids FROM lh.shop.events GROUP BY kind ORDER BY kind")
    out["events_files"] = rows(
        s, "SELECT content, count(*) AS n FROM lh.shop.events.files GROUP BY content ORDER BY content")

    # The read-only ref reads, and refuses writes.
    out["frozen_people"] = rows(s, "SELECT id, name FROM frozen.shop.people ORDER BY id")
    refused(s, out, "frozen_write", "INSERT INTO frozen.shop.people VALUES (9, 'mallory')")
    s.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:4])
