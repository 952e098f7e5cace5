//! How the REST paths name things: a namespace is its levels joined by the unit
//! separator, a table is `ns.table` in lh's catalog (the prefix, an lh ref, is the REST
//! catalog service's to resolve).

use super::types::{TableIdent, bad_request};
use crate::http::IcebergResult;

/// A namespace as a path parameter: levels separated by the unit separator (0x1F).
/// The lh ref expression a catalog prefix (or warehouse) names: parsed here, once, and
/// passed typed from here on.
pub fn prefix(raw: &str) -> IcebergResult<lh_catalog::RefExpr> {
    lh_catalog::RefExpr::parse(raw)
        .map_err(|e| bad_request(format!("{e} (the catalog prefix is an lh ref)")).into())
}

pub fn namespace(raw: &str) -> IcebergResult<Vec<String>> {
    let parts: Vec<String> = raw.split('\u{1f}').map(String::from).collect();
    let joined = lh_catalog::names::join_levels(&parts);
    lh_catalog::names::validate_namespace(&joined).map_err(|e| bad_request(e.to_string()))?;
    Ok(parts)
}

pub fn table_name(ns: &[String], table: &str) -> IcebergResult<String> {
    let mut levels = ns.to_vec();
    levels.push(table.to_string());
    let name = lh_catalog::names::join_levels(&levels);
    lh_catalog::names::validate_table_name(&name).map_err(|e| bad_request(e.to_string()))?;
    Ok(name)
}

pub fn ident_name(id: &TableIdent) -> IcebergResult<String> {
    table_name(&id.namespace, &id.name)
}
