//! Who may do what beyond the built-in roles: roles scoped to refs and namespaces, the
//! checks a protected branch requires before a merge (webhooks and a project's
//! expectations), post-merge webhooks, pipeline secrets, and OpenID Connect tokens.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lh_e2e::{Lh, Server};
use serde_json::{Value, json};

use crate::auth::call;
use crate::oidc_keys;
use crate::runs::{project, server_with};

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// A role's grants decide, per ref and per namespace, what its tokens may do, the same
/// way through the CLI, the API, queries and the Iceberg REST catalog; what it may not
/// read is as absent as what does not exist.
#[test]
fn a_role_grants_actions_on_the_refs_and_namespaces_it_names() {
    let server = Server::start();
    let admin = server.lh();
    let orders = admin.file("orders.csv", "id,amount\n1,10\n2,-5\n");
    let ledger = admin.file("ledger.csv", "id,total\n1,100\n");
    admin
        .run(&["table", "import", "sales.orders", path(&orders)])
        .ok();
    admin
        .run(&["table", "import", "finance.ledger", path(&ledger)])
        .ok();

    // Bad grants and names are refused, saying why; built-in roles do not change.
    let err = admin
        .run(&["role", "set", "team-a", "--grant", "fly on *"])
        .fails(5)
        .to_string();
    assert!(err.contains("unknown action 'fly'"), "{err}");
    let err = admin
        .run(&["role", "set", "team-a", "--grant", "admin on team-a.*"])
        .fails(5)
        .to_string();
    assert!(
        err.contains("'admin' is granted on every ref only"),
        "{err}"
    );
    let err = admin
        .run(&["role", "set", "writer", "--grant", "read on *"])
        .fails(5)
        .to_string();
    assert!(err.contains("built-in role"), "{err}");
    admin
        .run(&["role", "set", "Team A", "--grant", "read on *"])
        .fails(5);
    admin
        .run(&[
            "role",
            "set",
            "team-a",
            "--grant",
            "read on * in sales",
            "--grant",
            "write,run on team-a.*",
            "--grant",
            "merge on main in sales",
        ])
        .ok();
    let roles: Value = serde_json::from_str(admin.run(&["role", "ls", "-o", "json"]).ok()).unwrap();
    let team = roles
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "team-a")
        .unwrap();
    assert_eq!(
        team["grants"],
        json!([
            "read on * in sales",
            "write,run on team-a.*",
            "merge on main in sales"
        ])
    );
    // Tokens of unknown roles are not made.
    admin
        .run(&["token", "create", "--user", "x", "--role", "team-b"])
        .fails(3);
    let alice_token = server.token_for("alice", "team-a");
    let alice = admin.with_token(&alice_token);

    // Reads: the sales namespace only. A hidden table answers as a missing one does.
    let ls = alice.run(&["table", "ls"]);
    assert!(ls.ok().contains("sales.orders"), "{}", ls.stdout);
    assert!(!ls.stdout.contains("finance"), "{}", ls.stdout);
    let hidden = alice
        .run(&["query", "select * from finance.ledger"])
        .fails(3)
        .replace("ledger", "X");
    let absent = alice
        .run(&["query", "select * from finance.nothing"])
        .fails(3)
        .replace("nothing", "X");
    assert_eq!(hidden, absent);
    let err = alice
        .run(&["table", "show", "finance.ledger"])
        .fails(9)
        .to_string();
    assert!(
        err.contains("'read' permission on table 'finance.ledger'"),
        "{err}"
    );
    assert_eq!(
        alice.rows("select count(*)::int as n from sales.orders", "main")[0]["n"],
        2
    );

    // Writes: her team's branches only; never main directly.
    alice.run(&["branch", "create", "team-a.fix"]).ok();
    let err = alice
        .run(&["branch", "create", "hotfix"])
        .fails(9)
        .to_string();
    assert!(
        err.contains("'write' permission on ref 'hotfix'") && err.contains("role team-a"),
        "{err}"
    );
    alice
        .run(&[
            "table",
            "import",
            "sales.orders",
            path(&orders),
            "--mode",
            "append",
        ])
        .fails(9);
    alice
        .run(&[
            "table",
            "import",
            "sales.orders",
            path(&orders),
            "--mode",
            "append",
            "--ref",
            "team-a.fix",
        ])
        .ok();
    // A merge into main of sales changes: granted.
    alice.run(&["merge", "team-a.fix", "--into", "main"]).ok();
    assert_eq!(
        admin.rows("select count(*)::int as n from sales.orders", "main")[0]["n"],
        4
    );
    // One that also changes finance: refused as a whole, naming the table.
    alice.run(&["branch", "create", "team-a.books"]).ok();
    alice
        .run(&[
            "table",
            "import",
            "finance.ledger",
            path(&ledger),
            "--mode",
            "append",
            "--ref",
            "team-a.books",
        ])
        .ok();
    let before = admin.head("main");
    let err = alice
        .run(&["merge", "team-a.books", "--into", "main"])
        .fails(9)
        .to_string();
    assert!(
        err.contains("finance.ledger") && err.contains("'merge' permission"),
        "{err}"
    );
    assert_eq!(admin.head("main"), before);
    // Moving refs needs merge on them; runs need run on the target.
    alice.run(&["branch", "rm", "team-a.books"]).fails(9);
    let dir = project(
        &alice,
        "p",
        &[
            ("lh_project.yml", "name: p\nnamespace: sales\n"),
            ("m.sql", "select 1 as x\n"),
        ],
    );
    let err = alice.run(&["run", path(&dir)]).fails(9).to_string();
    assert!(err.contains("'run' permission on ref 'main'"), "{err}");
    // On her branch it runs: its writes (on its own run branch) are checked as writes
    // to her branch, and it publishes there.
    alice.run(&["run", path(&dir), "--ref", "team-a.fix"]).ok();
    assert_eq!(alice.rows("select x from sales.m", "team-a.fix")[0]["x"], 1);
    // Run branches are only their runs'.
    let err = alice
        .run(&["branch", "create", "team-a.x/../run/x"])
        .fails(5)
        .to_string();
    assert!(err.contains("invalid ref name"), "{err}");
    let err = admin
        .run(&["branch", "create", "run/mine"])
        .fails(9)
        .to_string();
    assert!(err.contains("a run's branch"), "{err}");

    // Moving main wholesale to a branch with finance changes, or deleting it, needs
    // merge there on every namespace.
    let main_head = admin.head("main");
    let (s, v, _) = call(
        &server,
        "POST",
        "/api/v1/refs/main/assign",
        Some(&alice_token),
        &[],
        Some(json!({"to": "team-a.books", "expected": main_head})),
    );
    assert_eq!(s, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("finance.ledger"),
        "{v}"
    );
    alice.run(&["branch", "rm", "main"]).fails(9);
    assert_eq!(admin.head("main"), main_head);
    // A diff lists only what she may read; a table cannot be registered from another's
    // metadata file; namespaces, shared by every ref, change only for who may write
    // them everywhere.
    let diff = alice.run(&["diff", "main", "team-a.books", "-o", "json"]);
    assert!(!diff.ok().contains("finance"), "{}", diff.stdout);
    let detail: Value = serde_json::from_str(
        admin
            .run(&["table", "show", "finance.ledger", "-o", "json"])
            .ok(),
    )
    .unwrap();
    let location = detail["pointer"]["metadata_location"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, v, _) = call(
        &server,
        "POST",
        "/iceberg/v1/team-a.fix/namespaces/sales/register",
        Some(&alice_token),
        &[],
        Some(json!({"name": "stolen", "metadata-location": location})),
    );
    assert_eq!(s, 403, "{v}");
    let (s, v, _) = call(
        &server,
        "POST",
        "/iceberg/v1/team-a.fix/namespaces/sales/properties",
        Some(&alice_token),
        &[],
        Some(json!({"updates": {"owner": "alice"}})),
    );
    assert_eq!(s, 403, "{v}");
    // A bare name is lh's `main` namespace (DuckDB's default schema): checked as such,
    // even once the commit's shared catalog has its view.
    let pay = admin.file("pay.csv", "who,amount\nceo,1000000\n");
    admin
        .run(&["table", "import", "main.payroll", path(&pay)])
        .ok();
    assert_eq!(
        admin.rows("select count(*)::int as n from main.payroll", "main")[0]["n"],
        1
    );
    let err = alice
        .run(&["query", "select * from payroll"])
        .fails(3)
        .to_string();
    assert!(
        !err.contains("ceo") && !err.contains("Did you mean"),
        "{err}"
    );
    // A CTE of the same name does not open the table either (bare names name no table).
    let out = alice.run(&[
        "query",
        "select * from payroll, (with payroll as (select 1 as x) select * from payroll)",
    ]);
    assert_ne!(out.code, 0, "{}", out.both());
    assert!(!out.both().contains("ceo"), "{}", out.both());
    // No table moves past the grants that hide it: renamed into a readable namespace,
    // or copied by a branch to a ref where it would be readable.
    let (s, v, _) = call(
        &server,
        "POST",
        "/iceberg/v1/team-a.books/tables/rename",
        Some(&alice_token),
        &[],
        Some(json!({
            "source": {"namespace": ["finance"], "name": "ledger"},
            "destination": {"namespace": ["sales"], "name": "ledger"}
        })),
    );
    assert_eq!(s, 403, "{v}");
    admin
        .run(&[
            "role",
            "set",
            "auditors",
            "--grant",
            "read on main in finance",
            "--grant",
            "read,write on audit-*",
        ])
        .ok();
    let auditor = admin.with_token(&server.token_for("aud", "auditors"));
    let err = auditor
        .run(&["branch", "create", "audit-1", "--from", "main"])
        .fails(9)
        .to_string();
    assert!(
        err.contains("would make them readable in 'audit-1'"),
        "{err}"
    );
    assert!(!err.contains("sales.orders"), "{err}");
    admin
        .run(&["branch", "create", "audit-1", "--from", "main"])
        .ok();
    // Runs on refs she may not read are not hers to see.
    admin
        .run(&["role", "set", "outsider", "--grant", "read,run on team-b.*"])
        .ok();
    let outsider = admin.with_token(&server.token_for("olga", "outsider"));
    let runs: Value =
        serde_json::from_str(outsider.run(&["runs", "ls", "-o", "json"]).ok()).unwrap();
    assert_eq!(runs, json!([]), "{runs}");
    let all: Value = serde_json::from_str(admin.run(&["runs", "ls", "-o", "json"]).ok()).unwrap();
    let id = all[0]["id"].as_str().unwrap();
    outsider.run(&["runs", "show", id]).fails(9);
    outsider.run(&["runs", "logs", id]).fails(9);

    // The REST catalog: the same grants, on its prefix and namespace.
    let (s, v, _) = call(
        &server,
        "GET",
        "/iceberg/v1/main/namespaces",
        Some(&alice_token),
        &[],
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["namespaces"], json!([["sales"]]), "{v}");
    for ns in ["finance", "no_such_ns"] {
        let (s, v, _) = call(
            &server,
            "GET",
            &format!("/iceberg/v1/main/namespaces/{ns}/tables"),
            Some(&alice_token),
            &[],
            None,
        );
        assert_eq!(s, 403, "{v}");
        assert_eq!(v["error"]["type"], "ForbiddenException", "{v}");
    }
    let (s, _, _) = call(
        &server,
        "GET",
        "/iceberg/v1/main/namespaces/sales/tables/orders",
        Some(&alice_token),
        &[],
        None,
    );
    assert_eq!(s, 200);

    // Tags never move: made by who may write there, deleted by admins only.
    alice
        .run(&["tag", "create", "team-a.v1", "--from", "team-a.fix"])
        .ok();
    alice.run(&["tag", "rm", "team-a.v1"]).fails(9);

    // The audit log has the role's definition and her refusals; its filters are checked.
    let audit: Value =
        serde_json::from_str(admin.run(&["audit", "-n", "1000", "-o", "json"]).ok()).unwrap();
    let has = |user: &str, method: &str, route: &str, status: u64| {
        audit.as_array().unwrap().iter().any(|e| {
            e["user"] == user
                && e["method"] == method
                && e["route"] == route
                && e["status"].as_u64() == Some(status)
        })
    };
    assert!(has("tester", "PUT", "/api/v1/roles/{name}", 200), "{audit}");
    assert!(has("alice", "POST", "/api/v1/refs", 403), "{audit}");
    assert!(has("alice", "POST", "/api/v1/merge", 200), "{audit}");
    let admin_token = server.token();
    for bad in ["since=yesterday", "limit=many", "limit=-1"] {
        let (s, v, _) = call(
            &server,
            "GET",
            &format!("/api/v1/audit?{bad}"),
            Some(&admin_token),
            &[],
            None,
        );
        assert_eq!(s, 400, "{bad}: {v}");
    }

    // A role with live tokens stays; once they are revoked it goes.
    admin.run(&["role", "rm", "team-a"]).fails(4);
    let tokens: Value =
        serde_json::from_str(admin.run(&["token", "ls", "-o", "json"]).ok()).unwrap();
    let id = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["user"] == "alice")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    admin.run(&["token", "revoke", &id]).ok();
    admin.run(&["role", "rm", "team-a"]).ok();
    admin.run(&["role", "rm", "team-a"]).fails(3);
    alice.run(&["table", "ls"]).fails(9);
}

