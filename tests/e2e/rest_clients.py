"""Real Iceberg REST clients against an lh server, driven by tests/e2e/rest.rs.

    python rest_clients.py SCENARIO URI WAREHOUSE [ARGS...]

URI is the server's REST root (http://127.0.0.1:PORT/iceberg), WAREHOUSE an lh ref. Each
scenario does what a user of that client would do and prints one JSON document of what
it saw; the Rust test asserts on it. A client error is not caught unless the scenario is
about that error: it fails the process with its traceback.
"""

import datetime
import decimal
import json
import os
import sys
import threading

import pyarrow as pa


def plain(v):
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def rows_of(table, key="id"):
    return [{k: plain(v) for k, v in r.items()} for r in table.sort_by(key).to_pylist()]


def catalog(uri, warehouse):
    """A RestCatalog on the ref `warehouse`, authenticated with the token in
    LH_TEST_TOKEN (its user is the author of its commits): as `token`, or exchanged at
    the catalog's token endpoint as a client `credential` when LH_TEST_OAUTH is set."""
    from pyiceberg.catalog.rest import RestCatalog

    token = os.environ.get("LH_TEST_TOKEN")
    extra = {}
    if token and os.environ.get("LH_TEST_OAUTH"):
        extra["credential"] = token
    elif token:
        extra["token"] = token
    return RestCatalog("lh", uri=uri, warehouse=warehouse, **extra)


def pyiceberg_basics(uri, warehouse):
    """Namespaces, create, append, overwrite, a filtered scan, schema evolution."""
    from pyiceberg.expressions import GreaterThan
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    cat = catalog(uri, warehouse)
    cat.create_namespace("shop", {"owner": "analytics"})
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "amount", DoubleType(), required=False),
        NestedField(3, "status", StringType(), required=False),
    )
    t = cat.create_table("shop.orders", schema=schema)
    arrow_schema = t.schema().as_arrow()
    t.append(pa.Table.from_pylist(
        [{"id": 1, "amount": 10.0, "status": "placed"}, {"id": 2, "amount": 20.5, "status": "returned"}],
        schema=arrow_schema))
    t.append(pa.Table.from_pylist([{"id": 3, "amount": 5.0, "status": "placed"}], schema=arrow_schema))
    before_overwrite = t.scan().to_arrow().num_rows
    t.overwrite(pa.Table.from_pylist(
        [{"id": 1, "amount": 11.0, "status": "placed"}, {"id": 2, "amount": 20.5, "status": "shipped"},
         {"id": 3, "amount": 5.0, "status": "placed"}, {"id": 4, "amount": 42.0, "status": "placed"}],
        schema=arrow_schema))
    filtered = cat.load_table("shop.orders").scan(row_filter=GreaterThan("amount", 10.0),
                                                   selected_fields=("id", "amount")).to_arrow()
    with t.update_schema() as u:
        u.add_column("note", StringType())
    with t.update_schema() as u:
        u.rename_column("amount", "total")
    t.append(pa.Table.from_pylist([{"id": 5, "total": 1.5, "status": "placed", "note": "late"}],
                                  schema=t.schema().as_arrow()))
    t = cat.load_table("shop.orders")
    print(json.dumps({
        "namespaces": [list(n) for n in cat.list_namespaces()],
        "namespace_properties": cat.load_namespace_properties("shop"),
        "tables": [list(i) for i in cat.list_tables("shop")],
        "before_overwrite": before_overwrite,
        "filtered": rows_of(filtered),
        "columns": [f.name for f in t.schema().fields],
        "field_ids": [f.field_id for f in t.schema().fields],
        "snapshots": len(t.metadata.snapshots),
        "rows": rows_of(t.scan().to_arrow()),
        "metadata_location": t.metadata_location,
    }))


def read(uri, warehouse, name, key="id"):
    """The rows of a table at the warehouse's ref, or that it does not exist."""
    cat = catalog(uri, warehouse)
    if not cat.table_exists(name):
        print(json.dumps({"exists": False}))
        return
    t = cat.load_table(name)
    print(json.dumps({"exists": True, "rows": rows_of(t.scan().to_arrow(), key),
                      "columns": [f.name for f in t.schema().fields]}))


