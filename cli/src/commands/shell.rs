//! The interactive SQL shell: `lh shell`, and `lh query` with no SQL on a terminal.
//!
//! Line editing and history (kept in `~/.lh/history` across sessions) come from
//! rustyline; a statement may span lines and runs when it ends with `;` (outside quotes
//! and comments, `statements.rs`). Tab completes SQL keywords, the tables of the current
//! ref and the columns of the tables the statement names (asked of the server once per
//! ref and table). Dot commands change the session: `.ref`, `.tables`, `.schema`,
//! `.timer`, `.output`, `.maxrows`. A result taller or wider than the terminal goes
//! through a pager (`LH_PAGER`, else `PAGER`, else `less -SRFX`; an empty value turns
//! paging off). Ctrl-C while a request runs drops it (a query's connection closing
//! interrupts the query on the server); at the prompt it clears the line; it never
//! ends the shell, Ctrl-D does. A line starting with a space stays out of the history.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::FutureExt;

use lh_api::QueryRequest;
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};

use crate::args::OutputFormat;
use crate::client::Client;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::settings::Settings;
use crate::statements;

/// What a session starts with (the flags of `lh shell` and `lh query`).
#[derive(Debug, Clone)]
pub struct Options {
    pub reference: Option<String>,
    pub max_rows: Option<u64>,
    pub timeout_secs: Option<u64>,
}

/// Runs the shell until Ctrl-D or `.quit`.
pub async fn run(client: &Client, settings: &Settings, options: Options) -> CliResult<()> {
    let handle = tokio::runtime::Handle::current();
    let reference = client
        .resolve_ref(settings.reference(&options.reference))
        .await?;
    // The editor blocks on the terminal; the requests it makes run on this runtime.
    tokio::task::block_in_place(|| {
        Shell::new(client, handle, reference, settings.output, options)?.run()
    })
}

struct Shell<'a> {
    client: &'a Client,
    handle: tokio::runtime::Handle,
    /// SIGINT, taken over for the session (so Ctrl-C never ends it).
    sigint: tokio::signal::unix::Signal,
    editor: Editor<Names<'a>, FileHistory>,
    history: Option<std::path::PathBuf>,
    format: OutputFormat,
    timer: bool,
    max_rows: Option<u64>,
    timeout_secs: Option<u64>,
}

