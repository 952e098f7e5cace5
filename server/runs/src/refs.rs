//! The refs service: branches and tags, their history, diffs and merges.
//!
//! Each method validates, authorizes and acts: its caller (lh's HTTP API) parses the
//! request, calls one method, and words the answer. What a caller may see of history
//! (`auth::history`) holds in every answer: a request reads the exact commit its limits
//! were computed for, and a commit that changed a table the caller may not read is shown
//! without its message and properties.

use std::sync::Arc;

use lh_catalog::{
    Catalog, Commit, CommitMeta, DiffKind, LogQuery, MergeOptions, RefExpr, RefKind, Reference,
    TablePointer,
};

use crate::RunService;
use crate::auth::protected::ProtectedBranches;
use crate::auth::{Action, Identity};
use crate::breaking::BreakingChange;
use crate::error::{Code, Error, Result};
use crate::merges::{Merged, Merger, Via};
use crate::query::QueryEngine;
use crate::query::diff::{ColumnChange, RowCounts, RowDiff, RowDiffRequest};
use crate::tables::Tables;

/// Branches and tags, as each caller may see and change them.
pub struct Refs {
    catalog: Catalog,
    tables: Arc<Tables>,
    queries: Arc<QueryEngine>,
    protected: Arc<ProtectedBranches>,
    merger: Arc<Merger>,
    runs: Arc<RunService>,
}

/// A ref, with its protection.
#[derive(Debug, Clone)]
pub struct RefView {
    pub reference: Reference,
    pub protected: bool,
    /// The checks a merge into it needs (a protected branch's).
    pub required_checks: Vec<String>,
}

impl RefView {
    fn plain(reference: Reference) -> RefView {
        RefView {
            reference,
            protected: false,
            required_checks: Vec::new(),
        }
    }
}

/// A page of history as a caller sees it.
pub struct LogPage {
    pub commits: Vec<Commit>,
    pub next_page_token: Option<String>,
}

/// The tables that differ between two commits a caller may read.
pub struct Diff {
    pub from: Commit,
    pub to: Commit,
    pub tables: Vec<TableChange>,
}

/// How one table differs between two commits, with what was found of its rows and
/// columns when asked.
#[derive(Debug, Clone)]
pub struct TableChange {
    pub table: String,
    pub change: DiffKind,
    /// Its pointer at the first commit (None: added).
    pub from: Option<TablePointer>,
    /// Its pointer at the second commit (None: removed).
    pub to: Option<TablePointer>,
    /// The rows added and removed (a diff asked for with rows).
    pub rows: Option<RowCounts>,
    /// Why the rows could not be counted (a table lh cannot read, a timeout).
    pub rows_error: Option<String>,
    /// Columns added, dropped, renamed or retyped, matched by Iceberg field id.
    pub schema_changes: Vec<ColumnChange>,
}

impl From<lh_catalog::TableDiff> for TableChange {
    fn from(d: lh_catalog::TableDiff) -> TableChange {
        TableChange {
            change: d.change(),
            table: d.table,
            from: d.from,
            to: d.to,
            rows: None,
            rows_error: None,
            schema_changes: Vec::new(),
        }
    }
}

/// One table's rows that differ between two commits.
pub struct RowsDiff {
    pub from: Commit,
    pub to: Commit,
    pub diff: RowDiff,
}

/// The rows of one table asked for between two ref expressions.
pub struct RowsAsk<'a> {
    pub from: &'a RefExpr,
    pub to: &'a RefExpr,
    pub table: &'a str,
    /// Columns that identify a row (empty: none).
    pub key: &'a [String],
    /// Rows to return (counts are always whole).
    pub limit: u64,
    /// Compare every row, skipping no shared file.
    pub full: bool,
}

/// What a merge did (or, previewed, would do), and the schema changes other projects'
/// runs on the target read.
pub struct MergeDone {
    pub merged: Merged,
    pub tables: Vec<TableChange>,
    pub breaking: Vec<BreakingChange>,
    pub breaking_unknown: Option<String>,
}

