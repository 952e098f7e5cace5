//! A model's memo key (`fingerprint`: code, lh's version, environment, parameters,
//! inputs) and how a miss is explained.

#[allow(unused_imports)]
use super::*;

/// A node's fingerprint, the key of its memoized output: everything the node can read.
/// A Python function can import or open any file of its project, so its code is the
/// content hash of the whole code snapshot (every file shipped), not the files it seems
/// to import; a SQL model reads nothing but its text and its tables (DuckDB's sandbox
/// has no file access), so its text is its code. Then lh's own version (the harness that
/// calls functions and the writer of outputs), the environment's lock, the parameters,
/// and the snapshots of its inputs with their columns and filter; for an appending
/// model, also the snapshot it appends to.
///
/// Also returns the key's parts by name (a short hash each), which the memo table keeps
/// so that a later miss can say what changed.
pub(super) fn fingerprint(
    shared: &Shared,
    node: &PlanNode,
    inputs: &[Input],
    params: &BTreeMap<String, serde_json::Value>,
    env_key: Option<&str>,
    current: Option<&lh_catalog::TablePointer>,
    secrets: &BTreeMap<String, i64>,
) -> Result<(String, BTreeMap<String, String>)> {
    let inputs: Vec<serde_json::Value> = node
        .inputs
        .iter()
        .zip(inputs)
        .map(|(i, read)| match &read.part {
            // Read filtered to a partition: the files that may hold its rows.
            Some(part) => serde_json::json!({
                "table": i.table, "files": part.files, "partition": part.sql,
                "columns": i.columns, "filter": i.filter, "arg": i.arg,
            }),
            None => whole_input(i, &read.pointer),
        })
        .collect();
    let (lang, code, detail) = code_of_node(node, &shared.code_hash);
    let materialize = materialization(node);
    let previous = appended_to(node, current);
    let parts = key_parts(
        node,
        &shared.code_hash,
        &inputs,
        params,
        env_key,
        previous.as_deref(),
        secrets,
    );
    let mut doc = serde_json::json!({
        "v": 2, "lh": env!("CARGO_PKG_VERSION"), "node": node.display_name(), "lang": lang, "detail": detail, "code": code, "env": env_key,
        "params": params, "inputs": inputs, "materialize": materialize, "previous": previous,
    });
    if !secrets.is_empty() {
        doc["secrets"] = serde_json::json!(secrets);
    }
    if let Some(spec) = &node.partitioned_by {
        doc["partitioned_by"] = serde_json::json!(spec);
    }
    Ok((
        blake3::hash(doc.to_string().as_bytes())
            .to_hex()
            .to_string(),
        parts,
    ))
}

/// A node's language, code (a Python function's code snapshot) and what names its code
/// in the snapshot (a SQL model: its text).
pub(super) fn code_of_node<'a>(
    node: &PlanNode,
    code_hash: &'a str,
) -> (&'static str, Option<&'a str>, serde_json::Value) {
    match &node.lang {
        Lang::Python {
            function,
            memory_bytes,
            ..
        } => (
            "python",
            Some(code_hash),
            serde_json::json!({"file": node.file, "function": function, "memory": memory_bytes}),
        ),
        Lang::Sql { sql, .. } => ("sql", None, serde_json::json!({"sql": sql})),
    }
}

pub(super) fn materialization(node: &PlanNode) -> String {
    match node.kind {
        NodeKind::Model { materialize } => format!("{materialize:?}"),
        NodeKind::Expectation { .. } => String::new(),
    }
}

/// What a model adds to (an append, a partition overwrite) is part of its output; not
/// for an instance of a partitioned model, whose output is its partition alone.
pub(super) fn appended_to(
    node: &PlanNode,
    current: Option<&lh_catalog::TablePointer>,
) -> Option<String> {
    match node.kind {
        _ if node.partition.is_some() => None,
        NodeKind::Model {
            materialize: Materialize::Append | Materialize::OverwritePartitions,
        } => current.map(|p| p.metadata_location.clone()),
        _ => None,
    }
}

/// An input as a node's key has it, read whole at `pointer`.
pub(crate) fn whole_input(
    i: &crate::project::PlanInput,
    pointer: &lh_catalog::TablePointer,
) -> serde_json::Value {
    serde_json::json!({
        "table": i.table, "metadata": pointer.metadata_location,
        "snapshot": pointer.snapshot_id,
        "columns": i.columns, "filter": i.filter, "arg": i.arg,
    })
}

/// The parts of a node's key by name, a short hash each (see [`fingerprint`]): what a
/// miss reports as changed, and what `lh run --plan` compares before running.
pub(crate) fn key_parts(
    node: &PlanNode,
    code_hash: &str,
    inputs: &[serde_json::Value],
    params: &BTreeMap<String, serde_json::Value>,
    env_key: Option<&str>,
    previous: Option<&str>,
    secrets: &BTreeMap<String, i64>,
) -> BTreeMap<String, String> {
    let (_, code, detail) = code_of_node(node, code_hash);
    let short =
        |v: &serde_json::Value| blake3::hash(v.to_string().as_bytes()).to_hex()[..12].to_string();
    let mut parts = BTreeMap::from([
        (
            "lh version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        (
            "code".to_string(),
            match code {
                Some(snapshot) => format!("snapshot {}", &snapshot[..snapshot.len().min(12)]),
                None => short(&detail),
            },
        ),
        ("function".to_string(), short(&detail)),
        (
            "environment".to_string(),
            env_key.unwrap_or("-").to_string(),
        ),
        ("parameters".to_string(), short(&serde_json::json!(params))),
        ("materialization".to_string(), materialization(node)),
        (
            "partitioned_by".to_string(),
            node.partitioned_by.clone().unwrap_or_default(),
        ),
        (
            "the table appended to".to_string(),
            short(&serde_json::json!(previous)),
        ),
    ]);
    for (i, v) in node.inputs.iter().zip(inputs) {
        parts.insert(format!("input {}", i.table), short(v));
    }
    for (name, version) in secrets {
        parts.insert(format!("secret {name}"), format!("version {version}"));
    }
    parts
}

/// Why a model ran instead of reusing an output: the parts of its key that differ from
/// those of the newest memoized output of its table (`before`, JSON), or that there is
/// none.
pub(super) fn why_not_reused(before: Option<&str>, now: &BTreeMap<String, String>) -> String {
    let Some(before) =
        before.and_then(|b| serde_json::from_str::<BTreeMap<String, String>>(b).ok())
    else {
        return "ran: no earlier output of this model".into();
    };
    let mut changed: Vec<String> = Vec::new();
    for (k, v) in now {
        match before.get(k) {
            Some(old) if old == v => {}
            Some(old) if k == "code" => changed.push(format!("code changed ({old} -> {v})")),
            Some(_) => changed.push(format!("{k} changed")),
            None => changed.push(format!("{k} is new")),
        }
    }
    for k in before.keys().filter(|k| !now.contains_key(*k)) {
        changed.push(format!("{k} is gone"));
    }
    if changed.is_empty() {
        // The same parts under another key: an output of an older lh or another project.
        return "ran: no earlier output with the same key".into();
    }
    format!("ran: {}", changed.join(", "))
}