impl<'a> Shell<'a> {
    fn new(
        client: &'a Client,
        handle: tokio::runtime::Handle,
        reference: String,
        format: OutputFormat,
        options: Options,
    ) -> CliResult<Shell<'a>> {
        let config = rustyline::Config::builder()
            .auto_add_history(false)
            // The prompt and the line go to the terminal, results to stdout.
            .behavior(rustyline::Behavior::PreferTerm)
            .completion_type(rustyline::CompletionType::List)
            .max_history_size(10_000)
            .map_err(|e| CliError::Other(e.into()))?
            .build();
        let mut editor: Editor<Names<'a>, FileHistory> =
            Editor::with_config(config).map_err(|e| CliError::Other(e.into()))?;
        let names = Names {
            client,
            handle: handle.clone(),
            reference: Mutex::new(reference),
            tables: Mutex::new(Cached::Missing),
            columns: Mutex::new(BTreeMap::new()),
        };
        editor.set_helper(Some(names));
        // After the editor, which sets its own SIGINT handler for its lifetime: this one
        // (signal-hook's, under tokio) runs first and calls the editor's after it.
        let sigint = {
            let _in = handle.enter();
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?
        };
        let history = history_file();
        if let Some(h) = &history
            && h.exists()
            && let Err(e) = editor.load_history(h)
        {
            eprintln!("warning: cannot read the history in {}: {e}", h.display());
        }
        Ok(Shell {
            client,
            handle,
            sigint,
            editor,
            history,
            format,
            timer: false,
            max_rows: options.max_rows,
            timeout_secs: options.timeout_secs,
        })
    }

    fn names(&self) -> &Names<'a> {
        self.editor.helper().expect("the shell's helper")
    }

    fn reference(&self) -> String {
        self.names().reference.lock().expect("ref").clone()
    }

    fn run(&mut self) -> CliResult<()> {
        eprintln!(
            "lh {} on {}, ref {}. Statements end with ';'; .help lists the dot commands; Ctrl-D leaves.",
            env!("CARGO_PKG_VERSION"),
            self.client.endpoint(),
            self.reference()
        );
        loop {
            let prompt = format!("{}> ", self.reference());
            let line = match self.editor.readline(&prompt) {
                Ok(line) => line,
                Err(ReadlineError::Interrupted) => continue,
                Err(ReadlineError::Eof) => return Ok(()),
                Err(e) => return Err(CliError::Other(e.into())),
            };
            let entry = line.trim();
            if entry.is_empty() {
                continue;
            }
            if !line.starts_with(' ') {
                self.remember(entry);
            }
            if let Some(command) = entry.strip_prefix('.') {
                match self.dot(command) {
                    Ok(true) => {}
                    Ok(false) => return Ok(()),
                    Err(e) => e.report(),
                }
                continue;
            }
            for sql in statements::all(entry) {
                match self.query(&sql) {
                    Ok(true) => {}
                    // Cancelled: the statements after it do not run.
                    Ok(false) => break,
                    Err(e) => {
                        e.report();
                        break;
                    }
                }
            }
        }
    }

    /// Adds `entry` to the history, and to the history file at once (a killed shell
    /// keeps what it ran).
    fn remember(&mut self, entry: &str) {
        if self.editor.add_history_entry(entry).unwrap_or(false)
            && let Some(h) = &self.history
        {
            if let Some(dir) = h.parent() {
                let _ = lh_api::config_file::create_private_dir(dir);
            }
            if let Err(e) = self.editor.append_history(h) {
                eprintln!("warning: cannot write the history to {}: {e}", h.display());
            }
        }
    }

    /// Awaits `request`, unless Ctrl-C comes first: then it is dropped (its connection
    /// closes; for a query, the server interrupts it) and the answer is `None`.
    fn wait<T>(
        &mut self,
        request: impl std::future::Future<Output = CliResult<T>>,
    ) -> CliResult<Option<T>> {
        let sigint = &mut self.sigint;
        self.handle.block_on(async {
            // A Ctrl-C from before (pressed while results printed) cancels nothing.
            while sigint.recv().now_or_never().is_some() {}
            tokio::select! {
                r = request => r.map(Some),
                _ = sigint.recv() => {
                    eprintln!("cancelled");
                    Ok(None)
                }
            }
        })
    }

    /// Runs one statement and prints its result; `false` when Ctrl-C cancelled it.
    fn query(&mut self, sql: &str) -> CliResult<bool> {
        let req = QueryRequest {
            sql: sql.to_string(),
            reference: Some(self.reference()),
            timeout_ms: self.timeout_secs.map(|s| s.saturating_mul(1000)),
            max_rows: self.max_rows,
            progress_id: None,
        };
        let started = Instant::now();
        let client = self.client;
        let Some(result) = self.wait(client.query(&req))? else {
            return Ok(false);
        };
        let elapsed = started.elapsed();
        let mut text = Vec::new();
        output::write_batches(&mut text, self.format, &result.schema, &result.batches)?;
        let rows: usize = result.batches.iter().map(|b| b.num_rows()).sum();
        page(&text)?;
        if result.truncated {
            eprintln!(
                "note: the result was cut to {rows} rows (.maxrows {})",
                self.max_rows.unwrap_or(0)
            );
        }
        if self.timer {
            println!(
                "Run Time: {:.3} s, {}",
                elapsed.as_secs_f64(),
                output::count(rows, "row")
            );
        }
        Ok(true)
    }

    /// A dot command; `false` to leave the shell.
    fn dot(&mut self, command: &str) -> CliResult<bool> {
        let mut words = command.split_whitespace();
        let name = words.next().unwrap_or_default();
        let args: Vec<&str> = words.collect();
        let one = |what: &str| -> CliResult<&str> {
            match args.as_slice() {
                [a] => Ok(a),
                _ => Err(CliError::invalid(
                    format!(".{name} takes {what}"),
                    Some(".help lists the dot commands"),
                )),
            }
        };
        match name {
            "quit" | "exit" | "q" => return Ok(false),
            "help" => print!("{HELP}"),
            "ref" => {
                if args.is_empty() {
                    println!("{}", self.reference());
                } else {
                    let wanted = one("one ref: a branch, tag or commit")?.to_string();
                    let client = self.client;
                    if let Some(list) = self.wait(client.tables(&wanted, None))? {
                        self.names().switch(wanted, list);
                    }
                }
            }
            "tables" => {
                // Asked again: the ref's head may have moved since.
                let (client, at) = (self.client, self.reference());
                if let Some(list) = self.wait(client.tables(&at, None))? {
                    self.names().switch(at, list.clone());
                    for t in list.tables {
                        println!("{}", t.name);
                    }
                }
            }
            "schema" => {
                let table = one("one table name")?.to_string();
                let (client, at) = (self.client, self.reference());
                let Some(detail) = self.wait(client.table(&table, &at))? else {
                    return Ok(true);
                };
                let rows: Vec<Vec<String>> = detail
                    .columns
                    .iter()
                    .map(|c| {
                        vec![
                            c.name.clone(),
                            c.data_type.clone(),
                            if c.required { "not null" } else { "" }.to_string(),
                        ]
                    })
                    .collect();
                let mut out = std::io::stdout().lock();
                output::aligned(&mut out, &["column", "type", ""], &rows)?;
            }
            "timer" => {
                self.timer = match one("on or off")? {
                    "on" => true,
                    "off" => false,
                    other => {
                        return Err(CliError::invalid(
                            format!(".timer takes on or off, not '{other}'"),
                            None,
                        ));
                    }
                }
            }
            "output" | "mode" => {
                if args.is_empty() {
                    println!("{}", format_name(self.format));
                } else {
                    self.format = match one("table, json or csv")? {
                        "table" => OutputFormat::Table,
                        "json" => OutputFormat::Json,
                        "csv" => OutputFormat::Csv,
                        other => {
                            return Err(CliError::invalid(
                                format!(".{name} takes table, json or csv, not '{other}'"),
                                None,
                            ));
                        }
                    }
                }
            }
            "maxrows" => {
                let n = one("a number of rows, or off")?;
                self.max_rows = match n {
                    "off" | "0" => None,
                    n => Some(n.parse().map_err(|_| {
                        CliError::invalid(format!(".maxrows takes a number, not '{n}'"), None)
                    })?),
                };
            }
            other => {
                return Err(CliError::invalid(
                    format!("no dot command '.{other}'"),
                    Some(".help lists the dot commands"),
                ));
            }
        }
        Ok(true)
    }
}