/// What a webhook receiver saw: each request's headers (lowercase names) and body.
#[derive(Default)]
struct Seen {
    requests: Vec<(Vec<(String, String)>, String)>,
}

/// A webhook receiver on loopback: answers each request with the next of `answers`
/// (status, text, delay), the last one from then on.
struct Receiver {
    url: String,
    seen: Arc<Mutex<Seen>>,
    answers: Arc<Mutex<Vec<(u16, String, Duration)>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let answers: Arc<Mutex<Vec<(u16, String, Duration)>>> =
            Arc::new(Mutex::new(vec![(200, "ok".into(), Duration::ZERO)]));
        let (s, a) = (seen.clone(), answers.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut headers = Vec::new();
                let mut line = String::new();
                reader.read_line(&mut line).unwrap_or_default();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = line.trim_end().split_once(':') {
                        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                    }
                }
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k == "content-length")
                    .map_or(0, |(_, v)| v.parse().unwrap_or(0));
                let mut body = vec![0u8; len];
                let _ = reader.read_exact(&mut body);
                s.lock()
                    .unwrap()
                    .requests
                    .push((headers, String::from_utf8_lossy(&body).to_string()));
                let (status, text, delay) = {
                    let mut q = a.lock().unwrap();
                    if q.len() > 1 {
                        q.remove(0)
                    } else {
                        q[0].clone()
                    }
                };
                std::thread::sleep(delay);
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        Receiver { url, seen, answers }
    }

    fn answer(&self, answers: &[(u16, &str, Duration)]) {
        *self.answers.lock().unwrap() = answers
            .iter()
            .map(|(s, t, d)| (*s, t.to_string(), *d))
            .collect();
    }

    fn requests(&self) -> Vec<(Vec<(String, String)>, String)> {
        self.seen.lock().unwrap().requests.clone()
    }

    /// Waits for at least `n` requests (post-merge hooks are told in the background).
    fn wait_for(&self, n: usize) -> Vec<(Vec<(String, String)>, String)> {
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            let r = self.requests();
            if r.len() >= n {
                return r;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the receiver saw {} requests, not {n}",
            self.requests().len()
        );
    }
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> &'a str {
    h.iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

