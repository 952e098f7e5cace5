//! The one way tables change on a branch. Every table commit goes through here: lh's
//! own writes (imports, pipeline outputs, `lh table rm`) and the Iceberg REST catalog's
//! (commits and multi-table transactions, creates, drops, renames, registrations).
//!
//! A `Transaction` stages changes, then makes them one catalog commit. Staging a new
//! version of a table checks the client's requirements against the table as it was
//! read, refuses what would let a client delete shared files, builds the next metadata
//! from a base and Iceberg updates with iceberg-rust's `TableMetadataBuilder`, checks
//! that every location stays inside the warehouse and writes the metadata file (durably,
//! under a new name). The commit expects every pointer the changes were read at, so a
//! table that moved meanwhile is a conflict, never a lost update. When the catalog
//! refuses the commit, or the transaction is dropped uncommitted, the metadata files it
//! wrote are removed; when the catalog failed in a way that may have committed (a lost
//! database connection), they stay, and `lh gc` removes what no commit reaches.
//!
//! While a transaction lives it holds the commit gate shared: garbage collection,
//! which holds it exclusively while it removes files, never removes a file a commit is
//! about to point at (a registration's or a client's files may be of any age).

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    FormatVersion, Schema, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec,
};
use iceberg::{MetadataLocation, TableRequirement, TableUpdate};
use lh_catalog::{Commit, CommitMeta, TableOp, TablePointer};
use uuid::Uuid;

use super::{LoadedTable, Tables, require_branch};
use crate::auth::{Action, Identity};
use crate::error::{Code, Error, Kind, Result};

/// The table property that tells engines' maintenance not to delete files: Spark's
/// `DROP TABLE ... PURGE`, `expire_snapshots` and `remove_orphan_files` (and pyiceberg's
/// purge) check it before deleting anything on the client. It stays false in lh,
/// because a table's files are shared by every ref and every older commit that sees it.
pub const GC_ENABLED: &str = "gc.enabled";

/// One table's part of a commit.
pub enum Change {
    /// A table's next version, or a new table: new metadata in a new metadata file.
    Put(Put),
    /// A table pointed at a metadata file that exists (a registration): it is read, and
    /// must be inside the warehouse.
    Register {
        table: String,
        /// The pointer it replaces (None: the table is new).
        expected: Option<TablePointer>,
        metadata_location: String,
    },
    /// A table removed from the branch. Its files stay: other refs and older commits
    /// still read them.
    Drop {
        table: String,
        expected: TablePointer,
    },
    /// A table under a new name: the same pointer, the old name gone.
    Rename {
        from: String,
        to: String,
        pointer: TablePointer,
    },
}

/// A table's next version (or a new table), from a base and Iceberg updates.
pub struct Put {
    pub table: String,
    /// The table as it was read at the branch head (None: it is new). The commit
    /// expects its pointer, and its metadata file goes into the new one's log.
    pub current: Option<LoadedTable>,
    pub base: Base,
    /// Checked against `current` before anything is written.
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
    /// Files the new version names that nobody wrote yet (a snapshot's manifests and
    /// manifest list, made in memory): written with its metadata file, at once.
    pub files: Vec<(String, bytes::Bytes)>,
}

/// What a put's updates apply to.
pub enum Base {
    /// The table as read: its current metadata; when there is none, a new table made
    /// by the updates themselves (a staged create, committed: add-schema, add-spec,
    /// set-location, ...).
    AsRead,
    /// Metadata made for this change and not stored yet: a new table's (complete as it
    /// is when no update follows), or the current table's with an evolved schema.
    Made(Box<TableMetadata>),
}

/// What a new table is made of (a create through the Iceberg REST catalog).
pub struct NewTable {
    /// Where its files go; a new folder in the warehouse by default.
    pub location: Option<String>,
    pub schema: Schema,
    pub partition_spec: Option<UnboundPartitionSpec>,
    pub sort_order: Option<SortOrder>,
    /// Its properties, with the reserved `format-version` (1, 2 or 3; 2 by default).
    pub properties: HashMap<String, String>,
}

/// A table's version as a commit left it.
#[derive(Clone)]
pub struct Version {
    pub table: String,
    pub pointer: TablePointer,
    pub metadata: Arc<TableMetadata>,
}

/// What a commit did.
pub struct Committed {
    pub commit: Commit,
    /// The new version of each put and registration, in the order they were staged.
    pub versions: Vec<Version>,
}

/// Changes staged for one catalog commit (see the module's documentation).
pub struct Transaction<'a> {
    tables: &'a Tables,
    _gate: tokio::sync::RwLockReadGuard<'a, ()>,
    ops: Vec<TableOp>,
    versions: Vec<Version>,
    /// The metadata files written, removed unless the commit lands or may have.
    written: Vec<String>,
}

