//! The table service as a caller meets it: each method validates, authorizes (grants,
//! and what history hides at the commit read) and acts, for lh's HTTP API.

use lh_catalog::{Commit, RefExpr, TableEntry};

use crate::Tables;
use crate::auth::{Action, Identity};
use crate::error::{Code, Error, Result};

impl Tables {
    /// The tables at `at` (a ref expression; in `namespace`, when given) that `identity`
    /// may read, and the commit read: the very one history's limits were found for.
    pub async fn list_for(
        &self,
        identity: &Identity,
        at: &RefExpr,
        namespace: Option<&str>,
    ) -> Result<(Commit, Vec<TableEntry>)> {
        identity.require_ref(Action::Read, at, "listing its tables")?;
        let identity = crate::auth::history::scoped(&self.catalog, identity, at).await?;
        if let Some(ns) = namespace {
            lh_catalog::names::validate_namespace(ns)?;
        }
        let resolved = self.catalog.resolve(&identity.reads(at)).await?;
        let tables = self
            .catalog
            .tables_in(&resolved.commit, namespace)
            .await?
            .into_iter()
            // Tables the identity may not read are not listed.
            .filter(|t| identity.can_table(Action::Read, at, &t.name))
            .collect();
        Ok((resolved.commit, tables))
    }

    /// Table `name` at `at` as `identity` may read it: a table of another namespace than
    /// history's ceilings is as missing as one that is not there.
    pub async fn detail_for(
        &self,
        identity: &Identity,
        at: &RefExpr,
        name: &str,
    ) -> Result<crate::TableDetail> {
        identity.require_table(Action::Read, at, name, "reading it")?;
        let scoped = crate::auth::history::scoped(&self.catalog, identity, at).await?;
        if !scoped.can_table(Action::Read, at, name) {
            return Err(Error::not_found(
                Code::TableNotFound,
                format!("table '{name}' not found at '{at}'"),
            ));
        }
        // The commit checked, not the ref again: it may have moved since.
        self.detail(&scoped.reads(at), name).await
    }

    /// Refuses `identity` a change to `name` at `branch` (`what`: "importing into it")
    /// that its grants or history refuse, before anything of the table is read; the
    /// commit checks again.
    pub async fn require_writable(
        &self,
        identity: &Identity,
        branch: &str,
        name: &str,
        what: &str,
    ) -> Result<()> {
        identity.require_table(Action::Write, &RefExpr::named(branch), name, what)?;
        self.require_unhidden(identity, branch, name, what).await
    }

    /// Refuses `identity` a change to `name` at `branch` that history hides from it
    /// there (`auth::history::require_unhidden`), before anything of the table is read.
    pub async fn require_unhidden(
        &self,
        identity: &Identity,
        branch: &str,
        name: &str,
        what: &str,
    ) -> Result<()> {
        let branch = RefExpr::named(branch);
        let scoped = crate::auth::history::scoped(&self.catalog, identity, &branch).await?;
        crate::auth::history::require_unhidden(&self.catalog, &scoped, &branch, name, what).await
    }

    /// Drops `name` from `branch` as `identity` (one commit; its files stay for other
    /// refs).
    pub async fn drop_for(&self, identity: &Identity, branch: &str, name: &str) -> Result<Commit> {
        self.require_writable(identity, branch, name, "dropping it")
            .await?;
        self.drop_table(branch, name, identity).await
    }
}
