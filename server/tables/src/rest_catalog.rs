//! The Iceberg REST catalog as a service: the prefix is an lh ref (writable when it is a
//! branch head), a namespace is its levels joined by dots, a table is `ns.table` in lh's
//! catalog. Each method validates, authorizes (grants, and what history hides at the
//! commit read) and acts; every change (a commit, a multi-table transaction, create,
//! drop, rename, register) is one commit of the table service (`commit.rs`), the path
//! lh's own writes take. The handlers (`control-plane/src/rest`) read the request, call
//! one method and word the answer in the spec's types.

use std::collections::BTreeSet;
use std::sync::Arc;

use iceberg::spec::TableMetadata;
use iceberg::{TableRequirement, TableUpdate};
use lh_catalog::{Commit, CommitMeta, RefExpr};

use crate::Tables;
use crate::auth::{Action, Identity};
use crate::commit::{Base, Change, Committed, NewTable, Put};
use crate::error::{Code, Error, Kind, Result};
use crate::namespaces::{Namespaces, Properties, not_found};

/// The Iceberg REST catalog over the table service and the namespace store.
pub struct RestCatalog {
    tables: Arc<Tables>,
    namespaces: Arc<Namespaces>,
}

/// The ref a prefix names, the commit read, and whether writes are allowed there.
pub struct At {
    pub expr: String,
    pub commit: Commit,
    writable: bool,
}

/// A client's change to one table: what it asserts of the table, and what it does.
pub struct TableChange {
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
}

/// A table as a client loads it: where its metadata is (none: a staged create, stored
/// nowhere yet) and the metadata.
pub struct Loaded {
    pub location: Option<String>,
    pub metadata: Arc<TableMetadata>,
}

/// A table to create: its folder (`None`: the one lh makes), what a new table holds, and
/// whether it is only staged (the client commits it later).
pub struct Create {
    pub table: NewTable,
    pub stage: bool,
}

/// What a namespace property update did.
pub struct PropertiesUpdated {
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    pub missing: Vec<String>,
}

fn bad_request(message: impl Into<String>) -> Error {
    Error::bad_request(Code::BadRequest, message)
}

fn no_table(name: &str, at: &str) -> Error {
    Error::not_found(
        Code::TableNotFound,
        format!("table '{name}' does not exist at '{at}'"),
    )
}

impl RestCatalog {
    pub fn new(tables: Arc<Tables>, namespaces: Arc<Namespaces>) -> RestCatalog {
        RestCatalog { tables, namespaces }
    }

    /// The commit a prefix names, for a read by `identity`: the very commit the guard
    /// found its history limits for (`Identity::reads`), not the prefix resolved again.
    pub async fn at(&self, identity: &Identity, prefix: &RefExpr) -> Result<At> {
        self.resolve(prefix, &identity.reads(prefix)).await
    }

    /// The ref a prefix names as it is now.
    async fn named(&self, prefix: &RefExpr) -> Result<At> {
        self.resolve(prefix, prefix).await
    }

    async fn resolve(&self, prefix: &RefExpr, read: &RefExpr) -> Result<At> {
        let resolved = self.tables.catalog.resolve(read).await.map_err(|e| {
            let message = format!("{} (the catalog prefix is an lh ref)", e.message());
            match e.kind() {
                lh_catalog::ErrorKind::RefNotFound => {
                    Error::not_found(Code::PrefixNotFound, message)
                }
                _ => bad_request(message),
            }
        })?;
        Ok(At {
            expr: prefix.to_string(),
            writable: resolved.is_branch_head,
            commit: resolved.commit,
        })
    }

    /// The branch a prefix names, for a write by `identity`: a tag or a fixed commit is
    /// refused. A write goes to the branch's head as it is now; when history limits what
    /// the identity reads there, that head must be the commit the limits were found for
    /// (a branch moved since is a conflict the client retries), so that what the write
    /// reads and answers (a table's metadata, whether it exists) is held to them.
    async fn branch(&self, identity: &Identity, prefix: &RefExpr) -> Result<At> {
        let a = self.named(prefix).await?;
        if let Some(checked) = &identity.access.ceilings_at
            && *checked != a.commit.id.to_hex()
        {
            return Err(Error::new(
                Kind::Conflict,
                Code::CommitFailed,
                format!(
                    "'{}' moved while the request was being checked; try again",
                    a.expr
                ),
            ));
        }
        if !a.writable {
            return Err(Error::new(
                Kind::Forbidden,
                Code::ReadOnlyRef,
                format!(
                    "'{}' is read-only (a tag or a fixed commit); write to a branch",
                    a.expr
                ),
            ));
        }
        Ok(a)
    }

