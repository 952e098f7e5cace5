//! Tables: list, show, import, remove.

use indicatif::{ProgressBar, ProgressStyle};
use lh_api::{FileFormat, GcRequest, ImportMode, ImportRequest, TableDetail};

use crate::args::{FormatArg, GcArgs, ImportArgs, ImportModeArg, OutputFormat, TableCommand};
use crate::client::Client;
use crate::error::{CliError, CliResult};
use crate::output::{self, short};
use crate::settings::Settings;

pub async fn run(client: &Client, settings: &Settings, cmd: TableCommand) -> CliResult<()> {
    match cmd {
        TableCommand::Ls {
            reference,
            namespace,
        } => {
            let at = client.resolve_ref(settings.reference(&reference)).await?;
            let list = client.tables_with_totals(&at, namespace.as_deref()).await?;
            if settings.output == OutputFormat::Json {
                return output::item(settings.output, &list, &[]);
            }
            let or_unknown = |n: Option<String>| n.unwrap_or_else(|| "?".into());
            output::listing(
                settings.output,
                &["table", "rows", "size", "updated", "snapshot"],
                &list.tables,
                |t| {
                    vec![
                        t.name.clone(),
                        or_unknown(t.rows.map(|r| r.to_string())),
                        or_unknown(t.bytes.map(output::bytes)),
                        t.updated_at
                            .map_or("-".into(), |u| u.format("%Y-%m-%d %H:%M").to_string()),
                        t.pointer.snapshot_id.map_or("-".into(), |s| s.to_string()),
                    ]
                },
            )
        }
        TableCommand::Show { name, reference } => {
            let at = client.resolve_ref(settings.reference(&reference)).await?;
            let d = client.table(&name, &at).await?;
            show(settings, &at, &d)
        }
        TableCommand::Import(args) => import(client, settings, args).await,
        TableCommand::Compact {
            name,
            reference,
            target_file_size,
        } => {
            let at = client.resolve_ref(settings.reference(&reference)).await?;
            let req = lh_api::CompactRequest {
                reference: Some(at.clone()),
                target_file_size: Some(target_file_size),
            };
            let r = client.compact(&name, &req).await?;
            if settings.output != OutputFormat::Table {
                return output::item(settings.output, &r, &[]);
            }
            if r.compacted {
                let deletes = match r.delete_files_removed {
                    0 => String::new(),
                    n => format!(", {} applied", output::count(n as usize, "delete file")),
                };
                eprintln!(
                    "compacted {} on '{at}': {} data files into {} ({} rewritten{deletes}, {} unchanged; commit {})",
                    r.table,
                    r.files_before,
                    r.files_after,
                    output::count(r.files_rewritten as usize, "file"),
                    output::count(r.rows as usize, "row"),
                    short(&r.commit)
                );
            } else {
                eprintln!(
                    "{} on '{at}' has nothing to compact ({}); no commit",
                    r.table,
                    output::count(r.files_before as usize, "data file")
                );
            }
            Ok(())
        }
        TableCommand::Expire {
            name,
            reference,
            older_than,
        } => {
            let at = client.resolve_ref(settings.reference(&reference)).await?;
            let req = lh_api::ExpireRequest {
                reference: Some(at.clone()),
                older_than_secs: Some(older_than),
            };
            let r = client.expire(&name, &req).await?;
            if settings.output != OutputFormat::Table {
                return output::item(settings.output, &r, &[]);
            }
            if r.expired > 0 {
                eprintln!(
                    "expired {} of {} on '{at}' ({} left; commit {}); `lh gc` frees their files",
                    output::count(r.expired as usize, "snapshot"),
                    r.table,
                    r.snapshots_after,
                    short(&r.commit)
                );
            } else {
                eprintln!(
                    "{} on '{at}' has no snapshot to expire ({} kept: read by the {} commits the retention keeps, or younger); no commit",
                    r.table, r.snapshots_before, r.kept_commits
                );
            }
            Ok(())
        }
        TableCommand::Rm { name, reference } => {
            let at = client.resolve_ref(settings.reference(&reference)).await?;
            let r = client.drop_table(&name, &at).await?;
            eprintln!(
                "removed table '{}' from '{at}': commit {}",
                r.table,
                short(&r.commit)
            );
            Ok(())
        }
    }
}