def snapshots(uri, warehouse, name):
    """Reads the table at every one of its snapshots: every file of its history opens."""
    t = catalog(uri, warehouse).load_table(name)
    counts = [t.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows for s in t.snapshots()]
    print(json.dumps({"snapshots": len(counts), "rows": counts}))


def write_error(uri, warehouse, name):
    """An append at a ref that may be read-only: the error the client raised, if any."""
    cat = catalog(uri, warehouse)
    t = cat.load_table(name)
    out = {"error": None}
    try:
        t.append(t.scan(limit=1).to_arrow())
    except Exception as e:  # the scenario is about which error
        out = {"error": type(e).__name__, "message": str(e)}
    try:
        cat.create_namespace("elsewhere")
        out["create_namespace"] = None
    except Exception as e:
        out["create_namespace"] = type(e).__name__
    print(json.dumps(out))


def drop(uri, warehouse, name, purge):
    cat = catalog(uri, warehouse)
    if purge == "purge":
        cat.purge_table(name)
    else:
        cat.drop_table(name)
    print(json.dumps({"exists_after": cat.table_exists(name)}))


def rename(uri, warehouse, source, destination):
    cat = catalog(uri, warehouse)
    cat.rename_table(source, destination)
    print(json.dumps({"source": cat.table_exists(source), "destination": cat.table_exists(destination)}))


def writers(uri, warehouse, name, rebase="false"):
    """Two writers on one table: the second gets the spec's conflict, retries and wins
    (with `rebase` true, the table lets lh make the stale append again: no conflict);
    then several threads append at once, retrying on conflicts: no row is lost."""
    from pyiceberg.exceptions import CommitFailedException

    # pyiceberg retries a failed commit by itself; turn that off to see each conflict.
    with catalog(uri, warehouse).load_table(name).transaction() as tx:
        tx.set_properties({"commit.retry.num-retries": "0", "lh.rebase-appends": rebase})
    first = catalog(uri, warehouse).load_table(name)
    second = catalog(uri, warehouse).load_table(name)
    schema = first.schema().as_arrow()

    def batch(start, n):
        return pa.Table.from_pylist([{"id": start + i, "v": start + i} for i in range(n)], schema=schema)

    first.append(batch(1000, 1))
    conflict = None
    try:
        second.append(batch(2000, 1))
    except CommitFailedException as e:
        conflict = str(e)
        second.refresh()
        second.append(batch(2000, 1))

    threads, per_thread = 4, 5
    retries = [0] * threads
    errors = []

    def work(k):
        try:
            t = catalog(uri, warehouse).load_table(name)
            for j in range(per_thread):
                while True:
                    try:
                        t.append(batch(10_000 * (k + 1) + 2 * j, 2))
                        break
                    except CommitFailedException:
                        retries[k] += 1
                        t.refresh()
        except Exception as e:
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    final = catalog(uri, warehouse).load_table(name).scan().to_arrow()
    ids = sorted(final.column("id").to_pylist())
    print(json.dumps({"conflict": conflict, "errors": errors, "retries": sum(retries),
                      "rows": final.num_rows, "distinct_ids": len(set(ids)), "ids": ids}))


def stale_after_overwrite(uri, warehouse, name):
    """On a table that lets lh rebase appends: an append made on a state that an
    overwrite replaced since (as the insert half of an upsert would be) stays the
    spec's conflict, and the rows are the overwrite's."""
    from pyiceberg.exceptions import CommitFailedException

    with catalog(uri, warehouse).load_table(name).transaction() as tx:
        tx.set_properties({"commit.retry.num-retries": "0", "lh.rebase-appends": "true"})
    first = catalog(uri, warehouse).load_table(name)
    second = catalog(uri, warehouse).load_table(name)
    schema = first.schema().as_arrow()
    first.overwrite(pa.Table.from_pylist([{"id": 7, "v": 7}], schema=schema))
    conflict = None
    try:
        second.append(pa.Table.from_pylist([{"id": 8, "v": 8}], schema=schema))
    except CommitFailedException as e:
        conflict = str(e)
    final = catalog(uri, warehouse).load_table(name).scan().to_arrow()
    print(json.dumps({"conflict": conflict, "ids": sorted(final.column("id").to_pylist())}))


