//! The one way a branch takes another's changes: `lh merge`, and a run publishing its
//! outputs. A merge is made first without moving the target (the catalog's prepared
//! merge: its commit is written, no ref points at it), then:
//!
//! 1. every table it changes is checked against the identity's grants on the target;
//! 2. on a protected target, the checks the branch requires run on the would-be result
//!    (`checks`): a webhook's answer, or an lh project's expectations;
//! 3. the target moves to the prepared commit only if it is still where the merge was
//!    made against (else the merge is made again, and checked again);
//! 4. the post-merge webhooks are told, in the background (`hooks`).
//!
//! A refused or failed merge moves nothing; its prepared commit is an unreachable
//! object.

pub mod checks;
pub mod hooks;

use std::sync::Arc;

use lh_catalog::{Catalog, MergeKind, MergeOptions, MergeOutcome, RefExpr};

use crate::auth::protected::ProtectedBranches;
use crate::auth::roles::Roles;
use crate::auth::{Action, Identity};
use crate::error::{Code, Error, Kind, Result};

/// Who asks for the merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `lh merge`: needs `merge` on the target.
    Merge,
    /// A run publishing its branch: on a protected target a merge (needs `merge`), on
    /// any other the run's own write (needs `write`).
    RunPublish,
}

/// A merge made (or previewed), with the verdicts of the checks its target required.
pub struct Merged {
    pub outcome: MergeOutcome,
    pub checks: Vec<checks::Verdict>,
}

/// A merge's caller, as `Merger::authorize` found it allowed.
struct Authorized {
    by: Identity,
    /// `by` as history lets it read the source (`lh merge`; a run's publish: `by`).
    source: Identity,
    /// `by` as history lets it read the target (`lh merge`; a run's publish: `by`).
    dest: Identity,
    action: Action,
    what: String,
    protected: bool,
}

pub struct Merger {
    pub catalog: Catalog,
    /// Combines two sides' appends to one table (see `tables::combine`).
    pub tables: Arc<crate::tables::Tables>,
    pub protected: Arc<ProtectedBranches>,
    pub roles: Arc<Roles>,
    pub checks: Arc<checks::Checks>,
    pub hooks: Arc<hooks::Hooks>,
}

/// Whether the merger may read `table` on both sides of a merge, as history lets it
/// read each (found by the twenty-fourth review: by its grants alone, a table history
/// hides was named).
fn readable_on_both(a: &Authorized, from: &RefExpr, into: &str, table: &str) -> bool {
    let both = a.source.can_table(Action::Read, from, table)
        && a.dest.can_table(Action::Read, &RefExpr::named(into), table);
    // A table the merger may change at the source is its own to be told of (a role may
    // write a namespace it does not read), unless history hides it there.
    let hidden_by_history =
        a.by.can_table(Action::Read, from, table) && !a.source.can_table(Action::Read, from, table);
    both || (a.by.can_table(Action::Write, from, table) && !hidden_by_history)
}

/// A merge's error as `by` may see it: a table changed on both sides that it may not
/// read on both sides is neither named nor described (its uuid, files, snapshots), only
/// said to be there (found by the twenty-third review: a limited reader's preview listed
/// a hidden table's metadata on all three sides).
fn as_seen(a: &Authorized, from: &RefExpr, into: &str, e: lh_catalog::Error) -> Error {
    let mut err: Error = e.into();
    let before = err.conflicts.len();
    err.conflicts
        .retain(|c| readable_on_both(a, from, into, &c.table));
    if err.conflicts.len() < before {
        let names: Vec<&str> = err.conflicts.iter().map(|c| c.table.as_str()).collect();
        err.message = format!(
            "cannot merge '{from}' into '{into}': {}tables you may not read were changed on \
             both sides; nothing was merged",
            if names.is_empty() {
                String::new()
            } else {
                format!("{} and ", names.join(", "))
            }
        );
    }
    err
}

/// How many times a merge is made again when its target moved meanwhile.
const ATTEMPTS: usize = 3;