fn show(settings: &Settings, at: &str, d: &TableDetail) -> CliResult<()> {
    if settings.output != OutputFormat::Table {
        return output::item(
            settings.output,
            d,
            &[
                ("name", d.name.clone()),
                ("rows", d.rows.to_string()),
                ("files", d.files.to_string()),
                ("delete_files", d.delete_files.to_string()),
                ("size_bytes", d.size_bytes.to_string()),
                ("partition_by", d.partition_by.clone()),
                (
                    "snapshot",
                    d.pointer
                        .snapshot_id
                        .map_or(String::new(), |s| s.to_string()),
                ),
            ],
        );
    }
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(
        out,
        "table     {} at {at} (commit {})",
        d.name,
        short(&d.commit)
    )?;
    writeln!(out, "rows      {}", d.rows)?;
    if d.delete_files > 0 {
        writeln!(
            out,
            "files     {} (and {} delete files: merge-on-read)",
            d.files, d.delete_files
        )?;
    } else {
        writeln!(out, "files     {}", d.files)?;
    }
    writeln!(out, "size      {}", output::bytes(d.size_bytes))?;
    writeln!(
        out,
        "snapshot  {}",
        d.pointer
            .snapshot_id
            .map_or("none".into(), |s| s.to_string())
    )?;
    writeln!(out, "location  {}", d.location)?;
    writeln!(out, "format    Iceberg v{}", d.format_version)?;
    if !d.partition_by.is_empty() {
        writeln!(
            out,
            "partition {} (spec {})",
            d.partition_by, d.partition_spec_id
        )?;
    }
    if d.partition_count > 0 {
        // The first few by their values; `-o json` lists up to a thousand.
        const SHOWN: usize = 20;
        writeln!(
            out,
            "\n{}",
            output::count(d.partition_count as usize, "partition")
        )?;
        let rows: Vec<Vec<String>> = d
            .partitions
            .iter()
            .take(SHOWN)
            .map(|p| {
                vec![
                    if p.partition.is_empty() {
                        "(unpartitioned)".into()
                    } else {
                        p.partition.clone()
                    },
                    p.rows.to_string(),
                    p.files.to_string(),
                    output::bytes(p.size_bytes),
                ]
            })
            .collect();
        output::aligned(&mut out, &["partition", "rows", "files", "size"], &rows)?;
        if d.partition_count as usize > SHOWN {
            writeln!(
                out,
                "... and {} more (-o json lists them)",
                d.partition_count as usize - SHOWN
            )?;
        }
    }
    writeln!(out, "\nschema")?;
    let rows: Vec<Vec<String>> = d
        .columns
        .iter()
        .map(|c| {
            vec![
                c.id.to_string(),
                c.name.clone(),
                c.data_type.clone(),
                if c.required {
                    "required".into()
                } else {
                    "optional".into()
                },
            ]
        })
        .collect();
    output::aligned(&mut out, &["id", "column", "type", "nullability"], &rows)?;
    writeln!(out, "\nsnapshots (newest first)")?;
    let rows: Vec<Vec<String>> = d
        .snapshots
        .iter()
        .map(|s| {
            vec![
                s.snapshot_id.to_string(),
                s.timestamp
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                s.operation.clone(),
                s.summary.get("added-records").cloned().unwrap_or_default(),
                s.summary.get("total-records").cloned().unwrap_or_default(),
            ]
        })
        .collect();
    output::aligned(
        &mut out,
        &["snapshot", "time", "operation", "added rows", "total rows"],
        &rows,
    )?;
    out.flush()?;
    Ok(())
}