impl Tables {
    /// Starts a transaction; it waits while garbage collection removes files.
    pub async fn begin(&self) -> Transaction<'_> {
        Transaction {
            tables: self,
            _gate: self.commit_gate.read().await,
            ops: Vec::new(),
            versions: Vec::new(),
            written: Vec::new(),
        }
    }

    /// Stages `changes` and makes them one commit on `branch`.
    pub async fn commit(
        &self,
        branch: &str,
        by: &Identity,
        changes: Vec<Change>,
        meta: CommitMeta,
    ) -> Result<Committed> {
        let mut tx = self.begin().await;
        for change in changes {
            tx.stage(change).await?;
        }
        tx.commit(branch, by, meta).await
    }

    /// Removes `name` from `branch` (its files stay: other refs may see them).
    pub async fn drop_table(&self, branch: &str, name: &str, by: &Identity) -> Result<Commit> {
        lh_catalog::names::validate_table_name(name)?;
        let resolved = self.catalog.resolve(branch).await?;
        require_branch(branch, &resolved)?;
        let t = self.load_required(&resolved.commit, name, branch).await?;
        let change = Change::Drop {
            table: name.to_string(),
            expected: t.pointer,
        };
        let meta = CommitMeta::new(&by.user, format!("drop table {name}"));
        Ok(self.commit(branch, by, vec![change], meta).await?.commit)
    }

    /// A new table's metadata, not stored yet. Its folder is made in the warehouse now,
    /// for clients that write files there before their first commit and make no
    /// folders (DuckDB).
    pub fn new_table(&self, name: &str, t: NewTable) -> Result<TableMetadata> {
        let uuid = Uuid::now_v7();
        // Stored in the one spelling the server reads back (`file://localhost/p` is
        // `file:///p`).
        let location = match t.location {
            Some(l) => self
                .warehouse
                .canonical(&l)
                .map_err(|_| outside(format!("location '{l}' is outside the warehouse")))?,
            None => self
                .warehouse
                .new_table_location(&lh_catalog::names::levels(name)?, &uuid),
        };
        self.warehouse
            .prepare_table_location(&location)
            .map_err(|_| outside(format!("location '{location}' is outside the warehouse")))?;
        let mut properties = t.properties;
        let format = format_version(properties.remove("format-version").as_deref())?;
        let metadata = first_metadata(
            t.schema,
            t.partition_spec
                .unwrap_or_else(|| UnboundPartitionSpec::builder().build()),
            t.sort_order.unwrap_or_else(SortOrder::unsorted_order),
            location,
            format,
            properties,
            uuid,
        )
        .and_then(|b| b.build())
        .map_err(invalid_update)?
        .metadata;
        let metadata = java_field_ids(metadata)?;
        check_kept(name, &metadata)?;
        Ok(metadata)
    }

    /// Writes a new metadata file for `metadata` (the next version after `previous`)
    /// and returns its location.
    pub async fn write_metadata(
        &self,
        metadata: &TableMetadata,
        previous: Option<&str>,
    ) -> Result<String> {
        self.write_version(metadata, previous, Vec::new()).await
    }

    /// [`Tables::write_metadata`], with `files` the version names written at the same
    /// time (each a round trip on S3). If any write fails, what was written is removed.
    async fn write_version(
        &self,
        metadata: &TableMetadata,
        previous: Option<&str>,
        mut files: Vec<(String, bytes::Bytes)>,
    ) -> Result<String> {
        let location = match previous {
            // A registered table's files may be named in another way: start over at 0
            // (the name's uuid keeps it unique).
            Some(p) => match p.parse::<MetadataLocation>() {
                Ok(l) => l.with_next_version().to_string(),
                Err(_) => {
                    MetadataLocation::new_with_metadata(metadata.location(), metadata).to_string()
                }
            },
            None => MetadataLocation::new_with_metadata(metadata.location(), metadata).to_string(),
        };
        let json = crate::encode::metadata_bytes(metadata)?;
        if json.len() > MAX_METADATA_BYTES {
            return Err(Error::bad_request(
                Code::InvalidUpdate,
                format!(
                    "the table's metadata would be {} MiB; at most {} MiB is kept (every load \
                     reads all of it)",
                    json.len() >> 20,
                    MAX_METADATA_BYTES >> 20
                ),
            ));
        }
        for (f, _) in &files {
            self.warehouse
                .canonical(f)
                .map_err(|_| outside(format!("file '{f}' is outside the warehouse")))?;
        }
        let size = json.len() as u64;
        files.push((location.clone(), json.into()));
        // Removed if the writes fail or the caller goes away while they run.
        let pending = Uncommitted {
            tables: self,
            files: files.iter().map(|(l, _)| l.clone()).collect(),
        };
        self.warehouse.write_durable(files).await?;
        pending.keep();
        self.metadata
            .insert(location.clone(), (Arc::new(metadata.clone()), size));
        Ok(location)
    }

    /// Test support: points `name` on `branch` at a metadata file written with
    /// [`Tables::write_metadata`], expecting it at `expected`.
    #[cfg(any(test, feature = "testing"))]
    pub async fn commit_table(
        &self,
        branch: &str,
        name: &str,
        expected: Option<TablePointer>,
        location: String,
        _metadata: &TableMetadata,
        meta: CommitMeta,
    ) -> Result<(Commit, TablePointer)> {
        let change = Change::Register {
            table: name.to_string(),
            expected,
            metadata_location: location,
        };
        let mut done = self
            .commit(branch, &Identity::admin("t"), vec![change], meta)
            .await?;
        let pointer = done.versions.remove(0).pointer;
        Ok((done.commit, pointer))
    }
}