/// A merge as asked.
pub struct MergeAsk<'a> {
    pub from: &'a RefExpr,
    pub into: &'a str,
    /// The hash (or prefix) the target must still be at.
    pub expected_head: Option<&'a str>,
    pub message: String,
    pub properties: std::collections::BTreeMap<String, String>,
    pub no_fast_forward: bool,
    /// Only what it would do: the target does not move and no check runs.
    pub dry_run: bool,
    /// The side a table changed on both sides is taken from (none: a conflict).
    pub prefer: Option<lh_catalog::Side>,
    /// Per table, whatever `prefer` says.
    pub sides: std::collections::BTreeMap<String, lh_catalog::Side>,
}

/// At most this many changed tables are looked at for breaking changes after a merge.
const MAX_TABLES_CHECKED: usize = 100;

/// The most the search for readers of a merge's breaking changes may take (the merge is
/// made: its answer waits only this long).
const BREAKING_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// At most this many tables' rows are counted by one diff (a listing stays a listing).
const COUNTED: usize = 100;

impl Refs {
    pub fn new(runs: Arc<RunService>, protected: Arc<ProtectedBranches>) -> Refs {
        Refs {
            catalog: runs.catalog.clone(),
            tables: runs.tables.clone(),
            queries: runs.queries.clone(),
            merger: runs.merger.clone(),
            protected,
            runs,
        }
    }

    /// Every branch and tag `identity` may read (of `kind`, when given).
    pub async fn list(&self, identity: &Identity, kind: Option<&str>) -> Result<Vec<RefView>> {
        let refs = self.catalog.list_refs().await?;
        let protected = self.protected.list().await?;
        Ok(refs
            .into_iter()
            .filter(|r| kind.is_none_or(|k| k == r.kind.as_str()))
            .filter(|r| identity.access.on_ref(Action::Read, &r.name))
            .map(|r| RefView {
                protected: r.kind == RefKind::Branch && protected.contains(&r.name),
                reference: r,
                required_checks: Vec::new(),
            })
            .collect())
    }

    /// One branch or tag.
    pub async fn get(&self, identity: &Identity, name: &str) -> Result<RefView> {
        identity.require_ref(Action::Read, &RefExpr::named(name), "reading it")?;
        let mut r = RefView::plain(self.catalog.get_ref(name).await?);
        r.protected =
            r.reference.kind == RefKind::Branch && self.protected.is_protected(name).await?;
        if r.protected {
            r.required_checks = self.merger.checks.required(name).await?;
        }
        Ok(r)
    }

    /// A new branch or tag `name` at `from` (a ref expression), zero-copy.
    pub async fn create(
        &self,
        identity: &Identity,
        name: &str,
        kind: RefKind,
        from: &RefExpr,
    ) -> Result<RefView> {
        identity.require_ref(Action::Read, from, "creating a ref from it")?;
        if crate::tables::is_run_branch(name) {
            return Err(crate::tables::run_branch_refused(name, "creating it"));
        }
        identity.require_ref(
            Action::Write,
            &RefExpr::named(name),
            &format!("creating the {} '{name}'", kind.as_str()),
        )?;
        // A new ref holds every table of its source: none the identity could read there
        // and not here (history's limits on the source included), and it is made from
        // the very commit that was checked.
        let reads = crate::auth::history::scoped(&self.catalog, identity, from).await?;
        let pinned = reads.reads(from);
        if !reads
            .access
            .on_ref_every_namespace(Action::Read, from.ref_name().unwrap_or_default())
        {
            let source = self.catalog.resolve(&pinned).await?.commit;
            let tables: Vec<String> = self
                .catalog
                .tables_in(&source, None)
                .await?
                .into_iter()
                .map(|t| t.name)
                .collect();
            crate::merges::require_no_widening(
                identity,
                &reads,
                from,
                &RefExpr::named(name),
                &tables,
            )?;
        }
        let r = match kind {
            RefKind::Branch => self.catalog.create_branch(name, &pinned).await?,
            RefKind::Tag => self.catalog.create_tag(name, &pinned).await?,
        };
        Ok(RefView::plain(r))
    }

