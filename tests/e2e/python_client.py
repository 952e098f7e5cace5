"""lh's Python client (`lh.Client`, runner/python/lh/client.py) against a live server:
every method, and the errors. `python_client.rs` starts the server and runs this with
LH_ENDPOINT, LH_TOKEN (an admin's), LH_TEST_READER_TOKEN (a reader's), LH_TEST_DIR (a
scratch folder) and PYTHONPATH pointing at runner/python. Prints "ok" at the end."""

import os
import sys
import time
from pathlib import Path

import pandas
import polars
import pyarrow as pa
import pyarrow.csv

import lh

work = Path(os.environ["LH_TEST_DIR"])
endpoint = os.environ["LH_ENDPOINT"]
admin = os.environ["LH_TOKEN"]


def raises(cls, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except cls as e:
        assert isinstance(e, lh.LhError), e
        assert e.message, e
        return e
    raise AssertionError(f"{fn.__name__} did not raise {cls.__name__}")


# Settings: from the environment, and from a profile of the config file.
client = lh.Client()
assert client.endpoint == endpoint, client.endpoint
assert client.info()["default_branch"] == "main"
# The config file as the CLI writes it (python_client.rs saves it with lh's own code):
# profile `team`, active branch `2024-01-01` (a name a YAML 1.1 reader takes for a date).
client.create_branch("2024-01-01", from_ref="main")
home = work / "home"
saved = {k: os.environ.pop(k) for k in ("LH_ENDPOINT", "LH_TOKEN")}
os.environ["LH_HOME"] = str(home)
from_profile = lh.Client()
assert from_profile.endpoint == endpoint and from_profile.ref == "2024-01-01", from_profile
assert from_profile.tables() == [], from_profile.tables()
assert from_profile.create_branch("from-profile").head == client.get_ref("main").head
# A profile's token goes to its own endpoint only: elsewhere, none is sent.
elsewhere = lh.Client(endpoint="http://127.0.0.1:9")
assert elsewhere._token is None
raises(lh.Unreachable, elsewhere.tables)
raises(lh.InvalidInput, lh.Client, profile="nope")
os.environ.update(saved)
del os.environ["LH_HOME"]
client.delete_branch("from-profile")
client.delete_branch("2024-01-01")

# Tables: import from pyarrow, pandas, polars and files; list, show, remove.
orders = pa.table({"id": [1, 2, 3], "customer": ["alice", "bob", "carol"], "amount": [10.5, 20.0, None]})
r = client.import_data("raw.orders", orders)
assert r.rows == 3 and r.table == "raw.orders", r
client.import_data("raw.orders", pandas.DataFrame({"id": [4], "customer": ["dave"], "amount": [7.0]}),
                   mode="append")
client.import_data("raw.orders", polars.DataFrame({"id": [5], "customer": ["erin"], "amount": [1.0]}),
                   mode="append")
csv = work / "events.csv"
csv.write_text("ts,kind\n2026-11-01 10:00:00,a\n2026-11-02 11:00:00,b\n")
r = client.import_data("raw.events", csv, partition_by="day(ts)")
assert r.rows == 2, r
assert client.tables() == ["raw.events", "raw.orders"], client.tables()
assert client.tables(namespace="raw") == ["raw.events", "raw.orders"]
t = client.table("raw.orders")
assert t.rows == 5 and [c["name"] for c in t.columns] == ["id", "customer", "amount"], t
assert len(t.snapshots) == 3 and "5 rows" in repr(t) and "<table>" in t._repr_html_(), repr(t)
assert client.table("raw.events").partition_by == "day(ts)"
raises(lh.InvalidInput, client.import_data, "raw.orders", orders, mode="sideways")
raises(lh.InvalidInput, client.import_data, "raw.orders", {"not": "a table"})
raises(lh.InvalidInput, client.import_data, "raw.orders", work / "missing.csv", mode="append")
e = raises(lh.Conflict, client.import_data, "raw.orders", orders)          # exists already
assert e.exit_code == 4 and e.status == 409, e
e = raises(lh.InvalidInput, client.import_data, "raw.orders",                # wrong schema
           pa.table({"other": [1]}), mode="append")
assert e.exit_code == 5
raises(lh.NotFound, client.table, "raw.nothing")
raises(lh.InvalidInput, client.table, "..")

# Queries: Arrow, pandas, polars, batches; limits; errors.
result = client.query("SELECT id, customer FROM raw.orders ORDER BY id")
assert isinstance(result, pa.Table) and result.column("id").to_pylist() == [1, 2, 3, 4, 5], result
assert result.schema.metadata[b"lh.truncated"] == b"false"
assert len(result.schema.metadata[b"lh.commit"]) == 64
assert client.query_to_pandas("SELECT sum(amount) AS s FROM raw.orders")["s"][0] == 38.5
assert client.query_to_polars("SELECT count(*) AS n FROM raw.orders")["n"][0] == 5
batches = list(client.query_batches("SELECT range AS i FROM range(300000)"))
assert all(isinstance(b, pa.RecordBatch) for b in batches) and sum(b.num_rows for b in batches) == 300000
cut = client.query("SELECT range AS i FROM range(100)", max_rows=10)
assert cut.num_rows == 10 and cut.schema.metadata[b"lh.truncated"] == b"true"
e = raises(lh.InvalidInput, client.query, "SELEKT 1")
assert e.exit_code == 5 and e.status == 400
raises(lh.InvalidInput, client.query, "DELETE FROM raw.orders")
raises(lh.NotFound, client.query, "SELECT 1", ref="no-such-branch")
e = raises(lh.LimitExceeded, client.query, "SELECT count(*) FROM range(1000000000) a, range(100000) b",
           timeout=1)
assert isinstance(e, lh.QueryTimeout) and e.exit_code == 7, e

# Refs: branches, tags, checkout, log, diff, merge.
b = client.create_branch("alice.fix", from_ref="main")
assert b.kind == "branch" and b.name == "alice.fix" and len(b.head) == 64 and "alice.fix" in repr(b)
assert {r.name for r in client.branches()} == {"main", "alice.fix"}
client.checkout("alice.fix")
assert client.ref == "alice.fix"
raises(lh.NotFound, client.checkout, "nowhere")
assert client.ref == "alice.fix"
client.import_data("raw.orders", pa.table({"id": [6], "customer": ["fay"], "amount": [3.0]}), mode="append")
assert client.query("SELECT count(*) AS n FROM raw.orders")["n"][0].as_py() == 6        # the default ref
assert client.query("SELECT count(*) AS n FROM raw.orders", ref="main")["n"][0].as_py() == 5
log = client.log()
assert log[0].author and "raw.orders" in log[0].message, log[0]
assert len(client.log("main")) == len(log) - 1
d = client.diff("main", "alice.fix")
assert [(x["table"], x["change"]) for x in d.tables] == [("raw.orders", "changed")], d
assert "changed raw.orders" in repr(d)
tag = client.create_tag("before-merge", from_ref="main")
assert tag.kind == "tag" and client.get_ref("before-merge").head == tag.head
raises(lh.Conflict, client.create_branch, "alice.fix")
raises(lh.InvalidInput, client.create_branch, "bad..name")
m = client.merge("alice.fix", into="main", message="fix orders")
assert m.into == "main", m
assert client.query("SELECT count(*) AS n FROM raw.orders", ref="main")["n"][0].as_py() == 6
assert client.query("SELECT count(*) AS n FROM raw.orders", ref="before-merge")["n"][0].as_py() == 5
# A merge that conflicts changes nothing and names the table.
client.create_branch("bob.edit", from_ref="main")
client.import_data("raw.orders", orders, mode="replace", ref="bob.edit")
client.import_data("raw.orders", orders, mode="replace", ref="main")
head = client.get_ref("main").head
e = raises(lh.Conflict, client.merge, "bob.edit", into="main")
assert [c["table"] for c in e.conflicts] == ["raw.orders"], e.conflicts
assert client.get_ref("main").head == head
client.delete_tag("before-merge")
client.delete_branch("bob.edit")
raises(lh.NotFound, client.get_ref, "bob.edit")
client.checkout("main")
dropped = client.drop_table("raw.events", ref="alice.fix")
assert dropped.table == "raw.events"
assert "raw.events" not in client.tables(ref="alice.fix") and "raw.events" in client.tables()

# Runs: run and wait (with live updates), a failing run, rerun with new code, detach
# and cancel, logs, the list.
def project(name, files):
    d = work / name
    d.mkdir()
    (d / "lh_project.yml").write_text("name: shop\nnamespace: analytics\n")
    for f, text in files.items():
        (d / f).write_text(text)
    return d


good = project("good", {"totals.sql": "select count(*) as n, sum(amount) as total from raw.orders\n"})
# Fails as it runs: a customer's name is no integer.
bad = project("bad", {"totals.sql": "select count(*) as n, sum(amount) as total, "
                                    "max(cast(customer as integer)) as bad from raw.orders\n"})
seen = []
run = client.run(good, on_update=lambda r: seen.append(r.status))
assert run.succeeded and run.merge_commit, run
assert seen and seen[-1] == "succeeded", seen
assert [n["name"] for n in run.nodes] == ["analytics.totals"], run.nodes
assert "succeeded" in repr(run), repr(run)
assert "<table>" in run._repr_html_()
assert client.query("SELECT n FROM analytics.totals")["n"][0].as_py() == 3
# Parameters, as `lh run --param` gives them.
param = project("param", {"big.sql": "select count(*) as n from raw.orders where amount >= $min_amount\n"})
(param / "lh_project.yml").write_text("name: shop\nnamespace: analytics\n"
                                       "parameters:\n  min_amount: {type: int, default: 0}\n")
client.run(param, params={"min_amount": 10})
assert client.query("SELECT n FROM analytics.big")["n"][0].as_py() == 2
raises(lh.InvalidInput, client.run, param, params={"min_amount": "ten"})
e = raises(lh.RunFailed, client.run, bad)
assert e.exit_code == 8 and e.run.status == "failed" and not e.run.succeeded, e
assert any(n["status"] == "failed" for n in e.run.nodes)
# A SQL model writes no log; the node's log is asked by name.
assert e.run.logs() == "" and e.run.logs(node="analytics.totals") == ""
failed_id = e.run.id
fixed = client.rerun(failed_id, code=good, from_failed=True)
assert fixed.succeeded and fixed.rerun_of == failed_id, fixed
assert client.get_run(fixed.id).status == "succeeded"
assert [r.id for r in client.runs(limit=3)][:2] == [fixed.id, failed_id]
plan = client.plan(good)
assert [n["name"] for n in plan.nodes] == ["analytics.totals"] and plan.project == "shop", plan
slow = project("slow", {"big.sql": "select count(*) as n from range(1000000000) a, range(100000) b\n"})
running = client.run(slow, detach=True)
assert running.status == "running", running
time.sleep(1)
running.cancel()
running.wait(timeout=60, raise_on_failure=False)
assert running.status == "cancelled", running
# A running function's prints arrive as they happen (follow_logs), not when it ends.
ticks = project("ticks", {"m.py": "import time\nimport lh\n\n@lh.model()\n"
                                   "def ticks(o=lh.Model('raw.orders', columns=['id'])):\n"
                                   "    for i in range(8):\n"
                                   "        print('tick %d' % i, flush=True)\n"
                                   "        time.sleep(0.5)\n"
                                   "    return o\n"})
(ticks / "lh_project.yml").write_text('name: shop\nnamespace: analytics\npython: "3.11"\n')
live = client.run(ticks, detach=True)
chunks = [(chunk, live.status) for chunk in live.follow_logs(node="analytics.ticks")]
text = "".join(c for c, _ in chunks)
assert [t for t in text.splitlines() if t.startswith("tick")] == ["tick %d" % i for i in range(8)], text
assert next(status for c, status in chunks if "tick 0" in c) == "running", chunks
assert live.succeeded, live
raises(lh.NotFound, client.get_run, "0" * 32)
raises(lh.InvalidInput, client.run, work / "home")      # no lh_project.yml

# What a project upload holds, as `lh run` packs it: no hidden files, links or caches;
# a file with two names is a plain file (the server refuses links).
import tarfile  # noqa: E402
from lh.client import _tar  # noqa: E402

packed = project("packed", {"a.sql": "select 1 as x\n", ".env": "SECRET=1\n"})
(packed / "__pycache__").mkdir()
(packed / "__pycache__" / "m.pyc").write_text("x")
(packed / "sub").mkdir()
(packed / "sub" / "b.sql").write_text("select 2 as y\n")
os.symlink("/etc/passwd", packed / "passwd.sql")
os.link(packed / "a.sql", packed / "c.sql")
with _tar(packed) as f:
    f.seek(0)
    with tarfile.open(fileobj=f) as tar:
        members = tar.getmembers()
assert [m.name for m in members] == ["a.sql", "c.sql", "lh_project.yml", "sub/b.sql"], members
assert all(m.isfile() and m.uid == 0 and m.uname == "" for m in members), members
run = client.run(packed)
assert sorted(n["name"] for n in run.nodes) == ["analytics.a", "analytics.b", "analytics.c"], run.nodes

# Data of every kind: a list of files, a pandas frame with a meaningful index, a polars
# lazy frame, a bool parameter; a format a file name does not tell.
csv2 = work / "more.csv"
csv2.write_text("ts,kind\n2026-11-03 10:00:00,c\n")
assert client.import_data("raw.events", [csv, csv2], mode="append").rows == 3
by_kind = pandas.DataFrame({"kind": ["a", "b"], "n": [1, 2]}).set_index("kind")
client.import_data("raw.by_kind", by_kind)
assert [c["name"] for c in client.table("raw.by_kind").columns] == ["kind", "n"]
client.import_data("raw.lazy", polars.DataFrame({"x": [1, 2]}).lazy())
assert client.query("SELECT sum(x) AS s FROM raw.lazy")["s"][0].as_py() == 3
odd = work / "rows.txt"
odd.write_text("x\n1\n")
raises(lh.InvalidInput, client.import_data, "raw.odd", odd)
assert client.import_data("raw.odd", odd, format="csv").rows == 1
flag = project("flag", {"f.sql": "select $loud as loud\n"})
(flag / "lh_project.yml").write_text("name: shop\nnamespace: analytics\n"
                                      "parameters:\n  loud: {type: bool, default: false}\n")
client.run(flag, params={"loud": True})
assert client.query("SELECT loud FROM analytics.f")["loud"][0].as_py() is True

# Errors that are not lh's: a server that answers otherwise (no lh error body), or
# redirects (the token would go along: not followed).
import http.server  # noqa: E402
import threading  # noqa: E402


class Odd(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/api/v1/refs"):
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:1/steal")
            self.end_headers()
        else:
            body = b'{"error": "invalid_token"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args):
        pass


odd_server = http.server.HTTPServer(("127.0.0.1", 0), Odd)
threading.Thread(target=odd_server.serve_forever, daemon=True).start()
other = lh.Client(endpoint=f"http://127.0.0.1:{odd_server.server_port}", token="lht_x_y")
e = raises(lh.LhError, other.tables, ref="main")
assert type(e) is lh.LhError and e.status == 404 and "invalid_token" in e.message, e
e = raises(lh.LhError, other.branches)
assert e.status == 302 and "redirects" in e.message, e
odd_server.shutdown()

# A reader may read, not write.
reader = lh.Client(token=os.environ["LH_TEST_READER_TOKEN"])
assert reader.query("SELECT count(*) AS n FROM raw.orders")["n"][0].as_py() == 3
e = raises(lh.Unauthorized, reader.create_branch, "rita.branch")
assert e.exit_code == 9
e = raises(lh.Unauthorized, lh.Client(token="lht_bogus_token").tables)
assert e.status == 401
print("ok")
