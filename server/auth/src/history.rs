//! What a grant on a ref means for its history. A grant's ref pattern names where an
//! identity may act; history is not bounded by refs, though: a commit of `main` is
//! also a commit of every branch and tag made from it, of every branch `main` was
//! merged into, and of `team-b.y@<hash>`. So a read grant limited to some namespaces
//! limits what its holder reads of **every commit in the history of the refs it
//! matches, by any route**: reading commit C through ref X, an identity reads namespace
//! N only if it may read N at X and, for every ref R whose history holds C and on which
//! its read is limited (some read grant on R, not on every namespace, narrower than at
//! X), it may read N at R. (A ref the identity has no grant on limits nothing: its
//! history is no more its business than any other ref's.)
//!
//! History also travels inside commits: a branch made from `main` and given one more
//! commit still holds `main`'s tables. So the limit holds on what a commit carries of a
//! limited ref's history: where the commit's history meets the ref's (their merge
//! base), the namespaces the commit holds that were there then are bounded by the
//! ref's grants; only namespaces that came after are the commit's own (a commit in the
//! ref's history is its own merge base: all of it is bounded).
//!
//! [`scoped`] applies this to one request: it resolves the ref expression the request
//! reads, finds for each limited ref the merge base with the commit and the namespaces
//! since, and returns the identity with those ceilings on its reads
//! (`Access::ceilings`), which every check of the request then meets. Time travel by name reads only the ref that has the
//! name now (`lh_catalog`: a deleted ref has no past, a re-created one only its own).

use std::sync::Arc;

use lh_catalog::{Catalog, RefExpr};

use super::roles::Pattern;
use super::{Action, Identity};
use crate::error::Result;

/// More limited refs than this are not checked one by one: their ceilings all apply.
const MAX_CHECKED_REFS: usize = 256;

/// `identity` as it may read the commit `expr` resolves to (see the module's text). An
/// expression that does not resolve is left to the caller, which reports it; meanwhile
/// the identity reads nothing its history could limit through it (the ref may be made
/// before the caller reads it: once, a query queued behind the caller's own slow ones
/// read a branch made meanwhile from an old commit, with no limit at all).
pub async fn scoped(catalog: &Catalog, identity: &Identity, expr: &RefExpr) -> Result<Identity> {
    let Some(limits) = Limits::of(catalog, identity, expr.ref_name()).await? else {
        return Ok(identity.clone());
    };
    match catalog.resolve(expr).await {
        Ok(resolved) => {
            let scoped = limits.at(catalog, &resolved.commit).await?;
            let mut access = (*scoped.access).clone();
            access.ceilings_at = Some(resolved.commit.id.to_hex());
            Ok(Identity {
                access: Arc::new(access),
                ..scoped
            })
        }
        Err(_) => {
            let mut access = (*identity.access).clone();
            // A ceiling no namespace is under.
            access.ceilings.push(Vec::new());
            Ok(Identity {
                access: Arc::new(access),
                ..identity.clone()
            })
        }
    }
}

/// Refuses a change to `table` at `expr` by `scoped` (an identity as [`scoped`] made it
/// for `expr`) when history hides the table there and its namespace holds tables at that
/// commit: the change would tell of them (its errors, "already exists") or change them.
/// A namespace that holds nothing there is the change's own to fill; an identity whose
/// grants never let it read the table is not history's to limit.
pub async fn require_unhidden(
    catalog: &Catalog,
    scoped: &Identity,
    expr: &RefExpr,
    table: &str,
    what: &str,
) -> Result<()> {
    if scoped.access.ceilings.is_empty() || scoped.can_table(Action::Read, expr, table) {
        return Ok(());
    }
    let mut granted = (*scoped.access).clone();
    granted.ceilings.clear();
    let granted = Identity {
        access: Arc::new(granted),
        ..scoped.clone()
    };
    if !granted.can_table(Action::Read, expr, table) {
        return Ok(());
    }
    let Ok(resolved) = catalog.resolve(&scoped.reads(expr)).await else {
        return Ok(());
    };
    let ns = super::roles::namespace_of(table);
    if catalog
        .tables_in(&resolved.commit, Some(ns))
        .await?
        .is_empty()
    {
        return Ok(());
    }
    Err(super::roles::refused(
        &scoped.user,
        &scoped.access,
        Action::Read,
        what,
        &format!(
            " on namespace '{ns}' at '{expr}' (the history of a ref limits what you read there)"
        ),
    ))
}

/// The refs that limit an identity reading through one route (a ref, or none for a
/// bare commit): those on which it reads less than there. Found once per request, then
/// applied to each commit it reads ([`Limits::at`]), as a log page does.
pub struct Limits {
    identity: Identity,
    /// Each limiting ref, the heads whose history is its (its head, and those it left:
    /// assigned back or elsewhere, or deleted), and its grants' namespaces.
    refs: Vec<(Vec<lh_catalog::CommitId>, Vec<Pattern>)>,
}

/// The most heads a ref left that are checked one by one (the latest); it held more
/// before, and its ceiling then applies to everything.
const MAX_LEFT_HEADS: usize = 64;
/// The most deleted refs one limited grant's pattern is checked against one by one.
const MAX_DELETED_REFS: usize = 256;