    /// Protects a branch (from then on it changes only by a merge), a merge into it
    /// needing `checks`. The route is an admin's (`auth::routes`).
    pub async fn protect(
        &self,
        identity: &Identity,
        name: &str,
        checks: &[String],
    ) -> Result<RefView> {
        let r = self.catalog.get_ref(name).await?;
        if r.kind != RefKind::Branch {
            return Err(Error::bad_request(
                Code::NotABranch,
                format!("'{name}' is a tag: tags never move, only branches are protected"),
            ));
        }
        // The checks first: a missing one refuses the whole request.
        self.merger.checks.require(name, checks).await?;
        if self.protected.protect(name, &identity.user).await? {
            tracing::info!(branch = %name, by = %identity.user, "branch protected");
        }
        Ok(RefView {
            reference: r,
            protected: true,
            required_checks: self.merger.checks.required(name).await?,
        })
    }

    /// Unprotects a branch (an admin's route).
    pub async fn unprotect(&self, identity: &Identity, name: &str) -> Result<RefView> {
        let was = self.protected.unprotect(name).await?;
        self.merger.checks.require(name, &[]).await?;
        let r = self.catalog.get_ref(name).await;
        if was {
            tracing::info!(branch = %name, by = %identity.user, "branch unprotected");
        }
        Ok(RefView::plain(r?))
    }

    /// Deletes a branch (if still at `expected`, a hash or prefix, when given) or a tag.
    pub async fn delete(
        &self,
        identity: &Identity,
        name: &str,
        kind: RefKind,
        expected: Option<&str>,
    ) -> Result<()> {
        let expected = match expected {
            Some(e) => Some(self.catalog.resolve(&format!("@{e}")).await?.commit.id),
            None => None,
        };
        match kind {
            // Tags never move: deleting one (and making it again elsewhere) is an
            // admin's.
            RefKind::Tag => {
                identity.require(Action::Admin, &format!("deleting the tag '{name}'"))?;
                Ok(self.catalog.delete_tag(name).await?)
            }
            RefKind::Branch => {
                // A branch's deletion takes every table of it away; a run's is an
                // admin's.
                identity.require_ref_whole(Action::Merge, name, "deleting it")?;
                if crate::tables::is_run_branch(name) {
                    identity
                        .require(Action::Admin, &format!("deleting the run branch '{name}'"))?;
                }
                self.protected.check_direct(name, "deleting it").await?;
                Ok(self.catalog.delete_branch(name, expected).await?)
            }
        }
    }

    /// Points branch `name` at `to` (a ref expression), if it is still at `expected`.
    pub async fn assign(
        &self,
        identity: &Identity,
        name: &str,
        to: &RefExpr,
        expected: &str,
    ) -> Result<RefView> {
        let branch = RefExpr::named(name);
        identity.require_ref(Action::Merge, &branch, "pointing it at another commit")?;
        identity.require_ref(Action::Read, to, "pointing a branch at it")?;
        if crate::tables::is_run_branch(name) {
            return Err(crate::tables::run_branch_refused(
                name,
                "pointing it elsewhere",
            ));
        }
        // One resolution of each side: what is checked is what the branch moves to.
        let expected = self.catalog.resolve(&format!("@{expected}")).await?.commit;
        let target = self.catalog.resolve(to).await?.commit;
        let diffs = self.catalog.diff_commits(&expected, &target).await?;
        let changed: Vec<String> = diffs.iter().map(|d| d.table.clone()).collect();
        // Every table the move changes, the identity may merge there (as for a merge),
        // and read where it comes from.
        let refused: Vec<&str> = changed
            .iter()
            .map(String::as_str)
            .filter(|t| !identity.can_table(Action::Merge, &branch, t))
            .collect();
        if !refused.is_empty() {
            return Err(crate::auth::roles::refused(
                &identity.user,
                &identity.access,
                Action::Merge,
                "pointing it at another commit",
                &format!(" on table(s) {} of '{name}'", refused.join(", ")),
            ));
        }
        let reads = crate::auth::history::scoped(&self.catalog, identity, to).await?;
        crate::merges::require_no_widening(identity, &reads, to, &branch, &changed)?;
        let here = crate::auth::history::scoped(&self.catalog, identity, &branch).await?;
        crate::merges::require_no_overwrite(identity, &here, &branch, &diffs)?;
        self.protected
            .check_direct(name, "pointing it at another commit")
            .await?;
        let moved = self
            .catalog
            .assign_branch(name, expected.id, &format!("@{}", target.id.to_hex()))
            .await?;
        Ok(RefView::plain(moved))
    }