    /// The catalog a client configures: `warehouse` (an lh ref) must exist and be
    /// readable by `identity`.
    pub async fn config_for(&self, identity: &Identity, warehouse: &RefExpr) -> Result<()> {
        identity.require_ref(Action::Read, warehouse, "reading its catalog")?;
        self.named(warehouse).await.map(|_| ())
    }

    /// The namespaces under `parent` (levels; empty: the top) at the prefix that
    /// `identity` may read, sorted.
    pub async fn namespaces_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        parent: &[String],
    ) -> Result<Vec<Vec<String>>> {
        let a = self.at(identity, prefix).await?;
        let all = self.namespaces.at(&a.commit).await?;
        let spelled = lh_catalog::names::join_levels(parent);
        let children: BTreeSet<Vec<String>> = all
            .keys()
            .filter_map(|k| lh_catalog::names::levels(k).ok())
            .filter(|parts| parts.len() == parent.len() + 1 && parts.starts_with(parent))
            // Namespaces the identity may not read are not listed.
            .filter(|parts| {
                identity.can_namespace(Action::Read, prefix, &lh_catalog::names::join_levels(parts))
            })
            .collect();
        // A parent the caller may not read, and in which it reads nothing, is missing to
        // it, whether it exists or not (the thirty-ninth review: 200 or 404 told which).
        let hidden = !identity.can_namespace(Action::Read, prefix, &spelled) && children.is_empty();
        if !parent.is_empty() && (!all.contains_key(&spelled) || hidden) {
            return Err(not_found(&spelled));
        }
        Ok(children.into_iter().collect())
    }

    /// Creates namespace `levels` on the prefix's branch.
    pub async fn create_namespace_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        levels: &[String],
        properties: &Properties,
    ) -> Result<()> {
        let name = lh_catalog::names::join_levels(levels);
        identity.require_namespace_everywhere(Action::Write, &name, "creating a namespace")?;
        let a = self.branch(identity, prefix).await?;
        if levels.is_empty() {
            return Err(bad_request("a namespace has at least one level"));
        }
        lh_catalog::names::validate_namespace(&name).map_err(|e| bad_request(e.to_string()))?;
        self.namespaces.create(&a.commit, &name, properties).await
    }

    /// Namespace `name`'s properties at the prefix.
    pub async fn namespace_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
    ) -> Result<Properties> {
        let a = self.at(identity, prefix).await?;
        self.namespaces.get(&a.commit, name).await
    }

    /// Drops namespace `name` from the prefix's branch.
    pub async fn drop_namespace_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
    ) -> Result<()> {
        identity.require_namespace_everywhere(Action::Write, name, "dropping a namespace")?;
        let a = self.branch(identity, prefix).await?;
        self.namespaces.remove(&a.commit, &a.expr, name).await
    }

    /// Sets and removes namespace `name`'s properties.
    pub async fn update_properties_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
        updates: Properties,
        removals: &[String],
    ) -> Result<PropertiesUpdated> {
        identity.require_namespace_everywhere(
            Action::Write,
            name,
            "changing a namespace's properties",
        )?;
        let a = self.branch(identity, prefix).await?;
        let mut props = self.namespaces.get(&a.commit, name).await?;
        if let Some(k) = removals.iter().find(|k| updates.contains_key(*k)) {
            return Err(Error::new(
                Kind::Unprocessable,
                Code::PropertyConflict,
                format!("'{k}' is both updated and removed"),
            ));
        }
        let (mut removed, mut missing) = (Vec::new(), Vec::new());
        for k in removals {
            if props.remove(k).is_some() {
                removed.push(k.clone())
            } else {
                missing.push(k.clone())
            }
        }
        let updated: Vec<String> = updates.keys().cloned().collect();
        props.extend(updates);
        self.namespaces.set_properties(name, &props).await?;
        Ok(PropertiesUpdated {
            updated,
            removed,
            missing,
        })
    }

    /// The tables directly in namespace `levels` at the prefix, by their last name part,
    /// sorted.
    pub async fn tables_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        levels: &[String],
    ) -> Result<Vec<String>> {
        let a = self.at(identity, prefix).await?;
        let name = lh_catalog::names::join_levels(levels);
        self.namespaces.get(&a.commit, &name).await?;
        let mut names: Vec<String> = self
            .tables
            .catalog
            .tables_in(&a.commit, Some(&name))
            .await?
            .into_iter()
            .filter_map(|t| {
                let (ns, table) = lh_catalog::names::split_table(&t.name)?;
                let mut table = lh_catalog::names::levels(table).ok()?;
                (ns == name && table.len() == 1).then(|| table.remove(0))
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Table `name` at the prefix.
    pub async fn load_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
    ) -> Result<Loaded> {
        let a = self.at(identity, prefix).await?;
        let t = self
            .tables
            .load(&a.commit, name)
            .await?
            .ok_or_else(|| no_table(name, &a.expr))?;
        Ok(Loaded {
            location: Some(t.pointer.metadata_location),
            metadata: t.metadata,
        })
    }

    /// Whether table `name` is at the prefix (an error when it is not).
    pub async fn exists_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
    ) -> Result<()> {
        let a = self.at(identity, prefix).await?;
        match self.tables.catalog.table_in(&a.commit, name).await? {
            Some(_) => Ok(()),
            None => Err(no_table(name, &a.expr)),
        }
    }

    /// A client's scan or commit report on table `name` (Java clients send one after
    /// each scan): logged.
    pub async fn report_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
        report_type: &str,
        snapshot: Option<i64>,
    ) -> Result<()> {
        self.exists_for(identity, prefix, name).await?;
        if !matches!(report_type, "scan-report" | "commit-report") {
            return Err(bad_request(format!(
                "unknown report-type '{report_type}': expected scan-report or commit-report"
            )));
        }
        tracing::debug!(table = %name, at = %prefix, report = %report_type,
            snapshot = ?snapshot, "iceberg metrics report");
        Ok(())
    }

    /// Stages one table's change (its requirements checked against the table at the
    /// branch head) and returns what it does, for the commit message.
    async fn stage(
        &self,
        tx: &mut crate::commit::Transaction<'_>,
        a: &At,
        identity: &Identity,
        name: &str,
        change: TableChange,
    ) -> Result<String> {
        for u in &change.updates {
            if let TableUpdate::SetLocation { location } = u {
                self.chosen_location(identity, name, location)?;
            }
            if let TableUpdate::SetProperties { updates } = u
                && let Some(key) = updates
                    .keys()
                    .find(|k| !crate::error::client_table_property(k))
            {
                return Err(crate::error::reserved_property(key));
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
                return Err(crate::error::reserved_property(key));
            }
        }
        let current = self.tables.load(&a.commit, name).await?;
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
    /// Such a folder can neither be nor hold another table's folder (names have no `-`,
    /// so no namespace folder is named so), and a table's own folder is what decides
    /// which files its snapshots may name: a table placed over another's would read its
    /// files past its grants.
    fn chosen_location(&self, identity: &Identity, name: &str, location: &str) -> Result<()> {
        let wh = &self.tables.warehouse;
        let default = wh.new_table_location(&lh_catalog::names::levels(name)?, &uuid::Uuid::nil());
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

    /// One table's change as one commit on the prefix's branch; a stale plain append is
    /// made again on the table as it is now, when the table lets lh do so. The table's
    /// new version.
    pub async fn commit_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
        change: TableChange,
    ) -> Result<Loaded> {
        // The answer is the table's metadata: for who may read it too.
        identity.require_table(Action::Read, prefix, name, "committing to a table")?;
        let a = self.branch(identity, prefix).await?;
        let append = plain_append(&change);
        // The transaction (and its hold on the commit gate) ends with this block.
        let tried: Result<Committed> = async {
            let mut tx = self.tables.begin().await;
            let what = self.stage(&mut tx, &a, identity, name, change).await?;
            tx.commit(&a.expr, identity, meta(identity, what))
                .await
                .map_err(commit_failed)
        }
        .await;
        let done = match (tried, append) {
            (Ok(done), _) => done,
            // A stale append, on a table that lets lh make it again on its current state.
            (Err(e), Some(append)) if e.kind == Kind::Conflict => {
                match self.rebase_append(&a.expr, name, identity, &append).await {
                    Ok(Some(done)) => done,
                    Ok(None) => return Err(e),
                    // A rebased commit may have landed (the client must not remove its
                    // files, so it hears that rather than the conflict), or the caller
                    // may not write.
                    Err(r) => return Err(commit_failed(r)),
                }
            }
            (Err(e), _) => return Err(e),
        };
        first(done)
    }

    /// A client's stale append made again on the table as it is at the branch head (see
    /// `snapshot::rebase_append` for when that is safe), until it lands, as lh's own
    /// writes are (`rebase.rs`): `None` when it may not be or could not be (the client's
    /// conflict stands); an error when the caller may not write, or when a rebased commit
    /// may have landed.
    async fn rebase_append(
        &self,
        branch: &str,
        name: &str,
        identity: &Identity,
        append: &PlainAppend,
    ) -> Result<Option<Committed>> {
        use crate::rebase::{MAX_REBASES, Rebases};
        use crate::snapshot::{self, ClientAppend};
        // Nothing is read for a caller that may not write.
        identity.require_table(
            Action::Write,
            &RefExpr::named(branch),
            name,
            "appending to a table",
        )?;
        let wh = &self.tables.warehouse;
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
                let head = self.tables.catalog.resolve(branch).await?;
                self.tables.load(&head.commit, name).await
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
                // Every file the append names is under the table's folder, in the
                // spelling the server reads (a location it cannot spell, one through `.`
                // or `..`, is not).
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
            let produced = match snapshot::rebase_append(wh.io(), &now.metadata, read, files).await
            {
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
            let lock = self.tables.commit_lock(branch, name);
            let _turn = lock.lock().await;
            match self
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

    /// A multi-table transaction: all the tables' changes land in one lh commit, or none
    /// do.
    pub async fn transaction_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        changes: Vec<(String, TableChange)>,
    ) -> Result<()> {
        let a = self.branch(identity, prefix).await?;
        let mut tx = self.tables.begin().await;
        let mut names: Vec<String> = Vec::new();
        let mut whats = Vec::new();
        for (name, change) in changes {
            // Before the table is read: a refusal tells nothing of what exists. Its
            // requirements and changes read the table: for who may read it, as a single
            // table's commit is (history's limits included).
            identity.require_table(Action::Write, prefix, &name, "changing a table")?;
            identity.require_table(Action::Read, prefix, &name, "changing a table")?;
            if names.contains(&name) {
                return Err(bad_request(format!("table '{name}' appears twice")));
            }
            whats.push(self.stage(&mut tx, &a, identity, &name, change).await?);
            names.push(name);
        }
        tx.commit(&a.expr, identity, meta(identity, whats.join("; ")))
            .await
            .map_err(commit_failed)?;
        Ok(())
    }

    /// Creates table `name` in namespace `levels` on the prefix's branch (or only stages
    /// it).
    pub async fn create_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        levels: &[String],
        name: &str,
        create: Create,
    ) -> Result<Loaded> {
        // Before anything is looked up: "already exists" would tell of a table history
        // hides.
        crate::auth::history::require_unhidden(
            &self.tables.catalog,
            identity,
            prefix,
            name,
            "creating a table",
        )
        .await?;
        let a = self.branch(identity, prefix).await?;
        self.namespaces
            .get(&a.commit, &lh_catalog::names::join_levels(levels))
            .await?;
        if self
            .tables
            .catalog
            .table_in(&a.commit, name)
            .await?
            .is_some()
        {
            return Err(Error::new(
                Kind::Conflict,
                Code::AlreadyExists,
                format!("table '{name}' already exists at '{}'", a.expr),
            ));
        }
        if let Some(l) = &create.table.location {
            self.chosen_location(identity, name, l)?;
        }
        if let Some(key) = create
            .table
            .properties
            .keys()
            .find(|k| !crate::error::client_table_property(k))
        {
            return Err(crate::error::reserved_property(key));
        }
        let metadata = self.tables.new_table(name, create.table)?;
        if create.stage {
            // Nothing is stored: the client commits the table later (assert-create).
            return Ok(Loaded {
                location: None,
                metadata: Arc::new(metadata),
            });
        }
        let put = Put {
            table: name.to_string(),
            current: None,
            base: Base::Made(Box::new(metadata)),
            requirements: Vec::new(),
            updates: Vec::new(),
            files: Vec::new(),
        };
        let message = format!("create {name}");
        let done = self
            .tables
            .commit(
                &a.expr,
                identity,
                vec![Change::Put(put)],
                meta(identity, message),
            )
            .await
            .map_err(already_exists(name))?;
        first(done)
    }

    /// Drops table `name` from the prefix's branch. Its files stay, purge or not: other
    /// refs and history still read them (an lh commit can always be travelled back to).
    pub async fn drop_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
        purge: bool,
    ) -> Result<()> {
        // Before the table is looked up: whether it is there is for who may read it.
        identity.require_table(Action::Read, prefix, name, "dropping a table")?;
        let a = self.branch(identity, prefix).await?;
        let p = self
            .tables
            .catalog
            .table_in(&a.commit, name)
            .await?
            .ok_or_else(|| no_table(name, &a.expr))?;
        let purge = if purge {
            " (purge requested: files kept for other refs)"
        } else {
            ""
        };
        let change = Change::Drop {
            table: name.to_string(),
            expected: p,
        };
        let message = format!("drop {name}{purge}");
        self.tables
            .commit(&a.expr, identity, vec![change], meta(identity, message))
            .await
            .map_err(commit_failed)?;
        Ok(())
    }

    /// Renames table `from` to `to` (in namespace `to_levels`) on the prefix's branch.
    pub async fn rename_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        from: &str,
        to: &str,
        to_levels: &[String],
    ) -> Result<()> {
        // Before anything is looked up: a refusal tells nothing of what exists.
        for t in [from, to] {
            identity.require_table(Action::Write, prefix, t, "renaming a table")?;
        }
        // Renamed into a namespace the caller reads, the table must have been readable.
        identity.require_table(Action::Read, prefix, from, "renaming a table")?;
        crate::auth::history::require_unhidden(
            &self.tables.catalog,
            identity,
            prefix,
            to,
            "renaming a table",
        )
        .await?;
        let a = self.branch(identity, prefix).await?;
        let p = self
            .tables
            .catalog
            .table_in(&a.commit, from)
            .await?
            .ok_or_else(|| no_table(from, &a.expr))?;
        self.namespaces
            .get(&a.commit, &lh_catalog::names::join_levels(to_levels))
            .await?;
        if self.tables.catalog.table_in(&a.commit, to).await?.is_some() {
            return Err(Error::new(
                Kind::Conflict,
                Code::AlreadyExists,
                format!("table '{to}' already exists"),
            ));
        }
        let change = Change::Rename {
            from: from.to_string(),
            to: to.to_string(),
            pointer: p,
        };
        let message = format!("rename {from} to {to}");
        self.tables
            .commit(&a.expr, identity, vec![change], meta(identity, message))
            .await
            .map_err(commit_failed)?;
        Ok(())
    }

    /// Registers table `name` from an existing metadata file, on the prefix's branch.
    pub async fn register_for(
        &self,
        identity: &Identity,
        prefix: &RefExpr,
        name: &str,
        metadata_location: &str,
    ) -> Result<Loaded> {
        // A metadata file anywhere in the warehouse may be another ref's or namespace's
        // table: registering one is an admin's (a migration, a restore).
        identity.require(
            Action::Admin,
            "registering a table from an existing metadata file",
        )?;
        let a = self.branch(identity, prefix).await?;
        let change = Change::Register {
            table: name.to_string(),
            expected: None,
            metadata_location: metadata_location.to_string(),
        };
        let message = format!("register {name} from {metadata_location}");
        let done = self
            .tables
            .commit(&a.expr, identity, vec![change], meta(identity, message))
            .await
            .map_err(already_exists(name))?;
        first(done)
    }
}

/// The one table a commit changed, as loaded.
fn first(done: Committed) -> Result<Loaded> {
    let v = done
        .versions
        .into_iter()
        .next()
        .ok_or_else(|| Error::internal("the commit changed no table"))?;
    Ok(Loaded {
        location: Some(v.pointer.metadata_location),
        metadata: v.metadata,
    })
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
    CommitMeta::new(author, lh_catalog::shortened_message(message))
        .with_property("lh.operation", "iceberg-rest")
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

/// A plain append, as Iceberg's writers commit one: one `append` snapshot made current
/// on `main`, asserting at most the table's uuid and what `main` was when read.
struct PlainAppend {
    snapshot: iceberg::spec::Snapshot,
    uuid: Option<uuid::Uuid>,
    /// The snapshot `main` was at when the client read the table, when it asserts one
    /// (`Some(None)`: the table had no snapshot).
    read: Option<Option<i64>>,
}

fn plain_append(change: &TableChange) -> Option<PlainAppend> {
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
            TableRequirement::UuidMatch { uuid: u } if uuid.is_none() => uuid = Some(*u),
            TableRequirement::RefSnapshotIdMatch { r#ref, snapshot_id }
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
