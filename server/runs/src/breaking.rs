//! What a merge may break elsewhere (`lh merge` warns): the columns it dropped, renamed
//! or retyped and the tables it dropped, with the nodes of projects' runs that read
//! them.
//!
//! The readers are the models and expectations of the last succeeded run (that ran
//! models) of each project on the target; what a node reads is told as a plan's change
//! category tells it (`RunService::columns_read`: a SQL node's column references, a
//! Python node's declared columns, everything for `*`, whole rows or undeclared
//! columns). A project whose own last run on the merged branch made the table is left
//! out: its readers ran with the change there. A nested field's change counts for
//! readers of its top-level column.

use std::collections::{BTreeSet, HashMap};

use lh_catalog::RefExpr;

use super::RunService;
use super::project::NodeKind;
use crate::auth::{Action, Identity};
use crate::error::Result;
use crate::query::diff::{ColumnChange, ColumnChangeKind};

/// A change a merge brought that readers elsewhere may not survive.
#[derive(Debug, Clone)]
pub struct BreakingChange {
    pub table: String,
    /// The column dropped, renamed or retyped; None: the table itself was dropped.
    pub change: Option<ColumnChange>,
    /// The models and expectations that read it, in the last succeeded run of each
    /// project on the target.
    pub readers: Vec<ColumnReader>,
    /// Readers the caller may not see (they touch tables it may not read), counted.
    pub hidden_readers: usize,
}

/// A node of a project's run that reads a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnReader {
    pub project: String,
    /// A model's table, or an expectation's function.
    pub node: String,
    /// `model` or `expectation`.
    pub kind: String,
    /// The run it was last part of.
    pub run: String,
}

/// What a merge changed in one table that may break its readers.
pub struct Changed {
    pub table: String,
    /// The columns dropped, renamed or retyped; None: the table was dropped.
    pub columns: Option<Vec<ColumnChange>>,
}

/// Whether readers of the column may fail after the change.
pub fn breaks(c: &ColumnChange) -> bool {
    matches!(
        c.kind,
        ColumnChangeKind::Dropped | ColumnChangeKind::Renamed | ColumnChangeKind::Retyped
    )
}

/// The top-level column a reader names to read the changed one (a renamed column by
/// its old name).
fn read_as(c: &ColumnChange) -> &str {
    let name = match c.kind {
        ColumnChangeKind::Renamed => c.from.as_deref().unwrap_or(&c.column),
        _ => &c.column,
    };
    name.split('.').next().unwrap_or(name)
}

impl RunService {
    /// The changes in `changed` (merged from `from` into `into`) that nodes of the
    /// projects' last runs on `into` read; readers `by` may not see are counted only.
    pub async fn breaking(
        &self,
        into: &str,
        from: &RefExpr,
        changed: &[Changed],
        by: &Identity,
    ) -> Result<Vec<BreakingChange>> {
        if changed.is_empty() {
            return Ok(Vec::new());
        }
        let mut plans = Vec::new();
        for p in self.store.projects_on(into).await? {
            if let Some((run, plan)) = self.previous_plan(&p, into).await? {
                plans.push((p, run, plan));
            }
        }
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        // The projects whose last run on the merged branch made each table.
        let mut makers: HashMap<String, BTreeSet<String>> = HashMap::new();
        if let Some(branch) = from.ref_name().filter(|b| *b != into) {
            for p in self.store.projects_on(branch).await? {
                if let Some((_, plan)) = self.previous_plan(&p, branch).await? {
                    for n in &plan.nodes {
                        if matches!(n.kind, NodeKind::Model { .. }) {
                            makers.entry(n.name.clone()).or_default().insert(p.clone());
                        }
                    }
                }
            }
        }
        let mut out = Vec::new();
        for c in changed {
            // Each reader of the table, the columns it reads (None: all), and whether
            // `by` may see it.
            let mut readers: Vec<(ColumnReader, Option<BTreeSet<String>>, bool)> = Vec::new();
            for (project, run, plan) in &plans {
                if makers.get(&c.table).is_some_and(|m| m.contains(project)) {
                    continue;
                }
                for d in &plan.nodes {
                    if !d.inputs.iter().any(|i| i.table == c.table)
                        || readers
                            .iter()
                            .any(|(r, ..)| r.project == *project && r.node == d.name)
                    {
                        continue;
                    }
                    let model = matches!(d.kind, NodeKind::Model { .. });
                    let on = RefExpr::named(into);
                    let visible = (!model || by.can_table(Action::Read, &on, &d.name))
                        && d.inputs
                            .iter()
                            .all(|i| by.can_table(Action::Read, &on, &i.table));
                    let reader = ColumnReader {
                        project: project.clone(),
                        node: d.name.clone(),
                        kind: super::kind_name(&d.kind).into(),
                        run: run.clone(),
                    };
                    // A dropped table breaks every reader, whatever it reads.
                    let reads = match &c.columns {
                        Some(_) => self.columns_read(d, &c.table).await,
                        None => None,
                    };
                    readers.push((reader, reads, visible));
                }
            }
            if readers.is_empty() {
                continue;
            }
            // A nested field's change is told once, with its top-level column's when
            // that changed too (a struct dropped whole drops its fields).
            let changes: Vec<Option<&ColumnChange>> = match &c.columns {
                None => vec![None],
                Some(cs) => cs
                    .iter()
                    .filter(|c| breaks(c))
                    .filter(|ch| {
                        !ch.column.contains('.')
                            || !cs.iter().any(|o| {
                                breaks(o) && !o.column.contains('.') && read_as(o) == read_as(ch)
                            })
                    })
                    .map(Some)
                    .collect(),
            };
            for change in changes {
                let hit = readers.iter().filter(|(_, cols, _)| match (change, cols) {
                    (Some(ch), Some(cols)) => {
                        let name = read_as(ch);
                        cols.iter().any(|x| x.eq_ignore_ascii_case(name))
                    }
                    _ => true,
                });
                let (mut shown, mut hidden) = (Vec::new(), 0);
                for (r, _, visible) in hit {
                    match visible {
                        true => shown.push(r.clone()),
                        false => hidden += 1,
                    }
                }
                if shown.is_empty() && hidden == 0 {
                    continue;
                }
                out.push(BreakingChange {
                    table: c.table.clone(),
                    change: change.cloned(),
                    readers: shown,
                    hidden_readers: hidden,
                });
            }
        }
        Ok(out)
    }
}