    /// A page of `at`'s history as `identity` sees it (`until`: stop before that ref
    /// expression's commit).
    pub async fn log(
        &self,
        identity: &Identity,
        at: &RefExpr,
        mut query: LogQuery,
        until: Option<&RefExpr>,
    ) -> Result<LogPage> {
        identity.require_ref(Action::Read, at, "reading its history")?;
        // With a table: the history of the commit checked, not of the ref again.
        let mut log_at = at.clone();
        if let Some(t) = &query.table {
            let scoped = crate::auth::history::scoped(&self.catalog, identity, at).await?;
            scoped.require_table(Action::Read, at, t, "reading its history")?;
            log_at = scoped.reads(at);
        }
        if let Some(u) = until {
            identity.require_ref(Action::Read, u, "reading its history")?;
            query.until = Some(self.catalog.resolve(u).await?.commit.id);
        }
        // A page token is where an earlier page of this history stopped: a commit of its
        // first-parent line, the one the log walks. Any other commit (a hash seen
        // elsewhere, a merged branch's, a branch one may not read) is refused.
        if let Some(token) = &query.page_token {
            let head = self.catalog.resolve(&log_at).await?.commit.id;
            let inside = match token.parse::<lh_catalog::CommitId>() {
                Ok(t) => self
                    .catalog
                    .on_first_parent_line(t, head)
                    .await
                    .unwrap_or(false),
                Err(_) => false,
            };
            if !inside {
                return Err(Error::bad_request(
                    Code::InvalidArgument,
                    format!("invalid page token for the history of '{at}'"),
                ));
            }
        }
        let limits =
            crate::auth::history::Limits::of(&self.catalog, identity, at.ref_name()).await?;
        // With a filter (a table, properties): a commit counts only as the caller sees it
        // (a table it may read there, properties not hidden), so that neither the page
        // nor where it stops tells of what it may not see.
        let page = if query.table.is_some() || !query.properties.is_empty() {
            let (catalog, limits, table, wanted) =
                (&self.catalog, &limits, &query.table, &query.properties);
            self.catalog
                .log_where(&log_at, &query, |c| async move {
                    let there = match limits {
                        Some(l) => l.at(catalog, &c).await?,
                        None => identity.clone(),
                    };
                    if let Some(t) = table
                        && !there.can_table(Action::Read, at, t)
                    {
                        return Ok(false);
                    }
                    if wanted.is_empty() {
                        return Ok(true);
                    }
                    let seen = self.as_seen(&there, at, (*c).clone()).await?;
                    Ok::<bool, Error>(
                        wanted
                            .iter()
                            .all(|(k, v)| seen.properties.get(k) == Some(v)),
                    )
                })
                .await?
        } else {
            self.catalog.log(&log_at, &query).await?
        };
        let mut commits = Vec::with_capacity(page.commits.len());
        for c in page.commits {
            // What history allows of this commit, read through `at`'s ref.
            let there = match &limits {
                Some(l) => l.at(&self.catalog, &c).await?,
                None => identity.clone(),
            };
            // A filtered page holds only what `log_where` kept as the caller sees it.
            commits.push(self.as_seen(&there, at, c).await?);
        }
        Ok(LogPage {
            commits,
            next_page_token: page.next_page_token,
        })
    }

    /// One commit, by full hash or unique prefix.
    pub async fn commit(&self, identity: &Identity, id: &str) -> Result<Commit> {
        let at = RefExpr::parse(&format!("@{id}"))?;
        identity.require_ref(Action::Read, &at, "reading a commit")?;
        let commit = self.catalog.resolve(&at).await?.commit;
        let limits = crate::auth::history::Limits::of(&self.catalog, identity, None).await?;
        let there = match &limits {
            Some(l) => l.at(&self.catalog, &commit).await?,
            None => identity.clone(),
        };
        self.as_seen(&there, &at, commit).await
    }

