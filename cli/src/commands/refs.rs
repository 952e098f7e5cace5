//! Branches, tags, checkout, log, diff, merge and info.

use lh_api::{CommitInfo, CreateRef, MergeKind, MergeRequest, RefKind, ServerInfo};
use serde::Serialize;

use crate::args::{CheckoutArgs, DiffArgs, LogArgs, MergeArgs, OutputFormat, RefCommand};
use crate::client::Client;
use crate::error::CliResult;
use crate::output::{self, short};
use crate::settings::Settings;

/// The branches runs work on (`run/<id>`), kept when a run fails.
const RUN_BRANCH_PREFIX: &str = "run/";

pub async fn refs(
    client: &Client,
    settings: &Settings,
    kind: RefKind,
    cmd: RefCommand,
) -> CliResult<()> {
    match cmd {
        RefCommand::Create { name, from } => {
            let from = client.resolve_ref(settings.reference(&from)).await?;
            let r = client
                .create_ref(&CreateRef {
                    name,
                    kind,
                    from: Some(from.clone()),
                })
                .await?;
            if settings.output == OutputFormat::Table {
                eprintln!(
                    "created {} '{}' at {} (from {from})",
                    kind.as_str(),
                    r.name,
                    short(&r.head)
                );
                return Ok(());
            }
            output::item(
                settings.output,
                &r,
                &[
                    ("name", r.name.clone()),
                    ("kind", kind.as_str().into()),
                    ("head", r.head.clone()),
                ],
            )
        }
        RefCommand::Ls { all } => {
            let mut refs = client.refs(kind).await?;
            if kind == RefKind::Tag {
                return output::listing(settings.output, &["name", "head"], &refs, |r| {
                    vec![r.name.clone(), short(&r.head).to_string()]
                });
            }
            // The active branch is marked, as git marks the checked-out one.
            let active = client.resolve_ref(settings.branch.clone()).await?;
            // A failed run's branch is kept for inspection (`lh runs show` names it):
            // listed with --all, or when it is the active branch.
            let before = refs.len();
            if !all {
                refs.retain(|r| !r.name.starts_with(RUN_BRANCH_PREFIX) || r.name == active);
            }
            let hidden = before - refs.len();
            output::listing(settings.output, &["", "name", "head"], &refs, |r| {
                let mark = if r.name == active { "*" } else { "" };
                let name = if r.protected {
                    format!("{} (protected)", r.name)
                } else {
                    r.name.clone()
                };
                vec![mark.to_string(), name, short(&r.head).to_string()]
            })?;
            if hidden > 0 && settings.output == OutputFormat::Table {
                eprintln!(
                    "({hidden} branch{} of failed runs not shown: lh branch ls --all)",
                    if hidden == 1 { "" } else { "es" }
                );
            }
            Ok(())
        }
        RefCommand::Rm { name } => {
            client.delete_ref(&name, kind).await?;
            eprintln!("deleted {} '{name}'", kind.as_str());
            Ok(())
        }
        RefCommand::Protect { name, .. } | RefCommand::Unprotect { name }
            if kind == RefKind::Tag =>
        {
            Err(crate::error::CliError::invalid(
                format!("'{name}': tags never move; only branches are protected"),
                None,
            ))
        }
        RefCommand::Protect {
            name,
            require_checks,
        } => {
            let r = client.protect_branch(&name, true, &require_checks).await?;
            if r.required_checks.is_empty() {
                eprintln!("protected branch '{name}': it changes only by lh merge");
            } else {
                eprintln!(
                    "protected branch '{name}': it changes only by lh merge, once the checks {} pass",
                    r.required_checks.join(", ")
                );
            }
            Ok(())
        }
        RefCommand::Unprotect { name } => {
            client.protect_branch(&name, false, &[]).await?;
            eprintln!("unprotected branch '{name}'");
            Ok(())
        }
    }
}

pub async fn checkout(
    client: &Client,
    settings: &mut Settings,
    args: CheckoutArgs,
) -> CliResult<()> {
    if args.create {
        let from = client.resolve_ref(settings.reference(&args.from)).await?;
        let r = client
            .create_ref(&CreateRef {
                name: args.branch.clone(),
                kind: RefKind::Branch,
                from: Some(from.clone()),
            })
            .await?;
        eprintln!(
            "created branch '{}' at {} (from {from})",
            r.name,
            short(&r.head)
        );
    } else {
        let r = client.get_ref(&args.branch).await?;
        if r.kind != RefKind::Branch {
            return Err(crate::error::CliError::invalid(
                format!(
                    "'{}' is a tag; only a branch can be checked out",
                    args.branch
                ),
                Some("create a branch from it: lh checkout -b NAME --from TAG"),
            ));
        }
    }
    settings.set_active_branch(&args.branch)?;
    eprintln!(
        "active branch is now '{}' (profile '{}')",
        args.branch, settings.profile
    );
    Ok(())
}

