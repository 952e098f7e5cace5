//! `lh bisect`: the first commit where a table went bad.
//!
//! The candidates are the commits of `--bad`'s first-parent history, back to `--good`,
//! where the table changed (the server's log, filtered by table): the table reads the
//! same at every other commit, so only those can be the first bad one. A binary search
//! runs the check at one candidate per step: a read-only query at that commit, or a
//! project's expectation run as a check (the server's check run: only that expectation,
//! reading every table as it is at the commit, recorded as a run of --bad's branch,
//! publishing nothing). No table is written. `--good` and `--bad` are taken at their word and checked only
//! when the search ends next to one of them, so n candidates cost at most
//! ceil(log2(n)) + 1 queries (2 for a single candidate). Commits are named on `--bad`'s
//! ref (`main@<hash>`) when it is a ref, so that a user who may read that ref only can
//! bisect it. Only the named table's changes are searched: a check that reads other
//! tables should read them as they are at each commit, and a change of theirs alone is
//! not a candidate.

use std::path::{Path, PathBuf};

use arrow::array::Array;
use lh_api::{CommitInfo, NodeStatus, QueryRequest, RunCheck, RunRequest};
use serde::Serialize;

use crate::args::{BisectArgs, OutputFormat};
use crate::client::Client;
use crate::error::{CliError, CliResult};
use crate::output::short;
use crate::settings::Settings;

/// What `lh bisect -o json` prints.
#[derive(Debug, Serialize)]
struct Found {
    table: String,
    first_bad: CommitInfo,
    /// The commit before it where the table last changed (or --good's).
    last_good: String,
    /// The commits between --good and --bad that changed the table.
    candidates: usize,
    /// The checks run (queries), with their commits and answers.
    checks: Vec<Check>,
    /// The run and node that wrote the first bad snapshot, when a pipeline did.
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    /// The rows the first bad commit changed in the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    rows: Option<lh_api::RowCounts>,
}

#[derive(Debug, Serialize)]
struct Check {
    commit: String,
    good: bool,
    /// The check's run, for an expectation.
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<String>,
}

/// What says whether the table is good at a commit.
enum Checker {
    /// A query returning one boolean.
    Sql(String),
    /// A project's expectation (`file:function`, the file relative to the project's
    /// folder), run as a check on `branch`.
    Expectation {
        dir: PathBuf,
        name: String,
        branch: String,
        params: std::collections::BTreeMap<String, String>,
    },
}

