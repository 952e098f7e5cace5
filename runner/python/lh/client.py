"""The lh client: the server's HTTP API from Python, as the `lh` CLI uses it.

    import lh

    client = lh.Client()                      # LH_ENDPOINT / LH_TOKEN / ~/.lh/config.yaml
    client.create_branch("alice.fix", from_ref="main")
    orders = client.query("SELECT * FROM raw.orders", ref="alice.fix")   # pyarrow.Table
    client.import_data("raw.orders", orders_df, mode="append", ref="alice.fix")
    run = client.run("examples/jaffle_shop", ref="alice.fix")
    client.merge("alice.fix", into="main", message="fix orders")

Settings are read as the CLI reads them: arguments, then `LH_ENDPOINT`, `LH_TOKEN` and
`LH_PROFILE`, then the profile of `$LH_HOME/config.yaml` (`~/.lh/config.yaml`). A
profile's token is sent only to that profile's endpoint. Query results come as the
server sends them, an Arrow IPC stream, read batch by batch (no JSON on the way).

Errors are exceptions mirroring the CLI's exit codes: `NotFound` (3), `Conflict` (4),
`InvalidInput` (5), `Unreachable` (6), `LimitExceeded` and its `QueryTimeout` (7),
`RunFailed` (8), `Unauthorized` (9), all `LhError`s carrying the server's message and
hint.
"""

from __future__ import annotations

import html
import http.client
import io
import json
import os
import socket
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

DEFAULT_PORT = 7878
_SKIP = {"__pycache__", "venv", ".venv", "target", "node_modules", ".git"}
_MAX_PROJECT_BYTES = 64 << 20
_ARROW_STREAM = "application/vnd.apache.arrow.stream"


# --- errors -------------------------------------------------------------------------


class LhError(Exception):
    """An error from lh: `message`, the server's `hint`, its error `kind`, the HTTP
    `status`, and `exit_code`, the code the CLI exits with for it."""

    exit_code = 1

    def __init__(self, message: str, hint: Optional[str] = None, kind: Optional[str] = None,
                 status: Optional[int] = None, conflicts: Optional[list] = None):
        super().__init__(message if not hint else f"{message} (hint: {hint})")
        self.message = message
        self.hint = hint
        self.kind = kind
        self.status = status
        self.conflicts = conflicts or []


class NotFound(LhError):
    """A ref, table, run or commit that does not exist (exit code 3)."""
    exit_code = 3


class Conflict(LhError):
    """A write that lost to another, or a merge with conflicts (exit code 4); the
    tables in conflict are in `conflicts`."""
    exit_code = 4


class InvalidInput(LhError):
    """Bad input: a malformed name, bad SQL, a bad project (exit code 5)."""
    exit_code = 5


class Unreachable(LhError):
    """No lh server answers at the endpoint (exit code 6)."""
    exit_code = 6


class LimitExceeded(LhError):
    """A query ran too long or its result was too large (exit code 7)."""
    exit_code = 7


class QueryTimeout(LimitExceeded):
    """A query stopped at its timeout (exit code 7)."""


class RunFailed(LhError):
    """A pipeline run ended without publishing (exit code 8); the run is in `run`."""
    exit_code = 8

    def __init__(self, run: "Run"):
        super().__init__(f"run {run.id[:12]} {run.status}" + (f": {run.error}" if run.error else ""),
                         kind="run_failed")
        self.run = run


class Unauthorized(LhError):
    """No valid token, or the token's role may not do this (exit code 9)."""
    exit_code = 9


