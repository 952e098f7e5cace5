//! `lh run`, `lh runs ...`, `lh rerun`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use lh_api::{NodeStatus, PlanResponse, RerunRequest, RunInfo, RunNode, RunRequest, RunStatus};

use crate::args::{OutputFormat, RerunArgs, RunArgs, RunsCommand};
use crate::client::Client;
use crate::error::{CliError, CliResult};
use crate::output::{self, short};
use crate::settings::Settings;

/// Folders never uploaded with a project.
const SKIP: [&str; 6] = [
    "__pycache__",
    "venv",
    ".venv",
    "target",
    "node_modules",
    ".git",
];
const MAX_BYTES: u64 = 64 << 20;

/// Packs the project folder into `project.tar` in a temporary folder (code and small
/// files; no data).
fn pack(dir: &Path) -> CliResult<tempfile::TempDir> {
    if !dir.join("lh_project.yml").is_file() {
        return Err(CliError::invalid(
            format!(
                "{} is not an lh project: it has no lh_project.yml",
                dir.display()
            ),
            Some("a project folder holds lh_project.yml, Python files and SQL files"),
        ));
    }
    let tmp = tempfile::tempdir()?;
    let mut builder = tar::Builder::new(std::fs::File::create(tmp.path().join("project.tar"))?);
    builder.follow_symlinks(false);
    let mut total = 0u64;
    fn walk(
        root: &Path,
        dir: &Path,
        b: &mut tar::Builder<std::fs::File>,
        total: &mut u64,
    ) -> CliResult<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || SKIP.contains(&name.as_str()) {
                continue;
            }
            let p = e.path();
            let ty = e.file_type()?;
            if ty.is_dir() {
                walk(root, &p, b, total)?;
            } else if ty.is_file() {
                *total += e.metadata()?.len();
                if *total > MAX_BYTES {
                    return Err(CliError::invalid(
                        format!("the project folder is larger than {} MB", MAX_BYTES >> 20),
                        Some("lh uploads code, not data: keep data in tables"),
                    ));
                }
                let rel = p.strip_prefix(root).map_err(anyhow::Error::from)?;
                b.append_path_with_name(&p, rel)?;
            }
        }
        Ok(())
    }
    walk(dir, dir, &mut builder, &mut total)?;
    builder.finish()?;
    Ok(tmp)
}

pub(crate) fn parse_params(raw: &[String]) -> CliResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for p in raw {
        let (k, v) = p.split_once('=').ok_or_else(|| {
            CliError::invalid(
                format!("--param '{p}' is not KEY=VALUE"),
                Some("for example --param run_date=2026-01-01"),
            )
        })?;
        out.insert(k.trim().to_string(), v.to_string());
    }
    Ok(out)
}

pub(crate) async fn upload_project(client: &Client, dir: &Path) -> CliResult<String> {
    let tmp = pack(dir)?;
    Ok(client
        .upload(&tmp.path().join("project.tar"), false)
        .await?
        .id)
}

pub async fn run(client: &Client, settings: &Settings, args: RunArgs) -> CliResult<()> {
    let req = RunRequest {
        upload: upload_project(client, &args.dir).await?,
        reference: client
            .resolve_ref(settings.reference(&args.reference))
            .await?,
        params: parse_params(&args.params)?,
        no_cache: args.no_cache,
        strict: args.strict,
        partitions: args.partition.or(args.partitions),
        select: args.select.clone(),
        changes: args.plan,
        check: None,
    };
    if args.dry_run || args.plan {
        let plan = client.plan_run(&req).await?;
        return print_plan(settings, &plan);
    }
    if args.each_partition {
        return each_partition(client, settings, req, &args.dir).await;
    }
    let started = client.start_run(&req).await?;
    follow(client, settings, started, args.detach).await
}