def graft(uri, warehouse, name, other, kind):
    """Writes, under table `name`'s folder, the files of a hostile append that would
    graft table `other`'s files onto it: a manifest list naming `other`'s manifests
    (`kind` manifest) or a manifest of its own naming `other`'s data files (`kind`
    datafile). Commits nothing; prints the snapshot id and the manifest list."""
    import copy
    import uuid

    from pyiceberg.manifest import (
        ManifestEntry,
        ManifestEntryStatus,
        write_manifest,
        write_manifest_list,
    )

    lake = catalog(uri, warehouse)
    ours, theirs = lake.load_table(name), lake.load_table(other)
    sid = 7_000_000 + uuid.uuid4().int % 1_000_000
    manifests = theirs.current_snapshot().manifests(theirs.io)
    meta = ours.location().rstrip("/") + "/metadata"
    if kind == "manifest":
        listed = []
        for m in manifests:
            m = copy.copy(m)
            m._data = list(m._data)
            m._data[6] = sid  # added_snapshot_id
            listed.append(m)
    else:
        out = ours.io.new_output(f"{meta}/{uuid.uuid4()}-m0.avro")
        with write_manifest(
            format_version=2, spec=ours.spec(), schema=ours.schema(), output_file=out,
            snapshot_id=sid, avro_compression="null",
        ) as w:
            for m in manifests:
                for e in m.fetch_manifest_entry(theirs.io, discard_deleted=True):
                    w.add_entry(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=sid,
                        sequence_number=None, file_sequence_number=None,
                        data_file=e.data_file))
        listed = [w.to_manifest_file()]
    list_path = f"{meta}/snap-{sid}-1-{uuid.uuid4()}.avro"
    with write_manifest_list(
        format_version=2, output_file=ours.io.new_output(list_path), snapshot_id=sid,
        parent_snapshot_id=None, sequence_number=99, avro_compression="null",
    ) as lw:
        lw.add_manifests(listed)
    print(json.dumps({"snapshot_id": sid, "manifest_list": list_path}))


