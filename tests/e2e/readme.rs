//! The README as a test: its blocks run in order, as written, against one server, so that
//! the README cannot drift from what lh does.
//!
//! Every fenced or indented block of README.md is one of:
//! - a shell block (```` ```sh ````, an indented block, or a fence with no language): run
//!   by bash, stopping at the first command that fails, in a folder of the test's own
//!   where `examples/` is the repository's. A line starting `lh server` is not run: the
//!   test's server plays it.
//! - a transcript (lines starting `$ `): each command runs and must print what the README
//!   shows after it, up to hashes, ids and times (a line `...` stands for any lines, and
//!   `...` in a line for any text).
//! - a Python block: run by the suite's Python, with lh's package on its path; a fragment
//!   of a module (one that imports nothing) after `import os`, `import lh` and
//!   `import pyarrow.compute as pc`.
//! - marked by an HTML comment just before it, `<!-- readme-test: ... -->`: `not run: WHY`;
//!   `excerpt of PATH` (its text is in that file, comments and layout aside); `the demo's
//!   output` (basics::the_demo_runs_to_the_end holds the demo to it); `placeholder TEXT =
//!   $(COMMAND)` (TEXT stands for what COMMAND prints where it stands); `before: COMMAND`.
//!
//! A YAML, SQL or text block that is not a transcript must be marked. Everywhere,
//! `http://127.0.0.1:7878` is the test server's address and `/tmp/` a folder of the
//! test's own.

use std::path::{Path, PathBuf};
use std::process::Command;

use lh_e2e::{Server, lh_bin};

const README: &str = include_str!("../../README.md");

/// One block of the README: where it starts, its language (`indent` for an indented
/// block, `-` for a fence without one), its lines (indentation removed) and its marks.
pub(crate) struct Block {
    pub line: usize,
    pub lang: String,
    pub lines: Vec<String>,
    pub marks: Vec<String>,
}

/// The README's blocks, in order, each with the marks just before it.
pub(crate) fn blocks() -> Vec<Block> {
    let lines: Vec<&str> = README.lines().collect();
    let mut blocks = Vec::new();
    let mut marks: Vec<(usize, String)> = Vec::new();
    let mut previous_blank = true;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if let Some(mark) = l
            .strip_prefix("<!-- readme-test: ")
            .and_then(|m| m.strip_suffix(" -->"))
        {
            marks.push((i + 1, mark.to_string()));
            i += 1;
            previous_blank = true;
            continue;
        }
        let block = if let Some(lang) = l.strip_prefix("```") {
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].starts_with("```"))
                .unwrap_or_else(|| panic!("README line {}: a fence that never closes", i + 1));
            let b = Block {
                line: i + 1,
                lang: if lang.trim().is_empty() {
                    "-".into()
                } else {
                    lang.trim().into()
                },
                lines: lines[i + 1..end].iter().map(|s| s.to_string()).collect(),
                marks: Vec::new(),
            };
            i = end + 1;
            Some(b)
        } else if previous_blank && l.starts_with("    ") && !l.trim().is_empty() {
            let mut end = i;
            while end < lines.len()
                && (lines[end].starts_with("    ")
                    || (lines[end].is_empty()
                        && lines.get(end + 1).is_some_and(|n| n.starts_with("    "))))
            {
                end += 1;
            }
            let b = Block {
                line: i + 1,
                lang: "indent".into(),
                lines: lines[i..end]
                    .iter()
                    .map(|s| s.strip_prefix("    ").unwrap_or(s).to_string())
                    .collect(),
                marks: Vec::new(),
            };
            i = end;
            Some(b)
        } else {
            None
        };
        match block {
            Some(mut b) => {
                b.marks = marks.drain(..).map(|(_, m)| m).collect();
                blocks.push(b);
                previous_blank = false;
            }
            None => {
                if let Some((at, _)) = marks.first()
                    && !l.trim().is_empty()
                {
                    panic!("README line {at}: a readme-test mark with no block after it");
                }
                previous_blank = l.trim().is_empty();
                i += 1;
            }
        }
    }
    assert!(marks.is_empty(), "a readme-test mark at the README's end");
    blocks
}