impl Merger {
    /// The merge commit, prepared: tables both sides only appended to are combined
    /// (their appends together), any other table changed on both sides is a conflict.
    async fn prepared(
        &self,
        a: &Authorized,
        from: &RefExpr,
        into: &str,
        options: MergeOptions,
    ) -> Result<lh_catalog::MergeOutcome> {
        let e = match self.catalog.merge(from, into, options.clone()).await {
            Ok(out) => return Ok(out),
            Err(e) if e.kind() == lh_catalog::ErrorKind::Conflict && !e.conflicts().is_empty() => e,
            Err(e) => return Err(e.into()),
        };
        let mut resolutions = Vec::new();
        for c in e.conflicts() {
            // Nothing is written for a table the identity may not change there.
            if !a.by.can_table(a.action, &RefExpr::named(into), &c.table) {
                return Err(as_seen(a, from, into, e));
            }
            let theirs = c.incoming.clone().flatten();
            match self
                .tables
                .combine_appends(
                    &c.table,
                    c.expected.as_ref(),
                    c.actual.as_ref(),
                    theirs.as_ref(),
                )
                .await?
            {
                Some(pointer) => resolutions.push(lh_catalog::Resolution {
                    table: c.table.clone(),
                    base: c.expected.clone(),
                    ours: c.actual.clone(),
                    theirs,
                    pointer,
                }),
                None => return Err(as_seen(a, from, into, e)),
            }
        }
        tracing::info!(
            %from,
            into,
            tables = resolutions.len(),
            "merge combines both sides' appends"
        );
        self.catalog
            .merge(
                from,
                into,
                MergeOptions {
                    resolutions,
                    ..options
                },
            )
            .await
            .map_err(|e| as_seen(a, from, into, e))
    }

    /// The identity as its roles are now (a run's starter may have lost a grant since).
    pub(crate) async fn current(&self, by: &Identity) -> Result<Identity> {
        let mut now = by.clone();
        now.access = self.roles.access(&by.access.roles).await?;
        Ok(now)
    }

    /// Who may merge `from` into `into` via `via`: the identity as it is now, the action
    /// its grants are checked for, what the refusal calls the merge, and whether the
    /// target is protected.
    async fn authorize(
        &self,
        by: &Identity,
        from: &RefExpr,
        into: &str,
        via: Via,
    ) -> Result<Authorized> {
        let by = self.current(by).await?;
        if crate::tables::is_run_branch(into) {
            return Err(crate::tables::run_branch_refused(into, "merging into it"));
        }
        let protected = self.protected.is_protected(into).await?;
        let action = match via {
            Via::Merge => Action::Merge,
            Via::RunPublish if protected => Action::Merge,
            Via::RunPublish => Action::Write,
        };
        // What history lets it read of the source: a merge takes nothing it hides.
        let (source, dest) = match via {
            Via::Merge => {
                by.require_ref(Action::Read, from, "merging from it")?;
                (
                    crate::auth::history::scoped(&self.catalog, &by, from).await?,
                    crate::auth::history::scoped(&self.catalog, &by, &RefExpr::named(into)).await?,
                )
            }
            Via::RunPublish => (by.clone(), by.clone()),
        };
        let what = if protected {
            format!("merging into the protected branch '{into}'")
        } else {
            format!("merging into '{into}'")
        };
        by.require_ref(action, &RefExpr::named(into), &what)?;
        Ok(Authorized {
            by,
            source,
            dest,
            action,
            what,
            protected,
        })
    }

    /// Refuses a prepared merge that changes a table the identity may not change there,
    /// or (`lh merge`) copies one past the grants that hide it.
    fn require_tables(
        a: &Authorized,
        from: &RefExpr,
        into: &str,
        via: Via,
        out: &MergeOutcome,
    ) -> Result<()> {
        let refused: Vec<&str> = out
            .tables
            .iter()
            .map(|t| t.table.as_str())
            .filter(|t| !a.by.can_table(a.action, &RefExpr::named(into), t))
            .collect();
        if !refused.is_empty() {
            // Named only where the identity may read them on both sides.
            let (named, hidden): (Vec<&str>, Vec<&str>) = refused
                .iter()
                .partition(|t| readable_on_both(a, from, into, t));
            let mut on = String::new();
            if !named.is_empty() {
                on.push_str(&format!(" on table(s) {}", named.join(", ")));
            }
            if !hidden.is_empty() {
                on.push_str(if named.is_empty() { " on " } else { " and " });
                on.push_str("tables you may not read");
            }
            return Err(crate::auth::roles::refused(
                &a.by.user,
                &a.by.access,
                a.action,
                &a.what,
                &format!("{on} of '{into}'"),
            ));
        }
        if via == Via::Merge {
            let incoming: Vec<String> = out.tables.iter().map(|t| t.table.clone()).collect();
            let into = RefExpr::named(into);
            require_no_widening(&a.by, &a.source, from, &into, &incoming)?;
            require_no_overwrite(&a.by, &a.dest, &into, &out.tables)?;
        }
        Ok(())
    }

    /// What `lh merge` would do, made and held to the same grants, without moving the
    /// target: no required check and no hook runs (`lh merge --dry-run`). The prepared
    /// commit is an unreachable object.
    pub async fn preview(
        &self,
        by: &Identity,
        from: &RefExpr,
        into: &str,
        options: MergeOptions,
    ) -> Result<MergeOutcome> {
        let a = self.authorize(by, from, into, Via::Merge).await?;
        let prepare = MergeOptions {
            prepare: true,
            ..options
        };
        let out = self.prepared(&a, from, into, prepare).await?;
        Self::require_tables(&a, from, into, Via::Merge, &out)?;
        Ok(out)
    }

