//! "Did you mean": when the server finds no ref or table of a name, the one nearest it
//! (as git and DuckDB suggest), among those the user may list. The names come from the
//! server's own listings, so a suggestion names nothing the user could not list.

use lh_api::RefKind;

use crate::client::Client;
use crate::error::CliError;
use crate::settings::Settings;

/// `e` with a suggestion in its hint, when it is a ref or table not found and a name
/// near it exists.
pub async fn suggested(client: &Client, settings: &Settings, e: CliError) -> CliError {
    let CliError::Api { status, mut body } = e else {
        return e;
    };
    let quoted = quoted(&body.error.message);
    let nearest = match (body.error.kind.as_str(), quoted.as_slice()) {
        ("ref_not_found", [name, ..]) => {
            let mut names = Vec::new();
            for kind in [RefKind::Branch, RefKind::Tag] {
                if let Ok(refs) = client.refs(kind).await {
                    names.extend(
                        refs.into_iter()
                            .map(|r| r.name)
                            .filter(|n| !n.starts_with("run/")),
                    );
                }
            }
            nearest(name, &names)
        }
        ("table_not_found", [name, rest @ ..]) => {
            let at = match rest.first() {
                Some(at) => Ok(at.clone()),
                None => client.resolve_ref(settings.branch.clone()).await,
            };
            let listed = match at {
                Ok(at) => client.tables(&at, None).await,
                Err(e) => Err(e),
            };
            match listed {
                Ok(list) => {
                    let names: Vec<String> = list.tables.into_iter().map(|t| t.name).collect();
                    nearest(name, &names)
                }
                Err(_) => None,
            }
        }
        _ => None,
    };
    if let Some(n) = nearest {
        let mean = format!("did you mean '{n}'?");
        body.error.hint = Some(match body.error.hint.take() {
            Some(h) => format!("{mean}; {h}"),
            None => mean,
        });
    }
    CliError::Api { status, body }
}

/// The texts between single quotes in a message, in order.
fn quoted(message: &str) -> Vec<String> {
    message
        .split('\'')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The name of `names` nearest `typed` (by edits, ignoring case; a table may be typed
/// without its namespace), when near enough to be a typo and not `typed` itself.
fn nearest(typed: &str, names: &[String]) -> Option<String> {
    let typed_l = typed.to_lowercase();
    let max = (typed.chars().count() / 3).clamp(1, 3);
    names
        .iter()
        .filter(|n| n.as_str() != typed)
        .filter_map(|n| {
            let full = n.to_lowercase();
            let short = full.rsplit('.').next().unwrap_or(&full).to_string();
            let d = edits(&typed_l, &full).min(if typed.contains('.') {
                usize::MAX
            } else {
                edits(&typed_l, &short)
            });
            (d <= max).then_some((d, n))
        })
        .min()
        .map(|(_, n)| n.clone())
}

/// Levenshtein distance, with a swap of two neighbours counted as one edit.
fn edits(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_nearest_name_is_suggested_only_when_it_is_a_typo() {
        let refs = names(&["main", "dev", "alice.discounts"]);
        assert_eq!(nearest("mian", &refs).as_deref(), Some("main"));
        assert_eq!(
            nearest("alice.discount", &refs).as_deref(),
            Some("alice.discounts")
        );
        assert_eq!(nearest("production", &refs), None);
        assert_eq!(nearest("main", &refs), None);
        let tables = names(&["raw.orders", "raw.payments", "analytics.customers"]);
        assert_eq!(nearest("raw.ordrs", &tables).as_deref(), Some("raw.orders"));
        assert_eq!(
            nearest("custmers", &tables).as_deref(),
            Some("analytics.customers")
        );
        assert_eq!(nearest("raw.custmers", &tables), None);
        assert_eq!(
            quoted("table 'raw.x' not found at 'main'"),
            ["raw.x", "main"]
        );
    }
}