pub async fn log(client: &Client, settings: &Settings, args: LogArgs) -> CliResult<()> {
    let at = client
        .resolve_ref(settings.reference(&args.reference))
        .await?;
    let page = client
        .log_filtered(&at, args.limit, args.table.as_deref(), None, None)
        .await?;
    match settings.output {
        OutputFormat::Table if args.graph => graph(client, &at, &page.commits).await,
        OutputFormat::Table if args.oneline => {
            use std::io::Write;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            for c in &page.commits {
                let first = c.message.lines().next().unwrap_or("");
                let merge = if c.parents.len() > 1 { "(merge) " } else { "" };
                writeln!(out, "{} {merge}{first}", short(&c.id))?;
            }
            out.flush()?;
            Ok(())
        }
        OutputFormat::Table => {
            use std::io::Write;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            for c in &page.commits {
                writeln!(out, "commit {}", c.id)?;
                if c.parents.len() > 1 {
                    let ps: Vec<&str> = c.parents.iter().map(|p| short(p)).collect();
                    writeln!(out, "Merge:  {}", ps.join(" "))?;
                }
                writeln!(out, "Author: {}", c.author)?;
                writeln!(
                    out,
                    "Date:   {}",
                    c.timestamp
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                )?;
                for (k, v) in &c.properties {
                    writeln!(out, "        {k}={v}")?;
                }
                writeln!(out, "\n    {}\n", c.message)?;
            }
            out.flush()?;
            Ok(())
        }
        _ => output::listing(
            settings.output,
            &["id", "author", "timestamp", "message"],
            &page.commits,
            |c: &CommitInfo| {
                vec![
                    c.id.clone(),
                    c.author.clone(),
                    c.timestamp.to_rfc3339(),
                    c.message.clone(),
                ]
            },
        ),
    }
}

/// The most commits of a merged branch `lh log --graph` draws beside each merge.
const GRAPH_SIDE: usize = 10;