def _error(status: int, body: bytes) -> LhError:
    """The exception for an error answer. Only an lh error body (`{"error": {"kind",
    "message", ...}}`) maps by status, as the CLI maps it: anything else (a proxy's page,
    another server's error) is a plain `LhError`."""
    try:
        e = json.loads(body)["error"]
        if not (isinstance(e, dict) and isinstance(e.get("message"), str) and isinstance(e.get("kind"), str)):
            raise TypeError("not an lh error")
    except (ValueError, KeyError, TypeError, IndexError):
        text = body[:300].decode("utf-8", "replace")
        return LhError(f"the server answered {status}: {text}", status=status)
    message, kind = e["message"], e["kind"]
    hint = e.get("hint") if isinstance(e.get("hint"), str) else None
    conflicts = e.get("conflicts") if isinstance(e.get("conflicts"), list) else []
    cls: type = LhError
    if status == 404:
        cls = NotFound
    elif status == 409:
        cls = Conflict
    elif status in (400, 422):
        cls = InvalidInput
    elif status == 504:
        cls = QueryTimeout
    elif status == 413:
        cls = LimitExceeded
    elif status == 401 or (status == 403 and kind in ("permission_denied", "branch_protected")):
        cls = Unauthorized
    return cls(message.rstrip("."), hint=hint, kind=kind, status=status, conflicts=conflicts)


# --- records ------------------------------------------------------------------------


class Record:
    """A value the server returned: its fields as attributes (and `to_dict()`)."""

    _show: Sequence[str] = ()

    def __init__(self, data: Mapping[str, Any]):
        self._data = dict(data)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_data"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self._data))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and type(self) is type(other) and self._data == other._data

    def __hash__(self) -> int:
        return hash(json.dumps(self._data, sort_keys=True, default=str))

    def to_dict(self) -> Dict[str, Any]:
        return dict(self._data)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={self._data.get(k)!r}" for k in self._show if k in self._data)
        return f"{type(self).__name__}({fields})"


class Ref(Record):
    """A branch or tag: `name`, `kind`, `head` (the commit it names)."""
    _show = ("name", "kind", "head")

    def __repr__(self) -> str:
        return f"Ref({self.kind} {self.name!r} at {self.head[:12]})"


class Commit(Record):
    """A commit: `id`, `parents`, `author`, `message`, `timestamp`, `properties`."""
    _show = ("id", "author", "message", "timestamp")

    def __repr__(self) -> str:
        return f"Commit({self.id[:12]} {self.author}: {self.message!r})"


class Diff(Record):
    """The tables that differ between two refs: `tables`, each with `table`, `change`
    (added, removed, changed), `from` and `to`."""

    def __repr__(self) -> str:
        changes = ", ".join(f"{t['change']} {t['table']}" for t in self.tables) or "no change"
        return f"Diff({self._data['from']} -> {self.to}: {changes})"


class TableInfo(Record):
    """A table at a ref: `name`, `columns`, `rows`, `files`, `size_bytes`, `snapshots`
    (newest first), `partition_by`, `location`, `commit`."""

    def __repr__(self) -> str:
        cols = ", ".join(f"{c['name']} {c['type']}" for c in self.columns)
        part = f", partitioned by {self.partition_by}" if self.partition_by else ""
        return f"TableInfo({self.name}: {self.rows} rows, {self.files} files{part}; {cols})"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(c['name'])}</td><td>{html.escape(c['type'])}</td>"
            f"<td>{'' if c.get('required') is False else 'not null'}</td></tr>" for c in self.columns)
        part = f", partitioned by <code>{html.escape(self.partition_by)}</code>" if self.partition_by else ""
        return (f"<b>{html.escape(self.name)}</b>: {self.rows} rows, {self.files} files, "
                f"{len(self.snapshots)} snapshots{part}"
                f"<table><tr><th>column</th><th>type</th><th></th></tr>{rows}</table>")


class Result(Record):
    """What a write or merge returned (its fields as the HTTP API documents them)."""

    def __repr__(self) -> str:
        return f"Result({self._data!r})"