pub async fn bisect(client: &Client, settings: &Settings, args: BisectArgs) -> CliResult<()> {
    let table = args.table.clone();
    let bad_ref = client.resolve_ref(settings.reference(&args.bad)).await?;
    let head = |page: lh_api::LogPage, r: &str| {
        page.commits
            .into_iter()
            .next()
            .ok_or_else(|| CliError::invalid(format!("'{r}' has no commit"), None))
    };
    let good = head(client.log(&args.good, 1).await?, &args.good)?;
    let bad = head(client.log(&bad_ref, 1).await?, &bad_ref)?;
    let quiet = settings.output != OutputFormat::Table;

    // The commits that changed the table, oldest first.
    let mut candidates: Vec<CommitInfo> = Vec::new();
    let mut token: Option<String> = None;
    // A commit as the checks name it: on --bad's ref when that is a ref.
    let plain_ref =
        !bad_ref.is_empty() && !bad_ref.starts_with('@') && !bad_ref.contains(['@', '~', '^']);
    let on_ref = |id: &str| match plain_ref {
        true => format!("{bad_ref}@{id}"),
        false => format!("@{id}"),
    };
    let (bad_at, good_at) = (on_ref(&bad.id), on_ref(&good.id));
    let checker = match (&args.check, &args.expectation) {
        (Some(sql), None) => Checker::Sql(sql.clone()),
        (None, Some(e)) => {
            if !plain_ref {
                return Err(CliError::invalid(
                    format!(
                        "--expectation runs checks on a branch; --bad '{bad_ref}' names no branch"
                    ),
                    Some("give --bad a branch: the first-parent history searched is its own"),
                ));
            }
            let (dir, name) = expectation_of(e)?;
            Checker::Expectation {
                dir,
                name,
                branch: bad_ref.clone(),
                params: super::runs::parse_params(&args.params)?,
            }
        }
        _ => {
            return Err(CliError::invalid(
                "give one of --check SQL and --expectation FILE:FUNCTION",
                None,
            ));
        }
    };
    loop {
        let page = client
            .log_filtered(
                &bad_at,
                1000,
                Some(&table),
                Some(&good_at),
                token.as_deref(),
            )
            .await?;
        candidates.extend(page.commits);
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    candidates.reverse();
    // An older server that ignores the filters would hand over every commit.
    if candidates.iter().any(|c| c.id == good.id) {
        return Err(CliError::invalid(
            "the server's log does not filter by table: it is older than this lh",
            Some("upgrade the server"),
        ));
    }
    if candidates.is_empty() {
        return Err(CliError::invalid(
            format!(
                "'{table}' did not change between --good {} and --bad {}: the check \
                 cannot differ",
                short(&good.id),
                short(&bad.id)
            ),
            Some("`lh log --table NAME` lists the commits that changed a table"),
        ));
    }
    if !quiet {
        eprintln!(
            "bisecting {} that changed {table} between {} (good) and {} (bad)",
            crate::output::count(candidates.len(), "commit"),
            short(&good.id),
            short(&bad.id)
        );
    }

    let mut checks: Vec<Check> = Vec::new();
    let mut run_check = async |commit: &str, label: &str| -> CliResult<bool> {
        let (good, run) = match &checker {
            Checker::Sql(sql) => (check(client, sql, commit, &on_ref(commit)).await?, None),
            Checker::Expectation {
                dir,
                name,
                branch,
                params,
            } => {
                let place = Place {
                    branch,
                    commit,
                    at: &on_ref(commit),
                };
                let (good, run) = expectation(client, dir, name, params, &place).await?;
                (good, Some(run))
            }
        };
        if !quiet {
            let by = match &run {
                Some(r) => format!(" (run {})", short(r)),
                None => String::new(),
            };
            eprintln!(
                "  {} {label}: {}{by}",
                short(commit),
                if good { "good" } else { "bad" }
            );
        }
        checks.push(Check {
            commit: commit.to_string(),
            good,
            run,
        });
        Ok(good)
    };
    // Indices: -1 is --good, n-1 is --bad's own last change of the table.
    let n = candidates.len() as i64;
    let (mut lo, mut hi) = (-1i64, n - 1);
    let (mut lo_checked, mut hi_checked) = (false, false);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let c = &candidates[mid as usize];
        let label = format!("({} of {n})", mid + 1);
        if run_check(&c.id, &label).await? {
            lo = mid;
            lo_checked = true;
        } else {
            hi = mid;
            hi_checked = true;
        }
    }
    if !hi_checked {
        let c = &candidates[hi as usize];
        if run_check(&c.id, "(the last change before --bad)").await? {
            return Err(CliError::invalid(
                format!(
                    "the check passes at --bad ({}): there is no bad commit to find",
                    short(&bad.id)
                ),
                Some("the check returns true where the table is good"),
            ));
        }
    }
    if !lo_checked {
        let id = if lo < 0 {
            good.id.clone()
        } else {
            candidates[lo as usize].id.clone()
        };
        if !run_check(&id, "(--good)").await? {
            return Err(CliError::invalid(
                format!("the check fails at --good ({}) already", short(&good.id)),
                Some("give an older --good, where the check returns true"),
            ));
        }
    }
    let first_bad = candidates[hi as usize].clone();
    let last_good = if hi == 0 {
        good.id.clone()
    } else {
        candidates[hi as usize - 1].id.clone()
    };

    // Who wrote it: a run's merge names its run, and the run the node whose output is
    // the table (a model is named by its table; a partitioned one's instances by it
    // and their partition).
    let run = first_bad.properties.get("lh.run").cloned();
    let mut node = first_bad.properties.get("lh.node").cloned();
    if node.is_none()
        && let Some(r) = &run
        && let Ok(info) = client.run(r).await
    {
        node = info
            .nodes
            .iter()
            .find(|n| n.name == table || n.name.starts_with(&format!("{table}[")))
            .map(|n| n.name.clone());
    }
    let rows = client
        .diff_rows(
            &on_ref(&last_good),
            &on_ref(&first_bad.id),
            &table,
            None,
            0,
            false,
        )
        .await
        .ok()
        .map(|d| d.counts);
    let found = Found {
        table: table.clone(),
        first_bad,
        last_good,
        candidates: candidates.len(),
        checks,
        run,
        node,
        rows,
    };
    if settings.output != OutputFormat::Table {
        return crate::output::item(settings.output, &found, &[]);
    }
    let c = &found.first_bad;
    println!("first bad commit: {}", c.id);
    println!("Author:  {}", c.author);
    println!(
        "Date:    {}",
        c.timestamp
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    println!("Message: {}", c.message);
    if let Some(r) = &found.run {
        match &found.node {
            Some(n) => println!("Run:     {r} (node {n})"),
            None => println!("Run:     {r}"),
        }
    }
    if let Some(r) = &found.rows {
        println!(
            "Rows:    {} added, {} removed in {table} (against {})",
            r.added,
            r.removed,
            short(&found.last_good)
        );
    }
    eprintln!(
        "{} over {}",
        crate::output::count(found.checks.len(), "check"),
        crate::output::count(found.candidates, "candidate commit")
    );
    eprintln!(
        "see the rows: lh diff {} {} --table {table}",
        on_ref(short(&found.last_good)),
        on_ref(short(&c.id))
    );
    if let Some(r) = &found.run {
        eprintln!("replay that run with fixed code: lh rerun {r} --code DIR");
    }
    Ok(())
}

/// Prefixes the server's refusal of a check with what failed and at which commit.
fn at_commit<'a>(what: &'a str, commit: &'a str) -> impl Fn(CliError) -> CliError + 'a {
    move |e| match e {
        CliError::Api { status, mut body } => {
            body.error.message =
                format!("{what} at commit {}: {}", short(commit), body.error.message);
            CliError::Api { status, body }
        }
        e => e,
    }
}

/// Runs the check at a commit: one row, one boolean column.
async fn check(client: &Client, sql: &str, commit: &str, at: &str) -> CliResult<bool> {
    let req = QueryRequest {
        sql: sql.to_string(),
        reference: Some(at.to_string()),
        timeout_ms: None,
        max_rows: Some(2),
        progress_id: None,
    };
    let r = client
        .query(&req)
        .await
        .map_err(at_commit("the check failed", commit))?;
    let shape = || {
        CliError::invalid(
            format!(
                "the check must return one row with one boolean column (true: good); at \
                 commit {} it returned something else",
                short(commit)
            ),
            Some("e.g. --check 'SELECT count(*) = 0 FROM t WHERE amount < 0'"),
        )
    };
    let rows: usize = r.batches.iter().map(|b| b.num_rows()).sum();
    if rows != 1 || r.schema.fields().len() != 1 {
        return Err(shape());
    }
    let batch = r
        .batches
        .iter()
        .find(|b| b.num_rows() == 1)
        .ok_or_else(shape)?;
    let col = batch
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::BooleanArray>()
        .ok_or_else(shape)?;
    if col.is_null(0) {
        return Err(CliError::invalid(
            format!(
                "the check returned NULL at commit {}: it must say true or false",
                short(commit)
            ),
            Some("wrap it in coalesce(..., false)"),
        ));
    }
    Ok(col.value(0))
}

/// `FILE:FUNCTION` as the project's folder (the nearest one above the file holding an
/// `lh_project.yml`) and the expectation's name for the server (`file:function`, the
/// file relative to that folder).
fn expectation_of(arg: &str) -> CliResult<(PathBuf, String)> {
    let bad = |why: String| {
        CliError::invalid(
            format!("--expectation '{arg}': {why}"),
            Some("e.g. --expectation pipeline/expectations.py:orders_are_positive"),
        )
    };
    let (file, function) = arg
        .rsplit_once(':')
        .filter(|(f, n)| !f.is_empty() && !n.is_empty())
        .ok_or_else(|| bad("it must be FILE:FUNCTION".into()))?;
    // A link is followed: a project's upload holds files, not links, so an expectation
    // is its real file's, in the project around that.
    let file = std::fs::canonicalize(file).map_err(|e| bad(format!("cannot read {file}: {e}")))?;
    if !file.is_file() {
        return Err(bad(format!("{} is not a file", file.display())));
    }
    let dir = file
        .ancestors()
        .skip(1)
        .find(|d| d.join("lh_project.yml").is_file())
        .ok_or_else(|| bad("no lh_project.yml in any folder above the file".into()))?
        .to_path_buf();
    let relative = file
        .strip_prefix(&dir)
        .map_err(|_| bad("the file is outside its project".into()))?
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/");
    Ok((dir, format!("{relative}:{function}")))
}

/// Where a check runs: on a branch, at one of its commits (named on it as `at`).
struct Place<'a> {
    branch: &'a str,
    commit: &'a str,
    at: &'a str,
}

