//! Table handlers: list, load, exists, metrics reports, and the changes, each one
//! commit of the table service (`tables/commit.rs`): a commit or a multi-table
//! transaction (the client's requirements and updates, applied to the table at the
//! branch head), create (staged or not), drop, rename, register. What is REST's own
//! here: reading the request, the commit's message and author, and which of the spec's
//! errors a refused commit is.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use iceberg::TableUpdate;
use lh_catalog::CommitMeta;

use super::names::{At, at, branch, ident_name, namespace, no_table, table_name};
use super::types::{
    Body, CommitTable, CommitTransaction, CreateTable, DropQuery, LoadTableResult, MetricsReport,
    Page, Params, Register, Rename, TableIdent, asks_for_credentials, bad_request, loaded, served,
};
use crate::auth::{Action, Identity};
use crate::error::{Code, Error, Kind};
use crate::http::IcebergResult;
use crate::state::AppState;
use crate::tables::commit::{Base, Change, Committed, NewTable, Put, Transaction};

pub async fn list_tables(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
    Params(page): Params<Page>,
) -> IcebergResult<Json<serde_json::Value>> {
    let a = at(&s, &prefix, &identity).await?;
    let parts = namespace(&ns)?;
    let name = parts.join(".");
    s.namespaces.get(&a.commit, &name).await?;
    let mut ids: Vec<(String, TableIdent)> = s
        .catalog
        .tables_in(&a.commit, Some(&name))
        .await?
        .into_iter()
        .filter_map(|t| {
            let rest = t.name.strip_prefix(&format!("{name}."))?;
            (!rest.contains('.')).then(|| {
                let ident = TableIdent {
                    namespace: parts.clone(),
                    name: rest.to_string(),
                };
                (rest.to_string(), ident)
            })
        })
        .collect();
    ids.sort_by(|a, b| a.0.cmp(&b.0));
    let (page, next) = page.apply(ids)?;
    Ok(Json(
        serde_json::json!({ "identifiers": page, "next-page-token": next }),
    ))
}

pub async fn load_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    headers: HeaderMap,
    identity: Identity,
) -> IcebergResult<Json<LoadTableResult>> {
    let a = at(&s, &prefix, &identity).await?;
    let name = table_name(&namespace(&ns)?, &table)?;
    let t = s
        .tables
        .load(&a.commit, &name)
        .await?
        .ok_or_else(|| no_table(&name, &a.expr))?;
    Ok(loaded(
        Some(t.pointer.metadata_location.clone()),
        &t.metadata,
        s.vending
            .storage_for(&identity, asks_for_credentials(&headers)),
    ))
}