    /// A commit as `identity` (as history allows it this commit) sees it through `at`:
    /// one that changed a table it may not read (against its first parent) has its
    /// message and properties replaced, since they may name that table or its source
    /// ("create hr.salaries from ..."); the tables it may read are named instead, and
    /// the others are not counted. Whoever reads every namespace of the ref sees all.
    async fn as_seen(&self, identity: &Identity, at: &RefExpr, mut c: Commit) -> Result<Commit> {
        let whole = match at.ref_name() {
            Some(name) => identity.access.on_ref_every_namespace(Action::Read, name),
            None => identity.access.covers(crate::auth::Role::Reader),
        };
        let Some(parent) = c.parents.first().copied().filter(|_| !whole) else {
            return Ok(c);
        };
        let parent = self.catalog.get_commit(parent).await?;
        let changed = self.catalog.diff_commits(&parent, &c).await?;
        let (seen, hidden): (Vec<_>, Vec<_>) = changed
            .iter()
            .map(|d| d.table.as_str())
            .partition(|t| identity.can_table(Action::Read, at, t));
        if hidden.is_empty() {
            return Ok(c);
        }
        c.message = match seen.is_empty() {
            true => "(changes tables you may not read)".to_string(),
            false => format!("(changes {} and tables you may not read)", seen.join(", ")),
        };
        c.properties.clear();
        Ok(c)
    }

    /// The tables that differ between `from` and `to` (ref expressions) that `identity`
    /// may read on both sides; with `rows`, each changed table's rows added and removed
    /// and its schema changes, within one query timeout for them all.
    pub async fn diff(
        &self,
        identity: &Identity,
        from: &RefExpr,
        to: &RefExpr,
        rows: bool,
        since_base: bool,
    ) -> Result<Diff> {
        identity.require_ref(Action::Read, from, "diffing it")?;
        identity.require_ref(Action::Read, to, "diffing it")?;
        let (on_from, on_to) = (
            crate::auth::history::scoped(&self.catalog, identity, from).await?,
            crate::auth::history::scoped(&self.catalog, identity, to).await?,
        );
        let mut a = self.catalog.resolve(&on_from.reads(from)).await?.commit;
        let b = self.catalog.resolve(&on_to.reads(to)).await?.commit;
        // `A...B`: what B changed since it left A (their merge base, a commit of A's
        // history), not what A changed meanwhile.
        if since_base {
            let Some(base) = self.catalog.merge_base_of(a.id, b.id).await? else {
                return Err(Error::bad_request(
                    Code::InvalidArgument,
                    format!("'{from}' and '{to}' share no history"),
                ));
            };
            a = base;
        }
        let mut tables: Vec<TableChange> = self
            .catalog
            .diff_commits(&a, &b)
            .await?
            .into_iter()
            .filter(|d| {
                on_from.can_table(Action::Read, from, &d.table)
                    && on_to.can_table(Action::Read, to, &d.table)
            })
            .map(TableChange::from)
            .collect();
        if rows {
            // An added table's rows are all added, a removed one's all removed: its
            // snapshot's summary says how many (no data file is read).
            let whole: Vec<(usize, lh_catalog::TableEntry)> = tables
                .iter()
                .enumerate()
                .filter_map(|(i, t)| {
                    let pointer = match t.change {
                        DiffKind::Added => t.to.clone(),
                        DiffKind::Removed => t.from.clone(),
                        _ => None,
                    }?;
                    Some((
                        i,
                        lh_catalog::TableEntry {
                            name: t.table.clone(),
                            pointer,
                        },
                    ))
                })
                .collect();
            let entries: Vec<lh_catalog::TableEntry> =
                whole.iter().map(|(_, e)| e.clone()).collect();
            let totals = self.tables.totals(&entries).await;
            for ((i, _), total) in whole.iter().zip(totals) {
                let t = &mut tables[*i];
                match total.rows {
                    Some(n) => {
                        let added = t.change == DiffKind::Added;
                        t.rows = Some(RowCounts {
                            added: if added { n } else { 0 },
                            removed: if added { 0 } else { n },
                            changed: None,
                        });
                    }
                    None => t.rows_error = Some("not counted: its metadata cannot be read".into()),
                }
            }
            let deadline = std::time::Instant::now() + self.queries.limits().timeout;
            let mut counted = 0;
            for t in &mut tables {
                if t.change != DiffKind::Changed {
                    continue;
                }
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if counted == COUNTED || left.is_zero() {
                    t.rows_error = Some(format!(
                        "not counted: a diff counts the rows of {COUNTED} tables within the \
                         query timeout (a diff of {} alone counts these)",
                        t.table
                    ));
                    continue;
                }
                counted += 1;
                let req = RowDiffRequest {
                    from: &a,
                    to: &b,
                    table: &t.table,
                    key: &[],
                    limit: 0,
                    full: false,
                    timeout: left,
                    caller: Some(&identity.user),
                };
                match self.queries.row_diff(req).await {
                    Ok(d) => {
                        t.rows = Some(d.counts);
                        t.schema_changes = d.schema_changes;
                    }
                    Err(e) => t.rows_error = Some(e.message),
                }
            }
        }
        Ok(Diff {
            from: a,
            to: b,
            tables,
        })
    }