const HELP: &str = "\
.ref [NAME]            show the ref queried, or switch to a branch, tag or commit
.tables                list the tables at the ref
.schema TABLE          show a table's columns
.timer on|off          print each statement's time
.output table|json|csv how results print (also .mode)
.maxrows N|off         cut results to N rows
.help                  this list
.quit                  leave (also .exit, Ctrl-D)
Statements end with ';' and may span lines. Tab completes keywords, tables and columns.
Ctrl-C cancels a running query (on the server too) or clears the line.
";

fn format_name(f: OutputFormat) -> &'static str {
    match f {
        OutputFormat::Table => "table",
        OutputFormat::Json => "json",
        OutputFormat::Csv => "csv",
    }
}

/// Where the shell keeps its history.
fn history_file() -> Option<std::path::PathBuf> {
    Some(lh_api::env_vars::lh_home().join("history"))
}

/// Prints `text`, through the pager when stdout is a terminal the text does not fit.
fn page(text: &[u8]) -> CliResult<()> {
    let stdout = std::io::stdout();
    let fits = || {
        let Some((terminal_size::Width(w), terminal_size::Height(h))) =
            terminal_size::terminal_size()
        else {
            return true;
        };
        let s = String::from_utf8_lossy(text);
        let lines = s.lines().count();
        let widest = s.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        lines < h as usize && widest <= w as usize
    };
    let pager = std::env::var("LH_PAGER")
        .or_else(|_| std::env::var("PAGER"))
        .unwrap_or_else(|_| "less -SRFX".to_string());
    if !stdout.is_terminal() || pager.trim().is_empty() || fits() {
        let mut out = stdout.lock();
        out.write_all(text)?;
        out.flush()?;
        return Ok(());
    }
    let child = std::process::Command::new("sh")
        .args(["-c", &pager])
        .stdin(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("warning: cannot start the pager '{pager}': {e}");
            std::io::stdout().write_all(text)?;
            return Ok(());
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A pager quit early closes its input: not an error.
        let _ = stdin.write_all(text);
    }
    let _ = child.wait();
    Ok(())
}