impl Transaction<'_> {
    /// Checks a change and writes its files; nothing is committed yet.
    pub async fn stage(&mut self, change: Change) -> Result<()> {
        match change {
            Change::Put(p) => self.put(p).await,
            Change::Register {
                table,
                expected,
                metadata_location,
            } => {
                let metadata_location = self
                    .tables
                    .warehouse
                    .canonical(&metadata_location)
                    .map_err(|_| {
                        outside(format!("'{metadata_location}' is outside the warehouse"))
                    })?;
                let metadata = self
                    .tables
                    .metadata(&metadata_location)
                    .await
                    .map_err(|e| {
                        Error::bad_request(
                            Code::UnreadableMetadata,
                            format!("cannot read '{metadata_location}': {}", e.message),
                        )
                    })?;
                let pointer = pointer_of(&metadata_location, &metadata);
                self.ops.push(TableOp::Put {
                    table: table.clone(),
                    expected,
                    pointer: pointer.clone(),
                });
                self.versions.push(Version {
                    table,
                    pointer,
                    metadata,
                });
                Ok(())
            }
            Change::Drop { table, expected } => {
                self.ops.push(TableOp::Delete { table, expected });
                Ok(())
            }
            Change::Rename { from, to, pointer } => {
                self.ops.push(TableOp::Delete {
                    table: from,
                    expected: pointer.clone(),
                });
                self.ops.push(TableOp::Put {
                    table: to,
                    expected: None,
                    pointer,
                });
                Ok(())
            }
        }
    }

    async fn put(&mut self, p: Put) -> Result<()> {
        let written = self.tables.write_put(p).await?;
        self.adopt(written);
        Ok(())
    }

    /// Takes a version written with [`Tables::write_put`] into this commit.
    pub fn adopt(&mut self, mut w: WrittenPut<'_>) {
        self.written.append(&mut w.pending.files);
        self.ops.push(TableOp::Put {
            table: w.version.table.clone(),
            expected: w.expected.take(),
            pointer: w.version.pointer.clone(),
        });
        self.versions.push(w.version.clone());
    }

    /// Makes the staged changes one commit on `branch`.
    ///
    /// From here on, the files written are removed only when the catalog answers that it
    /// refused the commit. The catalog commits in a task of its own, so a caller that
    /// goes away while it waits (a client gone, a cancelled run) may still see the
    /// commit land: then the files must stay, and what no commit reaches is `lh gc`'s.
    ///
    /// `by` must be allowed to write every table the commit changes (its role's grants
    /// on `branch` and the tables' namespaces): the one check of every table write, the
    /// API's, the Iceberg REST catalog's and a run's alike.
    pub async fn commit(self, branch: &str, by: &Identity, meta: CommitMeta) -> Result<Committed> {
        if super::is_run_branch(branch) {
            return Err(super::run_branch_refused(branch, "a direct write"));
        }
        self.commit_as(branch, branch, by, meta).await
    }

    /// [`commit`](Self::commit) on `branch` with `by`'s grants on `grants_on`: a run's
    /// commit on its own branch, checked as a write to its target.
    pub async fn commit_as(
        self,
        branch: &str,
        grants_on: &str,
        by: &Identity,
        meta: CommitMeta,
    ) -> Result<Committed> {
        for op in &self.ops {
            let table = match op {
                TableOp::Put { table, .. } | TableOp::Delete { table, .. } => table,
            };
            by.require_table(
                Action::Write,
                &lh_catalog::RefExpr::named(grants_on),
                table,
                "changing a table",
            )?;
        }
        // A protected branch changes only by a merge: dropped here, the transaction
        // removes what it wrote.
        self.tables
            .protected
            .check_direct(
                branch,
                "a direct write (an import, a table change, an Iceberg REST commit)",
            )
            .await?;
        self.land(branch, meta).await
    }

    /// Hands the staged changes to the catalog as one commit on `branch` (checked by
    /// [`commit_as`](Self::commit_as)); the files stay unless the catalog refused it.
    async fn land(mut self, branch: &str, meta: CommitMeta) -> Result<Committed> {
        let ops = std::mem::take(&mut self.ops);
        let written = std::mem::take(&mut self.written);
        match self.tables.catalog.commit(branch, ops, meta).await {
            Ok(commit) => Ok(Committed {
                commit,
                versions: std::mem::take(&mut self.versions),
            }),
            Err(e) => {
                let e = Error::from(e);
                // Refused: nothing points at the files. Otherwise the commit may have
                // landed, and what it points at stays.
                if !e.commit_state_unknown() {
                    self.tables.remove_written(&written);
                }
                Err(e)
            }
        }
    }
}

impl Tables {
    /// Removes metadata files no commit points at.
    fn remove_written(&self, written: &[String]) {
        self.warehouse.remove_files(written);
    }
}

impl Drop for Transaction<'_> {
    /// The metadata files of a transaction abandoned before it asked for its commit.
    fn drop(&mut self) {
        self.tables.remove_written(&self.written);
    }
}

