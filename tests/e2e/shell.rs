//! The SQL shell, typed at through a pseudo-terminal (`lh shell`, and `lh query` with
//! no SQL on a terminal), and SQL on standard input when it is not one.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lh_e2e::{Lh, Server, lh_bin};

use crate::query::orders;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};

/// `lh ARGS` on a pseudo-terminal of 40 rows and 160 columns, with what it printed.
struct Term {
    writer: Box<dyn Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    raw: Arc<Mutex<Vec<u8>>>,
    /// How far in the cleaned output `expect` has read.
    cursor: usize,
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl Term {
    fn start(lh: &Lh, args: &[&str], envs: &[(&str, &str)]) -> Term {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 40,
                cols: 160,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pseudo-terminal");
        let mut cmd = CommandBuilder::new(lh_bin());
        cmd.args(args);
        cmd.cwd(&lh.cwd);
        // The environment `Lh::command` gives a CLI.
        let std = lh.command(&[]);
        for (k, v) in std.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            }
        }
        cmd.env("TERM", "xterm");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = pair
            .slave
            .spawn_command(cmd)
            .expect("spawn lh on the terminal");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("reader");
        let writer = pair.master.take_writer().expect("writer");
        let raw = Arc::new(Mutex::new(Vec::new()));
        let sink = raw.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Term {
            writer,
            child,
            raw,
            cursor: 0,
            _master: pair.master,
        }
    }

    /// Types `keys` (`\r` is Enter, `\t` Tab, `\x03` Ctrl-C, `\x04` Ctrl-D).
    fn send(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Types `keys` one at a time, as a person would (completion sees each).
    fn type_slowly(&mut self, keys: &str) {
        for c in keys.chars() {
            self.send(&c.to_string());
            std::thread::sleep(Duration::from_millis(15));
        }
    }

    /// The terminal's output so far, without escape sequences and carriage returns.
    fn text(&self) -> String {
        let raw = self.raw.lock().unwrap().clone();
        clean(&String::from_utf8_lossy(&raw))
    }

    /// Waits (at most 60 s) for `needle` after what was read, and returns the output
    /// from there to the end of the match.
    #[track_caller]
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.text();
            if let Some(i) = text[self.cursor.min(text.len())..].find(needle) {
                let start = self.cursor;
                self.cursor += i + needle.len();
                return text[start..self.cursor].to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} on the terminal; after the last match it shows:\n{}",
                &text[self.cursor.min(text.len())..]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `keys`, then waits (at most 60 s) until the terminal is quiet with
    /// `prompt` last (the shell redraws its prompt as keys are typed, so the prompt
    /// alone says nothing), and returns what it printed since the last answer.
    #[track_caller]
    fn answer(&mut self, keys: &str, prompt: &str) -> String {
        self.send(keys);
        self.settle(prompt)
    }

    /// See [`Term::answer`].
    #[track_caller]
    fn settle(&mut self, prompt: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = (0, Instant::now());
        loop {
            let len = self.raw.lock().unwrap().len();
            if len != last.0 {
                last = (len, Instant::now());
            }
            let text = self.text();
            // Something new (at least the echo of the keys), then quiet, prompt last.
            if text.len() > self.cursor
                && last.1.elapsed() > Duration::from_millis(300)
                && text.ends_with(prompt)
            {
                let out = text[self.cursor.min(text.len())..].to_string();
                self.cursor = text.len();
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "the terminal did not come back to {prompt:?}; after the last answer it shows:\n{}",
                &text[self.cursor.min(text.len())..]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the shell to leave, and its exit code.
    fn wait(&mut self) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.exit_code();
            }
            assert!(Instant::now() < deadline, "the shell did not leave");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// Terminal output as text: CSI and OSC sequences, other escapes and `\r` removed.
fn clean(s: &str) -> String {
    let re = regex::Regex::new(
        r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>()][0-9A-Za-z]?|\r",
    )
    .unwrap();
    re.replace_all(s, "").into_owned()
}

#[test]
fn the_shell_runs_statements_over_lines_and_switches_refs() {
    let server = Server::start();
    let lh = orders(&server);
    lh.run(&["branch", "create", "feature"]).ok();
    let more = lh.file("more.csv", "id,customer,amount\n4,dave,7\n");
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        more.to_str().unwrap(),
        "--mode",
        "append",
        "--ref",
        "feature",
    ])
    .ok();
    // `lh query` with no SQL on a terminal is the shell too.
    let mut t = Term::start(&lh, &["query"], &[]);
    t.settle("main> ");
    t.send("SELECT 41 + 1 AS answer;\r");
    let out = t.settle("main> ");
    assert!(out.contains("answer") && out.contains("42"), "{out}");

    // A statement over three lines runs when its `;` comes; quotes hide a `;`.
    t.send("SELECT count(*) AS n,\r");
    t.send("  'a;b' AS s\r");
    t.send("FROM raw.orders;\r");
    let out = t.settle("main> ");
    assert!(out.contains("| 3 ") && out.contains("a;b"), "{out}");

    // Two statements on one line: two results.
    t.send("SELECT 1 AS first; SELECT 2 AS second;\r");
    let out = t.settle("main> ");
    assert!(out.contains("first") && out.contains("second"), "{out}");

    // .ref switches; the prompt says where.
    t.answer(".ref feature\r", "feature> ");
    t.send("SELECT count(*) AS n FROM raw.orders;\r");
    let out = t.settle("feature> ");
    assert!(out.contains("| 4 "), "{out}");
    let out = t.answer(".ref no-such-branch\r", "feature> ");
    assert!(out.contains("error:"), "{out}");

    // Dot commands: tables, schema, timer, output.
    let out = t.answer(".tables\r", "feature> ");
    assert!(
        out.contains("raw.orders") && !out.contains("raw.late"),
        "{out}"
    );
    // A table made meanwhile shows at once.
    let late = lh.file("late.csv", "x\n1\n");
    lh.run(&[
        "table",
        "import",
        "raw.late",
        late.to_str().unwrap(),
        "--ref",
        "feature",
    ])
    .ok();
    let out = t.answer(".tables\r", "feature> ");
    assert!(out.contains("raw.late"), "{out}");
    let out = t.answer(".schema raw.orders\r", "feature> ");
    assert!(out.contains("customer") && out.contains("string"), "{out}");
    t.answer(".timer on\r", "feature> ");
    t.answer(".output csv\r", "feature> ");
    t.send("SELECT id, customer FROM raw.orders ORDER BY id;\r");
    let out = t.settle("feature> ");
    assert!(out.contains("id,customer\n1,alice\n"), "{out}");
    assert!(out.contains("Run Time: "), "{out}");
    t.answer(".output json\r", "feature> ");
    t.send("SELECT 'x' AS k;\r");
    let out = t.settle("feature> ");
    assert!(out.contains(r#"[{"k":"x"}]"#), "{out}");

    // Bad SQL and bad dot commands are errors; the shell goes on.
    t.send("SELEKT 1;\r");
    let out = t.settle("feature> ");
    assert!(out.contains("error:"), "{out}");
    let out = t.answer(".frobnicate\r", "feature> ");
    assert!(out.contains("no dot command '.frobnicate'"), "{out}");
    t.send("DELETE FROM raw.orders;\r");
    let out = t.settle("feature> ");
    assert!(out.contains("error:"), "{out}");
    assert_eq!(
        lh.rows("SELECT count(*) AS n FROM raw.orders", "feature")[0]["n"],
        4
    );

    // Ctrl-C at the prompt clears the line; Ctrl-D leaves with success.
    // (Keys typed before the new prompt may be dropped, as a terminal does.)
    t.send("SELECT 'half a line");
    t.answer("\x03", "feature> ");
    t.send("SELECT 'whole' AS w;\r");
    let out = t.settle("feature> ");
    assert!(out.contains("\"w\":\"whole\""), "{out}");
    t.send("\x04");
    assert_eq!(t.wait(), 0);
}

#[test]
fn the_shell_completes_names_and_keeps_its_history() {
    let server = Server::start();
    let lh = orders(&server);
    let mut t = Term::start(&lh, &["shell"], &[]);
    t.settle("main> ");
    // A keyword, a table and a column of the table the statement names, by Tab.
    t.type_slowly("SEL\t");
    t.type_slowly(" count(*) AS n FROM raw.ord\t");
    t.type_slowly(" WHERE amou\t > 15;\r");
    let out = t.settle("main> ");
    assert!(
        out.contains("SELECT count(*) AS n FROM raw.orders WHERE amount > 15;"),
        "{out}"
    );
    assert!(out.contains("| 1 "), "{out}");
    // A column by its table's name.
    t.type_slowly("SELECT customer FROM raw.orders WHERE orders.i\t = 2;\r");
    let out = t.settle("main> ");
    assert!(out.contains("WHERE orders.id = 2;"), "{out}");
    assert!(out.contains("bob"), "{out}");
    // A line starting with a space stays out of the history.
    t.answer(" SELECT 'secret' AS s;\r", "main> ");
    t.send(".quit\r");
    assert_eq!(t.wait(), 0);

    // The history survives the session: Up twice brings back the last statement
    // kept (before `.quit`).
    let history = std::fs::read_to_string(lh.home.join("history")).expect("history file");
    assert!(
        history.contains("raw.orders WHERE orders.id = 2;"),
        "{history}"
    );
    assert!(!history.contains("secret"), "{history}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(lh.home.join("history"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the history is the user's alone: {mode:o}");
    let mut t = Term::start(&lh, &["shell"], &[]);
    t.settle("main> ");
    t.send("\x1b[A");
    t.send("\x1b[A");
    let out = t.answer("\r", "main> ");
    assert!(out.contains("bob"), "{out}");
    t.send("\x04");
    assert_eq!(t.wait(), 0);
}

#[test]
fn ctrl_c_cancels_the_query_on_the_server() {
    // One query at a time, and a server timeout (10 minutes) past `settle`'s wait
    // (60 s): a query left running on the server would hold the one slot, and the next
    // would not answer.
    let server = Server::start_with(&["--max-concurrent-queries", "1", "--query-timeout", "600"]);
    let lh = orders(&server);
    let mut t = Term::start(&lh, &["shell"], &[]);
    t.settle("main> ");
    t.send("SELECT count(*) FROM range(1000000000) a, range(100000) b;\r");
    std::thread::sleep(Duration::from_millis(1500));
    t.send("\x03");
    t.expect("cancelled");
    // One prompt after it: the line editor does not see the Ctrl-C again.
    let out = t.settle("main> ");
    assert_eq!(out.matches("main> ").count(), 1, "{out:?}");
    t.send("SELECT count(*) AS n FROM raw.orders;\r");
    let out = t.settle("main> ");
    assert!(out.contains("| 3 "), "{out}");
    // Ctrl-C with nothing running does not end the shell.
    t.answer("\x03", "main> ");
    let out = t.answer("SELECT 5 AS five;\r", "main> ");
    assert!(out.contains("| 5 "), "{out}");
    t.send("\x04");
    assert_eq!(t.wait(), 0);
}

#[test]
fn long_and_wide_results_go_through_the_pager() {
    let server = Server::start();
    let lh = orders(&server);
    // The pager marks each line, so its work shows on the terminal.
    let mut t = Term::start(&lh, &["shell"], &[("LH_PAGER", "sed -e s/^/PAGED:/")]);
    t.settle("main> ");
    t.send("SELECT range AS i FROM range(100);\r");
    let out = t.settle("main> ");
    assert!(out.contains("PAGED:| 99 "), "{out}");
    t.send("SELECT repeat('w', 300) AS wide;\r");
    let out = t.settle("main> ");
    assert!(out.contains("PAGED:"), "{out}");
    // What fits the terminal is printed as is.
    t.send("SELECT 7 AS small;\r");
    let out = t.settle("main> ");
    assert!(out.contains("| 7 ") && !out.contains("PAGED:"), "{out}");
    t.send("\x04");
    assert_eq!(t.wait(), 0);
}

#[test]
fn sql_on_standard_input_gives_one_result_per_statement() {
    let server = Server::start();
    let lh = orders(&server);
    let script = "-- a script\nSELECT count(*) AS n FROM raw.orders;\n\
                  SELECT 'x;y' AS s; /* done */\nSELECT 3 AS last";
    let out = lh.run_with_input(&["query", "-o", "csv"], script);
    assert_eq!(out.ok(), "n\n3\ns\nx;y\nlast\n3\n");

    // The first failing statement stops the rest, and is named.
    let out = lh.run_with_input(
        &["query", "-o", "csv"],
        "SELECT 1 AS a; SELEKT 2; SELECT 3 AS c;",
    );
    let err = out.fails(5);
    assert!(err.contains("statement 2 of 3"), "{err}");
    assert_eq!(out.stdout, "a\n1\n");

    // Nothing, or only comments: a clear error.
    let out = lh.run_with_input(&["query"], "  -- nothing\n");
    assert!(out.fails(5).contains("no SQL"), "{}", out.stderr);
    // --out takes one statement.
    let out = lh.run_with_input(&["query", "--out", "x.parquet"], "SELECT 1; SELECT 2;");
    assert!(
        out.fails(5).contains("--out writes one result"),
        "{}",
        out.stderr
    );
}

/// Found trying lh as a new user would: `lh secret set NAME` on a terminal waited with no
/// prompt and showed the secret as it was typed. It asks, and shows nothing of it.
#[test]
fn a_secret_typed_on_a_terminal_is_asked_for_and_not_shown() {
    let server = Server::start();
    let lh = server.lh();
    let value = "sk_typed_0123456789";
    let mut term = Term::start(&lh, &["secret", "set", "TYPED"], &[]);
    term.expect("value of secret 'TYPED' (not shown; Enter to end): ");
    term.type_slowly(value);
    term.send("\r");
    term.expect("secret 'TYPED' set (version 1)");
    assert_eq!(term.wait(), 0);
    assert!(!term.text().contains(value), "{}", term.text());
    let listed = lh.run(&["secret", "ls"]);
    assert!(listed.ok().contains("TYPED"), "{}", listed.both());
}

/// Found trying lh as a new user would: Ctrl-C during `lh run` left without a word while
/// the run went on and published to main (dbt cancels). Ctrl-C cancels the attached run,
/// saying so and what is kept, and nothing is published; a second Ctrl-C leaves at once
/// (exit 130).
#[test]
fn ctrl_c_cancels_an_attached_run_and_publishes_nothing() {
    let server = crate::runs::server("process");
    let lh = server.lh();
    crate::runs::orders(&lh);
    let slow = "import time\nimport lh\n\n@lh.model()\ndef slow(o=lh.Model(\"raw.orders\", columns=[\"id\"])):\n    time.sleep(120)\n    return o\n";
    let dir = crate::runs::project(
        &lh,
        "slow",
        &[("lh_project.yml", crate::runs::PROJECT), ("m.py", slow)],
    );
    let before = lh.head("main");
    for presses in [1, 2] {
        let mut term = Term::start(&lh, &["run", dir.to_str().unwrap(), "--no-cache"], &[]);
        term.expect("running");
        term.send("\x03");
        term.expect("cancelling run");
        if presses == 2 {
            term.send("\x03");
            // It leaves at once, unless the cancellation (quick here) ended the run first.
            let code = term.wait();
            let text = term.text();
            assert!(
                (code == 130 && text.contains("left run"))
                    || (code == 8 && text.contains("cancelled")),
                "{code}: {text}"
            );
        } else {
            assert_eq!(term.wait(), 8, "{}", term.text());
        }
        let runs: serde_json::Value =
            serde_json::from_str(lh.run(&["runs", "ls", "-o", "json"]).ok()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut status = runs[0]["status"].clone();
        while status != "cancelled" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            let runs: serde_json::Value =
                serde_json::from_str(lh.run(&["runs", "ls", "-o", "json"]).ok()).unwrap();
            status = runs[0]["status"].clone();
        }
        assert_eq!(status, "cancelled", "{presses} Ctrl-C: {}", term.text());
        assert_eq!(lh.head("main"), before, "nothing was published");
        // The node stopped while it ran shows as cancelled, not skipped.
        let run: serde_json::Value = serde_json::from_str(
            lh.run(&[
                "runs",
                "show",
                runs[0]["id"].as_str().unwrap(),
                "-o",
                "json",
            ])
            .ok(),
        )
        .unwrap();
        let statuses: Vec<&str> = run["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["status"].as_str().unwrap())
            .collect();
        assert!(
            statuses.contains(&"cancelled"),
            "{presses} Ctrl-C: {statuses:?}"
        );
        assert!(!statuses.contains(&"running"), "{statuses:?}");
    }
}