async fn import(client: &Client, settings: &Settings, args: ImportArgs) -> CliResult<()> {
    let at = client
        .resolve_ref(settings.reference(&args.reference))
        .await?;
    let format = match args.format {
        Some(FormatArg::Csv) => Some(FileFormat::Csv),
        Some(FormatArg::Parquet) => Some(FileFormat::Parquet),
        Some(FormatArg::Json) => Some(FileFormat::Json),
        None => None,
    };
    for f in &args.files {
        if !f.is_file() {
            return Err(CliError::invalid(
                format!("{} is not a file", f.display()),
                None,
            ));
        }
        if format.is_none() && FileFormat::from_path(&f.display().to_string()).is_none() {
            return Err(CliError::invalid(
                format!("cannot tell the format of {} from its name", f.display()),
                Some("give it with --format csv|parquet|json"),
            ));
        }
    }
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut uploads = Vec::new();
    for f in &args.files {
        uploads.push(client.upload(f, interactive).await?.id);
    }
    let spinner = if interactive {
        let s = ProgressBar::new_spinner();
        s.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        s.set_message(format!("importing into {} on {at}", args.name));
        s.enable_steady_tick(std::time::Duration::from_millis(120));
        s
    } else {
        ProgressBar::hidden()
    };
    let req = ImportRequest {
        reference: at.clone(),
        mode: match args.mode {
            ImportModeArg::Create => ImportMode::Create,
            ImportModeArg::Append => ImportMode::Append,
            ImportModeArg::Replace => ImportMode::Replace,
            ImportModeArg::OverwritePartitions => ImportMode::OverwritePartitions,
        },
        uploads,
        format,
        // Names only: the server puts them in the commit message.
        file_names: args
            .files
            .iter()
            .map(|f| {
                f.file_name().map_or_else(
                    || f.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                )
            })
            .collect(),
        partition_by: args.partition_by.clone(),
    };
    let result = client.import(&args.name, &req).await;
    spinner.finish_and_clear();
    let r = result?;
    if settings.output != OutputFormat::Table {
        return output::item(
            settings.output,
            &r,
            &[
                ("table", r.table.clone()),
                ("commit", r.commit.clone()),
                ("rows", r.rows.to_string()),
                ("files", r.files.to_string()),
                ("bytes", r.bytes.to_string()),
                ("partitions", r.partitions.to_string()),
                ("rebased", r.rebased.to_string()),
            ],
        );
    }
    let verb = match args.mode {
        ImportModeArg::Create => "created",
        ImportModeArg::Append => "appended to",
        ImportModeArg::Replace => "replaced",
        ImportModeArg::OverwritePartitions => "overwrote partitions of",
    };
    let partitions = if r.partitions > 0 {
        format!(" in {}", output::count(r.partitions as usize, "partition"))
    } else {
        String::new()
    };
    let rebased = match r.rebased {
        0 => String::new(),
        n => format!(
            "; rebased onto other writes {}",
            output::count(n as usize, "time")
        ),
    };
    eprintln!(
        "{verb} {} on '{at}': {}, {}{partitions}, {} (commit {}){rebased}",
        r.table,
        output::count(r.rows as usize, "row"),
        output::count(r.files as usize, "file"),
        output::bytes(r.bytes),
        short(&r.commit)
    );
    Ok(())
}

/// `lh gc`: the warehouse files no commit reaches, removed (or listed with --dry-run).
pub async fn gc(client: &Client, settings: &Settings, args: GcArgs) -> CliResult<()> {
    let req = GcRequest {
        older_than_secs: Some(args.older_than),
        dry_run: args.dry_run,
    };
    let r = client.gc(&req).await?;
    if settings.output == OutputFormat::Json {
        return output::item(settings.output, &r, &[]);
    }
    if r.dry_run {
        for path in &r.removed {
            println!("{path}");
        }
    }
    let verb = if r.dry_run { "would remove" } else { "removed" };
    let folders = if r.removed_folders > 0 {
        format!(
            ", and {}",
            output::count(r.removed_folders as usize, "empty folder")
        )
    } else {
        String::new()
    };
    eprintln!(
        "{verb} {} ({}) that no commit reaches, last modified over {} ago{folders}",
        output::count(r.removed_files as usize, "file"),
        output::bytes(r.removed_bytes),
        age(r.older_than_secs)
    );
    eprintln!(
        "kept {}: {} reached by the commits ({}), {} too recent or being written",
        output::count((r.live_files + r.recent_files) as usize, "file"),
        r.live_files,
        output::count(r.table_versions as usize, "table version"),
        r.recent_files
    );
    if r.foreign_files > 0 {
        eprintln!(
            "left {} outside lh's table folders (<namespace>/<table>-<uuid>/) alone",
            output::count(r.foreign_files as usize, "file")
        );
    }
    if !r.unreadable.is_empty() {
        eprintln!(
            "warning: {} could not be read, so their table folders were left whole ({}):",
            output::count(r.unreadable.len(), "table version"),
            output::count(r.protected_files as usize, "file")
        );
        for u in &r.unreadable {
            eprintln!("  {u}");
        }
    }
    Ok(())
}

fn age(secs: u64) -> String {
    match secs {
        s if s % 86400 == 0 => format!("{}d", s / 86400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
