"""The worker harness: runs lh functions, one invocation after another.

    python -m lh._worker

Requests arrive as JSON lines on stdin; answers go, one JSON line each, to the file
descriptor the harness was given (LH_WORKER_FD, default: the original stdout). User
code's own output (print, logging) goes to stderr, which the runner collects as the
node's log. Inputs arrive as Arrow IPC files in the invocation's folder (memory-mapped:
no copy); a model's result is written as Parquet when the output path ends with
`.parquet` (lh's server reads it with DuckDB, which has no Arrow IPC reader), else as
Arrow IPC.

A request:  {"id", "kind": "model"|"expectation", "file", "function", "root",
             "inputs": {arg: path}, "params": {arg: value}, "output": path}
An answer:  {"id", "ok": true, "rows": n} for a model,
            {"id", "ok": true, "passed": bool, "detail": str} for an expectation,
            {"id", "ok": false, "error": str, "traceback": str} when the function failed.
"""

import importlib.util
import json
import os
import sys
import time
import traceback


def load_function(path, name):
    # A fresh module per invocation: runs never see each other's module state, and a
    # changed file is read again.
    spec = importlib.util.spec_from_file_location(f"lh_user_{abs(hash((path, time.time_ns())))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if fn is None:
        raise LookupError(f"{os.path.basename(path)} has no function {name}")
    return fn


def read_table(path):
    import pyarrow as pa
    # Memory-mapped: the function reads the input without a copy.
    with pa.ipc.open_file(pa.memory_map(path)) as r:
        return r.read_all()


def to_arrow(value):
    """The function's result as a pyarrow Table: a Table, a RecordBatch, a pandas or a
    polars DataFrame."""
    import pyarrow as pa
    if isinstance(value, pa.Table):
        return value
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    module = type(value).__module__.split(".")[0]
    if module == "pandas" and type(value).__name__ == "DataFrame":
        return pa.Table.from_pandas(value, preserve_index=False)
    if module == "polars" and type(value).__name__ == "DataFrame":
        return value.to_arrow()
    raise TypeError(
        f"a model must return a pyarrow.Table, a pandas or a polars DataFrame, not {type(value).__module__}.{type(value).__name__}"
    )


def write_table(table, path):
    """Writes a model's result: Parquet for `.parquet` (what lh imports), else Arrow IPC."""
    tmp = path + ".tmp"
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        pq.write_table(table, tmp, compression="snappy")
    else:
        import pyarrow.ipc as ipc
        with open(tmp, "wb") as f, ipc.new_file(f, table.schema) as w:
            w.write_table(table)
    os.replace(tmp, path)


def invoke(req):
    fn = load_function(req["file"], req["function"])
    kwargs = {}
    for arg, path in req.get("inputs", {}).items():
        kwargs[arg] = read_table(path)
    kwargs.update(req.get("params", {}))
    root = req.get("root")
    if root and root not in sys.path:
        sys.path.insert(0, root)
    result = fn(**kwargs)
    if req["kind"] == "expectation":
        if hasattr(result, "item") and not isinstance(result, (list, dict)):
            result = result.item()  # a numpy or pyarrow scalar
        if isinstance(result, tuple) and len(result) == 2:
            passed, detail = result
        else:
            passed, detail = result, ""
        if not isinstance(passed, bool):
            raise TypeError(f"an expectation must return True or False, not {type(passed).__name__}")
        return {"passed": passed, "detail": str(detail)}
    table = to_arrow(result)
    write_table(table, req["output"])
    return {"rows": table.num_rows}


def main():
    worker_pid = os.getpid()
    fd = int(os.environ.get("LH_WORKER_FD", "0") or 0)
    if fd > 0:
        answers = os.fdopen(fd, "w", buffering=1)
    else:
        answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
        # User prints must not corrupt the answers: stdout becomes stderr.
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    import pyarrow  # noqa: F401  (loaded once, so that invocations do not pay for it)
    answers.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        print(f"--- lh: {req.get('kind')} {req.get('function')} ---", file=sys.stderr, flush=True)
        try:
            out = invoke(req)
            answer = {"id": req["id"], "ok": True, **out}
            if os.getpid() != worker_pid:
                os._exit(0)  # a process the function forked: only the worker answers
        except (Exception, SystemExit) as e:  # the function's failure is the answer
            # The traceback starts at the user's code, not in this harness.
            frames = e.__traceback__
            while frames is not None and frames.tb_frame.f_code.co_filename == __file__:
                frames = frames.tb_next
            tb = "".join(traceback.format_exception(type(e), e, frames))
            if os.getpid() != worker_pid:
                os._exit(1)
            answer = {"id": req["id"], "ok": False, "error": f"{type(e).__name__}: {e}", "traceback": tb}
        sys.stderr.flush()
        answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