/// A line as compared: hashes, ids and times as placeholders, spaces collapsed.
pub(crate) fn normalize(line: &str) -> String {
    static RULES: std::sync::OnceLock<Vec<(regex::Regex, &'static str)>> =
        std::sync::OnceLock::new();
    let rules = RULES.get_or_init(|| {
        [
            (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "<time>"),
            (r"\S*/lh-demo\.[A-Za-z0-9]+", "<demo>"),
            (r"127\.0\.0\.1:\d+", "<address>"),
            (r"\b\d+(\.\d+)? (ms|s)\b", "<duration>"),
            (r"\b[0-9a-f]*[0-9][0-9a-f]*\b", "<id>"),
            (r"\s+", " "),
        ]
        .into_iter()
        .map(|(r, to)| (regex::Regex::new(r).unwrap(), to))
        .collect()
    });
    let mut s = line.trim().to_string();
    for (re, to) in rules {
        s = if *to == "<id>" {
            // Hex of seven or more characters holding a digit: commits, runs, snapshots.
            re.replace_all(&s, |c: &regex::Captures| {
                let m = &c[0];
                if m.len() >= 7 {
                    "<id>".to_string()
                } else {
                    m.to_string()
                }
            })
            .into_owned()
        } else {
            re.replace_all(&s, *to).into_owned()
        };
    }
    s
}

/// Whether `actual` (a line) matches `expected`, where `...` stands for any text.
fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("...").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let mut rest = actual;
    for (k, p) in parts.iter().enumerate() {
        if k == 0 {
            match rest.strip_prefix(p) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if k == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            match rest.find(p) {
                Some(at) => rest = &rest[at + p.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Whether the lines `actual` are `expected`, where a line `...` stands for any lines.
fn lines_match(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e == "..." => {
            (0..=actual.len()).any(|k| lines_match(rest, &actual[k..]))
        }
        Some((e, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| line_matches(e, a) && lines_match(rest, more)),
    }
}

fn significant(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| normalize(l))
        .filter(|l| !l.is_empty())
        .collect()
}

/// The README's commands run here: a folder with the repository's `examples/`, the
/// server's address and the profile its first start wrote, lh and the suite's Python
/// first on the PATH, lh's Python package on Python's path.
struct Shell {
    work: PathBuf,
    env: Vec<(String, String)>,
}

impl Shell {
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.current_dir(&self.work)
            .env_remove("LH_TOKEN")
            .env_remove("LH_PROFILE")
            .env_remove("LH_USER");
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    fn bash(&self, script: &str) -> std::process::Output {
        self.command("bash")
            .args(["-e", "-o", "pipefail", "-c", script])
            .output()
            .unwrap()
    }
}

fn shown(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The text of a file or block as compared for an excerpt: comment lines (but lh's
/// `-- lh.` headers) and comments ending lines dropped, spaces collapsed.
fn excerpt_text(lines: &[String]) -> String {
    let mut out = Vec::new();
    for l in lines {
        let t = l.trim();
        if t.starts_with('#') || (t.starts_with("--") && !t.starts_with("-- lh.")) {
            continue;
        }
        let t = match t.find("  #") {
            Some(at) => &t[..at],
            None => t,
        };
        out.push(t.to_string());
    }
    out.join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn check_excerpt(root: &Path, block: &Block, path: &str) {
    let file = std::fs::read_to_string(root.join(path))
        .unwrap_or_else(|e| panic!("README line {}: excerpt of {path}: {e}", block.line));
    let file_lines: Vec<String> = file.lines().map(str::to_string).collect();
    let whole = excerpt_text(&file_lines);
    let mut rest = whole.as_str();
    for piece in block.lines.split(|l| l.trim() == "...") {
        let piece = excerpt_text(piece);
        if piece.is_empty() {
            continue;
        }
        match rest.find(&piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => panic!(
                "README line {}: the block is not an excerpt of {path}:\n{piece}\nnot found in:\n{whole}",
                block.line
            ),
        }
    }
}

/// Every block of the README, in order, against one server (the embedded default, on the
/// process runtime):
/// Start here, the Python client, the diffs, bisects and plans of `examples/sales`,
/// partitions, the daily shop's backfill, the write-audit-publish story, pyiceberg
/// through the REST catalog, tokens, roles and secrets.
#[test]
fn every_block_of_the_readme_runs_as_written() {
    let cache = crate::runs::env_cache();
    let dir = tempfile::tempdir().unwrap();
    // The README walks through the embedded default, a warehouse folder (whose files
    // pyiceberg reads as `file://`), whatever warehouse the suite's phase gives others;
    // its transcripts show the author `admin`: the user who starts the server.
    let warehouse = dir.path().join("warehouse");
    let server = Server::start_with_env(
        &[
            "--env-cache",
            &cache,
            "--runtime",
            "process",
            "--warehouse",
            warehouse.to_str().unwrap(),
        ],
        &[("USER", "admin")],
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let work = dir.path().join("work");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    std::os::unix::fs::symlink(root.join("examples"), work.join("examples")).unwrap();
    let python = lh_e2e::python();
    let venv_bin = Path::new(&python).parent().unwrap();
    let base = server.lh().command(&[]);
    let mut env: Vec<(String, String)> = base
        .get_envs()
        .filter(|(k, _)| *k == "LH_ENDPOINT" || *k == "LH_HOME" || *k == "NO_COLOR")
        .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
        .collect();
    env.push((
        "PATH".into(),
        format!(
            "{}:{}:{}",
            lh_bin().parent().unwrap().display(),
            venv_bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    ));
    env.push((
        "PYTHONPATH".into(),
        root.join("runner/python").display().to_string(),
    ));
    let endpoint = env
        .iter()
        .find(|(k, _)| k == "LH_ENDPOINT")
        .map(|(_, v)| v.clone())
        .expect("the server's address");
    let shell = Shell { work, env };
    let tmp_prefix = format!("{}/", tmp.display());

    let mut ran = 0;
    let mut mismatches: Vec<String> = Vec::new();
    for block in blocks() {
        let at = format!("README line {} ({})", block.line, block.lang);
        let mut skip = false;
        let mut placeholders: Vec<(String, String)> = Vec::new();
        for mark in &block.marks {
            if let Some(why) = mark.strip_prefix("not run: ") {
                assert!(!why.trim().is_empty(), "{at}: say why it is not run");
                skip = true;
            } else if mark == "the demo's output" {
                skip = true;
            } else if let Some(path) = mark.strip_prefix("excerpt of ") {
                check_excerpt(root, &block, path);
                skip = true;
            } else if let Some(spec) = mark.strip_prefix("placeholder ") {
                let (text, command) = spec
                    .split_once(" = ")
                    .and_then(|(t, c)| Some((t, c.strip_prefix("$(")?.strip_suffix(')')?)))
                    .unwrap_or_else(|| panic!("{at}: placeholder TEXT = $(COMMAND)"));
                // In a shell block the command runs where the placeholder stands.
                let value = if block.lang == "python" {
                    let out = shell.bash(command);
                    let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
                    assert!(
                        out.status.success() && !value.is_empty(),
                        "{at}: the placeholder's command `{command}` gave nothing:\n{}",
                        shown(&out)
                    );
                    value
                } else {
                    format!("\"$({command})\"")
                };
                placeholders.push((text.to_string(), value));
            } else if let Some(command) = mark.strip_prefix("before: ") {
                let out = shell.bash(command);
                assert!(out.status.success(), "{at}: `{command}`:\n{}", shown(&out));
            } else {
                panic!("{at}: unknown readme-test mark '{mark}'");
            }
        }
        if skip {
            continue;
        }
        let lines: Vec<String> = block
            .lines
            .iter()
            .map(|l| {
                let mut l = l
                    .replace("http://127.0.0.1:7878", &endpoint)
                    .replace("/tmp/", &tmp_prefix);
                for (text, value) in &placeholders {
                    l = l.replace(text, value);
                }
                l
            })
            .collect();
        let transcript = lines.iter().any(|l| l.starts_with("$ "));
        match block.lang.as_str() {
            "python" => {
                let imports = lines
                    .iter()
                    .find(|l| !l.trim().is_empty() && !l.starts_with('#'))
                    .is_some_and(|l| l.starts_with("import ") || l.starts_with("from "));
                let mut source = String::new();
                if !imports {
                    source.push_str("import os\nimport lh\nimport pyarrow.compute as pc\n\n");
                }
                source.push_str(&lines.join("\n"));
                let out = shell
                    .command(&python)
                    .args(["-c", &source])
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{at}: the Python failed:\n{source}\n{}",
                    shown(&out)
                );
                ran += 1;
            }
            "sh" | "indent" | "-" | "text" if transcript => {
                let mut k = 0;
                while k < lines.len() {
                    let Some(command) = lines[k].strip_prefix("$ ") else {
                        k += 1;
                        continue;
                    };
                    let end = (k + 1..lines.len())
                        .find(|&j| lines[j].starts_with("$ "))
                        .unwrap_or(lines.len());
                    let expected = significant(&lines[k + 1..end]);
                    let out = shell.bash(&format!("{command} 2>&1"));
                    let printed: Vec<String> = String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .map(str::to_string)
                        .collect();
                    assert!(
                        out.status.success(),
                        "{at}: `{command}` failed:\n{}",
                        shown(&out)
                    );
                    let actual = significant(&printed);
                    // Every transcript is compared before the test fails on one.
                    if !lines_match(&expected, &actual) {
                        mismatches.push(format!(
                            "{at}: `{command}` printed what the README does not show.\nREADME:\n{}\nprinted:\n{}",
                            expected.join("\n"),
                            actual.join("\n")
                        ));
                    }
                    ran += 1;
                    k = end;
                }
            }
            "sh" | "indent" | "-" => {
                let mut script = Vec::new();
                let mut server_line = false;
                for l in &lines {
                    // `lh server` (and its continuation lines) is the test's server.
                    let starts = l.trim_start().starts_with("lh server");
                    if starts || server_line {
                        server_line = l.trim_end().ends_with('\\');
                        continue;
                    }
                    script.push(l.clone());
                }
                let script = script.join("\n");
                if script.lines().all(|l| {
                    let t = l.trim();
                    t.is_empty() || t.starts_with('#')
                }) {
                    continue;
                }
                let out = shell.bash(&script);
                assert!(
                    out.status.success(),
                    "{at}: the block failed:\n{script}\n{}",
                    shown(&out)
                );
                ran += 1;
            }
            other => panic!(
                "{at}: a {other} block must be marked (not run, an excerpt, the demo's output)"
            ),
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n\n"));
    assert!(ran >= 20, "only {ran} blocks and commands ran");
    // What Start here ends with holds: the jaffle shop's customers on main.
    let rows = server
        .lh()
        .rows("select count(*) AS n from analytics.customers", "main");
    assert_eq!(rows[0]["n"], 100, "{rows:?}");
}

#[test]
fn transcripts_match_up_to_ids_and_elisions() {
    let e = |s: &[&str]| significant(&s.iter().map(|l| l.to_string()).collect::<Vec<_>>());
    let readme = e(&[
        "first bad commit: f1a080d247e02fe1132af975d42550104b006147f4c5f369621f18c6783b912b",
        "Date:    2026-12-02T12:09:35Z",
        "...",
        "done",
    ]);
    let printed = e(&[
        "first bad commit: 0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a",
        "Date: 2026-12-07T01:02:03Z",
        "a",
        "b",
        "done",
    ]);
    assert!(lines_match(&readme, &printed));
    assert!(!lines_match(&readme, &printed[..3]));
    // Words of hex letters and short numbers stay as they are.
    assert_eq!(normalize("added  7  gus  70.0"), "added 7 gus 70.0");
    assert!(!lines_match(&e(&["added 7"]), &e(&["added 8"])));
    assert!(line_matches(
        "Run: ... (node mart.orders)",
        "Run: x y (node mart.orders)"
    ));
}
