"""lh: models and expectations of an lh pipeline.

A model is a function from tables to one table; an expectation is a function from
tables to True (passed) or False (failed). lh finds them by reading the project's
files (they are parsed, not imported, to plan a run), so every decorator argument and
every input declaration must be a literal.

    import lh

    @lh.model(materialize="replace")
    @lh.python(packages={"polars": "1.20.0"})
    def clean_orders(
        orders=lh.Model("raw.orders", columns=["id", "status"], filter="status <> 'returned'"),
        run_date=lh.Parameter("run_date"),
    ):
        return orders        # a pyarrow.Table, a pandas or a polars DataFrame

    @lh.expectation()
    def clean_orders_have_ids(data=lh.Model("clean_orders", columns=["id"])):
        return data.column("id").null_count == 0
"""

# The decorators only: `from lh import *` in pipeline code must not load the client,
# which the worker harness does not carry.
__all__ = ["model", "python", "expectation", "resources", "Model", "Parameter"]
__version__ = "0.1.0"

_CLIENT = {"Client", "LhError", "NotFound", "Conflict", "InvalidInput", "Unreachable",
           "LimitExceeded", "QueryTimeout", "RunFailed", "Unauthorized", "Run", "Ref", "Commit",
           "TableInfo", "Diff"}


def __getattr__(name):
    # The client (lh.Client, its errors) loads on first use: pipeline functions, which
    # import lh for its decorators, never pay for it.
    if name in _CLIENT:
        try:
            from . import client
        except ImportError as e:
            raise AttributeError(f"lh.{name} is not here (the client is not installed with "
                                 f"this copy of lh: {e})") from None
        return getattr(client, name)
    raise AttributeError(f"module 'lh' has no attribute {name!r}")


class Model:
    """An input: the table `name` (`namespace.table`, or a table of the project's
    namespace), optionally only some `columns` and the rows matching `filter` (SQL).
    A partitioned model reads it filtered to the run's partition when it is partitioned
    by the same key; `whole=True` reads every row instead."""

    def __init__(self, name, columns=None, filter=None, whole=False):
        self.name = name
        self.columns = columns
        self.filter = filter
        self.whole = whole

    def __repr__(self):
        return f"lh.Model({self.name!r}, columns={self.columns!r}, filter={self.filter!r})"


class Parameter:
    """A run parameter declared in lh_project.yml."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"lh.Parameter({self.name!r})"


def _attach(fn, key, value):
    spec = getattr(fn, "__lh__", None)
    if spec is None:
        spec = {}
        fn.__lh__ = spec
    spec[key] = value
    return fn


def model(materialize="replace", name=None, namespace=None, partitioned_by=None):
    """Marks a function as a model; its output table is `name` (the function's name by
    default) in `namespace` (the project's by default). `materialize` is "replace",
    "append" or "overwrite_partitions" (replace only the partitions the output's rows
    fall in). `partitioned_by` is the table's Iceberg partition spec, a list of fields
    such as ["day(order_date)", "bucket(16, customer_id)", "region"]."""
    def wrap(fn):
        return _attach(fn, "model", {"materialize": materialize, "name": name, "namespace": namespace,
                                     "partitioned_by": partitioned_by})
    return wrap


def python(version=None, packages=None, secrets=None):
    """The Python version and extra packages (name to version) of this function, and the
    secrets it needs (`lh secret set NAME`): each is an environment variable of its call,
    and of no other function's."""
    def wrap(fn):
        return _attach(fn, "python", {"version": version, "packages": packages or {},
                                      "secrets": list(secrets or [])})
    return wrap


def expectation(severity="error"):
    """Marks a function as an expectation: it returns True when the data is right.
    A failed "error" expectation stops the run from publishing; a "warn" one is
    reported (and stops it only with `lh run --strict`)."""
    def wrap(fn):
        return _attach(fn, "expectation", {"severity": severity})
    return wrap


def resources(memory=None, cpus=None, timeout=None):
    """Limits of this function: memory ("2g"), cpus (1.5), timeout ("10m", "90s")."""
    def wrap(fn):
        return _attach(fn, "resources", {"memory": memory, "cpus": cpus, "timeout": timeout})
    return wrap