class Run(Record):
    """A pipeline run: `id`, `status` (running, succeeded, failed, cancelled), `nodes`,
    `target`, `run_branch`, `merge_commit`, `error`... `refresh()` reads it again,
    `wait()` follows it to its end, `logs()`, `follow_logs()` and `cancel()` do what
    `lh runs` does."""

    def __init__(self, data: Mapping[str, Any], client: "Client"):
        super().__init__(data)
        self.__dict__["_client"] = client

    @property
    def done(self) -> bool:
        return self.status != "running"

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def refresh(self) -> "Run":
        self._data = self._client._get(f"/runs/{_segment(self.id)}")
        return self

    def wait(self, timeout: Optional[float] = None,
             on_update: Optional[Callable[["Run"], None]] = None, raise_on_failure: bool = True) -> "Run":
        """Follows the run to its end (at most `timeout` seconds), calling `on_update`
        with the run each time it or a node changes state; a run that ends without
        publishing raises `RunFailed` (unless `raise_on_failure=False`)."""
        started = time.monotonic()
        last = None
        while True:
            state = (self.status, [(n["name"], n["status"]) for n in self.nodes])
            if on_update is not None and state != last:
                on_update(self)
            last = state
            if self.done:
                break
            if timeout is not None and time.monotonic() - started > timeout:
                raise LimitExceeded(f"run {self.id[:12]} is still running after {timeout} s",
                                    hint="wait() again, or cancel() it")
            try:
                time.sleep(0.05 if time.monotonic() - started < 2 else 0.25)
                self.refresh()
            except KeyboardInterrupt:
                print(f"run {self.id} goes on; client.get_run({self.id!r}).cancel() stops it",
                      file=sys.stderr)
                raise
        if raise_on_failure and not self.succeeded:
            raise RunFailed(self)
        return self

    def logs(self, node: Optional[str] = None) -> str:
        """The run's log, or one node's."""
        query = {"node": node} if node else {}
        return self._client._request("GET", f"/runs/{_segment(self.id)}/logs", query=query).decode()

    def follow_logs(self, node: Optional[str] = None, interval: float = 0.25) -> Iterator[str]:
        """Yields the run's log (or one node's) as it is written, each time the text that
        is new, until the run ends: a running Python function's prints arrive as they
        happen, as `lh runs logs RUN --follow` shows them."""
        shown = ""
        while True:
            done = self.refresh().done
            text = self.logs(node)
            new = text[len(shown):] if text.startswith(shown) else text
            if new:
                yield new
            shown = text
            if done:
                return
            time.sleep(interval)

    def cancel(self) -> "Run":
        self._data = self._client._post(f"/runs/{_segment(self.id)}/cancel", {})
        return self

    def __repr__(self) -> str:
        counts: Dict[str, int] = {}
        for n in self.nodes:
            counts[n["status"]] = counts.get(n["status"], 0) + 1
        nodes = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        return f"Run({self.id[:12]} {self.project} on {self.target!r}: {self.status}; {nodes})"

    def _repr_html_(self) -> str:
        rows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
                n["name"], n["kind"], n["status"] + (" (cached)" if n.get("cached") else ""),
                "" if n.get("rows") is None else n["rows"], n.get("error") or n.get("detail") or "")) + "</tr>"
            for n in self.nodes)
        return (f"<b>run {html.escape(self.id[:12])}</b> of {html.escape(self.project)} on "
                f"<code>{html.escape(self.target)}</code>: <b>{html.escape(self.status)}</b>"
                f"<table><tr><th>node</th><th>kind</th><th>state</th><th>rows</th><th></th></tr>"
                f"{rows}</table>")


# --- settings -----------------------------------------------------------------------


def _lh_home() -> Path:
    home = os.environ.get("LH_HOME")
    return Path(home) if home else Path.home() / ".lh"