/// What completion knows: the ref queried, its tables, and the columns of the tables
/// a statement named (each asked of the server once per ref).
struct Names<'a> {
    client: &'a Client,
    handle: tokio::runtime::Handle,
    reference: Mutex<String>,
    tables: Mutex<Cached>,
    columns: Mutex<BTreeMap<String, Vec<String>>>,
}

/// The tables completion knows, or when asking for them last failed.
enum Cached {
    Missing,
    Known(Vec<String>),
    Failed(Instant),
}

/// How long completion waits for the server (the terminal is in raw mode meanwhile, so
/// Ctrl-C cannot stop it), and how long after a failure it asks again.
const NAMES_TIMEOUT: Duration = Duration::from_secs(3);
const NAMES_RETRY: Duration = Duration::from_secs(10);

impl Names<'_> {
    fn switch(&self, reference: String, list: lh_api::TableList) {
        *self.reference.lock().expect("ref") = reference;
        *self.tables.lock().expect("tables") =
            Cached::Known(list.tables.into_iter().map(|t| t.name).collect());
        self.columns.lock().expect("columns").clear();
    }

    /// The tables at the ref (asked once; none while the server does not answer).
    fn tables(&self) -> Vec<String> {
        match &*self.tables.lock().expect("tables") {
            Cached::Known(t) => return t.clone(),
            Cached::Failed(at) if at.elapsed() < NAMES_RETRY => return Vec::new(),
            _ => {}
        }
        let at = self.reference.lock().expect("ref").clone();
        let asked = self.handle.block_on(tokio::time::timeout(
            NAMES_TIMEOUT,
            self.client.tables(&at, None),
        ));
        match asked {
            Ok(Ok(list)) => {
                let names: Vec<String> = list.tables.into_iter().map(|t| t.name).collect();
                *self.tables.lock().expect("tables") = Cached::Known(names.clone());
                names
            }
            _ => {
                *self.tables.lock().expect("tables") = Cached::Failed(Instant::now());
                Vec::new()
            }
        }
    }

    /// The columns of `table` at the ref (asked once; none when it cannot be read).
    fn columns(&self, table: &str) -> Vec<String> {
        if let Some(c) = self.columns.lock().expect("columns").get(table) {
            return c.clone();
        }
        let at = self.reference.lock().expect("ref").clone();
        let asked = self.handle.block_on(tokio::time::timeout(
            NAMES_TIMEOUT,
            self.client.table(table, &at),
        ));
        match asked {
            Ok(Ok(d)) => {
                let cols: Vec<String> = d.columns.into_iter().map(|c| c.name).collect();
                self.columns
                    .lock()
                    .expect("columns")
                    .insert(table.to_string(), cols.clone());
                cols
            }
            // Not kept: the next Tab asks again.
            _ => Vec::new(),
        }
    }

    /// The candidates for `word`: keywords, tables, and the columns of the tables
    /// `text` names.
    fn candidates(&self, text: &str, word: &str) -> Vec<String> {
        let tables = self.tables();
        let lower = text.to_lowercase();
        let mut named: BTreeSet<String> = BTreeSet::new();
        for t in &tables {
            if contains_word(&lower, &t.to_lowercase()) {
                named.insert(t.clone());
            }
        }
        let mut out: BTreeSet<String> = BTreeSet::new();
        let w = word.to_lowercase();
        // `orders.am` completes the columns of a table named by its last part (the
        // word is split as typed: lowercasing may change its length).
        if let Some((prefix, col)) = word.rsplit_once('.') {
            let (p, col) = (prefix.to_lowercase(), col.to_lowercase());
            for t in &named {
                let short = t.rsplit('.').next().unwrap_or(t).to_lowercase();
                if short == p || t.to_lowercase() == p {
                    for c in self.columns(t) {
                        if c.to_lowercase().starts_with(&col) {
                            out.insert(format!("{prefix}.{c}"));
                        }
                    }
                }
            }
        }
        for t in &tables {
            if t.to_lowercase().starts_with(&w) {
                out.insert(t.clone());
            }
        }
        for t in &named {
            for c in self.columns(t) {
                if c.to_lowercase().starts_with(&w) {
                    out.insert(c);
                }
            }
        }
        let upper = word.chars().next().is_none_or(|c| c.is_uppercase());
        for k in KEYWORDS {
            if k.to_lowercase().starts_with(&w) {
                out.insert(if upper {
                    k.to_string()
                } else {
                    k.to_lowercase()
                });
            }
        }
        out.into_iter().collect()
    }
}