impl Tables {
    /// Checks a put and writes the table's next version: its metadata file with the
    /// files it names, at once. Nothing is committed: a transaction adopts the result
    /// ([`Transaction::adopt`]); dropped before, its files are removed. lh's own writes
    /// call this outside a transaction, while their data files upload: the files are
    /// new, which `lh gc` spares by their age.
    pub async fn write_put(&self, p: Put) -> Result<WrittenPut<'_>> {
        let name = p.table.as_str();
        let current = p.current.as_ref().map(|t| t.metadata.as_ref());
        for r in &p.requirements {
            r.check(current).map_err(|e| {
                let why = current
                    .and_then(|m| failed_requirement(r, m))
                    .unwrap_or_else(|| e.message().to_string());
                let message = format!("table '{name}': {why}");
                if current.is_none() && !matches!(r, TableRequirement::NotExist) {
                    Error::not_found(Code::TableNotFound, message)
                } else {
                    Error::new(Kind::Conflict, Code::RequirementFailed, message)
                }
            })?;
        }
        self.check_updates(name, &p.updates)?;
        // Whatever the base (the table as read, one made for this change, or none: a
        // staged create's updates make it), each snapshot added takes the next number.
        let mut last = match (&p.base, &p.current) {
            (Base::Made(m), _) => m.last_sequence_number(),
            (Base::AsRead, Some(t)) => t.metadata.last_sequence_number(),
            (Base::AsRead, None) => 0,
        };
        for u in &p.updates {
            if let TableUpdate::AddSnapshot { snapshot } = u {
                check_snapshot_bounds(snapshot, last)?;
                last = last.max(snapshot.sequence_number());
            }
        }
        // The snapshots a client adds (their lists and parents), and what lh made itself
        // for this put (its own files).
        let added: Vec<(String, Option<i64>)> = p
            .updates
            .iter()
            .filter_map(|u| match u {
                TableUpdate::AddSnapshot { snapshot } => Some((
                    snapshot.manifest_list().to_string(),
                    snapshot.parent_snapshot_id(),
                )),
                _ => None,
            })
            .collect();
        let made: std::collections::HashSet<String> =
            p.files.iter().map(|(l, _)| l.clone()).collect();
        let manifest_lists: Vec<String> = p
            .updates
            .iter()
            .filter_map(|u| match u {
                TableUpdate::AddSnapshot { snapshot } => Some(snapshot.manifest_list().to_string()),
                _ => None,
            })
            .collect();
        let previous = p
            .current
            .as_ref()
            .map(|t| t.pointer.metadata_location.clone());
        let metadata = match (p.base, &p.current) {
            (Base::AsRead, Some(t)) => {
                next_metadata((*t.metadata).clone(), previous.clone(), p.updates)?
            }
            (Base::AsRead, None) => self.made_by_updates(name, p.updates)?,
            (Base::Made(m), _) if p.updates.is_empty() => *m,
            (Base::Made(m), _) => next_metadata(*m, previous.clone(), p.updates)?,
        };
        let canonical = self.warehouse.canonical(metadata.location()).map_err(|_| {
            outside(format!(
                "location '{}' is outside the warehouse",
                metadata.location()
            ))
        })?;
        // A new snapshot's manifest list is the table's own: one under another table's
        // folder would graft that table's data onto this one, past its grants.
        let own = format!("{}/", canonical.trim_end_matches('/'));
        for list in &manifest_lists {
            let list = self
                .warehouse
                .canonical(list)
                .unwrap_or_else(|_| list.clone());
            if !list.starts_with(&own) {
                return Err(outside(format!(
                    "table '{name}': manifest list '{list}' is not under the table's location '{canonical}'"
                )));
            }
        }
        self.check_new_manifests(
            name,
            &own,
            metadata.format_version(),
            p.current.as_ref(),
            &added,
            &made,
        )
        .await?;
        // Every location is stored in the spelling the server reads back.
        let metadata = if canonical == metadata.location() {
            metadata
        } else {
            TableMetadataBuilder::new_from_metadata(metadata, previous.clone())
                .set_location(canonical)
                .build()
                .map_err(invalid_update)?
                .metadata
        };
        let mut files: Vec<String> = p.files.iter().map(|(l, _)| l.clone()).collect();
        let location = self
            .write_version(&metadata, previous.as_deref(), p.files)
            .await?;
        files.push(location.clone());
        let pointer = pointer_of(&location, &metadata);
        Ok(WrittenPut {
            pending: Uncommitted {
                tables: self,
                files,
            },
            expected: p.current.map(|t| t.pointer),
            version: Version {
                table: p.table,
                pointer,
                metadata: Arc::new(metadata),
            },
        })
    }

    /// The manifests a client's new snapshots add (those neither the table's current
    /// snapshot nor the snapshot each grows from lists) are under the table's folder,
    /// and so is every file they list, unless the current snapshot already reads it or
    /// the entry records its removal: a snapshot whose list is the table's own but
    /// names another table's manifests or data files would graft that table's rows
    /// onto this one, past its grants. The folder is the one the table had before this
    /// commit (`own` only for a new table), so a client cannot widen it by moving the
    /// table. Lists lh made itself (`made`) are not read again: lh checked what they
    /// carry (a client's append it rebased, [`super::snapshot::ClientAppend`]).
    async fn check_new_manifests(
        &self,
        name: &str,
        own: &str,
        format: iceberg::spec::FormatVersion,
        current: Option<&LoadedTable>,
        added: &[(String, Option<i64>)],
        made: &std::collections::HashSet<String>,
    ) -> Result<()> {
        use std::collections::HashSet;
        let added: Vec<&(String, Option<i64>)> =
            added.iter().filter(|(l, _)| !made.contains(l)).collect();
        if added.is_empty() {
            return Ok(());
        }
        let unreadable = |what: &str, location: &str, e: String| {
            Error::bad_request(
                Code::BadRequest,
                format!("table '{name}': cannot read the {what} '{location}': {e}"),
            )
        };
        let own = match current {
            Some(t) => format!(
                "{}/",
                self.warehouse
                    .canonical(t.metadata.location())
                    .unwrap_or_else(|_| t.metadata.location().to_string())
                    .trim_end_matches('/')
            ),
            None => own.to_string(),
        };
        let io = self.warehouse.io();
        let inside = |location: &str| {
            self.warehouse
                .canonical(location)
                .ok()
                .filter(|c| c.starts_with(&own))
        };
        let read_list = |location: String, format: iceberg::spec::FormatVersion| async move {
            let bytes = io
                .new_input(&location)?
                .read()
                .await
                .map_err(|e| unreadable("manifest list", &location, e.to_string()))?;
            Ok::<Vec<iceberg::spec::ManifestFile>, Error>(
                iceberg::spec::ManifestList::parse_with_version(&bytes, format)
                    .map_err(|e| unreadable("manifest list", &location, e.to_string()))?
                    .consume_entries()
                    .into_iter()
                    .collect(),
            )
        };
        // What the table reads now, and what each new snapshot grows from, is trusted:
        // it was checked when it was added (or added by an admin).
        let mut known = HashSet::new();
        let mut live = HashSet::new();
        if let Some(t) = current {
            let mut trusted: Vec<&str> = Vec::new();
            if let Some(s) = t.metadata.current_snapshot() {
                trusted.push(s.manifest_list());
            }
            for (_, parent) in &added {
                if let Some(s) = parent.and_then(|id| t.metadata.snapshot_by_id(id)) {
                    trusted.push(s.manifest_list());
                }
            }
            trusted.sort_unstable();
            trusted.dedup();
            for list in trusted {
                for m in read_list(list.to_string(), t.metadata.format_version()).await? {
                    known.insert(m.manifest_path);
                }
            }
            if let Ok(files) = self.live_files(t).await {
                live.extend(files.data.iter().map(|f| f.url.clone()));
                live.extend(files.position_deletes.iter().map(|(u, _)| u.clone()));
                live.extend(files.equality_deletes.iter().map(|d| d.url.clone()));
            }
        }
        for (list, _) in added {
            let list = inside(list).ok_or_else(|| {
                outside(format!(
                    "table '{name}': manifest list '{list}' is not under the table's location"
                ))
            })?;
            for m in read_list(list, format).await? {
                if known.contains(&m.manifest_path) || made.contains(&m.manifest_path) {
                    continue;
                }
                let path = inside(&m.manifest_path).ok_or_else(|| {
                    outside(format!(
                        "table '{name}': manifest '{}' is not under the table's location",
                        m.manifest_path
                    ))
                })?;
                let raw = io
                    .new_input(&path)?
                    .read()
                    .await
                    .map_err(|e| unreadable("manifest", &path, e.to_string()))?;
                let manifest = iceberg::spec::Manifest::parse_avro(&raw)
                    .map_err(|e| unreadable("manifest", &path, e.to_string()))?;
                let foreign = manifest.entries().iter().find(|e| {
                    e.status() != iceberg::spec::ManifestStatus::Deleted
                        && !live.contains(e.file_path())
                        && inside(e.file_path()).is_none()
                });
                if let Some(e) = foreign {
                    return Err(outside(format!(
                        "table '{name}': manifest '{}' names '{}', which is not under the table's location",
                        m.manifest_path,
                        e.file_path()
                    )));
                }
                known.insert(m.manifest_path);
            }
        }
        Ok(())
    }

    /// lh's rules for any update: no client may delete files other refs read, and a
    /// snapshot's files stay in the warehouse.
    fn check_updates(&self, name: &str, updates: &[TableUpdate]) -> Result<()> {
        let set: usize = updates
            .iter()
            .map(|u| match u {
                TableUpdate::SetProperties { updates } => properties_bytes(updates),
                _ => 0,
            })
            .sum();
        if set > MAX_PROPERTIES_BYTES {
            return Err(too_many_properties(name, set));
        }
        // Expiring snapshots is refused: the client deletes the expired snapshots' files
        // once the commit succeeds (Spark's and pyiceberg's procedures do), but older lh
        // commits, other refs and tags still read them. lh gc removes what nothing reads.
        if updates
            .iter()
            .any(|u| matches!(u, TableUpdate::RemoveSnapshots { .. }))
        {
            return Err(Error::bad_request(
                Code::SnapshotsKept,
                format!(
                    "table '{name}': lh keeps every snapshot, because older lh commits and other \
                     refs read their files; expiring them would let the client delete those \
                     files. lh's garbage collection removes unreferenced files instead"
                ),
            ));
        }
        // Nor may a client turn the file-deletion guard off.
        if updates.iter().any(|u| {
            matches!(u, TableUpdate::SetProperties { updates } if updates
                .get(GC_ENABLED)
                .is_some_and(|v| !v.eq_ignore_ascii_case("false")))
        }) {
            return Err(Error::bad_request(
                Code::GcEnabled,
                format!(
                    "table '{name}': {GC_ENABLED} stays false in lh, because other refs and older \
                     commits share the table's files. lh's garbage collection removes unreferenced files"
                ),
            ));
        }
        // A snapshot's files stay in the warehouse: the server reads manifest lists.
        for u in updates {
            if let TableUpdate::AddSnapshot { snapshot } = u {
                self.warehouse.key(snapshot.manifest_list()).map_err(|_| {
                    outside(format!(
                        "manifest list '{}' is outside the warehouse",
                        snapshot.manifest_list()
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// A table made by a commit (a staged create): its first schema, and the spec and
    /// order sent before any second schema, its location and properties come from the
    /// updates; the rest of the updates apply on top, in order. (A transaction that adds
    /// a schema, sets it current with `-1`, then adds another and sets that one current
    /// ends on the last: once only the first was kept, and a spec on a later schema's
    /// column was refused.)
    fn made_by_updates(&self, name: &str, updates: Vec<TableUpdate>) -> Result<TableMetadata> {
        let mut schema = None;
        let mut spec = None;
        let mut order = None;
        let mut location = None;
        let mut props = HashMap::new();
        let mut uuid = None;
        let mut format = FormatVersion::V2;
        let mut rest = Vec::new();
        // Whether a second schema came: a spec or order after it may use its columns.
        let mut evolved = false;
        for u in updates {
            match u {
                TableUpdate::AddSchema { schema: s, .. } if schema.is_none() => schema = Some(s),
                TableUpdate::AddSpec { spec: s } if spec.is_none() && !evolved => spec = Some(s),
                TableUpdate::AddSortOrder { sort_order } if order.is_none() && !evolved => {
                    order = Some(sort_order)
                }
                TableUpdate::AddSchema { .. } => {
                    evolved = true;
                    rest.push(u);
                }
                TableUpdate::SetLocation { location: l } => location = Some(l),
                TableUpdate::SetProperties { mut updates } => {
                    if let Some(v) = updates.remove("format-version") {
                        format = format_version(Some(&v))?;
                    }
                    props.extend(updates)
                }
                TableUpdate::AssignUuid { uuid: u } => uuid = Some(u),
                TableUpdate::UpgradeFormatVersion { format_version } => format = format_version,
                // The first schema, spec and order are current once made; `-1` after
                // them names them again, and after a later one, that one.
                other => rest.push(other),
            }
        }
        let schema = schema.ok_or_else(|| {
            Error::bad_request(
                Code::InvalidUpdate,
                "creating a table needs an add-schema update",
            )
        })?;
        let uuid = uuid.unwrap_or_else(Uuid::now_v7);
        let location = match location {
            Some(l) => self
                .warehouse
                .canonical(&l)
                .map_err(|_| outside(format!("location '{l}' is outside the warehouse")))?,
            None => self
                .warehouse
                .new_table_location(&lh_catalog::names::levels(name)?, &uuid),
        };
        let mut b = first_metadata(
            schema,
            spec.unwrap_or_else(|| UnboundPartitionSpec::builder().build()),
            order.unwrap_or_else(SortOrder::unsorted_order),
            location,
            format,
            props,
            uuid,
        )
        .map_err(invalid_update)?;
        for u in rest {
            b = u.apply(b).map_err(invalid_update)?;
        }
        let m = b.build().map_err(invalid_update)?.metadata;
        check_kept(name, &m)?;
        Ok(m)
    }
}

/// Files written for a commit that has not happened: removed when this is dropped,
/// unless kept.
struct Uncommitted<'a> {
    tables: &'a Tables,
    files: Vec<String>,
}

impl Uncommitted<'_> {
    fn keep(mut self) {
        self.files.clear();
    }
}

impl Drop for Uncommitted<'_> {
    fn drop(&mut self) {
        if !self.files.is_empty() {
            self.tables.remove_written(&self.files);
        }
    }
}

/// A table version written by [`Tables::write_put`], not committed yet.
pub struct WrittenPut<'a> {
    pending: Uncommitted<'a>,
    expected: Option<TablePointer>,
    version: Version,
}

impl WrittenPut<'_> {
    /// Keeps the version's files, whatever happens to the commit that will name it (a
    /// merge's): what no commit reaches, `lh gc` removes. Its pointer.
    pub fn keep(self) -> TablePointer {
        self.pending.keep();
        self.version.pointer
    }
}

/// The builder of a table's first metadata, with the uuid lh chose; updates may follow.
pub fn first_metadata(
    schema: Schema,
    spec: UnboundPartitionSpec,
    order: SortOrder,
    location: String,
    format: FormatVersion,
    properties: HashMap<String, String>,
    uuid: Uuid,
) -> iceberg::Result<TableMetadataBuilder> {
    Ok(
        TableMetadataBuilder::new(schema, spec, order, location, format, properties)?
            .assign_uuid(uuid),
    )
}

/// `m`, a new table's metadata, with its field ids in the order Java's `AssignFreshIds`
/// (and pyiceberg's) gives them: a struct's fields first, then each one's type, a map's
/// key and value before what is inside either. The iceberg crate numbers what is inside
/// a map's key before the value (`{key: struct<a, b>, value: struct<c>}` got key 1, a 2,
/// b 3, value 4; Java's value is 2), so a client expecting Java's ids altered the wrong
/// column (pyiceberg's test_mixed_changes). Ids are renumbered wherever metadata names
/// them: the schema, its identifier fields, partition and sort fields.
fn java_field_ids(m: TableMetadata) -> Result<TableMetadata> {
    use serde_json::Value;
    fn number(fields: &[Value], next: &mut i64, ids: &mut HashMap<i64, i64>) {
        for f in fields {
            take(&f["id"], next, ids);
        }
        for f in fields {
            number_type(&f["type"], next, ids);
        }
    }
    fn take(id: &Value, next: &mut i64, ids: &mut HashMap<i64, i64>) {
        if let Some(id) = id.as_i64() {
            ids.insert(id, *next);
            *next += 1;
        }
    }
    fn number_type(t: &Value, next: &mut i64, ids: &mut HashMap<i64, i64>) {
        match t["type"].as_str() {
            Some("struct") => number(t["fields"].as_array().map_or(&[], |f| f), next, ids),
            Some("list") => {
                take(&t["element-id"], next, ids);
                number_type(&t["element"], next, ids);
            }
            Some("map") => {
                take(&t["key-id"], next, ids);
                take(&t["value-id"], next, ids);
                number_type(&t["key"], next, ids);
                number_type(&t["value"], next, ids);
            }
            _ => {}
        }
    }
    /// Each id under one of `keys` (a number, or an array of them) renumbered.
    fn renumber(v: &mut Value, keys: &[&str], ids: &HashMap<i64, i64>) {
        let new = |id: &mut Value| {
            if let Some(old) = id.as_i64() {
                *id = Value::from(*ids.get(&old).unwrap_or(&old));
            }
        };
        match v {
            Value::Object(o) => {
                for (k, v) in o.iter_mut() {
                    match (keys.contains(&k.as_str()), v) {
                        (true, Value::Array(a)) => a.iter_mut().for_each(new),
                        (true, id) if id.is_i64() => new(id),
                        (_, v) => renumber(v, keys, ids),
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| renumber(v, keys, ids)),
            _ => {}
        }
    }
    let failed = |e: serde_json::Error| {
        Error::internal(format!("cannot renumber the new table's fields: {e}"))
    };
    let mut v = serde_json::to_value(&m).map_err(failed)?;
    let mut ids = HashMap::new();
    let mut next = 1;
    let schema = v["schemas"][0].clone();
    number(
        schema["fields"].as_array().map_or(&[], |f| f),
        &mut next,
        &mut ids,
    );
    if ids.iter().all(|(old, new)| old == new) {
        return Ok(m);
    }
    let field_ids = [
        "id",
        "element-id",
        "key-id",
        "value-id",
        "identifier-field-ids",
    ];
    for key in ["schemas", "schema"] {
        if let Some(x) = v.get_mut(key) {
            renumber(x, &field_ids, &ids);
        }
    }
    for key in ["partition-specs", "partition-spec", "sort-orders"] {
        if let Some(x) = v.get_mut(key) {
            renumber(x, &["source-id"], &ids);
        }
    }
    serde_json::from_value(v).map_err(failed)
}

/// `base` with `updates` applied; `previous` (the file `base` was read from) goes into
/// the metadata log.
fn next_metadata(
    base: TableMetadata,
    previous: Option<String>,
    updates: Vec<TableUpdate>,
) -> Result<TableMetadata> {
    let mut b = TableMetadataBuilder::new_from_metadata(base, previous);
    for u in updates {
        b = u.apply(b).map_err(invalid_update)?;
    }
    let m = b.build().map_err(invalid_update)?.metadata;
    check_kept("", &m)?;
    Ok(m)
}

/// The most columns (nested fields included) one schema of a table may have, and all
/// its schemas together. Parsed, a field takes some two kilobytes of the server's
/// memory, in every load of the table (the thirty-seventh review: three schemas of
/// 240,000 fields, 45 MB of metadata, took one load to 1.35 GB and two to 2.38 GB).
pub const MAX_SCHEMA_FIELDS: usize = 10_000;
pub const MAX_TABLE_FIELDS: usize = 100_000;

/// Refuses metadata whose properties or fields pass what lh keeps of a table
/// ([`MAX_PROPERTIES_BYTES`], [`MAX_SCHEMA_FIELDS`], [`MAX_TABLE_FIELDS`]).
fn check_kept(name: &str, m: &TableMetadata) -> Result<()> {
    let size = properties_bytes(m.properties());
    if size > MAX_PROPERTIES_BYTES {
        return Err(too_many_properties(name, size));
    }
    let mut total = 0;
    for schema in m.schemas_iter() {
        let n = schema.field_id_to_fields().len();
        if n > MAX_SCHEMA_FIELDS {
            return Err(Error::bad_request(
                Code::InvalidUpdate,
                format!(
                    "schema {} has {n} fields (nested ones included); at most {MAX_SCHEMA_FIELDS}",
                    schema.schema_id()
                ),
            ));
        }
        total += n;
    }
    if total > MAX_TABLE_FIELDS {
        return Err(Error::bad_request(
            Code::InvalidUpdate,
            format!(
                "the table's schemas would hold {total} fields together; at most {MAX_TABLE_FIELDS}"
            ),
        ));
    }
    Ok(())
}

/// A failed requirement in the words of Iceberg's reference implementation (Java's
/// `UpdateRequirement`), which clients match: pyiceberg's own tests look for "default
/// partition spec changed". `None` when `r` holds on `m`.
fn failed_requirement(r: &TableRequirement, m: &TableMetadata) -> Option<String> {
    let changed = |what: &str, want: String, have: String| {
        Some(format!(
            "Requirement failed: {what} changed: expected id {want} != {have}"
        ))
    };
    match r {
        TableRequirement::NotExist => Some("Requirement failed: table already exists".into()),
        TableRequirement::UuidMatch { uuid } if *uuid != m.uuid() => Some(format!(
            "Requirement failed: UUID does not match: expected {} != {uuid}",
            m.uuid()
        )),
        TableRequirement::RefSnapshotIdMatch { r#ref, snapshot_id } => {
            let have = m.snapshot_for_ref(r#ref).map(|s| s.snapshot_id());
            // (the crate does not say whether a ref is a tag; lh's REST clients commit
            // to branches)
            let kind = "branch";
            match (snapshot_id, have) {
                (Some(want), Some(have)) if *want != have => Some(format!(
                    "Requirement failed: {kind} {ref} has changed: expected id {want} != {have}",
                    ref = r#ref
                )),
                (Some(want), None) => Some(format!(
                    "Requirement failed: branch or tag {} is missing, expected {want}",
                    r#ref
                )),
                (None, Some(_)) => Some(format!(
                    "Requirement failed: {kind} {} was created concurrently",
                    r#ref
                )),
                _ => None,
            }
        }
        TableRequirement::LastAssignedFieldIdMatch {
            last_assigned_field_id: want,
        } if *want != m.last_column_id() => changed(
            "last assigned field id",
            want.to_string(),
            m.last_column_id().to_string(),
        ),
        TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: want,
        } if *want != m.current_schema_id() => changed(
            "current schema",
            want.to_string(),
            m.current_schema_id().to_string(),
        ),
        TableRequirement::LastAssignedPartitionIdMatch {
            last_assigned_partition_id: want,
        } if *want != m.last_partition_id() => changed(
            "last assigned partition id",
            want.to_string(),
            m.last_partition_id().to_string(),
        ),
        TableRequirement::DefaultSpecIdMatch {
            default_spec_id: want,
        } if *want != m.default_partition_spec_id() => changed(
            "default partition spec",
            want.to_string(),
            m.default_partition_spec_id().to_string(),
        ),
        TableRequirement::DefaultSortOrderIdMatch {
            default_sort_order_id: want,
        } if *want != m.default_sort_order_id() => changed(
            "default sort order",
            want.to_string(),
            m.default_sort_order_id().to_string(),
        ),
        _ => None,
    }
}

/// The largest a table's metadata file may be: every load of the table reads and sends
/// all of it (the thirty-sixth review: eight schema changes with a 12 MiB column
/// description each made it 100 MB, and twelve loads of it at once took the server to
/// 1.9 GB). lh keeps every snapshot, about a kilobyte each: some sixty thousand commits.
pub const MAX_METADATA_BYTES: usize = 64 << 20;

/// What a table's properties may hold, keys and values together. Every version of its
/// metadata carries them, every load reads them, and a commit's work grows with them:
/// the thirty-fifth review's 700,000 properties (12 MB) made each load 10.5 MB and each
/// commit of them take some 200 MB for a while. Iceberg's own are a few dozen bytes.
pub const MAX_PROPERTIES_BYTES: usize = 1 << 20;

/// What properties hold, keys and values together.
pub(crate) fn properties_bytes<'a>(p: impl IntoIterator<Item = (&'a String, &'a String)>) -> usize {
    p.into_iter().map(|(k, v)| k.len() + v.len()).sum()
}

fn too_many_properties(name: &str, size: usize) -> Error {
    let table = if name.is_empty() {
        "the table".to_string()
    } else {
        format!("table '{name}'")
    };
    Error::bad_request(
        Code::InvalidUpdate,
        format!(
            "{table}: its properties would hold {size} bytes; at most {MAX_PROPERTIES_BYTES} (1 MiB) are kept"
        ),
    )
}

/// How far ahead of the server's clock a client's snapshot may be dated: Iceberg's own
/// tolerance (a snapshot may not be older than the table's last update less a minute),
/// so that one dated ahead holds other writers back no longer than that.
const MAX_SNAPSHOT_CLOCK_SKEW_MS: i64 = 60_000;

/// A client's snapshot takes the table's next sequence number and is dated no later
/// than now (give or take a minute): one numbered or dated far ahead (`i64::MAX`) would
/// leave every later writer unable to number or date its own snapshot after it.
fn check_snapshot_bounds(snapshot: &iceberg::spec::Snapshot, last_sequence: i64) -> Result<()> {
    let next = last_sequence.saturating_add(1);
    if snapshot.sequence_number() > next {
        return Err(Error::bad_request(
            Code::InvalidUpdate,
            format!(
                "snapshot {} has sequence number {}; the table's next is {next}",
                snapshot.snapshot_id(),
                snapshot.sequence_number()
            ),
        ));
    }
    let now = chrono::Utc::now().timestamp_millis();
    if snapshot.timestamp_ms() > now.saturating_add(MAX_SNAPSHOT_CLOCK_SKEW_MS) {
        return Err(Error::bad_request(
            Code::InvalidUpdate,
            format!(
                "snapshot {} is dated {} ms after the epoch, more than a minute past the \
                 server's clock ({now})",
                snapshot.snapshot_id(),
                snapshot.timestamp_ms()
            ),
        ));
    }
    Ok(())
}

/// The format a new table asks for with the reserved `format-version` property (default 2).
fn format_version(asked: Option<&str>) -> Result<FormatVersion> {
    match asked {
        None | Some("2") => Ok(FormatVersion::V2),
        Some("1") => Ok(FormatVersion::V1),
        Some("3") => Ok(FormatVersion::V3),
        Some(v) => Err(Error::bad_request(
            Code::InvalidUpdate,
            format!("unknown Iceberg format version '{v}'"),
        )),
    }
}

/// Updates that do not apply to the table (iceberg-rust's builder said why).
fn invalid_update(e: iceberg::Error) -> Error {
    Error::bad_request(Code::InvalidUpdate, e.to_string())
}

fn outside(message: String) -> Error {
    Error::bad_request(Code::OutsideWarehouse, message)
}

fn pointer_of(location: &str, m: &TableMetadata) -> TablePointer {
    TablePointer {
        metadata_location: location.to_string(),
        table_uuid: m.uuid().to_string(),
        snapshot_id: m.current_snapshot_id(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    use lh_catalog::CommitMeta;

    use super::*;

    async fn tables(dir: &std::path::Path) -> Arc<Tables> {
        crate::write::tests_support::open_tables(dir).await
    }

    fn new_table() -> NewTable {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "x", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        NewTable {
            location: None,
            schema,
            partition_spec: None,
            sort_order: None,
            properties: HashMap::new(),
        }
    }

    fn set(key: &str, value: &str) -> TableUpdate {
        TableUpdate::SetProperties {
            updates: HashMap::from([(key.to_string(), value.to_string())]),
        }
    }

    fn put(current: Option<LoadedTable>, updates: Vec<TableUpdate>) -> Change {
        Change::Put(Put {
            table: "s.t".into(),
            current,
            base: Base::AsRead,
            requirements: Vec::new(),
            updates,
            files: Vec::new(),
        })
    }

    fn exists(t: &Tables, location: &str) -> bool {
        t.warehouse.local_path(location).unwrap().exists()
    }

    /// A new table's field ids are Java's: a map's key and value before what is inside
    /// either, and the partition and sort fields follow them.
    #[tokio::test]
    async fn a_new_tables_field_ids_are_numbered_as_java_numbers_them() {
        use iceberg::spec::{MapType, StructType, Transform, UnboundPartitionSpec};
        let dir = tempfile::tempdir().unwrap();
        let t = tables(dir.path()).await;
        let key = StructType::new(vec![
            NestedField::required(20, "a", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(21, "b", Type::Primitive(PrimitiveType::Int)).into(),
        ]);
        let value = StructType::new(vec![
            NestedField::required(12, "lat", Type::Primitive(PrimitiveType::Double)).into(),
        ]);
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::required(
                    4,
                    "locations",
                    Type::Map(MapType::new(
                        NestedField::map_key_element(10, Type::Struct(key)).into(),
                        NestedField::map_value_element(11, Type::Struct(value), true).into(),
                    )),
                )
                .into(),
            ])
            .with_identifier_field_ids(vec![1])
            .build()
            .unwrap();
        let mut table = new_table();
        table.schema = schema;
        table.partition_spec = Some(
            UnboundPartitionSpec::builder()
                .add_partition_field(1, "id_bucket", Transform::Bucket(4))
                .unwrap()
                .build(),
        );
        let m = t.new_table("s.t", table).unwrap();
        let s = m.current_schema();
        let id = |name: &str| s.field_by_name(name).unwrap().id;
        assert_eq!(id("id"), 1);
        assert_eq!(id("locations"), 2);
        let Type::Map(map) = s.field_by_name("locations").unwrap().field_type.as_ref() else {
            panic!("not a map");
        };
        assert_eq!((map.key_field.id, map.value_field.id), (3, 4));
        assert_eq!((id("locations.key.a"), id("locations.key.b")), (5, 6));
        assert_eq!(id("locations.value.lat"), 7);
        assert_eq!(m.last_column_id(), 7);
        assert_eq!(m.default_partition_spec().fields()[0].source_id, 1);
        assert_eq!(s.identifier_field_ids().collect::<Vec<_>>(), vec![1]);
    }

    /// Two writers read the same version; the second's commit is refused as a conflict
    /// and its metadata file is gone, the first's stays.
    #[tokio::test]
    async fn a_refused_commit_removes_the_metadata_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let t = tables(dir.path()).await;
        let m = t.new_table("s.t", new_table()).unwrap();
        let create = Change::Put(Put {
            table: "s.t".into(),
            current: None,
            base: Base::Made(Box::new(m)),
            requirements: Vec::new(),
            updates: Vec::new(),
            files: Vec::new(),
        });
        let made = t
            .commit(
                "main",
                &Identity::admin("t"),
                vec![create],
                CommitMeta::new("t", "create"),
            )
            .await
            .unwrap();
        assert!(exists(&t, &made.versions[0].pointer.metadata_location));
        let head = t.catalog.resolve("main").await.unwrap().commit;
        let read = t.load(&head, "s.t").await.unwrap().unwrap();

        let mut first = t.begin().await;
        first
            .stage(put(Some(read.clone()), vec![set("a", "1")]))
            .await
            .unwrap();
        let first = first
            .commit("main", &Identity::admin("t"), CommitMeta::new("t", "a"))
            .await
            .unwrap();
        let mut second = t.begin().await;
        second
            .stage(put(Some(read), vec![set("b", "2")]))
            .await
            .unwrap();
        let written = second.written.clone();
        assert_eq!(written.len(), 1);
        assert!(exists(&t, &written[0]));
        let e = second
            .commit("main", &Identity::admin("t"), CommitMeta::new("t", "b"))
            .await
            .err()
            .unwrap();
        assert_eq!(e.code, "conflict");
        assert!(!exists(&t, &written[0]));
        assert!(exists(&t, &first.versions[0].pointer.metadata_location));
    }

    /// A transaction that has staged a new table `s.t`, with the files it wrote.
    async fn staged_create(t: &Tables) -> (Transaction<'_>, Vec<String>) {
        let mut tx = t.begin().await;
        tx.stage(put(
            None,
            vec![TableUpdate::AddSchema {
                schema: new_table().schema,
            }],
        ))
        .await
        .unwrap();
        let written = tx.written.clone();
        (tx, written)
    }

    /// A caller that goes away while the catalog commits (a client gone, a cancelled
    /// run) must not take the files with it: the catalog's writer task still lands the
    /// commit, and a pointer at a removed metadata file would break the table and every
    /// later `lh gc`. (Found in review of the move onto one commit path.)
    #[tokio::test]
    async fn a_commit_abandoned_while_the_catalog_works_keeps_its_files() {
        use futures::FutureExt;
        let dir = tempfile::tempdir().unwrap();
        let t = tables(dir.path()).await;
        let (tx, written) = staged_create(&t).await;
        // Past its checks, one poll hands the commit to the catalog's writer task; then
        // the caller leaves.
        let pending = tx
            .land("main", CommitMeta::new("t", "create"))
            .now_or_never();
        assert!(pending.is_none(), "the commit finished in one poll");
        let mut landed = None;
        for _ in 0..500 {
            let head = t.catalog.resolve("main").await.unwrap().commit;
            if let Some(table) = t.catalog.table_in(&head, "s.t").await.unwrap() {
                landed = Some(table);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let landed = landed.expect("the abandoned commit landed");
        assert_eq!(landed.metadata_location, written[0]);
        assert!(exists(&t, &written[0]));
    }

    /// A transaction given up before its commit (a later change of it failed, the
    /// client left) leaves no file behind.
    #[tokio::test]
    async fn a_transaction_dropped_uncommitted_removes_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let t = tables(dir.path()).await;
        let (tx, written) = staged_create(&t).await;
        assert!(exists(&t, &written[0]));
        // A client may not turn off the guard against file deletion.
        let mut tx = tx;
        let e = tx
            .stage(put(None, vec![set(GC_ENABLED, "true")]))
            .await
            .err()
            .unwrap();
        assert_eq!(e.code, "gc_enabled");
        drop(tx);
        assert!(!exists(&t, &written[0]));
        let head = t.catalog.resolve("main").await.unwrap().commit;
        assert!(t.load(&head, "s.t").await.unwrap().is_none());
    }
}
