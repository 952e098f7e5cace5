//! Protected branches: a protected branch changes only by `lh merge` (or a run's
//! publish, which is a merge) from an identity whose role may merge. Direct writes
//! (imports, table drops, Iceberg REST commits) are refused whoever makes them, and the
//! branch is neither reassigned nor deleted until an admin unprotects it. The names live
//! in `lh_protected_branches`, next to the catalog, and are read at every check (no
//! copy to go stale on another control plane).

use chrono::Utc;
use sqlx::{AnyPool, Row};

use super::{Action, Identity};
use crate::error::{Code, Error, Kind, Result};

pub struct ProtectedBranches {
    pool: AnyPool,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("protected branch storage", e)
}

/// The refusal of a direct change of a protected branch.
pub fn refused(branch: &str, what: &str) -> Error {
    Error::new(
        Kind::Forbidden,
        Code::BranchProtected,
        format!("branch '{branch}' is protected: {what} is refused; it changes only by a merge"),
    )
    .with_remedy(lh_api::remedy::Remedy::MergeInto {
        into: branch.to_string(),
    })
}

impl ProtectedBranches {
    pub fn new(pool: AnyPool) -> ProtectedBranches {
        ProtectedBranches { pool }
    }

    pub async fn is_protected(&self, branch: &str) -> Result<bool> {
        let row = sqlx::query("SELECT 1 AS p FROM lh_protected_branches WHERE name = $1")
            .bind(branch)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        Ok(row.is_some())
    }

    /// Refuses a direct change (`what`) of `branch` when it is protected.
    pub async fn check_direct(&self, branch: &str, what: &str) -> Result<()> {
        if self.is_protected(branch).await? {
            return Err(refused(branch, what));
        }
        Ok(())
    }

    /// A run publishing to `branch` merges into it: on a protected branch only an
    /// identity that may merge starts one.
    pub async fn check_publish(&self, identity: &Identity, branch: &str) -> Result<()> {
        if self.is_protected(branch).await? {
            identity.require_ref(
                Action::Merge,
                &lh_catalog::RefExpr::named(branch),
                &format!("a run publishing to the protected branch '{branch}'"),
            )?;
        }
        Ok(())
    }

    /// Protects a branch; protecting it again is no error. Returns whether it was new.
    pub async fn protect(&self, branch: &str, by: &str) -> Result<bool> {
        let r = sqlx::query(
            "INSERT INTO lh_protected_branches (name, protected_by, protected_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(branch)
        .bind(by)
        .bind(Utc::now().timestamp_millis())
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(r.rows_affected() > 0)
    }

    /// Unprotects a branch; returns whether it was protected.
    pub async fn unprotect(&self, branch: &str) -> Result<bool> {
        let r = sqlx::query("DELETE FROM lh_protected_branches WHERE name = $1")
            .bind(branch)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(r.rows_affected() > 0)
    }

    pub async fn list(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT name FROM lh_protected_branches ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("name").map_err(db))
            .collect()
    }
}