/// Whether `name` appears in `text` as a whole word (names may hold dots).
fn contains_word(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '.';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

impl Completer for Names<'_> {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let start = before
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '.'))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let word = &before[start..];
        if word.is_empty() {
            return Ok((pos, Vec::new()));
        }
        // Dot commands at the start of a line.
        if before.trim_start().starts_with('.') && !before.trim_start().contains(' ') {
            return Ok((start, Vec::new()));
        }
        let pairs = self
            .candidates(line, word)
            .into_iter()
            .map(|c| Pair {
                display: c.clone(),
                replacement: c,
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for Names<'_> {
    type Hint = String;
}

impl Highlighter for Names<'_> {}

impl Validator for Names<'_> {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let input = ctx.input();
        if input.trim().is_empty() || input.trim_start().starts_with('.') {
            return Ok(ValidationResult::Valid(None));
        }
        let split = statements::split(input);
        // Complete when it ends with a `;` (or holds only comments, which run nothing).
        let done = (statements::is_blank(&split.rest) && !split.statements.is_empty())
            || statements::is_blank(input);
        Ok(if done {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

impl Helper for Names<'_> {}

/// The SQL keywords (and common functions) completion offers.
const KEYWORDS: &[&str] = &[
    "ALL",
    "AND",
    "ANTI",
    "ANY",
    "AS",
    "ASC",
    "ASOF",
    "AVG",
    "BETWEEN",
    "BIGINT",
    "BOOLEAN",
    "BY",
    "CASE",
    "CAST",
    "COALESCE",
    "COUNT",
    "CROSS",
    "CUBE",
    "CURRENT_DATE",
    "CURRENT_TIMESTAMP",
    "DATE",
    "DATE_TRUNC",
    "DECIMAL",
    "DESC",
    "DESCRIBE",
    "DISTINCT",
    "DOUBLE",
    "ELSE",
    "END",
    "EXCEPT",
    "EXCLUDE",
    "EXISTS",
    "EXPLAIN",
    "EXTRACT",
    "FALSE",
    "FILTER",
    "FIRST",
    "FROM",
    "FULL",
    "GROUP",
    "GROUPING",
    "HAVING",
    "ILIKE",
    "IN",
    "INNER",
    "INTEGER",
    "INTERSECT",
    "INTERVAL",
    "IS",
    "JOIN",
    "LAST",
    "LATERAL",
    "LEFT",
    "LIKE",
    "LIMIT",
    "MAX",
    "MIN",
    "NATURAL",
    "NOT",
    "NULL",
    "NULLS",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "OVER",
    "PARTITION",
    "PIVOT",
    "QUALIFY",
    "RANGE",
    "RECURSIVE",
    "REPLACE",
    "RIGHT",
    "ROLLUP",
    "ROWS",
    "SELECT",
    "SEMI",
    "SUM",
    "SUMMARIZE",
    "TABLE",
    "THEN",
    "TIMESTAMP",
    "TRUE",
    "UNION",
    "UNNEST",
    "UNPIVOT",
    "USING",
    "VALUES",
    "VARCHAR",
    "WHEN",
    "WHERE",
    "WINDOW",
    "WITH",
];

#[cfg(test)]
mod tests {
    use super::contains_word;

    #[test]
    fn table_names_match_whole_words() {
        assert!(contains_word(
            "select * from raw.orders where",
            "raw.orders"
        ));
        assert!(!contains_word("select * from raw.orders_v2", "raw.orders"));
        assert!(!contains_word("select * from xraw.orders", "raw.orders"));
        assert!(contains_word("from raw.orders;", "raw.orders"));
    }
}