def _read_config(path: Path) -> Dict[str, Any]:
    """The config file the CLI writes (`lh_api::config_file`, with serde_yaml_ng): a
    mapping with `profile` and `profiles: {name: {endpoint, branch, token}}`, every
    value a string. Read here by its fixed shape rather than by a YAML 1.1 loader, which
    would turn a branch named `2024-01-01` into a date and `yes` into True."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    out: Dict[str, Any] = {"profiles": {}}
    section = profile = None
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        key, value = _yaml_pair(raw.strip())
        if indent == 0:
            section = key
            if value not in (None, "{}"):
                out[key] = value
        elif section == "profiles" and value in (None, "{}"):
            profile = key
            out["profiles"][profile] = {}
        elif section == "profiles" and profile is not None and value is not None:
            out["profiles"][profile][key] = value
    return out


def _yaml_pair(line: str):
    """`key: value` of one line, each unquoted as YAML quotes scalars ('it''s', "a\\n");
    the value is None when the line opens a mapping."""
    key, rest = _yaml_scalar(line)
    rest = rest.lstrip()
    if not rest.startswith(":"):
        return key, None
    value = rest[1:].strip()
    if not value:
        return key, None
    if value == "{}":
        return key, "{}"
    return key, _yaml_scalar(value)[0]


def _yaml_scalar(text: str):
    """The scalar at the start of `text`, and what follows it."""
    if text.startswith("'"):
        i, out = 1, []
        while i < len(text):
            if text[i] == "'":
                if text[i + 1:i + 2] == "'":
                    out.append("'")
                    i += 2
                    continue
                return "".join(out), text[i + 1:]
            out.append(text[i])
            i += 1
        return "".join(out), ""
    if text.startswith('"'):
        i = 1
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == '"':
                return json.loads(text[:i + 1]), text[i + 1:]
            i += 1
        return text[1:], ""
    # A plain scalar: up to `: ` (a key) or the end.
    i = text.find(": ")
    if text.endswith(":") and i < 0:
        i = len(text) - 1
    if i < 0:
        return text.strip(), ""
    return text[:i].strip(), text[i:]


def _segment(s: str) -> str:
    """One path segment, escaped; `.` and `..` (which URLs resolve away) refused."""
    if s in ("", ".", ".."):
        raise InvalidInput(f"'{s}' is not a valid name or id")
    return urllib.parse.quote(s, safe="-_.~")


# --- the client ---------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: urllib would send the token along to wherever they
    point, and turn a POST into a GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class Client:
    """A client of one lh server (see the module's documentation).

    `ref` is the client's default ref (the profile's active branch by default, else the
    server's default branch); `checkout()` changes it for this client only. `timeout`
    bounds each request in seconds (none by default, as the CLI: an import or a merge
    that outlasts it may still land)."""

    def __init__(self, endpoint: Optional[str] = None, token: Optional[str] = None,
                 profile: Optional[str] = None, ref: Optional[str] = None, timeout: Optional[float] = None):
        config = _read_config(_lh_home() / "config.yaml")
        asked = profile or os.environ.get("LH_PROFILE")
        profile = asked or config.get("profile") or "default"
        profiles = config.get("profiles") or {}
        # As the CLI: a profile asked for must exist; the file's own choice need not.
        if asked and profile != "default" and profile not in profiles:
            raise InvalidInput(f"no profile '{profile}' in {_lh_home() / 'config.yaml'}",
                               hint=f"profiles: {', '.join(sorted(profiles)) or 'none'}")
        p = profiles.get(profile) or {}
        default = f"http://127.0.0.1:{DEFAULT_PORT}"
        self.endpoint = (endpoint or os.environ.get("LH_ENDPOINT") or p.get("endpoint") or default).rstrip("/")
        # The profile's token goes only to the profile's server.
        profile_server = (p.get("endpoint") or default).rstrip("/")
        self._token = token or os.environ.get("LH_TOKEN") or (
            p.get("token") if profile_server == self.endpoint else None)
        self.ref: Optional[str] = ref or p.get("branch")
        self.profile = profile
        self.timeout = timeout
        self._user = os.environ.get("LH_USER") or os.environ.get("USER") or "anonymous"

    def __repr__(self) -> str:
        return f"lh.Client({self.endpoint!r}, ref={self.ref!r})"

    # HTTP

    def _open(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
              body: Any = None, content_type: Optional[str] = None,
              timeout: Optional[float] = None, length: Optional[int] = None):
        url = f"{self.endpoint}/api/v1{path}"
        q = {k: v for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(q)
        req = urllib.request.Request(url, data=body, method=method)
        req.add_header("x-lh-user", self._user)
        if self._token:
            req.add_header("Authorization", f"Bearer {self._token}")
        if content_type:
            req.add_header("Content-Type", content_type)
        if length is not None:
            req.add_header("Content-Length", str(length))
        try:
            return _OPENER.open(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            if 300 <= e.code < 400:
                raise LhError(f"the server at {self.endpoint} redirects to {e.headers.get('Location')}",
                              hint="lh follows no redirect (the token would go along): use the "
                                   "endpoint it names", status=e.code) from None
            raise _error(e.code, e.read()) from None
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            raise Unreachable(f"cannot reach the lh server at {self.endpoint}: {reason}",
                              hint="start one with `lh server`, or pass endpoint= (or set LH_ENDPOINT)") from None

    def _request(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
                 body: Any = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        with self._open(method, path, query, data, "application/json" if data is not None else None) as r:
            return _read(r, self.endpoint)

    def _get(self, path: str, query: Optional[Mapping[str, Any]] = None) -> Any:
        return _json(self._request("GET", path, query))

    def _post(self, path: str, body: Any) -> Any:
        return _json(self._request("POST", path, body=body))

    def _at(self, ref: Optional[str]) -> str:
        return ref or self.ref or self.info()["default_branch"]

    def info(self) -> Dict[str, Any]:
        """The server: version, catalog, warehouse, default branch, limits."""
        if "_info" not in self.__dict__:
            self.__dict__["_info"] = self._get("/info")
        return self.__dict__["_info"]

    # refs

    def checkout(self, ref: str) -> "Client":
        """Makes `ref` this client's default ref (it must exist); returns the client."""
        self.tables(ref=ref)
        self.ref = ref
        return self

    def refs(self, kind: Optional[str] = None) -> List[Ref]:
        """Branches and tags (`kind="branch"` or `"tag"` for one kind)."""
        kinds = [kind] if kind else ["branch", "tag"]
        return [Ref(r) for k in kinds for r in self._get("/refs", {"kind": k})]

    def branches(self) -> List[Ref]:
        return self.refs("branch")

    def tags(self) -> List[Ref]:
        return self.refs("tag")

    def get_ref(self, name: str) -> Ref:
        return Ref(self._get(f"/refs/{_segment(name)}"))

    def create_branch(self, name: str, from_ref: Optional[str] = None) -> Ref:
        """A new branch at `from_ref` (the default ref by default): zero-copy."""
        return Ref(self._post("/refs", {"name": name, "kind": "branch", "from": from_ref or self.ref}))

    def create_tag(self, name: str, from_ref: Optional[str] = None) -> Ref:
        return Ref(self._post("/refs", {"name": name, "kind": "tag", "from": from_ref or self.ref}))

    def delete_branch(self, name: str) -> None:
        self._request("DELETE", f"/refs/{_segment(name)}", {"kind": "branch"})

    def delete_tag(self, name: str) -> None:
        self._request("DELETE", f"/refs/{_segment(name)}", {"kind": "tag"})

    def merge(self, from_ref: str, into: Optional[str] = None, message: Optional[str] = None,
              properties: Optional[Mapping[str, str]] = None) -> Result:
        """Merges `from_ref` into the branch `into` (the default ref by default),
        atomically; a conflict raises `Conflict` and changes nothing."""
        body = {"from": from_ref, "into": self._at(into), "message": message,
                "properties": dict(properties or {})}
        return Result(self._post("/merge", body))

    def log(self, ref: Optional[str] = None, limit: int = 50) -> List[Commit]:
        """The history of a ref, newest first."""
        page = self._get("/log", {"ref": self._at(ref), "limit": limit})
        return [Commit(c) for c in page["commits"]]

    def diff(self, from_ref: str, to_ref: Optional[str] = None) -> Diff:
        """The tables that differ between two refs."""
        return Diff(self._get("/diff", {"from": from_ref, "to": self._at(to_ref)}))

    # queries

    def _query_stream(self, sql: str, ref: Optional[str], max_rows: Optional[int],
                      timeout: Optional[float]):
        body: Dict[str, Any] = {"sql": sql, "ref": ref or self.ref}
        if max_rows is not None:
            body["max_rows"] = int(max_rows)
        if timeout is not None:
            body["timeout_ms"] = int(timeout * 1000)
        http_timeout = None if timeout is None else timeout + 30
        return self._open("POST", "/query", body=json.dumps(body).encode(),
                          content_type="application/json", timeout=http_timeout)

    def query_batches(self, sql: str, ref: Optional[str] = None, max_rows: Optional[int] = None,
                      timeout: Optional[float] = None) -> Iterator["pyarrow.RecordBatch"]:
        """The result's record batches, read one at a time from the answer (the server
        makes the whole answer before sending it; this saves the client holding it all).
        Close the generator (or read it to the end) to release its connection."""
        import pyarrow.ipc
        with self._query_stream(sql, ref, max_rows, timeout) as r:
            reader = pyarrow.ipc.open_stream(r)
            for batch in reader:
                yield batch

    def query(self, sql: str, ref: Optional[str] = None, max_rows: Optional[int] = None,
              timeout: Optional[float] = None) -> "pyarrow.Table":
        """Runs one read-only SQL statement on `ref` (the default ref by default), in
        the server's DuckDB, and returns the result as a pyarrow Table. `max_rows` cuts
        the result (see `truncated` in the table's schema metadata); `timeout` in
        seconds lowers the server's limit."""
        import pyarrow
        import pyarrow.ipc
        with self._query_stream(sql, ref, max_rows, timeout) as r:
            if r.headers.get("Content-Length") is None:
                # A large answer the server sends as it produces it: read as it comes.
                try:
                    table = pyarrow.ipc.open_stream(r).read_all()
                except (pyarrow.ArrowInvalid, http.client.HTTPException, OSError) as e:
                    raise LimitExceeded(
                        f"the answer of {self.endpoint} broke off ({e}): the server stopped the query "
                        "part-way, at its result limit or its timeout (its log says which)",
                        hint="add a LIMIT or aggregate") from None
            else:
                data = _body(r, self.endpoint, self.info().get("max_result_bytes"))
                try:
                    table = pyarrow.ipc.open_stream(data).read_all()
                except pyarrow.ArrowInvalid as e:
                    raise LhError(f"the answer of {self.endpoint} is no Arrow stream: {e}") from None
            meta = {b"lh.commit": (r.headers.get("x-lh-commit") or "").encode(),
                    b"lh.truncated": b"true" if r.headers.get("x-lh-truncated") else b"false"}
        return table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})

    def query_to_pandas(self, sql: str, **kwargs: Any) -> "pandas.DataFrame":
        return self.query(sql, **kwargs).to_pandas()

    def query_to_polars(self, sql: str, **kwargs: Any) -> "polars.DataFrame":
        import polars
        return polars.from_arrow(self.query(sql, **kwargs))

    # tables

    def tables(self, ref: Optional[str] = None, namespace: Optional[str] = None) -> List[str]:
        """The names of the tables at a ref (under `namespace` only, when given)."""
        listing = self._get("/tables", {"ref": self._at(ref), "namespace": namespace})
        return [t["name"] for t in listing["tables"]]

    def table(self, name: str, ref: Optional[str] = None) -> TableInfo:
        """A table at a ref: schema, snapshots, partitioning, rows and files."""
        return TableInfo(self._get(f"/tables/{_segment(name)}", {"ref": self._at(ref)}))

    def drop_table(self, name: str, ref: Optional[str] = None) -> Result:
        """Removes a table from a branch (one commit; older commits still read it)."""
        return Result(json.loads(self._request("DELETE", f"/tables/{_segment(name)}", {"ref": self._at(ref)})))

    def _upload(self, name: str, data: Any, size: int) -> str:
        """Streams `data` (bytes or a binary file of `size` bytes) to the server; its id."""
        with self._open("POST", "/uploads", {"name": name}, body=data,
                        content_type="application/octet-stream", length=size) as r:
            return json.loads(r.read())["id"]

    def import_data(self, name: str, data: Any, mode: str = "create", ref: Optional[str] = None,
                    partition_by: Optional[str] = None, format: Optional[str] = None) -> Result:
        """Imports `data` into the table `name` on a branch: a pyarrow Table or record
        batch, a pandas or polars DataFrame, or files (a path or a list of paths: CSV,
        Parquet, newline-delimited JSON). `mode` is create, append, replace or
        overwrite_partitions; `partition_by` the spec of a table created
        (`"day(ts), bucket(16, id)"`)."""
        if mode not in ("create", "append", "replace", "overwrite_partitions"):
            raise InvalidInput(f"mode '{mode}' is not create, append, replace or overwrite_partitions")
        uploads, names = [], []
        if isinstance(data, (str, os.PathLike)) or (
                isinstance(data, (list, tuple)) and data and all(isinstance(d, (str, os.PathLike)) for d in data)):
            paths = [Path(data)] if isinstance(data, (str, os.PathLike)) else [Path(d) for d in data]
            for p in paths:
                if not p.is_file():
                    raise InvalidInput(f"cannot read {p}: no such file")
                if format is None and p.suffix.lower() not in (".csv", ".parquet", ".json", ".jsonl", ".ndjson"):
                    raise InvalidInput(f"cannot tell the format of {p.name} from its name",
                                       hint="pass format='csv', 'parquet' or 'json'")
            for p in paths:
                with open(p, "rb") as f:
                    uploads.append(self._upload(p.name, f, p.stat().st_size))
                names.append(p.name)
        else:
            if format not in (None, "parquet"):
                raise InvalidInput(f"format='{format}' is for files: a table goes as Parquet")
            table = _to_arrow(data)
            import pyarrow.parquet
            buf = io.BytesIO()
            pyarrow.parquet.write_table(table, buf)
            uploads.append(self._upload("data.parquet", buf.getbuffer(), buf.tell()))
            names.append("data.parquet")
            format = "parquet"
        body: Dict[str, Any] = {"ref": self._at(ref), "mode": mode, "uploads": uploads,
                                "file_names": names}
        if format:
            body["format"] = format
        if partition_by:
            body["partition_by"] = partition_by
        return Result(self._post(f"/tables/{_segment(name)}/import", body))

    # runs

    def _pack(self, project_dir: Union[str, os.PathLike]) -> str:
        """Uploads the project folder as `lh run` does (see `_tar`)."""
        with _tar(project_dir) as f:
            size = f.seek(0, io.SEEK_END)
            f.seek(0)
            return self._upload("project.tar", f, size)

    def run(self, project_dir: Union[str, os.PathLike], ref: Optional[str] = None,
            params: Optional[Mapping[str, Any]] = None, detach: bool = False, no_cache: bool = False,
            strict: bool = False, partitions: Optional[str] = None,
            on_update: Optional[Callable[[Run], None]] = None,
            select: Optional[Sequence[str]] = None) -> Run:
        """Runs the pipeline in `project_dir` on the branch `ref`: outputs publish only
        when every node and expectation passes. Waits for its end unless `detach`
        (`on_update` is called as nodes change state); a run that does not publish
        raises `RunFailed`, which holds it. `select` runs only some nodes, as
        `lh run --select` does (`["orders+"]`)."""
        body = {"upload": self._pack(project_dir), "ref": self._at(ref),
                "params": {k: _param(v) for k, v in (params or {}).items()},
                "no_cache": no_cache, "strict": strict}
        if partitions:
            body["partitions"] = partitions
        if select:
            body["select"] = list(select)
        run = Run(self._post("/runs", body), self)
        return run if detach else run.wait(on_update=on_update)

    def plan(self, project_dir: Union[str, os.PathLike], ref: Optional[str] = None,
             params: Optional[Mapping[str, Any]] = None, partitions: Optional[str] = None) -> Result:
        """What `run` would do (`lh run --dry-run`): the nodes, and which are reused."""
        body = {"upload": self._pack(project_dir), "ref": self._at(ref),
                "params": {k: _param(v) for k, v in (params or {}).items()}}
        if partitions:
            body["partitions"] = partitions
        return Result(self._post("/runs/plan", body))

    def runs(self, limit: int = 20) -> List[Run]:
        """The latest runs, newest first."""
        return [Run(r, self) for r in self._get("/runs", {"limit": limit})["runs"]]

    def get_run(self, run_id: str) -> Run:
        return Run(self._get(f"/runs/{_segment(run_id)}"), self)

    def rerun(self, run_id: str, code: Optional[Union[str, os.PathLike]] = None, from_failed: bool = False,
              detach: bool = False, on_update: Optional[Callable[[Run], None]] = None) -> Run:
        """Replays a run with the same environment and input data: with its own code,
        or the project folder `code`; `from_failed` reuses the nodes that succeeded."""
        body: Dict[str, Any] = {"from_failed": from_failed}
        if code is not None:
            body["upload"] = self._pack(code)
        run = Run(self._post(f"/runs/{_segment(run_id)}/rerun", body), self)
        return run if detach else run.wait(on_update=on_update)