def duckdb_connection():
    """DuckDB with the iceberg extension, loaded from its wheel (scripts/duckdb_iceberg.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    from duckdb_iceberg import connect
    return connect()


def attach(con, uri, warehouse):
    """Attaches the ref `warehouse` as `lake`, with the token in LH_TEST_TOKEN."""
    token = os.environ.get("LH_TEST_TOKEN", "")
    if token:
        con.execute(f"CREATE OR REPLACE SECRET lh_token (TYPE iceberg, TOKEN '{token}')")
        con.execute(f"ATTACH '{warehouse}' AS lake (TYPE iceberg, ENDPOINT '{uri}', SECRET lh_token)")
    else:
        con.execute(f"ATTACH '{warehouse}' AS lake (TYPE iceberg, ENDPOINT '{uri}', AUTHORIZATION_TYPE 'none')")


def duckdb_scenario(uri, warehouse, source):
    """ATTACH a branch, read a table lh imported, CREATE TABLE AS, INSERT, DELETE, UPDATE."""
    con = duckdb_connection()
    attach(con, uri, warehouse)
    tables = sorted(f"{r[1]}.{r[2]}" for r in con.sql("SHOW ALL TABLES").fetchall() if r[0] == "lake")
    con.execute("CREATE SCHEMA IF NOT EXISTS lake.shop")
    source_rows = con.sql(f"SELECT * FROM lake.{source} ORDER BY id").fetchall()
    source_columns = [d[0] for d in con.sql(f"SELECT * FROM lake.{source}").description]
    con.execute(f"""CREATE TABLE lake.shop.by_city AS
                    SELECT city, count(*) AS people, sum(age)::BIGINT AS ages FROM lake.{source} GROUP BY city""")
    con.execute("INSERT INTO lake.shop.by_city VALUES ('nowhere', 0, 0)")
    con.execute("""CREATE TABLE lake.shop.numbers AS SELECT range AS id, range * 2 AS twice FROM range(1000)""")
    con.execute("INSERT INTO lake.shop.numbers SELECT range + 1000, 0 FROM range(10)")
    by_city = con.sql("SELECT city, people, ages FROM lake.shop.by_city ORDER BY city").fetchall()
    numbers = con.sql("SELECT count(*), sum(twice) FROM lake.shop.numbers").fetchone()
    # DELETE and UPDATE write position delete files (merge-on-read).
    con.execute("DELETE FROM lake.shop.numbers WHERE id % 10 = 0")
    con.execute("UPDATE lake.shop.numbers SET twice = -1 WHERE id = 1")
    after = con.sql("SELECT count(*), sum(twice) FROM lake.shop.numbers").fetchone()
    print(json.dumps({"tables": tables, "source_columns": source_columns,
                      "source_rows": [[plain(v) for v in r] for r in source_rows],
                      "by_city": [[plain(v) for v in r] for r in by_city], "numbers": list(numbers),
                      "numbers_after_delete": [plain(v) for v in after]}))


def duckdb_read(uri, warehouse, sql):
    con = duckdb_connection()
    attach(con, uri, warehouse)
    print(json.dumps({"rows": [[plain(v) for v in r] for r in con.sql(sql).fetchall()]}))


def duckdb_write_error(uri, warehouse, sql):
    con = duckdb_connection()
    attach(con, uri, warehouse)
    try:
        con.execute(sql)
        print(json.dumps({"error": None}))
    except Exception as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))


def partitions(uri, warehouse, name, column, low, high):
    """A table lh partitioned, read by pyiceberg and DuckDB: its spec; every data file's
    partition recomputed from the file's rows with pyiceberg's own transforms (the rows
    whose value differs from the manifest's are listed); all rows, and the rows whose
    `column` is in [low, high), each client with its own pruning."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
    from pyiceberg.io.pyarrow import PyArrowFileIO

    table = catalog(uri, warehouse).load_table(name)
    spec = table.spec()
    schema = table.schema()
    fields = [(f.name, str(f.transform), schema.find_field(f.source_id).name) for f in spec.fields]
    files = table.inspect.files().to_pylist()
    wrong = []
    io = table.io
    for f in files:
        path = f["file_path"]
        with io.new_input(path).open() as stream:
            rows = pq.read_table(stream)
        for pf in spec.fields:
            source = schema.find_field(pf.source_id)
            fn = pf.transform.transform(source.field_type)
            got = f["partition"][pf.name]
            for v in rows.column(source.name).to_pylist():
                want = fn(to_iceberg(v, source.field_type))
                if want != to_iceberg(got, pf.transform.result_type(source.field_type)):
                    wrong.append([path.rsplit("/", 1)[-1], pf.name, str(v), str(got), str(want)])
    filt = And(GreaterThanOrEqual(column, low), LessThan(column, high))
    scan = table.scan(row_filter=filt)
    planned = len(list(scan.plan_files()))
    some = scan.to_arrow().num_rows
    total = table.scan().to_arrow().num_rows
    con = duckdb_connection()
    attach(con, uri, warehouse)
    ns, t = name.split(".")
    duck_total = con.sql(f"SELECT count(*) FROM lake.{ns}.{t}").fetchone()[0]
    duck_some = con.sql(
        f"SELECT count(*) FROM lake.{ns}.{t} WHERE \"{column}\" >= '{low}' AND \"{column}\" < '{high}'"
    ).fetchone()[0]
    print(json.dumps({"fields": fields, "files": len(files), "wrong": wrong[:20],
                      "rows": total, "filtered": some, "planned_files": planned,
                      "duckdb_rows": duck_total, "duckdb_filtered": duck_some}))


def to_iceberg(v, ty):
    """A Python value (as pyarrow reads it, or a partition value) as pyiceberg's
    transforms take and give it: dates as days, times and timestamps as microseconds."""
    import datetime
    from pyiceberg.types import DateType, TimestampType, TimestamptzType, TimeType
    if v is None:
        return None
    if isinstance(ty, DateType) and isinstance(v, datetime.date):
        return (v - datetime.date(1970, 1, 1)).days
    if isinstance(ty, (TimestampType, TimestamptzType)) and isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        d = v - datetime.datetime(1970, 1, 1)
        return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    if isinstance(ty, TimeType) and isinstance(v, datetime.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    return v


def row_diff_changes(uri, warehouse, name):
    """What a row diff must find: on `warehouse`, rows deleted (copy-on-write: only the
    files holding them are rewritten), rows updated and inserted by an upsert, then a
    column added and one renamed (no file rewritten)."""
    from pyiceberg.expressions import In
    from pyiceberg.types import StringType

    t = catalog(uri, warehouse).load_table(name)
    t.delete(In("id", [7, 8, 9, 1500, 4001]))
    t = catalog(uri, warehouse).load_table(name)
    changed = pa.Table.from_pylist(
        [
            {"id": 20, "part": 0, "amount": -1.5, "label": "l20"},
            {"id": 21, "part": 1, "amount": 21.0, "label": "renamed"},
            {"id": 99001, "part": 3, "amount": 1.0, "label": "new"},
        ],
        schema=t.schema().as_arrow(),
    )
    t.upsert(changed, join_cols=["id"])
    t = catalog(uri, warehouse).load_table(name)
    with t.update_schema() as u:
        u.add_column("note", StringType())
        u.rename_column("amount", "total")
    print(json.dumps({"snapshots": len(catalog(uri, warehouse).load_table(name).snapshots())}))


def staged_create_evolves(uri, warehouse, name):
    """A create-table transaction that changes its schema and spec before it commits
    (two add-schema and set-current-schema -1 pairs, a spec on the second schema's
    column), then appends: pyiceberg's own test_create_table_transaction_*, and the
    table's snapshots, in the order they were made, loaded three times."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    cat = catalog(uri, warehouse)
    ns = name.split(".")[0]
    cat.create_namespace_if_not_exists(ns)
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "name", StringType(), required=False))
    with cat.create_table_transaction(name, schema) as tx:
        with tx.update_schema() as u:
            u.add_column("region", StringType())
        with tx.update_spec() as u:
            u.add_field("region", IdentityTransform(), "region")
    t = cat.load_table(name)
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"], "region": ["eu", "us"]})
    ids = []
    for _ in range(6):
        t.append(data)
        ids.append(t.current_snapshot().snapshot_id)
    orders = [[s.snapshot_id for s in cat.load_table(name).snapshots()] for _ in range(3)]
    print(json.dumps({
        "columns": [f.name for f in t.schema().fields],
        "spec": [f.name for f in t.spec().fields],
        "appended": ids,
        "loaded": orders,
    }))


def names_as_iceberg_allows(uri, warehouse):
    """Namespaces and tables named as Iceberg allows ('-', capitals, spaces, dots inside
    a level), made, written, listed and loaded; and a spec change that lost a race,
    refused in the words pyiceberg's own tests match."""
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType, NestedField, StringType

    cat = catalog(uri, warehouse)
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "name", StringType(), required=False))
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    made = [("my-db", "Sales 2026"), ("TEST NS", "t"), ("new.db", "ta.ble"), ("ns_dot", "ta.ble")]
    for ns, table in made:
        cat.create_namespace_if_not_exists((ns,))
        cat.create_table((ns, table), schema).append(data)
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(16),
                                        name="id_bucket"))
    t = cat.create_table(("my-db", "specs"), schema, partition_spec=spec)
    update = t.update_spec()
    update.add_field(source_column_name="name", transform=BucketTransform(4),
                     partition_field_name="shard")
    with cat.load_table(("my-db", "specs")).update_spec() as other:
        other.remove_field("id_bucket")
    try:
        update.commit()
        conflict = None
    except CommitFailedException as e:
        conflict = str(e)
    print(json.dumps({
        "namespaces": sorted(list(n) for n in cat.list_namespaces()),
        "tables": {ns: sorted(list(i) for i in cat.list_tables((ns,))) for ns, _ in made},
        "rows": {f"{ns}/{table}": len(cat.load_table((ns, table)).scan().to_arrow())
                 for ns, table in made},
        "conflict": conflict,
    }))


SCENARIOS = {
    "names_as_iceberg_allows": names_as_iceberg_allows,
    "staged_create_evolves": staged_create_evolves,
    "row_diff_changes": row_diff_changes,
    "pyiceberg_basics": pyiceberg_basics,
    "read": read,
    "snapshots": snapshots,
    "write_error": write_error,
    "drop": drop,
    "rename": rename,
    "writers": writers,
    "stale_after_overwrite": stale_after_overwrite,
    "graft": graft,
    "duckdb": duckdb_scenario,
    "duckdb_read": duckdb_read,
    "duckdb_write_error": duckdb_write_error,
    "partitions": partitions,
}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
