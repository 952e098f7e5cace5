//! `lh query`: one statement from the command line or a file; with neither, the
//! statements on standard input (one result each), or the shell on a terminal.

use std::io::{IsTerminal, Read};

use lh_api::QueryRequest;

use crate::args::{OutputFormat, QueryArgs};
use crate::client::Client;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::settings::Settings;
use crate::statements;

pub async fn run(client: &Client, settings: &Settings, args: QueryArgs) -> CliResult<()> {
    let sql = match (&args.sql, &args.file) {
        (Some(s), _) => s.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .map_err(|e| CliError::invalid(format!("cannot read {}: {e}", f.display()), None))?,
        (None, None) if std::io::stdin().is_terminal() => {
            if !std::io::stdout().is_terminal() || args.out.is_some() {
                return Err(CliError::invalid(
                    "no SQL: give it as an argument, with --file, or on standard input",
                    Some("the shell (`lh shell`) opens when both input and output are a terminal"),
                ));
            }
            let options = super::shell::Options {
                reference: args.reference.clone(),
                max_rows: args.max_rows,
                timeout_secs: args.timeout,
            };
            return super::shell::run(client, settings, options).await;
        }
        (None, None) => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::invalid(format!("cannot read standard input: {e}"), None))?;
            return statements(client, settings, &args, &text).await;
        }
    };
    // A file of several statements runs as standard input does.
    if args.file.is_some() && statements::all(&sql).len() > 1 {
        return statements(client, settings, &args, &sql).await;
    }
    if sql.trim().is_empty() {
        return Err(CliError::invalid("the query is empty", None));
    }
    let mut req = request(settings, &args, sql);
    let result = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let id = progress_id();
        req.progress_id = Some(id.clone());
        with_progress(client, &id, client.query(&req)).await?
    } else {
        client.query(&req).await?
    };
    if result.truncated {
        eprintln!(
            "note: the result was cut to {} rows (--max-rows)",
            args.max_rows.unwrap_or(0)
        );
    }
    if let Some(path) = &args.out {
        let rows = output::parquet_file(path, &result.schema, &result.batches)?;
        eprintln!(
            "wrote {rows} rows to {} (commit {})",
            path.display(),
            output::short(&result.commit)
        );
        return Ok(());
    }
    output::batches(settings.output, &result.schema, &result.batches)
}

/// How long a query runs before a terminal is shown that it does.
const SPINNER_AFTER: std::time::Duration = std::time::Duration::from_millis(700);

/// How often a running query's progress is asked for.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(300);

/// A name for a query's progress, unique among this user's queries.
fn progress_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("cli-{:x}-{nanos:x}", std::process::id())
}

/// `work` (the query named `id`), and on the terminal, once it has taken
/// [`SPINNER_AFTER`], a line on stderr that says it is running and for how long, with
/// DuckDB's progress as a bar once the server can tell it (cleared when it ends: the
/// answer prints alone).
async fn with_progress<T>(
    client: &Client,
    id: &str,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    tokio::select! {
        out = &mut work => return out,
        _ = tokio::time::sleep(SPINNER_AFTER) => {}
    }
    let bar = indicatif::ProgressBar::new(100);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} running the query ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let mut known = false;
    let out = loop {
        tokio::select! {
            out = &mut work => break out,
            _ = tokio::time::sleep(PROGRESS_EVERY) => {}
        }
        // A query the server has not started yet, or has just ended, is not found:
        // the spinner goes on.
        let asked = client.query_progress(id);
        tokio::pin!(asked);
        let percentage = tokio::select! {
            out = &mut work => break out,
            p = &mut asked => p.ok().flatten(),
        };
        if let Some(p) = percentage {
            if !known {
                known = true;
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} running the query [{bar:30}] {pos:>3}% ({elapsed})",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
            }
            bar.set_position(p.floor() as u64);
        }
    };
    bar.finish_and_clear();
    out
}

fn request(settings: &Settings, args: &QueryArgs, sql: String) -> QueryRequest {
    QueryRequest {
        sql,
        reference: settings.reference(&args.reference),
        timeout_ms: args.timeout.map(|s| s.saturating_mul(1000)),
        max_rows: args.max_rows,
        progress_id: None,
    }
}

/// The statements of `text` (standard input, or a file), run in order, each result
/// printed as it comes (tables one blank line apart). The first that fails stops the
/// rest, and its error names it.
async fn statements(
    client: &Client,
    settings: &Settings,
    args: &QueryArgs,
    text: &str,
) -> CliResult<()> {
    let all = statements::all(text);
    if all.is_empty() {
        return Err(CliError::invalid(
            "no SQL: give it as an argument, with --file, or on standard input",
            Some("`lh query 'SELECT ...'`, `lh query < q.sql`, or `lh shell` for a shell"),
        ));
    }
    if all.len() > 1 && args.out.is_some() {
        return Err(CliError::invalid(
            format!(
                "--out writes one result, and the SQL holds {} statements",
                all.len()
            ),
            None,
        ));
    }
    // The ref is resolved once, so that every statement reads the same commit.
    let reference = Some(
        client
            .resolve_ref(settings.reference(&args.reference))
            .await?,
    );
    let mut at: Option<String> = None;
    for (i, sql) in all.iter().enumerate() {
        let mut req = request(settings, args, sql.clone());
        req.reference = at.clone().or(reference.clone());
        let result = client.query(&req).await.inspect_err(|_| {
            if all.len() > 1 {
                eprintln!("error in statement {} of {}:", i + 1, all.len());
            }
        })?;
        // The first statement's commit pins the rest (a branch may move meanwhile),
        // as `branch@commit`, which the same grants allow.
        if let Some(r) = &reference
            && at.is_none()
            && !r.contains('@')
            && !result.commit.is_empty()
        {
            at = Some(format!("{r}@{}", result.commit));
        }
        if result.truncated {
            eprintln!(
                "note: the result of statement {} was cut to {} rows (--max-rows)",
                i + 1,
                args.max_rows.unwrap_or(0)
            );
        }
        if let Some(path) = &args.out {
            let rows = output::parquet_file(path, &result.schema, &result.batches)?;
            eprintln!("wrote {rows} rows to {}", path.display());
            continue;
        }
        if i > 0 && settings.output == OutputFormat::Table {
            println!();
        }
        output::batches(settings.output, &result.schema, &result.batches)?;
    }
    Ok(())
}
