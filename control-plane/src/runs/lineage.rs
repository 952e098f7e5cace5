//! Column-level lineage: which input columns each output column of a model comes from.
//!
//! A SQL model's lineage is read from DuckDB's parse tree of its query
//! (`json_serialize_sql`): the FROM clause gives the relations in scope (tables, CTEs,
//! subqueries, joins), each expression of the SELECT list gives its output column, and
//! the column references in it, resolved through the scope (a CTE's or subquery's
//! column to its own sources, `*` to every column in scope), give its sources. Filters,
//! join conditions and groupings decide which rows, not what a value is made of: they
//! are not lineage. A Python model that declares its input columns
//! (`lh.Model("t", columns=[...])`) has each output column come from every declared
//! column (its code is not read); one that declares none, from every column of the
//! input.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

/// A column of a table: (table, column).
pub type ColumnRef = (String, String);

/// An output column and the input columns it comes from.
pub type Sourced = (String, BTreeSet<ColumnRef>);

/// A table's name (as lineage names it) and columns, by its name as a query writes it.
pub type Tables<'a> = dyn Fn(&str) -> Option<(String, Vec<String>)> + 'a;

enum Rel {
    /// A table: its name as lineage names it, and its columns.
    Table(String, Vec<String>),
    /// A CTE or subquery: its columns and their sources.
    Derived(Vec<Sourced>),
}

/// The lineage of a parsed query's output columns, in order, or None when the query
/// has a shape this does not follow (a table function, a recursive CTE). `table` gives
/// the name and columns of a table as the query names it (`raw.orders`, or a bare name).
pub fn query_lineage(tree: &Value, table: &Tables) -> Option<Vec<Sourced>> {
    let statements = tree["statements"].as_array()?;
    let [statement] = statements.as_slice() else {
        return None;
    };
    node(&statement["node"], &HashMap::new(), table)
}

fn node(v: &Value, ctes: &HashMap<String, Vec<Sourced>>, table: &Tables) -> Option<Vec<Sourced>> {
    let mut ctes = ctes.clone();
    for entry in v["cte_map"]["map"].as_array().into_iter().flatten() {
        let name = entry["key"].as_str()?.to_lowercase();
        let cols = node(&entry["value"]["query"]["node"], &ctes, table)?;
        ctes.insert(name, cols);
    }
    match v["type"].as_str()? {
        "SELECT_NODE" => {
            let scope = from(&v["from_table"], &ctes, table)?;
            let mut out = Vec::new();
            for item in v["select_list"].as_array()? {
                if item["class"] == "STAR" {
                    let only = item["relation_name"].as_str().filter(|r| !r.is_empty());
                    for (alias, rel) in &scope {
                        if only.is_some_and(|o| !o.eq_ignore_ascii_case(alias)) {
                            continue;
                        }
                        out.extend(columns_of(rel));
                    }
                    continue;
                }
                let name = match item["alias"].as_str() {
                    Some(a) if !a.is_empty() => a.to_string(),
                    _ => match item["column_names"].as_array().and_then(|c| c.last()) {
                        Some(c) if item["class"] == "COLUMN_REF" => c.as_str()?.to_string(),
                        _ => String::new(),
                    },
                };
                let mut sources = BTreeSet::new();
                expression(item, &scope, &ctes, table, &mut sources);
                out.push((name, sources));
            }
            Some(out)
        }
        "SET_OPERATION_NODE" => {
            let left = node(&v["left"], &ctes, table)?;
            let right = node(&v["right"], &ctes, table)?;
            Some(
                left.into_iter()
                    .zip(right)
                    .map(|((n, mut a), (_, b))| {
                        a.extend(b);
                        (n, a)
                    })
                    .collect(),
            )
        }
        _ => None,
    }
}

/// The relations a FROM clause puts in scope, by alias.
fn from(
    v: &Value,
    ctes: &HashMap<String, Vec<Sourced>>,
    table: &Tables,
) -> Option<Vec<(String, Rel)>> {
    if v.is_null() {
        return Some(Vec::new());
    }
    let alias = v["alias"].as_str().unwrap_or_default().to_string();
    match v["type"].as_str()? {
        "BASE_TABLE" => {
            let name = v["table_name"].as_str()?;
            let schema = v["schema_name"].as_str().unwrap_or_default();
            let alias = if alias.is_empty() {
                name.to_string()
            } else {
                alias
            };
            if schema.is_empty()
                && let Some(cols) = ctes.get(&name.to_lowercase())
            {
                return Some(vec![(alias, Rel::Derived(cols.clone()))]);
            }
            let written = match schema {
                "" => name.to_string(),
                s => format!("{s}.{name}"),
            };
            let (full, cols) = table(&written)?;
            Some(vec![(alias, Rel::Table(full, cols))])
        }
        "JOIN" => {
            let mut l = from(&v["left"], ctes, table)?;
            l.extend(from(&v["right"], ctes, table)?);
            Some(l)
        }
        "SUBQUERY" => {
            let cols = node(&v["subquery"]["node"], ctes, table)?;
            Some(vec![(alias, Rel::Derived(cols))])
        }
        _ => None,
    }
}