/// `--each-partition`: the partitions the plan names, one run each, one after the other
/// (each with an upload of its own: the server takes an upload once).
async fn each_partition(
    client: &Client,
    settings: &Settings,
    req: RunRequest,
    dir: &Path,
) -> CliResult<()> {
    let plan = client.plan_run(&req).await?;
    let mut labels: Vec<String> = Vec::new();
    for n in &plan.nodes {
        if let Some(p) = n
            .name
            .strip_suffix(']')
            .and_then(|s| s.rsplit_once('['))
            .map(|(_, p)| p.to_string())
            && !labels.contains(&p)
        {
            labels.push(p);
        }
    }
    let mut failed = Vec::new();
    let mut runs = Vec::new();
    for label in &labels {
        let mut one = req.clone();
        one.partitions = Some(label.clone());
        one.upload = upload_project(client, dir).await?;
        let started = client.start_run(&one).await?;
        let mut quiet = settings.clone();
        quiet.output = OutputFormat::Table;
        if let Err(e) = follow(client, &quiet, started.clone(), false).await {
            if !matches!(e, CliError::RunFailed) {
                return Err(e);
            }
            failed.push(label.clone());
        }
        runs.push(client.run(&started.id).await?);
    }
    if settings.output == OutputFormat::Json {
        output::item(settings.output, &runs, &[])?;
    }
    if failed.is_empty() {
        eprintln!(
            "{} partitions published, each in its own merge",
            labels.len()
        );
        Ok(())
    } else {
        eprintln!(
            "error: {} of {} partitions failed and published nothing: {}",
            failed.len(),
            labels.len(),
            failed.join(", ")
        );
        Err(CliError::RunFailed)
    }
}

pub async fn rerun(client: &Client, settings: &Settings, args: RerunArgs) -> CliResult<()> {
    let upload = match &args.code {
        Some(dir) => Some(upload_project(client, dir).await?),
        None => None,
    };
    let req = RerunRequest {
        from_failed: args.from_failed,
        upload,
    };
    let started = client.rerun(&args.run, &req).await?;
    follow(client, settings, started, args.detach).await
}