/// `lh log --graph`: the first-parent history, one line a commit, and beside each merge
/// the commits it brought in (its second parent's history down to where it left this
/// one), their lane joining back at that commit when it is on the page.
async fn graph(client: &Client, at: &str, commits: &[CommitInfo]) -> CliResult<()> {
    use std::io::Write;
    // Where a merged branch left this one: a commit of this history, found on a longer
    // page than the one shown.
    let known: std::collections::HashSet<String> = client
        .log(at, commits.len() + 500)
        .await?
        .commits
        .into_iter()
        .map(|c| c.id)
        .collect();
    let line = |c: &CommitInfo| {
        format!(
            "{} {}",
            short(&c.id),
            c.message.lines().next().unwrap_or("")
        )
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // The lanes open beside this history: each waits for the commit it joins.
    let mut lanes: Vec<String> = Vec::new();
    for c in commits {
        while let Some(i) = lanes.iter().rposition(|l| *l == c.id) {
            lanes.remove(i);
            writeln!(out, "|{}/", " |".repeat(lanes.len()))?;
        }
        let beside = " |".repeat(lanes.len());
        writeln!(out, "*{beside} {}", line(c))?;
        let Some(merged) = c.parents.get(1) else {
            continue;
        };
        // A history the caller may not read (a limited role) is left undrawn.
        let Ok(side) = client.log(&format!("@{merged}"), 200).await else {
            continue;
        };
        let brought: Vec<&CommitInfo> = side
            .commits
            .iter()
            .take_while(|s| !known.contains(&s.id))
            .collect();
        let joins = side
            .commits
            .iter()
            .find(|s| known.contains(&s.id))
            .map(|s| s.id.clone());
        writeln!(out, "|{beside}\\")?;
        for s in brought.iter().take(GRAPH_SIDE) {
            writeln!(out, "|{beside} * {}", line(s))?;
        }
        if brought.len() > GRAPH_SIDE {
            writeln!(out, "|{beside} : {} more", brought.len() - GRAPH_SIDE)?;
        }
        match joins {
            Some(j) => lanes.push(j),
            // It left this history before the page (or never did): the lane ends here.
            None => writeln!(out, "|{beside} ~")?,
        }
    }
    out.flush()?;
    Ok(())
}

/// What `lh status` says.
#[derive(Serialize)]
struct Status {
    branch: String,
    head: Option<CommitInfo>,
    default_branch: String,
    /// Where the branch left the default branch (their merge base).
    base: Option<String>,
    /// The tables the branch changed since then.
    changed: Vec<String>,
    /// The tables the default branch changed since then.
    changed_on_default: Vec<String>,
}

/// `lh status`: the active branch, its head, and how it and the default branch moved
/// since the one left the other (as `git status` says ahead and behind).
pub async fn status(client: &Client, settings: &Settings) -> CliResult<()> {
    let default = client.info().await?.default_branch.clone();
    let branch = client.resolve_ref(settings.branch.clone()).await?;
    let head = client.log(&branch, 1).await?.commits.into_iter().next();
    let mut st = Status {
        branch: branch.clone(),
        head,
        default_branch: default.clone(),
        base: None,
        changed: Vec::new(),
        changed_on_default: Vec::new(),
    };
    if branch != default {
        let here = client.diff(&default, &branch, false, true).await?;
        let there = client.diff(&branch, &default, false, true).await?;
        st.base = Some(here.from_commit.clone());
        st.changed = here.tables.into_iter().map(|t| t.table).collect();
        st.changed_on_default = there.tables.into_iter().map(|t| t.table).collect();
    }
    if settings.output != OutputFormat::Table {
        return output::item(settings.output, &st, &[]);
    }
    println!("On branch {branch} (profile '{}')", settings.profile);
    if let Some(h) = &st.head {
        let first = h.message.lines().next().unwrap_or("");
        println!(
            "head {} {first} ({}, {})",
            short(&h.id),
            h.author,
            h.timestamp.format("%Y-%m-%d %H:%M UTC")
        );
    }
    let Some(base) = &st.base else {
        return Ok(());
    };
    let list = |names: &[String]| {
        let shown: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
        let more = names.len().saturating_sub(shown.len());
        format!(
            "{}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )
    };
    println!("left '{default}' at {}", short(base));
    match st.changed.len() {
        0 => println!("changed nothing since"),
        n => println!(
            "changed {n} table{} since: {}",
            if n == 1 { "" } else { "s" },
            list(&st.changed)
        ),
    }
    match st.changed_on_default.len() {
        0 => println!("'{default}' changed nothing since"),
        n => println!(
            "'{default}' changed {n} table{} since: {}",
            if n == 1 { "" } else { "s" },
            list(&st.changed_on_default)
        ),
    }
    if !st.changed.is_empty() {
        println!(
            "(lh diff {default}...{branch} shows the changes; lh merge {branch} --into {default} publishes them)"
        );
    }
    Ok(())
}

/// The two sides of `lh diff`: `A B`, or `A...B` (what B changed since it left A).
fn sides(args: &DiffArgs) -> CliResult<(String, String, bool)> {
    match (&args.to, args.from.split_once("...")) {
        (None, Some((a, b))) if !a.is_empty() && !b.is_empty() => {
            Ok((a.to_string(), b.to_string(), true))
        }
        (Some(to), None) => Ok((args.from.clone(), to.clone(), false)),
        _ => Err(crate::error::CliError::invalid(
            format!("'{}': give two refs, or A...B", args.from),
            Some(
                "lh diff main dev compares the two heads; lh diff main...dev shows what dev changed since it left main",
            ),
        )),
    }
}

pub async fn diff(client: &Client, settings: &Settings, args: DiffArgs) -> CliResult<()> {
    let (from, to, since_base) = sides(&args)?;
    if let Some(table) = &args.table {
        // From where B left A: that commit, by its id.
        let from = if since_base {
            format!(
                "@{}",
                client.diff(&from, &to, false, true).await?.from_commit
            )
        } else {
            from
        };
        return diff_rows(client, settings, &args, (&from, &to), table).await;
    }
    let d = client.diff(&from, &to, !args.no_rows, since_base).await?;
    if settings.output == OutputFormat::Json {
        return output::item(settings.output, &d, &[]);
    }
    if settings.output == OutputFormat::Table && d.tables.is_empty() {
        eprintln!("no differences between {} and {}", d.from, d.to);
        return Ok(());
    }
    let snap = |p: &Option<lh_api::TablePointer>| {
        p.as_ref()
            .map(|p| p.snapshot_id.map_or("-".to_string(), |s| s.to_string()))
            .unwrap_or_default()
    };
    let count =
        |t: &lh_api::TableDiff, f: fn(&lh_api::RowCounts) -> u64| match (&t.rows, &t.rows_error) {
            (Some(r), _) => f(r).to_string(),
            (None, Some(_)) => "?".to_string(),
            _ => String::new(),
        };
    output::listing(
        settings.output,
        &[
            "change",
            "table",
            "from snapshot",
            "to snapshot",
            "rows added",
            "rows removed",
            "schema",
        ],
        &d.tables,
        |t| {
            vec![
                change_name(t.change).to_string(),
                t.table.clone(),
                snap(&t.from),
                snap(&t.to),
                count(t, |r| r.added),
                count(t, |r| r.removed),
                t.schema_changes
                    .iter()
                    .map(schema_change)
                    .collect::<Vec<_>>()
                    .join("; "),
            ]
        },
    )?;
    for t in &d.tables {
        if let Some(e) = &t.rows_error {
            eprintln!("note: the rows of '{}' were not counted: {e}", t.table);
        }
    }
    Ok(())
}

fn change_name(c: lh_api::Change) -> &'static str {
    match c {
        lh_api::Change::Added => "added",
        lh_api::Change::Removed => "removed",
        lh_api::Change::Changed => "changed",
    }
}

/// A schema change in a few words: `+discount DOUBLE`, `-note`, `status -> state`,
/// `qty INTEGER -> BIGINT`.
fn schema_change(c: &lh_api::SchemaChange) -> String {
    let or = |v: &Option<String>| v.clone().unwrap_or_default();
    match c.change {
        lh_api::SchemaChangeKind::Added => format!("+{} {}", c.column, or(&c.to)),
        lh_api::SchemaChangeKind::Dropped => format!("-{}", c.column),
        lh_api::SchemaChangeKind::Renamed => format!("{} -> {}", or(&c.from), or(&c.to)),
        lh_api::SchemaChangeKind::Retyped => {
            format!("{} {} -> {}", c.column, or(&c.from), or(&c.to))
        }
    }
}

/// `lh diff A B --table T [--key K]`: counts first, then the rows.
async fn diff_rows(
    client: &Client,
    settings: &Settings,
    args: &DiffArgs,
    (from, to): (&str, &str),
    table: &str,
) -> CliResult<()> {
    let d = client
        .diff_rows(from, to, table, args.key.as_deref(), args.limit, args.full)
        .await?;
    if settings.output == OutputFormat::Json {
        return output::item(settings.output, &d, &[]);
    }
    // NULL shows as NULL in a table, as an empty field in CSV.
    let null = match settings.output {
        OutputFormat::Csv => "",
        _ => "NULL",
    };
    let cell = |v: &Option<String>| v.clone().unwrap_or_else(|| null.to_string());
    let mut headers: Vec<&str> = vec!["change"];
    headers.extend(d.columns.iter().map(|c| c.name.as_str()));
    let mut rows: Vec<Vec<String>> = Vec::new();
    for r in &d.rows {
        let mut row = vec![change_name(r.change).to_string()];
        match (&r.before, settings.output) {
            (Some(before), OutputFormat::Table) => {
                for ((new, old), c) in r.values.iter().zip(before).zip(&d.columns) {
                    row.push(if r.changed_columns.contains(&c.name) {
                        format!("{} -> {}", cell(old), cell(new))
                    } else {
                        cell(new)
                    });
                }
            }
            (Some(before), _) => {
                row.extend(r.values.iter().map(cell));
                let mut was = vec!["changed-from".to_string()];
                was.extend(before.iter().map(cell));
                rows.push(row);
                rows.push(was);
                continue;
            }
            (None, _) => row.extend(r.values.iter().map(cell)),
        }
        rows.push(row);
    }
    if settings.output == OutputFormat::Csv {
        let stdout = std::io::stdout();
        let mut w = csv::Writer::from_writer(stdout.lock());
        w.write_record(&headers)?;
        for r in &rows {
            w.write_record(r)?;
        }
        w.flush()?;
        return Ok(());
    }
    let c = &d.counts;
    let mut summary = match c.changed {
        Some(changed) => format!(
            "{}: {changed} changed, {} added, {} removed (key: {})",
            d.table,
            c.added,
            c.removed,
            d.key.join(", ")
        ),
        None => format!("{}: {} added, {} removed", d.table, c.added, c.removed),
    };
    summary.push_str(&format!(" between {from} and {to}"));
    println!("{summary}");
    for s in &d.schema_changes {
        println!("schema: {}", schema_change(s));
    }
    let scan = &d.scan;
    eprintln!(
        "read {} of {} data files ({} shared, skipped) in {} ms{}",
        scan.files_read,
        scan.files_from + scan.files_to,
        scan.files_shared,
        d.elapsed_ms,
        scan.full_because
            .as_ref()
            .map(|w| format!("; every file compared: {w}"))
            .unwrap_or_default()
    );
    if !rows.is_empty() {
        println!();
        let stdout = std::io::stdout();
        output::aligned(&mut stdout.lock(), &headers, &rows)?;
    }
    if d.truncated {
        let total = c.added + c.removed + c.changed.unwrap_or(0);
        eprintln!(
            "{} of {total} rows shown (--limit N for more)",
            d.rows.len()
        );
    }
    Ok(())
}

pub async fn merge(client: &Client, settings: &Settings, args: MergeArgs) -> CliResult<()> {
    let req = MergeRequest {
        from: args.from.clone(),
        into: args.into.clone(),
        message: args.message,
        expected_head: None,
        no_fast_forward: false,
        properties: Default::default(),
        strategy: args.strategy.map(|s| match s {
            crate::args::MergeStrategyArg::SourceWins => lh_api::MergeStrategy::SourceWins,
            crate::args::MergeStrategyArg::DestWins => lh_api::MergeStrategy::DestWins,
        }),
        take_source: args.take_source.clone(),
        take_dest: args.take_dest.clone(),
    };
    let answer = match args.dry_run {
        true => client.merge_preview(&req).await,
        false => client.merge(&req).await,
    };
    let m = match answer {
        Ok(m) => m,
        // A conflict says the ways forward.
        Err(crate::error::CliError::Api {
            status: 409,
            mut body,
        }) if !body.error.conflicts.is_empty() => {
            let tables: Vec<&str> = body
                .error
                .conflicts
                .iter()
                .map(|c| c.table.as_str())
                .collect();
            body.error.hint = Some(format!(
                "see what each side changed: lh diff {into}...{from} and lh diff {from}...{into}; \
                 then take one side for every such table (--strategy source-wins or dest-wins) \
                 or per table (--take-source {t} / --take-dest {t}), or change one side and merge again",
                into = args.into,
                from = args.from,
                t = tables[0],
            ));
            body.error.remedies.clear();
            return Err(crate::error::CliError::Api { status: 409, body });
        }
        Err(e) => return Err(e),
    };
    if settings.output == OutputFormat::Json {
        return output::item(settings.output, &m, &[]);
    }
    let tables = output::count(m.tables.len(), "table");
    match (m.kind, m.dry_run) {
        (MergeKind::UpToDate, _) => {
            eprintln!("'{}' is already up to date with '{}'", m.into, args.from)
        }
        (MergeKind::FastForward, false) => eprintln!(
            "fast-forwarded '{}' to {} ({tables})",
            m.into,
            short(&m.head)
        ),
        (MergeKind::FastForward, true) => eprintln!(
            "would fast-forward '{}' to {} ({tables}); nothing changed (--dry-run)",
            m.into,
            short(&m.head)
        ),
        (MergeKind::MergeCommit, false) => eprintln!(
            "merged '{}' into '{}': commit {} ({tables})",
            args.from,
            m.into,
            short(&m.head)
        ),
        (MergeKind::MergeCommit, true) => eprintln!(
            "would merge '{}' into '{}' with a merge commit ({tables}); nothing changed \
             (--dry-run; required checks run only on a merge)",
            args.from, m.into
        ),
    }
    for t in &m.tables {
        let change = match t.change {
            lh_api::Change::Added => "added",
            lh_api::Change::Removed => "removed",
            lh_api::Change::Changed => "changed",
        };
        let schema: Vec<String> = t.schema_changes.iter().map(schema_change).collect();
        match schema.is_empty() {
            true => eprintln!("  {change:<8} {}", t.table),
            false => eprintln!("  {change:<8} {} (columns: {})", t.table, schema.join(", ")),
        }
    }
    for c in &m.checks {
        eprintln!("  check {} ({}): passed: {}", c.name, c.kind, c.message);
    }
    for b in &m.breaking {
        let what = match &b.change {
            None => format!("dropped table {}", b.table),
            Some(c) => {
                let or = |v: &Option<String>| v.clone().unwrap_or_default();
                match c.change {
                    lh_api::SchemaChangeKind::Renamed => format!(
                        "renamed column {}.{} to {}",
                        b.table,
                        or(&c.from),
                        or(&c.to)
                    ),
                    lh_api::SchemaChangeKind::Retyped => format!(
                        "retyped column {}.{} ({} -> {})",
                        b.table,
                        c.column,
                        or(&c.from),
                        or(&c.to)
                    ),
                    _ => format!("dropped column {}.{}", b.table, c.column),
                }
            }
        };
        let mut readers: Vec<String> = b
            .readers
            .iter()
            .map(|r| {
                format!(
                    "{} {} of project {} (run {})",
                    r.kind,
                    r.node,
                    r.project,
                    short(&r.run)
                )
            })
            .collect();
        if b.hidden_readers > 0 {
            readers.push(format!(
                "{} you may not see",
                output::count(b.hidden_readers, "more reader")
            ));
        }
        eprintln!("warning: {what}, read by {}", readers.join("; "));
    }
    if !m.breaking.is_empty() {
        eprintln!(
            "hint: their next runs may fail; `lh lineage TABLE.COLUMN` shows what reads a column"
        );
    }
    if let Some(why) = &m.breaking_unknown {
        eprintln!("warning: breaking changes were not looked for in full: {why}");
    }
    Ok(())
}

#[derive(Serialize)]
struct InfoOut<'a> {
    endpoint: &'a str,
    iceberg_rest: &'a str,
    profile: &'a str,
    active_branch: &'a str,
    server: ServerInfo,
}