    /// The rows of `table` that differ between `from` and `to` (ref expressions): at
    /// most `limit` of them, an added and a removed row with the same `key` one changed
    /// row; shared data files skipped unless `full`.
    pub async fn diff_rows(&self, identity: &Identity, ask: RowsAsk<'_>) -> Result<RowsDiff> {
        let RowsAsk {
            from,
            to,
            table,
            key,
            limit,
            full,
        } = ask;
        lh_catalog::names::validate_table_name(table)?;
        if key.iter().any(|k| k.is_empty()) {
            return Err(Error::bad_request(
                Code::BadKey,
                "a key column's name is empty",
            ));
        }
        identity.require_table(Action::Read, from, table, "diffing it")?;
        identity.require_table(Action::Read, to, table, "diffing it")?;
        let mut reads = Vec::with_capacity(2);
        for side in [from, to] {
            let scoped = crate::auth::history::scoped(&self.catalog, identity, side).await?;
            if !scoped.can_table(Action::Read, side, table) {
                return Err(Error::not_found(
                    Code::TableNotFound,
                    format!("table '{table}' not found at '{side}'"),
                ));
            }
            // The commit checked, not the ref again: it may have moved since.
            reads.push(scoped.reads(side));
        }
        let a = self.catalog.resolve(&reads[0]).await?.commit;
        let b = self.catalog.resolve(&reads[1]).await?.commit;
        let req = RowDiffRequest {
            from: &a,
            to: &b,
            table,
            key,
            limit,
            full,
            timeout: self.queries.limits().timeout,
            caller: Some(&identity.user),
        };
        let diff = self.queries.row_diff(req).await?;
        Ok(RowsDiff {
            from: a,
            to: b,
            diff,
        })
    }

    /// Merges `ask.from` into `ask.into` atomically (conflicts listed, nothing changed),
    /// or previews it held to the same permissions (the prepared commit an unreachable
    /// object); then the schema changes it brought and which of them other projects'
    /// runs on the target read.
    pub async fn merge(&self, identity: &Identity, ask: MergeAsk<'_>) -> Result<MergeDone> {
        let expected_head = match ask.expected_head {
            Some(e) => Some(self.catalog.resolve(&format!("@{e}")).await?.commit.id),
            None => None,
        };
        if let Some(key) = ask
            .properties
            .keys()
            .find(|k| crate::error::is_reserved_property(k))
        {
            return Err(crate::error::reserved_property(key));
        }
        let into = RefExpr::named(ask.into);
        let (on_from, on_into) = if ask.sides.is_empty() {
            (identity.clone(), identity.clone())
        } else {
            (
                crate::auth::history::scoped(&self.catalog, identity, ask.from).await?,
                crate::auth::history::scoped(&self.catalog, identity, &into).await?,
            )
        };
        for table in ask.sides.keys() {
            lh_catalog::names::validate_table_name(table)?;
            // Named by the caller: refused by its grants and history's limits alone,
            // whether or not such a table is there (else the answer would tell of a
            // hidden one).
            if !on_from.can_table(Action::Read, ask.from, table)
                || !on_into.can_table(Action::Read, &into, table)
            {
                return Err(crate::auth::roles::refused(
                    &identity.user,
                    &identity.access,
                    Action::Read,
                    &format!("choosing the side of table '{table}'"),
                    &format!(" on '{}' and '{}'", ask.from, ask.into),
                ));
            }
        }
        let mut meta = CommitMeta::new(identity.user.clone(), ask.message);
        meta.properties = ask.properties;
        let options = MergeOptions {
            meta,
            expected_head,
            no_fast_forward: ask.no_fast_forward,
            prepare: false,
            resolutions: Vec::new(),
            prefer: ask.prefer,
            sides: ask.sides,
        };
        let merged = match ask.dry_run {
            true => Merged {
                outcome: self
                    .merger
                    .preview(identity, ask.from, ask.into, options)
                    .await?,
                checks: Vec::new(),
            },
            false => {
                self.merger
                    .merge(identity, ask.from, ask.into, Via::Merge, options)
                    .await?
            }
        };
        let mut tables: Vec<TableChange> = merged
            .outcome
            .tables
            .iter()
            .cloned()
            .map(TableChange::from)
            .collect();
        let (breaking, breaking_unknown) = self
            .breaking_changes(identity, ask.from, ask.into, &mut tables)
            .await;
        Ok(MergeDone {
            merged,
            tables,
            breaking,
            breaking_unknown,
        })
    }