def _read(r: Any, endpoint: str) -> bytes:
    try:
        return r.read()
    except (http.client.HTTPException, OSError) as e:
        raise Unreachable(f"the answer of {endpoint} broke off: {e}") from None


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise LhError(f"the server answered no JSON: {data[:200]!r}") from None


def _body(r: Any, endpoint: str, limit: Optional[int]) -> Any:
    """The whole answer, read straight into one Arrow buffer that Arrow then reads
    without a copy (faster than Arrow pulling the stream through a Python file object,
    and than `read()`, which joins the pieces it reads; Arrow's allocator, unlike a
    bytearray, does not zero it first). A length past twice the server's result limit
    is not believed."""
    import pyarrow
    length = r.headers.get("Content-Length")
    if length is None or not length.isdigit() or (limit and int(length) > 2 * int(limit) + (1 << 20)):
        return pyarrow.py_buffer(_read(r, endpoint))
    buf = pyarrow.allocate_buffer(int(length))
    view = memoryview(buf).cast("B")
    got = 0
    try:
        while got < len(buf):
            n = r.readinto(view[got:])
            if not n:
                raise Unreachable(f"the answer of {endpoint} ended after {got} of {len(buf)} bytes")
            got += n
    except (http.client.HTTPException, OSError) as e:
        raise Unreachable(f"the answer of {endpoint} broke off: {e}") from None
    return buf