pub async fn info(client: &Client, settings: &Settings) -> CliResult<()> {
    let server = client.info().await?.clone();
    let active_branch = settings
        .branch
        .clone()
        .unwrap_or_else(|| server.default_branch.clone());
    // Other engines' catalog URI: the Iceberg REST catalog, with a ref as the warehouse.
    let iceberg_rest = format!("{}/iceberg", client.endpoint().trim_end_matches('/'));
    let storage = server.storage.as_ref().map(|s| {
        format!(
            "{} ({}, region {}{}; credentials from the {}; {}; read cache {})",
            s.endpoint,
            s.bucket,
            s.region,
            if s.path_style { ", path style" } else { "" },
            s.credentials_from,
            if s.vends_credentials {
                format!(
                    "vended to REST clients that ask, of role {} or above",
                    if s.vend_credentials_to.is_empty() {
                        "admin"
                    } else {
                        &s.vend_credentials_to
                    }
                )
            } else {
                "not vended to REST clients".to_string()
            },
            output::bytes(s.cache_bytes)
        )
    });
    let mut lines = vec![
        (
            "server",
            format!("{} (lh {})", client.endpoint(), server.version),
        ),
        ("catalog", server.catalog.clone()),
        ("warehouse", server.warehouse.clone()),
        ("profile", settings.profile.clone()),
        ("active branch", active_branch.clone()),
        (
            "query timeout",
            format!("{} s", server.query_timeout_ms / 1000),
        ),
        ("max result", output::bytes(server.max_result_bytes)),
        ("runtime", server.runtime.clone()),
        ("iceberg rest", format!("{iceberg_rest} (warehouse: a ref)")),
    ];
    if let Some(s) = storage {
        lines.insert(3, ("s3 endpoint", s));
    }
    if let Some(a) = &server.auth {
        let auth = match (a.mode.as_str(), &a.user, &a.role) {
            ("off", ..) => "off (--no-auth: no token needed, loopback only)".to_string(),
            (_, Some(user), Some(role)) => format!("token of user '{user}' (role {role})"),
            (mode, ..) => mode.to_string(),
        };
        lines.insert(lines.len() - 1, ("auth", auth));
    }
    let out = InfoOut {
        endpoint: client.endpoint(),
        iceberg_rest: &iceberg_rest,
        profile: &settings.profile,
        active_branch: &active_branch,
        server,
    };
    output::item(settings.output, &out, &lines)
}