impl Limits {
    /// `None`: history limits nothing on this route.
    pub async fn of(
        catalog: &Catalog,
        identity: &Identity,
        route: Option<&str>,
    ) -> Result<Option<Limits>> {
        let access = &identity.access;
        // Reads everything everywhere: history limits nothing.
        if access
            .grants
            .iter()
            .any(|g| g.actions.contains(&Action::Read) && g.refs.is_any() && g.namespaces.is_any())
        {
            return Ok(None);
        }
        let at_route = access.namespaces_on(Action::Read, route);
        if at_route.is_empty() {
            // Nothing readable there: every check refuses anyway.
            return Ok(None);
        }
        // The namespaces a ref's grants limit a read to, when narrower than at the route.
        let limited = |name: &str| {
            let there = access.namespaces_on(Action::Read, Some(name));
            if there.is_empty() || there.iter().any(Pattern::is_any) {
                return None;
            }
            let narrower = at_route.iter().any(|p| {
                !there
                    .iter()
                    .any(|q| q.as_str() == p.as_str() || q.covers_namespace(p.as_str()))
            });
            narrower.then_some(there)
        };
        let mut refs = Vec::new();
        let listed = catalog.list_refs().await?;
        for r in &listed {
            if route == Some(r.name.as_str()) {
                continue;
            }
            if let Some(there) = limited(&r.name) {
                // What the ref once held is its history too: rolling `main` back past
                // an import left a branch made from it holding the import as its own
                // (found by the nineteenth review).
                let mut heads = vec![r.head];
                heads.extend(catalog.left_heads(&r.name, MAX_LEFT_HEADS + 1).await?);
                if heads.len() > MAX_LEFT_HEADS + 1 {
                    // More than are checked: every commit is bounded by its grants.
                    heads.clear();
                }
                refs.push((heads, there));
            }
        }
        // A ref deleted (and not made again) still limits what it held: deleting `rel`
        // once lifted its limit from a branch made from it (found by the twentieth
        // review). Found by the names the identity's limited read grants match.
        let mut seen: std::collections::BTreeSet<String> =
            listed.iter().map(|r| r.name.clone()).collect();
        for g in access
            .grants
            .iter()
            .filter(|g| g.actions.contains(&Action::Read) && !g.namespaces.is_any())
        {
            let names = catalog
                .deleted_refs(g.refs.as_str(), MAX_DELETED_REFS + 1)
                .await?;
            if names.len() > MAX_DELETED_REFS {
                // More than are checked: the grant's limit holds on every commit.
                refs.push((Vec::new(), vec![g.namespaces.clone()]));
                continue;
            }
            for name in names {
                if !g.refs.matches(&name)
                    || route == Some(name.as_str())
                    || !seen.insert(name.clone())
                {
                    continue;
                }
                if let Some(there) = limited(&name) {
                    let mut heads = catalog.left_heads(&name, MAX_LEFT_HEADS + 1).await?;
                    if heads.len() > MAX_LEFT_HEADS {
                        heads.clear();
                    }
                    refs.push((heads, there));
                }
            }
        }
        Ok((!refs.is_empty()).then(|| Limits {
            identity: identity.clone(),
            refs,
        }))
    }

    /// The identity as it may read `commit`.
    pub async fn at(&self, catalog: &Catalog, commit: &lh_catalog::Commit) -> Result<Identity> {
        let mut namespaces_here: Option<std::collections::BTreeSet<String>> = None;
        let mut ceilings: Vec<Vec<Pattern>> = Vec::new();
        let check_each = self.refs.len() <= MAX_CHECKED_REFS;
        for (heads, there) in &self.refs {
            let mut ceiling = there.clone();
            if check_each && !heads.is_empty() {
                // Where the commit's history meets the ref's (at each head it held):
                // what the commit holds of the namespaces there then is the ref's
                // history, carried along (a branch made from it, a merge of it, or new
                // commits on top of either); only namespaces that came after are the
                // commit's own.
                let mut then = std::collections::BTreeSet::new();
                let (mut met, mut inside) = (false, false);
                for head in heads {
                    let Some(base) = catalog.merge_base_of(commit.id, *head).await? else {
                        continue;
                    };
                    met = true;
                    if base.id == commit.id {
                        inside = true;
                        break;
                    }
                    then.extend(namespaces(catalog, &base).await?);
                }
                if !met {
                    continue;
                }
                if !inside {
                    if namespaces_here.is_none() {
                        namespaces_here = Some(namespaces(catalog, commit).await?);
                    }
                    let here = namespaces_here.as_ref().into_iter().flatten();
                    ceiling.extend(
                        here.filter(|ns| !then.contains(*ns))
                            .map(|ns| Pattern::literal(ns)),
                    );
                }
            }
            if !ceilings.contains(&ceiling) {
                ceilings.push(ceiling);
            }
        }
        if ceilings.is_empty() {
            return Ok(self.identity.clone());
        }
        let mut narrowed = (*self.identity.access).clone();
        narrowed.ceilings.extend(ceilings);
        Ok(Identity {
            user: self.identity.user.clone(),
            access: Arc::new(narrowed),
            token_id: self.identity.token_id.clone(),
        })
    }
}

/// The namespaces of the tables `commit` holds.
async fn namespaces(
    catalog: &Catalog,
    commit: &lh_catalog::Commit,
) -> Result<std::collections::BTreeSet<String>> {
    Ok(catalog
        .tables_in(commit, None)
        .await?
        .into_iter()
        .map(|t| super::roles::namespace_of(&t.name).to_string())
        .collect())
}