fn hmac_hex(secret: &str, body: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, body.as_bytes());
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A protected main requiring a webhook check: a merge whose check answers non-2xx or
/// not in time changes nothing and shows the hook's words; one that passes lands, with
/// the check's verdict. The request is the merge's diff, signed. Post-merge webhooks
/// are told after the fact, retried when they fail, and never block.
#[test]
fn a_protected_branch_merges_only_what_its_checks_pass() {
    let server = Server::start();
    let lh = server.lh();
    let hook = Receiver::start();
    let csv = lh.file("o.csv", "id,amount\n1,10\n");
    lh.run(&["table", "import", "sales.orders", path(&csv)])
        .ok();

    // Only admins add checks; a check that does not exist cannot be required.
    let writer = lh.with_token(&server.token_for("w", "writer"));
    writer
        .run(&["check", "add", "quality", "--webhook", &hook.url])
        .fails(9);
    lh.run(&["check", "add", "quality", "--webhook", "ftp://x"])
        .fails(5);
    // A check's answer lets a merge through: only over https, or on this machine.
    lh.run(&[
        "check",
        "add",
        "quality",
        "--webhook",
        "http://ci.example/hook",
    ])
    .fails(5);
    lh.run(&["branch", "protect", "main", "--require-checks", "nope"])
        .fails(3);
    lh.command(&[
        "check",
        "add",
        "quality",
        "--webhook",
        &hook.url,
        "--secret-env",
        "HOOK_SECRET",
        "--timeout",
        "2s",
    ])
    .env("HOOK_SECRET", "s3cr3t-shared")
    .output()
    .map(|o| assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)))
    .unwrap();
    lh.run(&["branch", "protect", "main", "--require-checks", "quality"])
        .ok();
    let listed: Value = serde_json::from_str(lh.run(&["check", "ls", "-o", "json"]).ok()).unwrap();
    assert_eq!(listed[0]["branches"], json!(["main"]), "{listed}");
    assert_eq!(listed[0]["signed"], true);
    assert!(
        !lh.run(&["check", "ls", "-o", "json"])
            .ok()
            .contains("s3cr3t")
    );
    // A required check is not removed.
    lh.run(&["check", "rm", "quality"]).fails(4);

    let maintainer = lh.with_token(&server.token_for("mia", "maintainer"));
    maintainer.run(&["branch", "create", "dev"]).ok();
    let more = lh.file("more.csv", "id,amount\n2,-5\n");
    maintainer
        .run(&[
            "table",
            "import",
            "sales.orders",
            path(&more),
            "--mode",
            "append",
            "--ref",
            "dev",
        ])
        .ok();
    let main_before = lh.head("main");

    // The hook says no: nothing changes, and its words are shown.
    hook.answer(&[(422, "sales.orders has a negative amount", Duration::ZERO)]);
    let err = maintainer
        .run(&["merge", "dev", "--into", "main"])
        .fails(4)
        .to_string();
    assert!(
        err.contains("blocked by its required checks")
            && err.contains(
                "FAILED quality (webhook): answered 422: sales.orders has a negative amount"
            ),
        "{err}"
    );
    assert_eq!(lh.head("main"), main_before);
    let (headers, body) = hook.requests().pop().unwrap();
    assert_eq!(header(&headers, "x-lh-event"), "merge.check");
    assert_eq!(
        header(&headers, "x-lh-signature"),
        format!("sha256={}", hmac_hex("s3cr3t-shared", &body))
    );
    let sent: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sent["from"], "dev");
    assert_eq!(sent["into"], "main");
    assert_eq!(sent["author"], "mia");
    assert_eq!(sent["base"], main_before);
    assert_eq!(sent["tables"][0]["table"], "sales.orders", "{sent}");

    // The hook does not answer in time: blocked too.
    hook.answer(&[(200, "late", Duration::from_secs(4))]);
    let err = maintainer
        .run(&["merge", "dev", "--into", "main"])
        .fails(4)
        .to_string();
    assert!(err.contains("no answer within 2"), "{err}");
    assert_eq!(lh.head("main"), main_before);

    // A post-merge hook, failing once: retried, and the merge does not wait for it.
    let notify = Receiver::start();
    notify.answer(&[(500, "busy", Duration::ZERO), (204, "", Duration::ZERO)]);
    lh.run(&["hook", "add", "tell", "--url", &notify.url, "--on", "main"])
        .ok();
    let other = Receiver::start();
    lh.run(&[
        "hook",
        "add",
        "elsewhere",
        "--url",
        &other.url,
        "--on",
        "release/*",
    ])
    .ok();

    // The hook says yes: the merge lands, with the check's verdict.
    hook.answer(&[(200, "all good", Duration::ZERO)]);
    let out = maintainer.run(&["merge", "dev", "--into", "main"]);
    assert!(
        out.stderr
            .contains("check quality (webhook): passed: all good"),
        "{}",
        out.both()
    );
    out.ok();
    assert_ne!(lh.head("main"), main_before);
    assert_eq!(
        lh.rows("select count(*)::int as n from sales.orders", "main")[0]["n"],
        2
    );
    let told = notify.wait_for(2);
    assert_eq!(header(&told[1].0, "x-lh-event"), "merge.done");
    let done: Value = serde_json::from_str(&told[1].1).unwrap();
    assert_eq!(done["head"], lh.head("main"));
    assert!(other.requests().is_empty());

    // Direct writes stay refused; a writer's merge too (merging needs the permission).
    lh.run(&[
        "table",
        "import",
        "sales.orders",
        path(&more),
        "--mode",
        "append",
    ])
    .fails(9);
    writer.run(&["merge", "dev", "--into", "main"]).fails(9);
    // Unprotected, the branch requires nothing any more.
    lh.run(&["branch", "unprotect", "main"]).ok();
    lh.run(&["check", "rm", "quality"]).ok();
}