def _tar(project_dir: Union[str, os.PathLike]) -> Any:
    """The project folder as `lh run` packs it, in a temporary file: code and small
    files, in name order, as plain files (no links, no owner); hidden files, symbolic
    links and the folders of `_SKIP` left out; at most 64 MB."""
    root = Path(project_dir)
    if not (root / "lh_project.yml").is_file():
        raise InvalidInput(f"{root} is not an lh project: it has no lh_project.yml",
                           hint="a project folder holds lh_project.yml, Python files and SQL files")
    f = tempfile.TemporaryFile()
    total = 0
    try:
        with tarfile.open(fileobj=f, mode="w", format=tarfile.GNU_FORMAT) as tar:
            def walk(d: Path) -> None:
                nonlocal total
                for e in sorted(d.iterdir(), key=lambda e: e.name):
                    if e.name.startswith(".") or e.name in _SKIP or e.is_symlink():
                        continue
                    if e.is_dir():
                        walk(e)
                    elif e.is_file():
                        st = e.stat()
                        total += st.st_size
                        if total > _MAX_PROJECT_BYTES:
                            raise InvalidInput(
                                f"the project folder is larger than {_MAX_PROJECT_BYTES >> 20} MB",
                                hint="lh uploads code, not data: keep data in tables")
                        info = tarfile.TarInfo(e.relative_to(root).as_posix())
                        info.size, info.mtime = st.st_size, int(st.st_mtime)
                        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                        with open(e, "rb") as src:
                            tar.addfile(info, src)
            walk(root)
    except BaseException:
        f.close()
        raise
    return f


def _param(v: Any) -> str:
    """A run parameter as `--param` spells it (booleans as true/false)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _to_arrow(data: Any) -> "pyarrow.Table":
    import pyarrow
    if isinstance(data, pyarrow.Table):
        return data
    if isinstance(data, pyarrow.RecordBatch):
        return pyarrow.Table.from_batches([data])
    module = type(data).__module__.split(".")[0]
    kind = type(data).__name__
    if module == "pandas":
        if kind == "Series":
            data = data.to_frame()
        if type(data.index).__name__ != "RangeIndex" or data.index.name is not None:
            # A meaningful index (a groupby's keys) is data: it becomes columns.
            data = data.reset_index()
        return pyarrow.Table.from_pandas(data, preserve_index=False)
    if module == "polars":
        if kind == "LazyFrame":
            data = data.collect()
        elif kind == "Series":
            data = data.to_frame()
        return data.to_arrow()
    if hasattr(data, "__arrow_c_stream__"):
        return pyarrow.table(data)
    raise InvalidInput(f"cannot import a {type(data).__name__}: give a pyarrow Table, a pandas or polars "
                       "DataFrame, or file paths")