pub async fn table_exists(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> IcebergResult<StatusCode> {
    let a = at(&s, &prefix, &identity).await?;
    let name = table_name(&namespace(&ns)?, &table)?;
    match s.catalog.table_in(&a.commit, &name).await? {
        Some(_) => Ok(StatusCode::NO_CONTENT),
        None => Err(no_table(&name, &a.expr).into()),
    }
}

/// A client's scan or commit report (Java clients send one after each scan): logged,
/// for the table at the ref.
pub async fn report_metrics(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    Body(report): Body<MetricsReport>,
) -> IcebergResult<StatusCode> {
    let a = at(&s, &prefix, &identity).await?;
    let name = table_name(&namespace(&ns)?, &table)?;
    if s.catalog.table_in(&a.commit, &name).await?.is_none() {
        return Err(no_table(&name, &a.expr).into());
    }
    if !matches!(report.report_type.as_str(), "scan-report" | "commit-report") {
        return Err(bad_request(format!(
            "unknown report-type '{}': expected scan-report or commit-report",
            report.report_type
        ))
        .into());
    }
    tracing::debug!(table = %name, at = %a.expr, report = %report.report_type,
        snapshot = ?report.snapshot_id, "iceberg metrics report");
    Ok(StatusCode::NO_CONTENT)
}

/// A REST commit's metadata: its author is the client's identity (with `--no-auth`,
/// the `x-lh-user` header, which pyiceberg sends with the catalog property
/// `header.x-lh-user`, or `iceberg-rest`).
fn meta(identity: &Identity, message: String) -> CommitMeta {
    let author = if identity.token_id.is_none() && identity.user == "anonymous" {
        "iceberg-rest".to_string()
    } else {
        identity.user.clone()
    };
    CommitMeta::new(author, message).with_property("lh.operation", "iceberg-rest")
}

/// Makes `changes` one commit on the prefix's branch.
async fn commit(
    s: &AppState,
    a: &At,
    identity: &Identity,
    changes: Vec<Change>,
    message: String,
) -> crate::error::Result<Committed> {
    s.tables
        .commit(&a.expr, identity, changes, meta(identity, message))
        .await
}

/// A commit the catalog refused because a table moved since it was read is the spec's
/// 409, which clients retry; one that may have landed (the database was lost
/// mid-transaction) is `CommitStateUnknownException`: clients must not delete what they
/// wrote, and neither does the server.
fn commit_failed(e: Error) -> Error {
    if e.code == Code::Conflict {
        Error::new(
            Kind::Conflict,
            Code::CommitFailed,
            format!("{}; retry", e.message),
        )
    } else if e.commit_state_unknown() {
        Error::new(
            Kind::Internal,
            Code::CommitStateUnknown,
            format!(
                "the commit may or may not have landed: {}; load the table to see",
                e.message
            ),
        )
    } else {
        e
    }
}

/// A create or registration that lost to another table of the same name.
fn already_exists(name: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| {
        if e.code == Code::Conflict {
            Error::new(
                Kind::Conflict,
                Code::AlreadyExists,
                format!("table '{name}' already exists"),
            )
        } else {
            e
        }
    }
}

/// Stages one table's change (its requirements checked against the table at the
/// branch head) and returns what it does, for the commit message.
async fn stage(
    s: &AppState,
    tx: &mut Transaction<'_>,
    a: &At,
    identity: &Identity,
    name: &str,
    change: CommitTable,
) -> IcebergResult<String> {
    for u in &change.updates {
        if let TableUpdate::SetLocation { location } = u {
            chosen_location(s, identity, name, location)?;
        }
        if let TableUpdate::SetProperties { updates } = u
            && let Some(key) = updates
                .keys()
                .find(|k| !crate::error::client_table_property(k))
        {
            return Err(crate::error::reserved_property(key).into());
        }
        // lh's provenance (the run and node that made a snapshot) is lh's to write:
        // reuse of memoized outputs and bisect's attribution read it.
        if let TableUpdate::AddSnapshot { snapshot } = u
            && let Some(key) = snapshot
                .summary()
                .additional_properties
                .keys()
                .find(|k| crate::error::is_reserved_property(k))
        {
            return Err(crate::error::reserved_property(key).into());
        }
    }
    let current = s.tables.load(&a.commit, name).await?;
    let what = describe(current.is_none(), &change.updates, name);
    tx.stage(Change::Put(Put {
        table: name.to_string(),
        current,
        base: Base::AsRead,
        requirements: change.requirements,
        updates: change.updates,
        files: Vec::new(),
    }))
    .await?;
    Ok(what)
}

/// A location a client chose for a table (at its creation, or by `set-location`). An
/// admin may choose any place in the warehouse. Anyone else gets a folder of the
/// table's own, beside the one lh would make: `<namespace folders>/<table>-<suffix>`.
/// Such a folder can neither be nor hold another table's folder (names have no `-`, so
/// no namespace folder is named so), and a table's own folder is what decides which
/// files its snapshots may name: a table placed over another's would read its files
/// past its grants.
fn chosen_location(
    s: &AppState,
    identity: &Identity,
    name: &str,
    location: &str,
) -> crate::error::Result<()> {
    let wh = &s.tables.warehouse;
    let default = wh.new_table_location(name, &uuid::Uuid::nil());
    let prefix = default.trim_end_matches(&uuid::Uuid::nil().simple().to_string());
    let own = wh.canonical(location).ok().is_some_and(|c| {
        c.strip_prefix(prefix).is_some_and(|suffix| {
            !suffix.is_empty()
                && suffix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        })
    });
    if own {
        return Ok(());
    }
    identity.require(
        Action::Admin,
        &format!(
            "placing table '{name}' at '{location}', outside a folder of its own (such as \
             '{prefix}<suffix>', or the one lh makes when no location is given)"
        ),
    )
}

/// What a change does, as in `append to sales.orders` or `create sales.big (append)`.
fn describe(created: bool, updates: &[TableUpdate], name: &str) -> String {
    let mut verbs: Vec<&str> = Vec::new();
    for u in updates {
        let verb = match u {
            TableUpdate::AddSnapshot { snapshot } => snapshot.summary().operation.as_str(),
            TableUpdate::AddSchema { .. } if !created => "schema change",
            TableUpdate::AddSpec { .. } if !created => "partition change",
            TableUpdate::SetProperties { .. } | TableUpdate::RemoveProperties { .. }
                if !created =>
            {
                "properties"
            }
            _ => continue,
        };
        if !verbs.contains(&verb) {
            verbs.push(verb);
        }
    }
    match (created, verbs.is_empty()) {
        (true, true) => format!("create {name}"),
        (true, false) => format!("create {name} ({})", verbs.join(", ")),
        (false, true) => format!("update {name}"),
        (false, false) => format!("{} {name}", verbs.join(", ")),
    }
}

pub async fn commit_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    identity: Identity,
    Body(change): Body<CommitTable>,
) -> IcebergResult<Json<serde_json::Value>> {
    let name = table_name(&namespace(&ns)?, &table)?;
    // The answer is the table's metadata: for who may read it too.
    identity.require_table(Action::Read, &prefix, &name, "committing to a table")?;
    let a = branch(&s, &prefix, &identity).await?;
    let append = plain_append(&change);
    // The transaction (and its hold on the commit gate) ends with this block.
    let tried: IcebergResult<Committed> = async {
        let mut tx = s.tables.begin().await;
        let what = stage(&s, &mut tx, &a, &identity, &name, change).await?;
        Ok(tx
            .commit(&a.expr, &identity, meta(&identity, what))
            .await
            .map_err(commit_failed)?)
    }
    .await;
    let done = match (tried, append) {
        (Ok(done), _) => done,
        // A stale append, on a table that lets lh make it again on its current state.
        (Err(e), Some(append)) if e.0.kind == Kind::Conflict => {
            match rebase_append(&s, &a.expr, &name, &identity, &append).await {
                Ok(Some(done)) => done,
                Ok(None) => return Err(e),
                // A rebased commit may have landed (the client must not remove its
                // files, so it hears that rather than the conflict), or the caller may
                // not write.
                Err(r) => return Err(commit_failed(r).into()),
            }
        }
        (Err(e), _) => return Err(e),
    };
    let v = &done.versions[0];
    Ok(Json(serde_json::json!({
        "metadata-location": v.pointer.metadata_location,
        "metadata": served(&v.metadata),
    })))
}