fn columns_of(rel: &Rel) -> Vec<Sourced> {
    match rel {
        Rel::Table(t, cols) => cols
            .iter()
            .map(|c| (c.clone(), BTreeSet::from([(t.clone(), c.clone())])))
            .collect(),
        Rel::Derived(cols) => cols.clone(),
    }
}

/// The sources of the column `col` of one relation.
fn column_of(rel: &Rel, col: &str) -> Option<BTreeSet<ColumnRef>> {
    match rel {
        Rel::Table(t, cols) => cols
            .iter()
            .find(|c| c.eq_ignore_ascii_case(col))
            .map(|c| BTreeSet::from([(t.clone(), c.clone())])),
        Rel::Derived(cols) => cols
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(col))
            .map(|(_, s)| s.clone()),
    }
}

/// Adds the sources of the column references in an expression.
fn expression(
    v: &Value,
    scope: &[(String, Rel)],
    ctes: &HashMap<String, Vec<Sourced>>,
    table: &Tables,
    out: &mut BTreeSet<ColumnRef>,
) {
    match v {
        Value::Object(m) => {
            match m.get("class").and_then(|c| c.as_str()) {
                Some("COLUMN_REF") => {
                    let parts: Vec<&str> = m["column_names"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.as_str())
                        .collect();
                    // `rel.col` (or `rel.col.field`), else a column (or `col.field`).
                    let qualified = parts.len() >= 2
                        && scope.iter().any(|(a, _)| a.eq_ignore_ascii_case(parts[0]));
                    if qualified {
                        let named = scope
                            .iter()
                            .filter(|(a, _)| a.eq_ignore_ascii_case(parts[0]));
                        for (_, rel) in named {
                            if let Some(s) = column_of(rel, parts[1]) {
                                out.extend(s);
                            }
                        }
                    } else if let Some(col) = parts.first() {
                        for (_, rel) in scope {
                            if let Some(s) = column_of(rel, col) {
                                out.extend(s);
                            }
                        }
                    }
                    return;
                }
                Some("SUBQUERY") => {
                    if let Some(cols) = node(&m["subquery"]["node"], ctes, table) {
                        for (_, s) in cols {
                            out.extend(s);
                        }
                    }
                    return;
                }
                _ => {}
            }
            m.values()
                .for_each(|v| expression(v, scope, ctes, table, out));
        }
        Value::Array(a) => a
            .iter()
            .for_each(|v| expression(v, scope, ctes, table, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(sql: &str) -> Value {
        let c = duckdb::Connection::open_in_memory().unwrap();
        let s: String = c
            .query_row("SELECT json_serialize_sql(?::VARCHAR)", [sql], |r| r.get(0))
            .unwrap();
        serde_json::from_str(&s).unwrap()
    }

    fn tables(name: &str) -> Option<(String, Vec<String>)> {
        let cols: &[&str] = match name {
            "raw.orders" | "orders" => &["id", "customer_id", "amount", "status"],
            "raw.customers" => &["id", "name"],
            _ => return None,
        };
        let full = if name.contains('.') {
            name.to_string()
        } else {
            format!("raw.{name}")
        };
        Some((full, cols.iter().map(|c| c.to_string()).collect()))
    }

    fn sources(sql: &str) -> Vec<(String, Vec<String>)> {
        query_lineage(&tree(sql), &tables)
            .unwrap()
            .into_iter()
            .map(|(n, s)| (n, s.into_iter().map(|(t, c)| format!("{t}.{c}")).collect()))
            .collect()
    }

    #[test]
    fn columns_come_from_what_their_expressions_name() {
        let got = sources(
            "with paid as (select id, customer_id, amount * 100 as cents from raw.orders \
             where status = 'paid') \
             select c.name, p.cents, sum(p.cents) as total, count(*) as n \
             from paid p join raw.customers c on c.id = p.customer_id group by all",
        );
        assert_eq!(
            got,
            vec![
                ("name".to_string(), vec!["raw.customers.name".to_string()]),
                ("cents".to_string(), vec!["raw.orders.amount".to_string()]),
                ("total".to_string(), vec!["raw.orders.amount".to_string()]),
                ("n".to_string(), vec![]),
            ],
            "a filter, a join condition and a grouping are not lineage"
        );
        // Stars, bare names, subqueries and unions.
        let got = sources(
            "select * from (select id as order_id, status from orders) s \
             union all select id, 'x' from raw.customers",
        );
        assert_eq!(
            got,
            vec![
                (
                    "order_id".to_string(),
                    vec!["raw.customers.id".to_string(), "raw.orders.id".to_string()]
                ),
                ("status".to_string(), vec!["raw.orders.status".to_string()]),
            ]
        );
        // A table function is not followed.
        assert!(query_lineage(&tree("select * from range(3)"), &tables).is_none());
    }
}

/// One step of lineage: a column made from another by a model.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: ColumnRef,
    pub to: ColumnRef,
    pub node: String,
    pub project: String,
}

impl super::RunService {
    /// The column edges of every model in the newest succeeded run (that ran models) of
    /// each project on `target`, with their tables as they are at `head`; and the
    /// models whose lineage could not be read, with why.
    pub async fn lineage_edges(
        &self,
        target: &str,
        head: &lh_catalog::Commit,
    ) -> crate::error::Result<(Vec<Edge>, Vec<String>)> {
        use super::project::{Lang, NodeKind};
        let mut edges = Vec::new();
        let mut unread = Vec::new();
        let mut columns: HashMap<String, Option<Vec<String>>> = HashMap::new();
        for project in self.store.projects_on(target).await? {
            let Some((_, plan)) = self.previous_plan(&project, target).await? else {
                continue;
            };
            let mut seen = BTreeSet::new();
            for n in &plan.nodes {
                if !matches!(n.kind, NodeKind::Model { .. }) || !seen.insert(n.name.clone()) {
                    continue;
                }
                // The columns of the tables involved, as they are at the head.
                for t in n.inputs.iter().map(|i| &i.table).chain([&n.name]) {
                    if !columns.contains_key(t) {
                        let cols = self.tables.load(head, t).await?.map(|t| {
                            t.metadata
                                .current_schema()
                                .as_struct()
                                .fields()
                                .iter()
                                .map(|f| f.name.clone())
                                .collect()
                        });
                        columns.insert(t.clone(), cols);
                    }
                }
                let Some(Some(out_cols)) = columns.get(&n.name).cloned() else {
                    continue;
                };
                let sourced: Vec<Sourced> = match &n.lang {
                    Lang::Sql { sql, .. } => {
                        let tree = match self.queries.parse_tree(sql).await {
                            Ok(t) => t,
                            Err(e) => {
                                unread.push(format!("{}: {}", n.name, e.message));
                                continue;
                            }
                        };
                        let mut by_name: HashMap<String, (String, Vec<String>)> = HashMap::new();
                        for i in &n.inputs {
                            if let Some(Some(cols)) = columns.get(&i.table) {
                                by_name.insert(
                                    i.table.to_lowercase(),
                                    (i.table.clone(), cols.clone()),
                                );
                                if i.bare
                                    && let Some((_, bare)) = i.table.rsplit_once('.')
                                {
                                    by_name.insert(
                                        bare.to_lowercase(),
                                        (i.table.clone(), cols.clone()),
                                    );
                                }
                            }
                        }
                        let lookup = |w: &str| by_name.get(&w.to_lowercase()).cloned();
                        match query_lineage(&tree, &lookup) {
                            // Unnamed expressions take the output's names, by position.
                            Some(mut s) => {
                                if s.len() == out_cols.len() {
                                    for ((name, _), real) in s.iter_mut().zip(&out_cols) {
                                        *name = real.clone();
                                    }
                                }
                                s
                            }
                            None => {
                                unread.push(format!(
                                    "{}: its query has a shape lineage does not follow",
                                    n.name
                                ));
                                continue;
                            }
                        }
                    }
                    Lang::Python { .. } => {
                        let mut from = BTreeSet::new();
                        for i in &n.inputs {
                            let cols = match (&i.columns, columns.get(&i.table)) {
                                (Some(c), _) => c.clone(),
                                (None, Some(Some(c))) => c.clone(),
                                _ => Vec::new(),
                            };
                            from.extend(cols.into_iter().map(|c| (i.table.clone(), c)));
                        }
                        out_cols.iter().map(|c| (c.clone(), from.clone())).collect()
                    }
                };
                for (col, sources) in sourced {
                    for s in sources {
                        edges.push(Edge {
                            from: s,
                            to: (n.name.clone(), col.clone()),
                            node: n.display_name(),
                            project: project.clone(),
                        });
                    }
                }
            }
        }
        edges.sort();
        edges.dedup();
        Ok((edges, unread))
    }
}
