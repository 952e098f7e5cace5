//! Query-string parameters as lh's API reads them.

/// Query-string pairs, repeated keys kept (`property=a=1&property=b=2`).
pub fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A client's ref expression, parsed here at the edge: the services take it typed.
pub fn ref_expr(text: &str) -> crate::error::Result<lh_catalog::RefExpr> {
    Ok(lh_catalog::RefExpr::parse(text)?)
}