/// A check made of an lh project's expectations runs them, as a run of its own, on the
/// merge's would-be result: a merge bringing bad rows is blocked with the failed
/// expectation named; a good one lands. A run publishing to the branch is held to the
/// same checks.
#[test]
fn an_expectations_check_runs_on_the_would_be_result() {
    let server = server_with("process", &[]);
    let lh = server.lh();
    let csv = lh.file("o.csv", "id,amount\n1,10\n");
    lh.run(&["table", "import", "sales.orders", path(&csv)])
        .ok();
    let checks = project(
        &lh,
        "checks",
        &[
            (
                "lh_project.yml",
                "name: checks\nnamespace: sales\npython: \"3.11\"\n",
            ),
            (
                "e.py",
                "import lh\nimport pyarrow.compute as pc\n\n@lh.expectation()\ndef no_negative_amounts(o=lh.Model(\"sales.orders\")):\n    bad = pc.sum(pc.less(o[\"amount\"], 0)).as_py() or 0\n    return bad == 0, f\"{bad} negative amounts\"\n",
            ),
        ],
    );
    lh.run(&["check", "add", "amounts", "--expectations", path(&checks)])
        .ok();
    lh.run(&["branch", "protect", "main", "--require-checks", "amounts"])
        .ok();

    lh.run(&["branch", "create", "bad"]).ok();
    let neg = lh.file("neg.csv", "id,amount\n2,-5\n");
    lh.run(&[
        "table",
        "import",
        "sales.orders",
        path(&neg),
        "--mode",
        "append",
        "--ref",
        "bad",
    ])
    .ok();
    let before = lh.head("main");
    let err = lh
        .run(&["merge", "bad", "--into", "main"])
        .fails(4)
        .to_string();
    assert!(
        err.contains("FAILED amounts (expectations)") && err.contains("no_negative_amounts"),
        "{err}"
    );
    assert_eq!(lh.head("main"), before);

    lh.run(&["branch", "create", "good"]).ok();
    let pos = lh.file("pos.csv", "id,amount\n3,7\n");
    lh.run(&[
        "table",
        "import",
        "sales.orders",
        path(&pos),
        "--mode",
        "append",
        "--ref",
        "good",
    ])
    .ok();
    let out = lh.run(&["merge", "good", "--into", "main"]);
    assert!(
        out.stderr
            .contains("check amounts (expectations): passed: 1 expectation passed"),
        "{}",
        out.both()
    );
    out.ok();
    assert_eq!(
        lh.rows("select count(*)::int as n from sales.orders", "main")[0]["n"],
        2
    );

    // A run publishing bad rows to main is held to the check: it fails, main stays.
    let pipeline = project(
        &lh,
        "pipe",
        &[
            (
                "lh_project.yml",
                "name: pipe\nnamespace: sales\npython: \"3.11\"\n",
            ),
            (
                "m.py",
                "import lh\nimport pyarrow as pa\n\n@lh.model(name=\"orders\", materialize=\"append\")\ndef more():\n    return pa.table({\"id\": [9], \"amount\": [-1]})\n",
            ),
        ],
    );
    let before = lh.head("main");
    let out = lh.run(&["run", path(&pipeline)]);
    assert_eq!(out.code, 8, "{}", out.both());
    assert!(out.stderr.contains("FAILED amounts"), "{}", out.both());
    assert_eq!(lh.head("main"), before);
}

