"""Reads the models and expectations of Python files without running them.

    python -m lh._plan FILE...

Prints one JSON document: {"functions": [...], "errors": [...]}. Each function has its
file, line, kind (model or expectation), decorator arguments and inputs; each error has
a file, a line and a message. Only literals are accepted where lh needs to know a value
before running anything.
"""

import ast
import json
import sys

DECORATORS = {"model", "python", "expectation", "resources"}
ARGS = {
    "model": {"materialize", "name", "namespace", "partitioned_by"},
    "python": {"version", "packages", "secrets"},
    "expectation": {"severity"},
    "resources": {"memory", "cpus", "timeout"},
}
POSITIONAL = {
    "model": ["materialize", "name", "namespace", "partitioned_by"],
    "python": ["version", "packages", "secrets"],
    "expectation": ["severity"],
    "resources": ["memory", "cpus", "timeout"],
}


class PlanError(Exception):
    def __init__(self, node, message):
        super().__init__(message)
        self.line = getattr(node, "lineno", 0)
        self.message = message


def literal(node, what):
    try:
        return ast.literal_eval(node)
    except Exception:
        raise PlanError(node, f"{what} must be a literal (a string, number, list or dict), not `{ast.unparse(node)}`")


def lh_call(node, lh_names, direct):
    """The name of the lh function a call or attribute refers to (`lh.model` or a
    `from lh import model`), or None."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in lh_names:
        return target.attr
    if isinstance(target, ast.Name) and target.id in direct:
        return direct[target.id]
    return None


def call_args(call, kind):
    out = {}
    positional = POSITIONAL[kind]
    if len(call.args) > len(positional):
        raise PlanError(call, f"@lh.{kind} takes at most {len(positional)} positional arguments")
    for name, arg in zip(positional, call.args):
        out[name] = literal(arg, f"@lh.{kind}({name}=...)")
    for kw in call.keywords:
        if kw.arg not in ARGS[kind]:
            allowed = ", ".join(sorted(ARGS[kind]))
            raise PlanError(kw, f"@lh.{kind} has no argument '{kw.arg}' (it takes {allowed})")
        out[kw.arg] = literal(kw.value, f"@lh.{kind}({kw.arg}=...)")
    return out


def inputs_of(fn, lh_names, direct):
    args = fn.args
    if args.vararg or args.kwarg or args.posonlyargs:
        raise PlanError(fn, f"{fn.name}: *args, **kwargs and positional-only parameters are not supported")
    params = args.args + args.kwonlyargs
    defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults) + list(args.kw_defaults)
    out = []
    for p, d in zip(params, defaults):
        if d is None:
            raise PlanError(p, f"{fn.name}: parameter '{p.arg}' needs a default: lh.Model(...) or lh.Parameter(...)")
        kind = lh_call(d, lh_names, direct) if isinstance(d, ast.Call) else None
        if kind == "Model":
            if not d.args and not any(k.arg == "name" for k in d.keywords):
                raise PlanError(d, f"{fn.name}: lh.Model needs a table name")
            spec = {"name": None, "columns": None, "filter": None, "whole": False}
            names = ["name", "columns", "filter", "whole"]
            if len(d.args) > 3:
                raise PlanError(d, "lh.Model takes at most 3 positional arguments")
            for n, a in zip(names, d.args):
                spec[n] = literal(a, f"lh.Model({n}=...)")
            for k in d.keywords:
                if k.arg not in names:
                    raise PlanError(k, f"lh.Model has no argument '{k.arg}' (it takes name, columns, filter, whole)")
                spec[k.arg] = literal(k.value, f"lh.Model({k.arg}=...)")
            if not isinstance(spec["name"], str):
                raise PlanError(d, "lh.Model's name must be a string")
            if spec["columns"] is not None and not (isinstance(spec["columns"], list) and all(isinstance(c, str) for c in spec["columns"])):
                raise PlanError(d, "lh.Model's columns must be a list of strings")
            if spec["filter"] is not None and not isinstance(spec["filter"], str):
                raise PlanError(d, "lh.Model's filter must be a SQL string")
            if not isinstance(spec["whole"], bool):
                raise PlanError(d, "lh.Model's whole must be True or False")
            out.append({"arg": p.arg, "kind": "model", "line": d.lineno, **spec})
        elif kind == "Parameter":
            if len(d.args) != 1 or d.keywords:
                raise PlanError(d, "lh.Parameter takes one argument: the parameter's name")
            name = literal(d.args[0], "lh.Parameter(name)")
            if not isinstance(name, str):
                raise PlanError(d, "lh.Parameter's name must be a string")
            out.append({"arg": p.arg, "kind": "parameter", "name": name, "line": d.lineno})
        else:
            raise PlanError(d, f"{fn.name}: the default of '{p.arg}' must be lh.Model(...) or lh.Parameter(...)")
    return out


def plan_file(path, functions, errors):
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        errors.append({"file": path, "line": e.lineno or 0, "message": f"syntax error: {e.msg}"})
        return
    except (OSError, UnicodeDecodeError) as e:
        errors.append({"file": path, "line": 0, "message": f"cannot read: {e}"})
        return
    lh_names, direct = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "lh":
                    lh_names.add(a.asname or "lh")
        elif isinstance(node, ast.ImportFrom) and node.module == "lh":
            for a in node.names:
                direct[a.asname or a.name] = a.name
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        decos = {}
        try:
            for d in node.decorator_list:
                kind = lh_call(d, lh_names, direct)
                if kind is None:
                    continue
                if kind not in DECORATORS:
                    raise PlanError(d, f"unknown decorator @lh.{kind} (lh has @lh.model, @lh.python, @lh.expectation, @lh.resources)")
                if not isinstance(d, ast.Call):
                    raise PlanError(d, f"@lh.{kind} must be called: @lh.{kind}()")
                if kind in decos:
                    raise PlanError(d, f"@lh.{kind} appears twice on {node.name}")
                decos[kind] = call_args(d, kind)
            if not ("model" in decos or "expectation" in decos):
                continue
            if "model" in decos and "expectation" in decos:
                raise PlanError(node, f"{node.name} cannot be both a model and an expectation")
            if isinstance(node, ast.AsyncFunctionDef):
                raise PlanError(node, f"{node.name}: async functions are not supported")
            functions.append({
                "file": path,
                "line": node.lineno,
                "function": node.name,
                "kind": "model" if "model" in decos else "expectation",
                "decorators": decos,
                "inputs": inputs_of(node, lh_names, direct),
            })
        except PlanError as e:
            errors.append({"file": path, "line": e.line, "message": e.message})


def main(paths):
    functions, errors = [], []
    for p in paths:
        found = []
        try:
            plan_file(p, found, errors)
            # What goes to the server must be writable as JSON too (a literal nested
            # past Python's recursion limit is not).
            json.dumps(found)
        except (RecursionError, MemoryError):
            errors.append({"file": p, "line": 0, "message": "the file nests too deeply to plan"})
            continue
        functions.extend(found)
    json.dump({"functions": functions, "errors": errors}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