    pub async fn merge(
        &self,
        by: &Identity,
        from: &RefExpr,
        into: &str,
        via: Via,
        options: MergeOptions,
    ) -> Result<Merged> {
        let a = self.authorize(by, from, into, via).await?;
        let (by, protected) = (&a.by, a.protected);
        let prepare = MergeOptions {
            prepare: true,
            ..options.clone()
        };
        for attempt in 1..=ATTEMPTS {
            let out = self.prepared(&a, from, into, prepare.clone()).await?;
            if out.kind == MergeKind::UpToDate {
                return Ok(Merged {
                    outcome: out,
                    checks: Vec::new(),
                });
            }
            Self::require_tables(&a, from, into, via, &out)?;
            let results = if protected {
                self.checks
                    .run_required(by, &from.to_string(), into, &out)
                    .await?
            } else {
                Vec::new()
            };
            if results.iter().any(|c| !c.passed) {
                return Err(blocked(into, &results));
            }
            let to = format!("@{}", out.head.to_hex());
            match self.catalog.assign_branch(into, out.base_head, &to).await {
                Ok(_) => {
                    self.hooks.merged(by, &from.to_string(), into, &out);
                    return Ok(Merged {
                        outcome: out,
                        checks: results,
                    });
                }
                // Moved meanwhile: made again on the new head, and checked again.
                Err(e)
                    if e.kind() == lh_catalog::ErrorKind::RefConflict
                        && options.expected_head.is_none()
                        && attempt < ATTEMPTS =>
                {
                    tracing::debug!(into, attempt, "target moved during the merge's checks");
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the last attempt returns")
    }
}

/// Refuses when `changes` (to `dest`'s tables) change or drop a table that history
/// hides from the identity there (`reads_dest`, as `auth::history::scoped` lets it read
/// `dest`): a merge or an assignment would replace it, and its summary tell its
/// columns. Tables its grants never let it read are its grants' to decide.
pub fn require_no_overwrite(
    by: &Identity,
    reads_dest: &Identity,
    dest: &RefExpr,
    changes: &[lh_catalog::TableDiff],
) -> Result<()> {
    let hidden = changes
        .iter()
        .filter(|d| d.from.is_some())
        .filter(|d| {
            by.can_table(Action::Read, dest, &d.table)
                && !reads_dest.can_table(Action::Read, dest, &d.table)
        })
        .count();
    if hidden == 0 {
        return Ok(());
    }
    Err(crate::auth::roles::refused(
        &by.user,
        &by.access,
        Action::Read,
        &format!("changing tables of '{dest}'"),
        &format!(" on {hidden} table(s) there (the history of a ref limits what you read there)"),
    ))
}

/// Refuses when `tables`, taken from `source` into `dest`, include one the identity
/// could read at `dest` but not at `source` (as `reads_source`, the identity as history
/// lets it read `source`: `auth::history::scoped`): no branch, assignment or merge
/// copies a table past the grants, or the history, that hide it.
pub fn require_no_widening(
    by: &Identity,
    reads_source: &Identity,
    source: &RefExpr,
    dest: &RefExpr,
    tables: &[String],
) -> Result<()> {
    let widened: Vec<&str> = tables
        .iter()
        .map(String::as_str)
        .filter(|t| {
            by.can_table(Action::Read, dest, t) && !reads_source.can_table(Action::Read, source, t)
        })
        .collect();
    if widened.is_empty() {
        return Ok(());
    }
    Err(crate::auth::roles::refused(
        &by.user,
        &by.access,
        Action::Read,
        &format!("taking tables from '{source}' into '{dest}'"),
        &format!(
            " on tables of '{source}' you may not read there (it would make them readable in '{dest}')"
        ),
    ))
}

/// The refusal of a merge its checks blocked, each check's verdict in the message.
fn blocked(into: &str, results: &[checks::Verdict]) -> Error {
    let lines: Vec<String> = results
        .iter()
        .map(|c| {
            format!(
                "  {} {} ({}): {}",
                if c.passed { "passed" } else { "FAILED" },
                c.name,
                c.kind,
                c.message
            )
        })
        .collect();
    Error::new(
        Kind::Conflict,
        Code::ChecksFailed,
        format!(
            "the merge into '{into}' is blocked by its required checks; nothing changed:\n{}",
            lines.join("\n")
        ),
    )
    .with_hint("fix what the failed checks report on the source branch, then merge again")
}
