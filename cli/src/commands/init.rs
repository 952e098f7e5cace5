//! `lh init`: a new project that runs as made (dbt's `init`, smaller): a Python model
//! with no inputs, a SQL model reading it, and an expectation on both, so that the
//! first `lh run` shows the whole cycle of run, audit and publish.

use std::path::Path;

use crate::args::InitArgs;
use crate::error::{CliError, CliResult};

const PROJECT_FILE: &str = "lh_project.yml";

pub fn run(args: InitArgs) -> CliResult<()> {
    let dir = &args.dir;
    if dir.join(PROJECT_FILE).exists() {
        return Err(CliError::invalid(
            format!("{} already holds a project ({PROJECT_FILE})", dir.display()),
            Some("lh init makes a new project; run this one with lh run"),
        ));
    }
    let folder = std::fs::canonicalize(dir)
        .ok()
        .or_else(|| Some(std::env::current_dir().ok()?.join(dir)))
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let name = identifier(&folder);
    let namespace = match args.namespace {
        Some(ns) => {
            if identifier(&ns) != ns {
                return Err(CliError::invalid(
                    format!(
                        "'{ns}' is not a namespace: use lowercase letters, digits and '_', starting with a letter"
                    ),
                    None,
                ));
            }
            ns
        }
        None => name.clone(),
    };
    let files = [
        (
            PROJECT_FILE.to_string(),
            format!(
                "# An lh project: its models and expectations run on a branch, and publish\n\
                 # together only when every one passes (see the README's \"Pipelines\").\n\
                 name: {name}\n\
                 # The namespace of the tables it makes.\n\
                 namespace: {namespace}\n\
                 python: \"3.11\"\n\
                 # Packages its Python functions import, pinned: {{pandas: \"2.2.3\"}}\n\
                 packages: {{}}\n"
            ),
        ),
        ("models/greetings.py".to_string(), GREETINGS.to_string()),
        (
            "models/greeting_lengths.sql".to_string(),
            LENGTHS.to_string(),
        ),
        ("expectations.py".to_string(), EXPECTATIONS.to_string()),
    ];
    // Nothing is overwritten: every file is new.
    for (path, _) in &files {
        if dir.join(path).exists() {
            return Err(CliError::invalid(
                format!(
                    "{} exists already: nothing was written",
                    dir.join(path).display()
                ),
                None,
            ));
        }
    }
    for (path, text) in &files {
        write_new(&dir.join(path), text)?;
    }
    let shown = dir.display();
    eprintln!("made project '{name}' in {shown} (its tables go to namespace '{namespace}')");
    eprintln!("  lh run {shown} --dry-run    # the DAG, without running anything");
    eprintln!("  lh run {shown}              # run, check the expectation, publish");
    eprintln!("  lh query \"select * from {namespace}.greeting_lengths\"");
    Ok(())
}

fn write_new(path: &Path, text: &str) -> CliResult<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// A name as lh's catalog takes it: lowercase letters, digits and `_`, starting with a
/// letter (`my-shop 2` is `my_shop_2`; nothing usable is `project`).
fn identifier(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    out = out.trim_matches('_').to_string();
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out = format!("p_{out}").trim_end_matches('_').to_string();
    }
    if out == "p" {
        out = "project".into();
    }
    out
}

const GREETINGS: &str = r#""""A model with no inputs: its rows come from here. A model returns a pyarrow
table (or pandas/polars); its name is the table's, in the project's namespace."""

import lh
import pyarrow as pa


@lh.model()
def greetings():
    return pa.table({
        "id": [1, 2, 3],
        "language": ["en", "fr", "es"],
        "word": ["hello", "bonjour", "hola"],
    })
"#;

const LENGTHS: &str = "-- A SQL model: one SELECT, its table named after the file. It reads the\n\
-- project's own models by name, and any table of the branch as namespace.table.\n\
select language, word, length(word) as letters\n\
from greetings\n\
order by id\n";

const EXPECTATIONS: &str = r#""""What must hold before anything is published: an expectation returns True, or
(False, what is wrong)."""

import lh
import pyarrow.compute as pc


@lh.expectation()
def every_word_has_letters(t=lh.Model("greeting_lengths", columns=["letters"])):
    empty = pc.sum(pc.equal(t.column("letters"), 0)).as_py() or 0
    return empty == 0, f"{empty} words are empty"
"#;

#[cfg(test)]
mod tests {
    use super::identifier;

    #[test]
    fn a_folder_name_becomes_a_namespace() {
        assert_eq!(identifier("shop"), "shop");
        assert_eq!(identifier("My-Shop 2"), "my_shop_2");
        assert_eq!(identifier("2024_data"), "p_2024_data");
        assert_eq!(identifier("---"), "project");
    }
}