/// `lh secret set ARGS` with `value` on stdin; its stderr.
fn set_secret(lh: &Lh, args: &[&str], value: &str) -> String {
    let mut all = vec!["secret", "set"];
    all.extend_from_slice(args);
    let out = lh.run_with_input(&all, &format!("{value}\n"));
    assert!(out.code == 0, "{}", out.stderr);
    out.stderr
}

crate::both_runtimes!(secrets_reach_only_the_functions_that_declare_them);

/// A secret reaches only the functions that declare it, as an environment variable;
/// its value appears in no log, error or record, is not stored in the clear, and only
/// its version is part of the cache key.
fn secrets_reach_only_the_functions_that_declare_them(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    let value = "sk_live_0123456789abcdef";
    let set = |v: &str| set_secret(&lh, &["API_KEY"], v);
    assert!(set(value).contains("version 1"));
    // Names only, never values; writers may list, only admins set.
    let listed = lh.run(&["secret", "ls", "-o", "json"]);
    assert!(listed.ok().contains("API_KEY") && !listed.stdout.contains(value));
    let writer = lh.with_token(&server.token_for("w", "writer"));
    writer.run(&["secret", "ls"]).ok();
    writer
        .command(&["secret", "set", "OTHER"])
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| assert_ne!(o.status.code(), Some(0)))
        .unwrap();
    lh.run(&["secret", "rm", "NOPE"]).fails(3);

    let dir = project(
        &lh,
        "sec",
        &[
            (
                "lh_project.yml",
                "name: sec\nnamespace: s\npython: \"3.11\"\n",
            ),
            (
                "m.py",
                r#"import os
import lh
import pyarrow as pa

@lh.python(secrets=["API_KEY"])
@lh.model()
def with_key():
    key = os.environ.get("API_KEY", "")
    print("the key is", key)
    return pa.table({"length": [len(key)]})

@lh.model()
def without_key():
    return pa.table({"length": [len(os.environ.get("API_KEY", ""))]})

@lh.python(secrets=["API_KEY"])
@lh.expectation(severity="warn")
def leaks(t=lh.Model("with_key")):
    return False, "it was " + os.environ["API_KEY"]
"#,
            ),
        ],
    );
    let out = lh.run(&["run", path(&dir), "-o", "json"]);
    out.ok();
    assert!(!out.both().contains(value), "{}", out.both());
    let rows = lh.rows(
        "select (select length from s.with_key) as a, (select length from s.without_key) as b",
        "main",
    );
    assert_eq!(rows[0]["a"], value.len());
    assert_eq!(rows[0]["b"], 0);
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let id = run["id"].as_str().unwrap();
    let shown = lh.run(&["runs", "show", id, "-o", "json"]);
    let logs = lh.run(&["runs", "logs", id]);
    for text in [shown.ok(), logs.ok(), &server.log()] {
        assert!(!text.contains(value), "{text}");
    }
    assert!(shown.stdout.contains("it was ***"), "{}", shown.stdout);
    assert!(logs.stdout.contains("the key is ***"), "{}", logs.stdout);
    // Not in the clear anywhere in the server's data (the catalog database included).
    let mut stack = vec![server.data_dir()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                assert!(
                    !bytes.windows(value.len()).any(|w| w == value.as_bytes()),
                    "{} holds the secret",
                    p.display()
                );
            }
        }
    }

    // A new version reruns what uses it; the rest is reused.
    set("sk_live_rotated_key_000");
    let again: Value =
        serde_json::from_str(lh.run(&["run", path(&dir), "-o", "json"]).ok()).unwrap();
    let status = |name: &str| {
        again["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"].as_str().unwrap().ends_with(name))
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(status("with_key"), "done", "{again}");
    assert_eq!(status("without_key"), "cached", "{again}");

    // A secret for main's runs is withheld from a run on another branch.
    set_secret(&lh, &["API_KEY", "--on", "main"], value);
    lh.run(&["branch", "create", "dev"]).ok();
    let out = lh.run(&["run", path(&dir), "--ref", "dev"]);
    assert_eq!(out.code, 8, "{}", out.both());
    assert!(
        out.both()
            .contains("the secret 'API_KEY' is given only to runs on branches matching 'main'"),
        "{}",
        out.both()
    );

    // A function needing a secret nobody set fails, saying which.
    lh.run(&["secret", "rm", "API_KEY"]).ok();
    let out = lh.run(&["run", path(&dir), "--no-cache"]);
    assert_eq!(out.code, 8, "{}", out.both());
    assert!(
        out.both()
            .contains("the secret 'API_KEY', which is not set"),
        "{}",
        out.both()
    );
}