fn print_plan(settings: &Settings, plan: &PlanResponse) -> CliResult<()> {
    if settings.output == OutputFormat::Json {
        return output::item(settings.output, plan, &[]);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(
        out,
        "project {} on '{}', outputs in '{}'",
        plan.project, plan.reference, plan.namespace
    )?;
    if !plan.params.is_empty() {
        let ps: Vec<String> = plan
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        writeln!(out, "parameters: {}", ps.join(", "))?;
    }
    writeln!(out)?;
    for (i, n) in plan.nodes.iter().enumerate() {
        let env = match &n.python {
            Some(py) if n.packages.is_empty() => format!(", python {py}"),
            Some(py) => {
                let pk: Vec<String> = n
                    .packages
                    .iter()
                    .map(|(k, v)| format!("{k}=={v}"))
                    .collect();
                format!(", python {py} with {}", pk.join(" "))
            }
            None => String::new(),
        };
        writeln!(
            out,
            "{:>2}. {} {} ({}{env}) at {}",
            i + 1,
            n.kind,
            n.name,
            n.language,
            n.location
        )?;
        for inp in &n.inputs {
            let from = inp
                .producer
                .as_deref()
                .map(|p| format!(" <- {p}"))
                .unwrap_or_else(|| " (from the branch)".into());
            let cols = inp
                .columns
                .as_ref()
                .map(|c| format!(" columns [{}]", c.join(", ")))
                .unwrap_or_default();
            let filter = inp
                .filter
                .as_ref()
                .map(|f| format!(" where {f}"))
                .unwrap_or_default();
            writeln!(out, "      in   {}{cols}{filter}{from}", inp.table)?;
        }
        if let Some(o) = &n.output {
            writeln!(out, "      out  {o}")?;
        }
        if let Some(c) = &n.change {
            writeln!(out, "      will {}: {}", c.action, c.reasons.join("; "))?;
            if let Some(cat) = &c.category {
                let since = c
                    .compared_with
                    .as_deref()
                    .map(|r| format!(" (against run {})", &r[..r.len().min(12)]))
                    .unwrap_or_default();
                writeln!(out, "      change {cat}{since}: {}", c.details.join("; "))?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

fn icon(s: NodeStatus) -> &'static str {
    match s {
        NodeStatus::Waiting => " ",
        NodeStatus::Running => ">",
        NodeStatus::Cached | NodeStatus::Done | NodeStatus::Passed => "+",
        NodeStatus::Warned => "!",
        NodeStatus::Failed => "x",
        NodeStatus::Skipped | NodeStatus::Cancelled => "-",
    }
}

fn node_line(n: &RunNode, width: usize) -> String {
    // A column no wider than a screen (formatting refuses widths past 65,535).
    let width = width.min(80);
    let elapsed = match (n.started_at, n.finished_at) {
        (Some(s), Some(f)) => format!("{:.1}s", (f - s).num_milliseconds() as f64 / 1000.0),
        (Some(s), None) => format!(
            "{:.1}s",
            (chrono::Utc::now() - s).num_milliseconds().max(0) as f64 / 1000.0
        ),
        _ => String::new(),
    };
    let rows = n
        .rows
        .map(|r| output::count(r as usize, "row"))
        .unwrap_or_default();
    format!(
        "{} {:<width$}  {:<8} {:>7}  {rows}",
        icon(n.status),
        n.name,
        n.status.as_str(),
        elapsed
    )
}

/// Shows a run's progress until it ends (or returns at once with `detach`).
async fn follow(
    client: &Client,
    settings: &Settings,
    started: RunInfo,
    detach: bool,
) -> CliResult<()> {
    eprintln!(
        "run {} of {} on '{}' ({} nodes; working on branch '{}')",
        short(&started.id),
        started.project,
        started.target,
        started.nodes.len(),
        started.run_branch
    );
    if detach {
        if settings.output == OutputFormat::Json {
            return output::item(settings.output, &started, &[]);
        }
        println!("{}", started.id);
        return Ok(());
    }
    let width = started
        .nodes
        .iter()
        .map(|n| n.name.len())
        .max()
        .unwrap_or(10);
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let multi = MultiProgress::new();
    let style = ProgressStyle::with_template("{spinner} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    // A run of more nodes than a screen shows well: one line that counts them
    // ("117 cached, 5 done, 1 running"), and each failure as it happens.
    let compact = interactive && started.nodes.len() > COMPACT_AFTER;
    let summary = match compact {
        true => multi.add(ProgressBar::new_spinner()),
        false => ProgressBar::hidden(),
    };
    summary.set_style(style.clone());
    summary.set_message(run_summary(&started.nodes));
    let bars: Vec<ProgressBar> = started
        .nodes
        .iter()
        .map(|n| {
            let b = if interactive && !compact {
                multi.add(ProgressBar::new_spinner())
            } else {
                ProgressBar::hidden()
            };
            b.set_style(style.clone());
            b.set_message(node_line(n, width));
            b
        })
        .collect();
    let mut reported = vec![false; started.nodes.len()];
    // Ctrl-C cancels the run it started (as dbt does): nothing is published. A second
    // one leaves at once (`--detach` lets a run go on without being watched).
    // (Listened for from here: a Ctrl-C before the first poll is not lost.)
    let mut interrupts = 0;
    let mut ctrl_c = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let run = loop {
        let run = client.run(&started.id).await?;
        summary.set_message(run_summary(&run.nodes));
        summary.tick();
        for (i, n) in run.nodes.iter().enumerate() {
            if let Some(b) = bars.get(i) {
                b.set_message(node_line(n, width));
                if n.status == NodeStatus::Running {
                    b.tick();
                }
            }
            let unreported = !reported.get(i).copied().unwrap_or(true);
            if !interactive && n.status.is_final() && unreported {
                eprintln!("{}", node_line(n, width));
                reported[i] = true;
            } else if compact
                && unreported
                && matches!(n.status, NodeStatus::Failed | NodeStatus::Warned)
            {
                let _ = multi.println(node_line(n, width));
                reported[i] = true;
            }
        }
        if run.status.is_final() {
            break run;
        }
        // Short runs end fast: poll often at first, then settle down.
        let waited = chrono::Utc::now() - started.created_at;
        let pause = if waited.num_milliseconds() < 2000 {
            20
        } else {
            200
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(pause)) => {}
            _ = ctrl_c.recv() => {
                interrupts += 1;
                if interrupts > 1 {
                    let _ = multi.clear();
                    eprintln!(
                        "left run {}: its cancellation goes on on the server (`lh runs show {}`)",
                        short(&started.id),
                        short(&started.id)
                    );
                    return Err(CliError::interrupted());
                }
                let _ = multi.println(format!(
                    "cancelling run {}: nothing is published; its branch '{}' is kept until it \
                     expires (Ctrl-C again to leave at once)",
                    short(&started.id),
                    started.run_branch
                ));
                if !interactive {
                    eprintln!(
                        "cancelling run {}: nothing is published; its branch '{}' is kept until \
                         it expires (Ctrl-C again to leave at once)",
                        short(&started.id),
                        started.run_branch
                    );
                }
                client.cancel_run(&started.id).await?;
            }
        }
    };
    for b in &bars {
        b.finish();
    }
    if compact {
        summary.finish_with_message(run_summary(&run.nodes));
    }
    report(settings, &run)
}

/// The most nodes `lh run` shows a line each for on a terminal; more get one summary.
const COMPACT_AFTER: usize = 12;

/// A run's nodes counted by state, in the order a run moves through them
/// ("117 cached, 5 done, 1 running, 3 waiting"), with the running ones named.
fn run_summary(nodes: &[RunNode]) -> String {
    let order = [
        NodeStatus::Cached,
        NodeStatus::Done,
        NodeStatus::Passed,
        NodeStatus::Warned,
        NodeStatus::Failed,
        NodeStatus::Skipped,
        NodeStatus::Cancelled,
        NodeStatus::Running,
        NodeStatus::Waiting,
    ];
    let mut parts: Vec<String> = order
        .iter()
        .filter_map(|s| {
            let n = nodes.iter().filter(|n| n.status == *s).count();
            (n > 0).then(|| format!("{n} {}", s.as_str()))
        })
        .collect();
    if parts.is_empty() {
        parts.push("no nodes".into());
    }
    let running: Vec<&str> = nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Running)
        .map(|n| n.name.as_str())
        .take(3)
        .collect();
    match running.is_empty() {
        true => parts.join(", "),
        false => format!("{} (running {})", parts.join(", "), running.join(", ")),
    }
}

fn report(settings: &Settings, run: &RunInfo) -> CliResult<()> {
    if settings.output == OutputFormat::Json {
        output::item(settings.output, run, &[])?;
    }
    match run.status {
        RunStatus::Succeeded => {
            let cached = run.nodes.iter().filter(|n| n.cached).count();
            // A run whose outputs were all there already makes no commit.
            let published = match run.merge_commit.as_deref().filter(|c| !c.is_empty()) {
                Some(c) => format!("published to '{}' in commit {}", run.target, short(c)),
                None => format!(
                    "'{}' already held every output: nothing to publish",
                    run.target
                ),
            };
            eprintln!(
                "run {} succeeded: {published}{}",
                short(&run.id),
                if cached > 0 {
                    format!(" ({cached} of {} nodes cached)", run.nodes.len())
                } else {
                    String::new()
                }
            );
            Ok(())
        }
        _ => {
            for n in run
                .nodes
                .iter()
                .filter(|n| matches!(n.status, NodeStatus::Failed | NodeStatus::Warned))
            {
                eprintln!(
                    "\n{} {} at {}: {}",
                    n.kind,
                    n.name,
                    n.location,
                    n.error.as_deref().unwrap_or("failed")
                );
                if let Some(d) = &n.detail {
                    eprintln!("  {d}");
                }
                if let Some(tb) = &n.traceback {
                    for line in tb.lines() {
                        eprintln!("  {line}");
                    }
                }
            }
            eprintln!(
                "\nerror: run {} {}: {}",
                short(&run.id),
                run.status.as_str(),
                run.error.as_deref().unwrap_or("")
            );
            eprintln!(
                "hint: '{}' is untouched; inspect the run's branch with `lh query ... --ref {}`, fix, and replay with `lh rerun {} --code DIR`",
                run.target,
                run.run_branch,
                short(&run.id)
            );
            Err(CliError::RunFailed)
        }
    }
}

pub async fn runs(client: &Client, settings: &Settings, cmd: RunsCommand) -> CliResult<()> {
    match cmd {
        RunsCommand::Ls { limit } => {
            let list = client.runs(limit).await?;
            output::listing(
                settings.output,
                &[
                    "run", "project", "target", "status", "nodes", "started", "author",
                ],
                &list.runs,
                |r| {
                    let done = r.nodes.iter().filter(|n| n.status.is_final()).count();
                    vec![
                        short(&r.id).to_string(),
                        r.project.clone(),
                        r.target.clone(),
                        r.status.as_str().to_string(),
                        format!("{done}/{}", r.nodes.len()),
                        r.created_at
                            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        r.author.clone(),
                    ]
                },
            )
        }
        RunsCommand::Show { run } => {
            let r = client.run(&run).await?;
            if settings.output != OutputFormat::Table {
                return output::item(
                    settings.output,
                    &r,
                    &[("id", r.id.clone()), ("status", r.status.as_str().into())],
                );
            }
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            writeln!(out, "run       {}", r.id)?;
            writeln!(
                out,
                "project   {} (code {})",
                r.project,
                short(&r.code_hash)
            )?;
            writeln!(
                out,
                "target    {} (input commit {})",
                r.target,
                short(&r.input_commit)
            )?;
            writeln!(out, "branch    {}", r.run_branch)?;
            writeln!(
                out,
                "status    {}{}",
                r.status.as_str(),
                r.error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            )?;
            if let Some(m) = &r.merge_commit {
                writeln!(out, "published commit {}", short(m))?;
            }
            if let Some(o) = &r.rerun_of {
                writeln!(out, "replay of {}", short(o))?;
            }
            if !r.params.is_empty() {
                let ps: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
                writeln!(out, "params    {}", ps.join(", "))?;
            }
            writeln!(out, "author    {}", r.author)?;
            if !r.partitions.is_empty() {
                let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
                for p in &r.partitions {
                    by.entry(p.status.as_str()).or_default().push(&p.partition);
                }
                writeln!(out, "partitions {}", r.partitions.len())?;
                for (status, labels) in by {
                    writeln!(out, "  {status:<8} {}", labels.join(", "))?;
                }
            }
            writeln!(out)?;
            let width = r.nodes.iter().map(|n| n.name.len()).max().unwrap_or(10);
            for n in &r.nodes {
                let inputs = if n.inputs.is_empty() {
                    String::new()
                } else {
                    format!("  <- {}", n.inputs.join(", "))
                };
                writeln!(out, "{}{inputs}", node_line(n, width))?;
                if let Some(r) = &n.reason {
                    writeln!(out, "    {r}")?;
                }
                if let Some(e) = &n.error {
                    writeln!(out, "    {e}")?;
                }
            }
            out.flush()?;
            Ok(())
        }
        RunsCommand::Logs {
            run,
            node: None,
            follow: true,
        } => follow_logs(client, &run).await,
        RunsCommand::Logs { run, node, follow } => {
            let mut shown = String::new();
            loop {
                let text = client.run_logs(&run, node.as_deref()).await?;
                if let Some(new) = text.strip_prefix(shown.as_str()) {
                    print!("{new}");
                } else {
                    print!("{text}");
                }
                std::io::stdout().flush()?;
                shown = text;
                if !follow {
                    return Ok(());
                }
                let r = client.run(&run).await?;
                if r.status.is_final() {
                    let last = client.run_logs(&run, node.as_deref()).await?;
                    if let Some(new) = last.strip_prefix(shown.as_str()) {
                        print!("{new}");
                    }
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        RunsCommand::Cancel { run } => {
            let r = client.cancel_run(&run).await?;
            eprintln!("run {} {}", short(&r.id), r.status.as_str());
            Ok(())
        }
    }
}

/// `lh runs logs RUN --follow`: each node's log as it grows (a running function's prints
/// as they happen), under a `=== node` line whenever the node printing changes, until
/// the run ends. Nodes run side by side: each is followed on its own, so their lines
/// never mix within a chunk and nothing is printed twice.
async fn follow_logs(client: &Client, run: &str) -> CliResult<()> {
    let mut shown: std::collections::HashMap<String, usize> = Default::default();
    // Nodes whose final log was read: nothing more comes.
    let mut ended = std::collections::HashSet::new();
    let mut last: Option<String> = None;
    let mut out = std::io::stdout();
    loop {
        let r = client.run(run).await?;
        for n in &r.nodes {
            if n.status == NodeStatus::Waiting || ended.contains(&n.name) {
                continue;
            }
            let text = client.run_logs(&r.id, Some(&n.name)).await?;
            let from = shown.get(&n.name).copied().unwrap_or(0);
            let new = text.get(from..).unwrap_or(&text);
            if !new.is_empty() {
                if last.as_deref() != Some(n.name.as_str()) {
                    writeln!(out, "=== {}", n.name)?;
                    last = Some(n.name.clone());
                }
                write!(out, "{new}")?;
                out.flush()?;
            }
            shown.insert(n.name.clone(), text.len());
            if n.status.is_final() {
                ended.insert(n.name.clone());
            }
        }
        if r.status.is_final() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `lh lineage TABLE[.COLUMN]`: upstream, then downstream, one step a line.
pub async fn lineage(
    client: &Client,
    settings: &Settings,
    args: crate::args::LineageArgs,
) -> CliResult<()> {
    let at = client
        .resolve_ref(settings.reference(&args.reference))
        .await?;
    let l = client.lineage(&args.name, &at).await?;
    if settings.output != OutputFormat::Table {
        let mut rows: Vec<(&str, &lh_api::LineageEdge)> =
            l.upstream.iter().map(|e| ("upstream", e)).collect();
        rows.extend(l.downstream.iter().map(|e| ("downstream", e)));
        if settings.output == OutputFormat::Json {
            return output::item(settings.output, &l, &[]);
        }
        return output::listing(
            settings.output,
            &["direction", "from", "to", "node", "project"],
            &rows
                .iter()
                .map(|(d, e)| (d.to_string(), (*e).clone()))
                .collect::<Vec<_>>(),
            |(d, e)| {
                vec![
                    d.clone(),
                    e.from.clone(),
                    e.to.clone(),
                    e.node.clone(),
                    e.project.clone(),
                ]
            },
        );
    }
    let what = match &l.column {
        Some(c) => format!("{}.{c}", l.table),
        None => l.table.clone(),
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for (title, edges) in [("made from", &l.upstream), ("used by", &l.downstream)] {
        writeln!(out, "{what} is {title}:")?;
        if edges.is_empty() {
            writeln!(out, "  nothing a run on '{}' shows", l.reference)?;
        }
        for e in edges.iter() {
            writeln!(
                out,
                "  {} -> {}  ({}, project {})",
                e.from, e.to, e.node, e.project
            )?;
        }
    }
    for u in &l.unresolved {
        eprintln!("note: lineage not read for {u}");
    }
    out.flush()?;
    Ok(())
}
