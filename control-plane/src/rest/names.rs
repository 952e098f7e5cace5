//! How the REST paths name things: the prefix is an lh ref (writable when it is a
//! branch head), a namespace is its levels joined by the unit separator, a table is
//! `ns.table` in lh's catalog.

use lh_catalog::Commit;

use super::types::{TableIdent, bad_request};
use crate::auth::Identity;
use crate::error::{Code, Error, Kind};
use crate::http::IcebergResult;
use crate::state::AppState;

/// The ref a prefix names, and whether writes are allowed there.
pub struct At {
    pub expr: String,
    pub commit: Commit,
    writable: bool,
}

/// The commit a prefix names, for a read by `identity`: the very commit the guard found
/// its history limits for (`Identity::reads`), not the prefix resolved again.
pub async fn at(s: &AppState, prefix: &str, identity: &Identity) -> IcebergResult<At> {
    resolve(s, prefix, &identity.reads(prefix)).await
}

/// The ref a prefix names as it is now (the catalog's configuration).
pub async fn named(s: &AppState, prefix: &str) -> IcebergResult<At> {
    resolve(s, prefix, prefix).await
}

async fn resolve(s: &AppState, prefix: &str, read: &str) -> IcebergResult<At> {
    let expr = prefix.to_string();
    let resolved = s.catalog.resolve(read).await.map_err(|e| {
        let message = format!("{} (the catalog prefix is an lh ref)", e.message());
        match e.kind() {
            lh_catalog::ErrorKind::RefNotFound => Error::not_found(Code::PrefixNotFound, message),
            _ => bad_request(message),
        }
    })?;
    Ok(At {
        expr,
        writable: resolved.is_branch_head,
        commit: resolved.commit,
    })
}

/// The branch a prefix names, for a write by `identity`: a tag or a fixed commit is
/// refused. A write goes to the branch's head as it is now; when history limits what
/// the identity reads there, that head must be the commit the limits were found for
/// (a branch moved since is a conflict the client retries), so that what the write
/// reads and answers (a table's metadata, whether it exists) is held to them.
pub async fn branch(s: &AppState, prefix: &str, identity: &Identity) -> IcebergResult<At> {
    let a = named(s, prefix).await?;
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
        )
        .into());
    }
    if !a.writable {
        return Err(Error::new(
            Kind::Forbidden,
            Code::ReadOnlyRef,
            format!(
                "'{}' is read-only (a tag or a fixed commit); write to a branch",
                a.expr
            ),
        )
        .into());
    }
    Ok(a)
}

/// A namespace as a path parameter: levels separated by the unit separator (0x1F).
pub fn namespace(raw: &str) -> IcebergResult<Vec<String>> {
    let parts: Vec<String> = raw.split('\u{1f}').map(String::from).collect();
    let joined = parts.join(".");
    lh_catalog::names::validate_namespace(&joined).map_err(|e| bad_request(e.to_string()))?;
    Ok(parts)
}

pub fn table_name(ns: &[String], table: &str) -> IcebergResult<String> {
    let name = format!("{}.{table}", ns.join("."));
    lh_catalog::names::validate_table_name(&name).map_err(|e| bad_request(e.to_string()))?;
    Ok(name)
}

pub fn ident_name(id: &TableIdent) -> IcebergResult<String> {
    table_name(&id.namespace, &id.name)
}

pub fn no_table(name: &str, at: &str) -> Error {
    Error::not_found(
        Code::TableNotFound,
        format!("table '{name}' does not exist at '{at}'"),
    )
}