/// Runs the expectation `name` of the project in `dir` as a check at a commit: whether
/// it passed, and the check's run. An expectation that cannot run (an exception, a
/// table missing at that commit) is an error, not a bad commit.
async fn expectation(
    client: &Client,
    dir: &Path,
    name: &str,
    params: &std::collections::BTreeMap<String, String>,
    place: &Place<'_>,
) -> CliResult<(bool, String)> {
    let Place { branch, commit, at } = *place;
    let req = RunRequest {
        upload: super::runs::upload_project(client, dir).await?,
        reference: branch.to_string(),
        params: params.clone(),
        no_cache: true,
        strict: false,
        partitions: None,
        select: Vec::new(),
        changes: false,
        check: Some(RunCheck {
            at: at.to_string(),
            expectations: vec![name.to_string()],
        }),
    };
    let started = client
        .start_run(&req)
        .await
        .map_err(at_commit("the expectation cannot run", commit))?;
    let run = loop {
        let run = client.run(&started.id).await?;
        if run.status.is_final() {
            break run;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let failed = |why: &str| {
        CliError::invalid(
            format!(
                "the expectation could not run at commit {}: {why} (run {})",
                short(commit),
                short(&run.id)
            ),
            Some(&format!(
                "see its log: lh runs logs {}; nothing was written",
                short(&run.id)
            )),
        )
    };
    let [node] = run.nodes.as_slice() else {
        return Err(failed(&format!(
            "the check ran {} nodes, not one",
            run.nodes.len()
        )));
    };
    match node.status {
        NodeStatus::Passed => Ok((true, run.id.clone())),
        NodeStatus::Failed | NodeStatus::Warned
            if node.error.as_deref() == Some(lh_api::EXPECTATION_NOT_MET) =>
        {
            Ok((false, run.id.clone()))
        }
        _ => Err(failed(
            node.error
                .as_deref()
                .or(run.error.as_deref())
                .unwrap_or(run.status.as_str()),
        )),
    }
}