/// Tokens of an OpenID Connect issuer: checked against its keys, audience, issuer and
/// times; the user's groups map to roles; the user is the author of their changes.
#[test]
fn an_identity_providers_tokens_sign_users_in() {
    let (key, jwk) = oidc_keys::new_es256_key();
    let (other_key, _) = oidc_keys::new_es256_key();
    // The issuer's keys, served on loopback as its jwks_uri would be.
    let jwks = Receiver::start();
    let served = oidc_keys::jwks(&[("k1", &jwk)]).to_string();
    jwks.answer(&[(200, served.as_str(), Duration::ZERO)]);
    let issuer = "https://id.example.com";
    let server = Server::start_with(&[
        "--oidc-issuer",
        issuer,
        "--oidc-audience",
        "lh-test",
        "--oidc-jwks",
        &jwks.url,
        "--oidc-user-claim",
        "email",
        "--oidc-role",
        "data-eng=maintainer",
        "--oidc-role",
        "analysts=reader",
    ]);
    let lh = server.lh();
    let token = |k: &[u8], claims: Value| oidc_keys::sign(k, "k1", &claims);
    let now = oidc_keys::now();
    let claims = |groups: Value| {
        json!({"iss": issuer, "aud": "lh-test", "sub": "u1", "email": "dana@example.com",
               "exp": now + 600, "groups": groups})
    };
    let dana = lh.with_token(&token(&key, claims(json!(["data-eng"]))));
    let info = dana.run(&["info"]);
    assert!(info.ok().contains("dana@example.com"), "{}", info.stdout);
    dana.run(&["branch", "create", "dana-dev"]).ok();
    let csv = lh.file("o.csv", "id\n1\n");
    dana.run(&["table", "import", "s.t", path(&csv), "--ref", "dana-dev"])
        .ok();
    dana.run(&["merge", "dana-dev", "--into", "main"]).ok();
    let log: Value = serde_json::from_str(lh.run(&["log", "main", "-o", "json"]).ok()).unwrap();
    assert_eq!(log[0]["author"], "dana@example.com");

    // An analyst reads, and may not write.
    let ann = lh.with_token(&token(&key, claims(json!(["analysts"]))));
    ann.run(&["table", "ls"]).ok();
    ann.run(&["branch", "create", "x"]).fails(9);

    // Refused, each saying why: no mapped group, another key, another audience,
    // another issuer, expired.
    let cases = [
        (
            token(&key, claims(json!(["sales"]))),
            "no group that maps to a role",
        ),
        (token(&other_key, claims(json!(["data-eng"]))), "signature"),
        (
            token(&key, {
                let mut c = claims(json!(["data-eng"]));
                c["aud"] = json!("someone-else");
                c
            }),
            "audience",
        ),
        (
            token(&key, {
                let mut c = claims(json!(["data-eng"]));
                c["iss"] = json!("https://evil.example.com");
                c
            }),
            "issued by",
        ),
        (
            token(&key, {
                let mut c = claims(json!(["data-eng"]));
                c["exp"] = json!(now - 3600);
                c
            }),
            "expired",
        ),
    ];
    for (t, why) in cases {
        let err = lh
            .with_token(&t)
            .run(&["branch", "ls"])
            .fails(9)
            .to_string();
        assert!(err.contains(why), "{why}: {err}");
    }
    // lh's own tokens keep working beside them.
    lh.run(&["branch", "ls"]).ok();
}