    /// The schema changes of the tables a merge brought (set on them), and which of those
    /// (and of the tables it dropped) other projects' runs on the target read. The merge
    /// is made: whatever goes wrong here is said, never an error.
    async fn breaking_changes(
        &self,
        identity: &Identity,
        from: &RefExpr,
        into: &str,
        tables: &mut [TableChange],
    ) -> (Vec<BreakingChange>, Option<String>) {
        let looked = tokio::time::timeout(
            BREAKING_BUDGET,
            self.look_for_breaking_changes(identity, from, into, tables),
        )
        .await;
        looked.unwrap_or_else(|_| {
            // Half an answer would read as "no change" for the tables not reached.
            for t in tables.iter_mut() {
                t.schema_changes.clear();
            }
            (
                Vec::new(),
                Some(format!(
                    "schema changes and their readers were not looked for in full within {} s",
                    BREAKING_BUDGET.as_secs()
                )),
            )
        })
    }

    async fn look_for_breaking_changes(
        &self,
        identity: &Identity,
        from: &RefExpr,
        into: &str,
        tables: &mut [TableChange],
    ) -> (Vec<BreakingChange>, Option<String>) {
        use crate::breaking::{Changed, breaks};
        use crate::query::diff::{schema_changes, schema_changes_by_name};
        let mut changed = Vec::new();
        let mut compared = 0;
        let mut unknown = None;
        for t in tables.iter_mut() {
            // Columns are told only to a reader of the table.
            if !identity.can_table(Action::Read, &RefExpr::named(into), &t.table) {
                continue;
            }
            let (Some(a), to) = (&t.from, &t.to) else {
                continue;
            };
            if to
                .as_ref()
                .is_some_and(|b| a.metadata_location == b.metadata_location)
            {
                continue;
            }
            if compared == MAX_TABLES_CHECKED {
                unknown = Some(format!(
                    "only the first {MAX_TABLES_CHECKED} changed tables were looked at"
                ));
                break;
            }
            compared += 1;
            match to {
                None => changed.push(Changed {
                    table: t.table.clone(),
                    columns: None,
                }),
                Some(b) => {
                    let (ma, mb) = match (
                        self.tables.metadata(&a.metadata_location).await,
                        self.tables.metadata(&b.metadata_location).await,
                    ) {
                        (Ok(ma), Ok(mb)) => (ma, mb),
                        (Err(e), _) | (_, Err(e)) => {
                            unknown = Some(format!(
                                "cannot read the metadata of '{}': {}",
                                t.table, e.message
                            ));
                            continue;
                        }
                    };
                    t.schema_changes = match a.table_uuid == b.table_uuid {
                        true => schema_changes(ma.current_schema(), mb.current_schema()),
                        false => schema_changes_by_name(ma.current_schema(), mb.current_schema()),
                    };
                    let columns: Vec<_> = t
                        .schema_changes
                        .iter()
                        .filter(|c| breaks(c))
                        .cloned()
                        .collect();
                    if !columns.is_empty() {
                        changed.push(Changed {
                            table: t.table.clone(),
                            columns: Some(columns),
                        });
                    }
                }
            }
        }
        match self.runs.breaking(into, from, &changed, identity).await {
            Ok(b) => (b, unknown),
            Err(e) => (Vec::new(), Some(e.message)),
        }
    }
}
