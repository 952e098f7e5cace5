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
/// has a shape this does not follow (a table function, `COLUMNS(...)`). `table` gives
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
        let query = &entry["value"]["query"]["node"];
        let mut cols = match query["type"].as_str()? {
            "RECURSIVE_CTE_NODE" => {
                recursive(query, &name, &entry["value"]["aliases"], &ctes, table)?
            }
            _ => node(query, &ctes, table)?,
        };
        // `name(a, b) AS (...)` names the CTE's first columns.
        renamed(&mut cols, &entry["value"]["aliases"]);
        ctes.insert(name, cols);
    }
    match v["type"].as_str()? {
        "SELECT_NODE" => {
            let scope = from(&v["from_table"], &ctes, table)?;
            let mut out = Vec::new();
            for item in v["select_list"].as_array()? {
                if item["class"] == "STAR" {
                    // `COLUMNS(...)` and `*` over an expression are not followed.
                    if item["columns"] == true || !item["expr"].is_null() {
                        return None;
                    }
                    out.extend(star(item, &scope, &ctes, table)?);
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
            // A union's values come from both sides, by position; EXCEPT and INTERSECT
            // only filter the left side's rows. Other forms are not followed.
            let (l, r) = match v.get("children").and_then(|c| c.as_array()) {
                Some(c) if c.len() == 2 => (&c[0], &c[1]),
                _ => (&v["left"], &v["right"]),
            };
            let left = node(l, &ctes, table)?;
            match v["setop_type"].as_str()? {
                "UNION" => {
                    let right = node(r, &ctes, table)?;
                    if right.len() != left.len() {
                        return None;
                    }
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
                // By name: the left side's columns, then the right side's others.
                "UNION_BY_NAME" => {
                    let mut out = left;
                    for (n, b) in node(r, &ctes, table)? {
                        match out.iter_mut().find(|(m, _)| m.eq_ignore_ascii_case(&n)) {
                            Some((_, a)) => a.extend(b),
                            None => out.push((n, b)),
                        }
                    }
                    Some(out)
                }
                "EXCEPT" | "INTERSECT" => Some(left),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Names the first columns by a CTE's aliases (`c(a, b)`), positionally.
fn renamed(cols: &mut [Sourced], aliases: &Value) {
    for (c, a) in cols
        .iter_mut()
        .zip(aliases.as_array().into_iter().flatten())
    {
        if let Some(a) = a.as_str() {
            c.0 = a.to_string();
        }
    }
}

/// A recursive CTE: its anchor's columns, each also made of what the recursive part
/// makes it from (where that reads the CTE itself, from what the CTE is so far, again
/// until nothing grows: the sets only grow, and they are finite).
fn recursive(
    v: &Value,
    name: &str,
    aliases: &Value,
    ctes: &HashMap<String, Vec<Sourced>>,
    table: &Tables,
) -> Option<Vec<Sourced>> {
    let mut cols = node(&v["left"], ctes, table)?;
    loop {
        let mut scope = ctes.clone();
        let mut named = cols.clone();
        renamed(&mut named, aliases);
        scope.insert(name.to_string(), named);
        let right = node(&v["right"], &scope, table)?;
        if right.len() != cols.len() {
            return None;
        }
        let mut grew = false;
        for ((_, a), (_, b)) in cols.iter_mut().zip(right) {
            let before = a.len();
            a.extend(b);
            grew |= a.len() > before;
        }
        if !grew {
            return Some(cols);
        }
    }
}

/// The columns a `*` (or `rel.*`) gives: every column in scope (or of `rel`), less
/// `EXCLUDE`d ones, `REPLACE`d ones made of their expression, `RENAME`d ones renamed.
fn star(
    item: &Value,
    scope: &[(String, Rel)],
    ctes: &HashMap<String, Vec<Sourced>>,
    table: &Tables,
) -> Option<Vec<Sourced>> {
    let only = item["relation_name"].as_str().filter(|r| !r.is_empty());
    let mut out = Vec::new();
    for (alias, rel) in scope {
        if only.is_some_and(|o| !o.eq_ignore_ascii_case(alias)) {
            continue;
        }
        for (col, sources) in columns_of(rel) {
            let excluded = item["exclude_list"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e.as_str())
                .any(|e| e.eq_ignore_ascii_case(&col))
                || item["qualified_exclude_list"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|q| same_column(q, alias, &col));
            if excluded {
                continue;
            }
            let replaced = item["replace_list"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| {
                    r["key"]
                        .as_str()
                        .is_some_and(|k| k.eq_ignore_ascii_case(&col))
                });
            let sources = match replaced {
                // One column of that name comes out, the first (DuckDB drops the rest).
                Some(_)
                    if out
                        .iter()
                        .any(|(n, _): &Sourced| n.eq_ignore_ascii_case(&col)) =>
                {
                    continue;
                }
                Some(r) => {
                    let mut s = BTreeSet::new();
                    expression(&r["value"], scope, ctes, table, &mut s);
                    s
                }
                None => sources,
            };
            let name = item["rename_list"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| same_column(&r["key"], alias, &col))
                .and_then(|r| r["value"].as_str().map(String::from))
                .unwrap_or(col);
            out.push((name, sources));
        }
    }
    Some(out)
}

/// Whether a qualified column name (`{"table", "column"}`, the table possibly empty)
/// names column `col` of the relation `alias`.
fn same_column(q: &Value, alias: &str, col: &str) -> bool {
    let t = q["table"].as_str().unwrap_or_default();
    q["column"]
        .as_str()
        .is_some_and(|c| c.eq_ignore_ascii_case(col))
        && (t.is_empty() || t.eq_ignore_ascii_case(alias))
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
                    let mut parts: Vec<&str> = m
                        .get("column_names")
                        .and_then(|c| c.as_array())
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.as_str())
                        .collect();
                    let named = |p: &str| scope.iter().any(|(a, _)| a.eq_ignore_ascii_case(p));
                    // `schema.table.col`: the table's alias is its name.
                    if parts.len() >= 3 && !named(parts[0]) && named(parts[1]) {
                        parts.remove(0);
                    }
                    // `rel.col` (or `rel.col.field`), else a column (or `col.field`).
                    let qualified = parts.len() >= 2 && named(parts[0]);
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
                    // A scalar subquery's value is lineage; IN, ANY and EXISTS only
                    // test (their left operand still is).
                    if m.get("subquery_type").and_then(|t| t.as_str()) == Some("SCALAR")
                        && let Some(cols) = m
                            .get("subquery")
                            .and_then(|q| node(&q["node"], ctes, table))
                    {
                        for (_, s) in cols {
                            out.extend(s);
                        }
                    }
                    if let Some(child) = m.get("child") {
                        expression(child, scope, ctes, table, out);
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
            .unwrap_or_else(|| panic!("not followed: {sql}"))
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
        // A table function and COLUMNS(...) are not followed.
        for sql in [
            "select * from range(3)",
            "select columns('a.*') from raw.orders",
        ] {
            assert!(query_lineage(&tree(sql), &tables).is_none(), "{sql}");
        }
        // `* EXCLUDE/REPLACE/RENAME`, qualified too; UNION BY NAME; a CTE's column
        // aliases; a recursive CTE, whose recursive part adds what it reads.
        let got = sources(
            "select * exclude (status) replace (amount * 2 as amount) rename (id as order_id) \
             from raw.orders",
        );
        assert_eq!(
            got,
            vec![
                ("order_id".to_string(), vec!["raw.orders.id".to_string()]),
                (
                    "customer_id".to_string(),
                    vec!["raw.orders.customer_id".to_string()]
                ),
                ("amount".to_string(), vec!["raw.orders.amount".to_string()]),
            ]
        );
        let got = sources(
            "select o.* exclude (o.status, o.amount), c.* exclude (id) rename (c.name as who) \
             from raw.orders o join raw.customers c on c.id = o.customer_id",
        );
        assert_eq!(
            got,
            vec![
                ("id".to_string(), vec!["raw.orders.id".to_string()]),
                (
                    "customer_id".to_string(),
                    vec!["raw.orders.customer_id".to_string()]
                ),
                ("who".to_string(), vec!["raw.customers.name".to_string()]),
            ]
        );
        let got = sources(
            "select name, id from raw.customers union by name \
             select status as name, amount as extra from raw.orders",
        );
        assert_eq!(
            got,
            vec![
                (
                    "name".to_string(),
                    vec![
                        "raw.customers.name".to_string(),
                        "raw.orders.status".to_string()
                    ]
                ),
                ("id".to_string(), vec!["raw.customers.id".to_string()]),
                ("extra".to_string(), vec!["raw.orders.amount".to_string()]),
            ]
        );
        // A value that moves one column over per step: all of them, in the end.
        let got = sources(
            "with recursive r(a, b, c, d, k) as (select id, customer_id, amount, \
             length(status), 0 from raw.orders union all select b, c, d, d, k + 1 from r \
             where k < 3) select a from r",
        );
        assert_eq!(
            got,
            vec![(
                "a".to_string(),
                vec![
                    "raw.orders.amount".to_string(),
                    "raw.orders.customer_id".to_string(),
                    "raw.orders.id".to_string(),
                    "raw.orders.status".to_string(),
                ]
            )]
        );
        let got = sources("with c(total) as (select amount from raw.orders) select total from c");
        assert_eq!(
            got,
            vec![("total".to_string(), vec!["raw.orders.amount".to_string()])]
        );
        let got = sources(
            "with recursive r(n, who) as (select id, name from raw.customers \
             union all select r.n + o.amount, r.who from r join raw.orders o on o.id = r.n \
             where r.n < 10) select n, who from r",
        );
        assert_eq!(
            got,
            vec![
                (
                    "n".to_string(),
                    vec![
                        "raw.customers.id".to_string(),
                        "raw.orders.amount".to_string()
                    ]
                ),
                ("who".to_string(), vec!["raw.customers.name".to_string()]),
            ]
        );
        // EXCEPT only filters; an IN subquery only tests, its operand is lineage; a
        // scalar subquery's value is; a column named schema.table.column.
        let got = sources(
            "select raw.orders.amount, status in (select name from raw.customers) as known,              (select max(name) from raw.customers) as top from raw.orders              except select amount, false, 'x' from raw.orders where id = 1",
        );
        assert_eq!(
            got,
            vec![
                ("amount".to_string(), vec!["raw.orders.amount".to_string()]),
                ("known".to_string(), vec!["raw.orders.status".to_string()]),
                ("top".to_string(), vec!["raw.customers.name".to_string()]),
            ]
        );
    }
}

/// A model whose lineage could not be read: its table, the tables it reads, and why.
pub struct Unresolved {
    pub model: String,
    pub tables: Vec<String>,
    pub why: String,
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
    ) -> crate::error::Result<(Vec<Edge>, Vec<Unresolved>)> {
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
                let tables: Vec<String> = n
                    .inputs
                    .iter()
                    .map(|i| i.table.clone())
                    .chain([n.name.clone()])
                    .collect();
                let unread_here = |why: String| Unresolved {
                    model: n.name.clone(),
                    tables: tables.clone(),
                    why,
                };
                // The columns of the tables involved, as they are at the head.
                let mut missing = None;
                for t in &tables {
                    if !columns.contains_key(t) {
                        let cols = match self.tables.load(head, t).await {
                            Ok(t) => t.map(|t| {
                                t.metadata
                                    .current_schema()
                                    .as_struct()
                                    .fields()
                                    .iter()
                                    .map(|f| f.name.clone())
                                    .collect()
                            }),
                            Err(_) => None,
                        };
                        columns.insert(t.clone(), cols);
                    }
                    if columns.get(t).is_none_or(|c| c.is_none()) {
                        missing = Some(t.clone());
                    }
                }
                if let Some(t) = missing {
                    unread.push(unread_here(format!("table {t} cannot be read at the head")));
                    continue;
                }
                let Some(Some(out_cols)) = columns.get(&n.name).cloned() else {
                    continue;
                };
                let sourced: Vec<Sourced> = match &n.lang {
                    Lang::Sql { sql, .. } => {
                        let Ok(tree) = self.queries.parse_tree(sql).await else {
                            unread.push(unread_here("its query does not parse".into()));
                            continue;
                        };
                        let mut by_name: HashMap<String, (String, Vec<String>)> = HashMap::new();
                        for i in &n.inputs {
                            if let Some(Some(cols)) = columns.get(&i.table) {
                                by_name.insert(
                                    i.table.to_lowercase(),
                                    (i.table.clone(), cols.clone()),
                                );
                                if i.bare
                                    && let Some((_, bare)) = lh_catalog::names::to_sql(&i.table)
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
                            // Unnamed expressions take the output's names by position,
                            // when every named one is where the output has it.
                            Some(mut s) => {
                                let lined_up = s.len() == out_cols.len()
                                    && s.iter().zip(&out_cols).all(|((n, _), real)| {
                                        n.is_empty() || n.eq_ignore_ascii_case(real)
                                    });
                                if lined_up {
                                    for ((name, _), real) in s.iter_mut().zip(&out_cols) {
                                        *name = real.clone();
                                    }
                                }
                                // Columns named as the table has them; others dropped.
                                let known: Vec<Sourced> = s
                                    .into_iter()
                                    .filter_map(|(name, src)| {
                                        let real = out_cols
                                            .iter()
                                            .find(|c| c.eq_ignore_ascii_case(&name))?;
                                        Some((real.clone(), src))
                                    })
                                    .collect();
                                known
                            }
                            None => {
                                unread.push(unread_here(
                                    "its query has a shape lineage does not follow".into(),
                                ));
                                continue;
                            }
                        }
                    }
                    Lang::Python { .. } => {
                        let mut from = BTreeSet::new();
                        for i in &n.inputs {
                            let all = match columns.get(&i.table) {
                                Some(Some(c)) => c.clone(),
                                _ => Vec::new(),
                            };
                            // Declared columns, as the table names them.
                            let cols: Vec<String> = match &i.columns {
                                Some(declared) => all
                                    .iter()
                                    .filter(|c| declared.iter().any(|d| d.eq_ignore_ascii_case(c)))
                                    .cloned()
                                    .collect(),
                                None => all,
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
                            node: n.name.clone(),
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