/// The server key: made once, private; a server given another key refuses to start
/// (it could open nothing the first sealed, here a check's signing secret), saying so.
#[test]
fn secrets_are_sealed_with_the_server_key() {
    let mut server = Server::start();
    let lh = server.lh();
    let key = server.data_dir().join("secret.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let hook = Receiver::start();
    let out = lh
        .command(&[
            "check",
            "add",
            "signed",
            "--webhook",
            &hook.url,
            "--secret-env",
            "S",
        ])
        .env("S", "shared-secret-value")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lh.run(&["branch", "protect", "main", "--require-checks", "signed"])
        .ok();
    lh.run(&["branch", "create", "dev"]).ok();
    let csv = lh.file("o.csv", "id\n1\n");
    lh.run(&["table", "import", "s.t", path(&csv), "--ref", "dev"])
        .ok();
    // The database alone does not hold the secret.
    let db = std::fs::read(server.data_dir().join("catalog.db")).unwrap();
    assert!(!db.windows(19).any(|w| w == b"shared-secret-value"));
    // Another key: the server refuses to start (it could open none of the sealed
    // values, and would seal new ones no other server of the catalog can open).
    std::fs::remove_file(&key).unwrap();
    std::fs::write(&key, "0".repeat(64)).unwrap();
    let log = server.restart_refused();
    assert!(
        log.contains("is not the one the servers of this catalog seal secrets with"),
        "{log}"
    );
    assert!(hook.requests().is_empty());
}