/// A plain append, as Iceberg's writers commit one: one `append` snapshot made current
/// on `main`, asserting at most the table's uuid and what `main` was when read.
struct PlainAppend {
    snapshot: iceberg::spec::Snapshot,
    uuid: Option<uuid::Uuid>,
    /// The snapshot `main` was at when the client read the table, when it asserts one
    /// (`Some(None)`: the table had no snapshot).
    read: Option<Option<i64>>,
}

fn plain_append(change: &CommitTable) -> Option<PlainAppend> {
    let mut snapshot: Option<&iceberg::spec::Snapshot> = None;
    let mut pointed = false;
    for u in &change.updates {
        match u {
            TableUpdate::AddSnapshot { snapshot: s } if snapshot.is_none() => snapshot = Some(s),
            TableUpdate::SetSnapshotRef {
                ref_name,
                reference,
            } if ref_name == iceberg::spec::MAIN_BRANCH
                && !pointed
                && snapshot.is_some_and(|s| s.snapshot_id() == reference.snapshot_id) =>
            {
                pointed = true
            }
            _ => return None,
        }
    }
    let (mut uuid, mut read) = (None, None);
    for r in &change.requirements {
        match r {
            iceberg::TableRequirement::UuidMatch { uuid: u } if uuid.is_none() => uuid = Some(*u),
            iceberg::TableRequirement::RefSnapshotIdMatch { r#ref, snapshot_id }
                if r#ref == iceberg::spec::MAIN_BRANCH && read.is_none() =>
            {
                read = Some(*snapshot_id)
            }
            _ => return None,
        }
    }
    let snapshot = snapshot?.clone();
    (pointed && snapshot.summary().operation == iceberg::spec::Operation::Append).then_some(
        PlainAppend {
            snapshot,
            uuid,
            read,
        },
    )
}

/// A client's stale append made again on the table as it is at the branch head (see
/// `snapshot::rebase_append` for when that is safe), until it lands, as lh's own writes
/// are (`tables::rebase`): `None` when it
/// may not be or could not be (the client's conflict stands); an error when the caller
/// may not write, or when a rebased commit may have landed.
async fn rebase_append(
    s: &AppState,
    branch: &str,
    name: &str,
    identity: &Identity,
    append: &PlainAppend,
) -> crate::error::Result<Option<Committed>> {
    use crate::tables::rebase::{MAX_REBASES, Rebases};
    use crate::tables::snapshot::{self, ClientAppend};
    // Nothing is read for a caller that may not write.
    identity.require_table(Action::Write, branch, name, "appending to a table")?;
    let wh = &s.tables.warehouse;
    let not_rebased = |why: &dyn std::fmt::Display| {
        tracing::info!(table = %name, "a stale append is not rebased: {why}");
        Ok(None)
    };
    // The client's files, read and checked once (again only if the table's folder
    // changed under it).
    let mut client: Option<(String, ClientAppend)> = None;
    let mut rebases = Rebases::new();
    while rebases.another() {
        rebases.pause().await;
        let now = match async {
            let head = s.tables.catalog.resolve(branch).await?;
            s.tables.load(&head.commit, name).await
        }
        .await
        {
            Ok(Some(now)) => now,
            Ok(None) => return not_rebased(&"the table is gone"),
            Err(e) => return not_rebased(&e),
        };
        if append.uuid.is_some_and(|u| u != now.metadata.uuid()) {
            return not_rebased(&"the table was replaced");
        }
        let own = match wh.canonical(now.metadata.location()) {
            Ok(c) => format!("{}/", c.trim_end_matches('/')),
            Err(e) => return not_rebased(&e),
        };
        if client.as_ref().is_none_or(|(o, _)| *o != own) {
            // Every file the append names is under the table's folder, in the spelling
            // the server reads (a location it cannot spell, one through `.` or `..`, is
            // not).
            let canonical = |l: &str| {
                if l.split('/').any(|part| part == ".." || part == ".") {
                    return None;
                }
                wh.canonical(l).ok().filter(|c| c.starts_with(&own))
            };
            match ClientAppend::read(
                wh.io(),
                now.metadata.format_version(),
                &append.snapshot,
                canonical,
            )
            .await
            {
                Ok(Ok(c)) => client = Some((own.clone(), c)),
                Ok(Err(why)) => return not_rebased(&why),
                Err(e) => return not_rebased(&e),
            }
        }
        let Some((_, files)) = &client else {
            return Ok(None);
        };
        // A client that asserted nothing accepts the table as it is.
        let read = append.read.unwrap_or(now.metadata.current_snapshot_id());
        let produced = match snapshot::rebase_append(wh.io(), &now.metadata, read, files).await {
            Ok(Ok(p)) => p,
            Ok(Err(why)) => return not_rebased(&why),
            Err(e) => return not_rebased(&e),
        };
        let change = Change::Put(Put {
            table: name.to_string(),
            current: Some(now),
            base: Base::AsRead,
            requirements: Vec::new(),
            updates: produced.updates,
            files: produced.files,
        });
        let message = format!("append to {name} (rebased)");
        // In turn with lh's own writers of the table on this server.
        let lock = s.tables.commit_lock(branch, name);
        let _turn = lock.lock().await;
        match s
            .tables
            .commit(branch, identity, vec![change], meta(identity, message))
            .await
        {
            Ok(done) => return Ok(Some(done)),
            Err(e) if e.code == Code::Conflict => continue,
            Err(e) if e.commit_state_unknown() => return Err(e),
            Err(e) => return not_rebased(&e),
        }
    }
    not_rebased(&format!("it lost {MAX_REBASES} times to other writes"))
}

/// A multi-table transaction: all the tables' changes land in one lh commit, or none do.
pub async fn commit_transaction(
    State(s): State<AppState>,
    Path(prefix): Path<String>,
    identity: Identity,
    Body(req): Body<CommitTransaction>,
) -> IcebergResult<StatusCode> {
    let a = branch(&s, &prefix, &identity).await?;
    let mut tx = s.tables.begin().await;
    let mut names = Vec::new();
    let mut whats = Vec::new();
    for change in req.table_changes {
        let id = change
            .identifier
            .as_ref()
            .ok_or_else(|| bad_request("every table change of a transaction names its table"))?;
        let name = ident_name(id)?;
        // Before the table is read: a refusal tells nothing of what exists. Its
        // requirements and changes read the table: for who may read it, as a single
        // table's commit is (history's limits included).
        identity.require_table(Action::Write, &prefix, &name, "changing a table")?;
        identity.require_table(Action::Read, &prefix, &name, "changing a table")?;
        if names.contains(&name) {
            return Err(bad_request(format!("table '{name}' appears twice")).into());
        }
        whats.push(stage(&s, &mut tx, &a, &identity, &name, change).await?);
        names.push(name);
    }
    tx.commit(&a.expr, &identity, meta(&identity, whats.join("; ")))
        .await
        .map_err(commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn create_table(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
    headers: HeaderMap,
    identity: Identity,
    Body(req): Body<CreateTable>,
) -> IcebergResult<Json<LoadTableResult>> {
    let parts = namespace(&ns)?;
    let name = table_name(&parts, &req.name)?;
    // Before anything is looked up: "already exists" would tell of a table history hides.
    crate::auth::history::require_unhidden(
        &s.catalog,
        &identity,
        &prefix,
        &name,
        "creating a table",
    )
    .await?;
    let a = branch(&s, &prefix, &identity).await?;
    s.namespaces.get(&a.commit, &parts.join(".")).await?;
    if s.catalog.table_in(&a.commit, &name).await?.is_some() {
        return Err(Error::new(
            Kind::Conflict,
            Code::AlreadyExists,
            format!("table '{name}' already exists at '{}'", a.expr),
        )
        .into());
    }
    if let Some(l) = &req.location {
        chosen_location(&s, &identity, &name, l)?;
    }
    if let Some(key) = req
        .properties
        .keys()
        .find(|k| !crate::error::client_table_property(k))
    {
        return Err(crate::error::reserved_property(key).into());
    }
    let metadata = s.tables.new_table(
        &name,
        NewTable {
            location: req.location,
            schema: req.schema,
            partition_spec: req.partition_spec,
            sort_order: req.write_order,
            properties: req.properties,
        },
    )?;
    if req.stage_create {
        // Nothing is stored: the client commits the table later (assert-create).
        return Ok(loaded(
            None,
            &metadata,
            s.vending
                .storage_for(&identity, asks_for_credentials(&headers)),
        ));
    }
    let put = Put {
        table: name.clone(),
        current: None,
        base: Base::Made(Box::new(metadata)),
        requirements: Vec::new(),
        updates: Vec::new(),
        files: Vec::new(),
    };
    let done = commit(
        &s,
        &a,
        &identity,
        vec![Change::Put(put)],
        format!("create {name}"),
    )
    .await
    .map_err(already_exists(&name))?;
    let v = &done.versions[0];
    Ok(loaded(
        Some(v.pointer.metadata_location.clone()),
        &v.metadata,
        s.vending
            .storage_for(&identity, asks_for_credentials(&headers)),
    ))
}

/// Drops a table from the branch. Its files stay, purge or not: other refs and history
/// still read them (an lh commit can always be travelled back to).
pub async fn drop_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    identity: Identity,
    Params(q): Params<DropQuery>,
) -> IcebergResult<StatusCode> {
    let name = table_name(&namespace(&ns)?, &table)?;
    // Before the table is looked up: whether it is there is for who may read it.
    identity.require_table(Action::Read, &prefix, &name, "dropping a table")?;
    let a = branch(&s, &prefix, &identity).await?;
    let p = s
        .catalog
        .table_in(&a.commit, &name)
        .await?
        .ok_or_else(|| no_table(&name, &a.expr))?;
    let purge = match q
        .purge_requested
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => {
            return Err(bad_request(format!("purgeRequested is true or false, not '{v}'")).into());
        }
    };
    let purge = if purge {
        " (purge requested: files kept for other refs)"
    } else {
        ""
    };
    let change = Change::Drop {
        table: name.clone(),
        expected: p,
    };
    commit(
        &s,
        &a,
        &identity,
        vec![change],
        format!("drop {name}{purge}"),
    )
    .await
    .map_err(commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn rename_table(
    State(s): State<AppState>,
    Path(prefix): Path<String>,
    identity: Identity,
    Body(req): Body<Rename>,
) -> IcebergResult<StatusCode> {
    let from = ident_name(&req.source)?;
    let to = ident_name(&req.destination)?;
    // Before anything is looked up: a refusal tells nothing of what exists.
    for t in [&from, &to] {
        identity.require_table(Action::Write, &prefix, t, "renaming a table")?;
    }
    // Renamed into a namespace the caller reads, the table must have been readable.
    identity.require_table(Action::Read, &prefix, &from, "renaming a table")?;
    crate::auth::history::require_unhidden(&s.catalog, &identity, &prefix, &to, "renaming a table")
        .await?;
    let a = branch(&s, &prefix, &identity).await?;
    let p = s
        .catalog
        .table_in(&a.commit, &from)
        .await?
        .ok_or_else(|| no_table(&from, &a.expr))?;
    s.namespaces
        .get(&a.commit, &req.destination.namespace.join("."))
        .await?;
    if s.catalog.table_in(&a.commit, &to).await?.is_some() {
        return Err(Error::new(
            Kind::Conflict,
            Code::AlreadyExists,
            format!("table '{to}' already exists"),
        )
        .into());
    }
    let change = Change::Rename {
        from: from.clone(),
        to: to.clone(),
        pointer: p,
    };
    commit(
        &s,
        &a,
        &identity,
        vec![change],
        format!("rename {from} to {to}"),
    )
    .await
    .map_err(commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn register_table(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
    headers: HeaderMap,
    identity: Identity,
    Body(req): Body<Register>,
) -> IcebergResult<Json<LoadTableResult>> {
    // A metadata file anywhere in the warehouse may be another ref's or namespace's
    // table: registering one is an admin's (a migration, a restore).
    identity.require(
        Action::Admin,
        "registering a table from an existing metadata file",
    )?;
    let a = branch(&s, &prefix, &identity).await?;
    let name = table_name(&namespace(&ns)?, &req.name)?;
    let change = Change::Register {
        table: name.clone(),
        expected: None,
        metadata_location: req.metadata_location.clone(),
    };
    let message = format!("register {name} from {}", req.metadata_location);
    let done = commit(&s, &a, &identity, vec![change], message)
        .await
        .map_err(already_exists(&name))?;
    let v = &done.versions[0];
    Ok(loaded(
        Some(v.pointer.metadata_location.clone()),
        &v.metadata,
        s.vending
            .storage_for(&identity, asks_for_credentials(&headers)),
    ))
}
