//! The web console in a real browser: headless Chromium driven through WebDriver
//! (Debian's chromium-driver), against a server holding a pipeline's runs, merges,
//! branches and hostile text. Each page is loaded, checked against what the API says,
//! and kept as a screenshot in `tests/artifacts/console/` (with `LH_UPDATE_SCREENSHOTS=1`
//! the run's DAG and the commit graph also replace the README's pictures in `docs/`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use lh_e2e::{Lh, Server};
use serde_json::{Value, json};

use crate::runs::{examples, jaffle_data, project, run_json, server};

/// Text that would run as script if the console ever made markup of data.
const HOSTILE: &str = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>";

/// A WebDriver session on headless Chromium; the driver stops with it.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let driver_bin = std::env::var("LH_TEST_CHROMEDRIVER").unwrap_or_else(|_| {
            panic!(
                "LH_TEST_CHROMEDRIVER is not set: the console tests need Chromium's WebDriver \
                 (`eval \"$(scripts/services.sh chromium)\"`, which `make test` runs)"
            )
        });
        let chromium = std::env::var("LH_TEST_CHROMIUM").unwrap_or_else(|_| {
            panic!("LH_TEST_CHROMIUM is not set (scripts/services.sh chromium)")
        });
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {driver_bin}: {e}"));
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut r) = ureq::get(&format!("{base}/status")).call()
                && r.body_mut()
                    .read_json::<Value>()
                    .is_ok_and(|v| v["value"]["ready"] == true)
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1440,1000", "--force-device-scale-factor=1",
                         "--no-first-run", "--disable-extensions",
                         format!("--user-data-dir={}", profile.path().display())],
            },
        }}});
        let v = post(&format!("{base}/session"), &caps);
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        Browser {
            driver,
            base,
            session,
            _profile: profile,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/session/{}{path}", self.base, self.session)
    }

    fn go(&self, url: &str) {
        post(&self.url("/url"), &json!({ "url": url }));
    }

    /// Runs `body` (a function body; `arguments` holds `args`) in the page; its value.
    fn js(&self, body: &str, args: Value) -> Value {
        let v = post(
            &self.url("/execute/sync"),
            &json!({ "script": body, "args": args }),
        );
        v["value"].clone()
    }

    /// Runs `body` until it returns something truthy; that value.
    fn wait_for(&self, what: &str, body: &str, args: Value) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.js(body, args.clone());
            if !(v.is_null() || v == false || v == "" || v == 0) {
                return v;
            }
            if Instant::now() > deadline {
                let page = self.js(
                    "return [document.documentElement.dataset.page, document.documentElement.dataset.state, (document.querySelector('#error')||{}).textContent, location.href].join(' | ')",
                    json!([]),
                );
                panic!("waiting for {what}: the page is {page}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Opens a route of the console and waits until it has drawn what it loads.
    fn open(&self, route: &str, page: &str) {
        self.js("location.hash = arguments[0]", json!([route]));
        self.settle(page);
    }

    /// Waits for `page` to be drawn (ready), failing with the page's error otherwise.
    fn settle(&self, page: &str) {
        let state = self.wait_for(
            &format!("the {page} page"),
            "const d = document.documentElement.dataset; return d.page === arguments[0] && (d.state === 'ready' || d.state === 'error') ? d.state : null",
            json!([page]),
        );
        if state != "ready" {
            let error = self.text("#error");
            panic!("the {page} page failed: {error}");
        }
    }

    fn text(&self, selector: &str) -> String {
        self.js(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null",
            json!([selector]),
        )
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no element {selector}"))
    }

    fn count(&self, selector: &str) -> usize {
        self.js(
            "return document.querySelectorAll(arguments[0]).length",
            json!([selector]),
        )
        .as_u64()
        .unwrap() as usize
    }

    fn click(&self, selector: &str) {
        let found = self.js(
            "const e = document.querySelector(arguments[0]); if (!e) return false; \
             e.scrollIntoView({block: 'center'}); \
             e.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true})); return true",
            json!([selector]),
        );
        assert_eq!(found, true, "no element {selector} to click");
    }

    /// Keeps a picture of the page as a test artifact; its path.
    fn screenshot(&self, name: &str) -> PathBuf {
        let v = get(&self.url("/screenshot"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(v["value"].as_str().expect("a screenshot"))
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let dir = artifacts();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Listens for the page's Content-Security-Policy refusals from now on: markup made
    /// of data would show up there (the policy blocks its script, so that script alone
    /// could never tell).
    fn watch_policy(&self) {
        self.js(
            "window.__refused = []; document.addEventListener('securitypolicyviolation', \
             e => window.__refused.push(e.violatedDirective + ' ' + e.blockedURI))",
            json!([]),
        );
    }

    /// Nothing the page was given became markup or ran as script.
    fn assert_not_pwned(&self) {
        let v = self.js(
            "return {pwned: window.__pwned === undefined, \
                     refused: window.__refused || null, \
                     markup: document.querySelectorAll('img[src=\"x\"], script:not([src]), [onerror]').length}",
            json!([]),
        );
        assert_eq!(
            v["pwned"], true,
            "hostile text ran as script in the console"
        );
        assert_eq!(v["markup"], 0, "hostile text became markup in the console");
        assert_eq!(
            v["refused"],
            json!([]),
            "the page tried what its policy refuses"
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = ureq::delete(&format!("{}/session/{}", self.base, self.session)).call();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn post(url: &str, body: &Value) -> Value {
    let mut r = ureq::post(url)
        .config()
        .http_status_as_error(false)
        .build()
        .send_json(body)
        .unwrap_or_else(|e| panic!("WebDriver {url}: {e}"));
    let v: Value = r.body_mut().read_json().unwrap();
    assert!(
        r.status().is_success(),
        "WebDriver {url}: {} {v}",
        r.status()
    );
    v
}

fn get(url: &str) -> Value {
    let mut r = ureq::get(url)
        .call()
        .unwrap_or_else(|e| panic!("WebDriver {url}: {e}"));
    r.body_mut().read_json().unwrap()
}

fn artifacts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("artifacts/console")
}

/// What the API answers at `path`, to compare the pages with.
fn api(server: &Server, path: &str) -> Value {
    let mut r = ureq::get(&format!("{}{path}", server.url))
        .header("Authorization", &format!("Bearer {}", server.token()))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    r.body_mut().read_json().unwrap()
}

/// A server with the jaffle shop run and published, a failed run, a branch with
/// changes, and hostile text in a commit message and in a table's values.
fn catalog() -> (Server, Lh, String, String) {
    let server = server("process");
    let lh = server.lh();
    let examples = examples();
    let data = jaffle_data(&lh);
    let (code, good) = run_json(&lh, &[examples.join("jaffle_shop").to_str().unwrap()]);
    assert_eq!(code, 0, "{good}");
    let good = good["id"].as_str().unwrap().to_string();

    // A run whose expectation fails: nothing publishes, its DAG shows the failure.
    let dir = project(
        &lh,
        "audit",
        &[
            (
                "lh_project.yml",
                "name: audit\nnamespace: audit\npython: \"3.11\"\n",
            ),
            (
                "models/big_orders.sql",
                "select * from raw.orders where id > 10",
            ),
            (
                "expectations.py",
                "import lh\n\n@lh.expectation()\ndef no_orders(data=lh.Model('big_orders', columns=['id'])):\n    print('checking', data.num_rows, 'orders')\n    return data.num_rows == 0, f'{data.num_rows} orders'\n",
            ),
        ],
    );
    let (code, bad) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_ne!(code, 0, "{bad}");
    let bad = bad["id"].as_str().unwrap().to_string();

    // A branch merged into main: main moves meanwhile, so the merge is a merge commit.
    lh.run(&["branch", "create", "alice.fix", "--from", "main"])
        .ok();
    let fix = lh.file("fix.csv", "id,reason\n7,late\n");
    lh.run(&[
        "table",
        "import",
        "raw.fixes",
        fix.to_str().unwrap(),
        "--ref",
        "alice.fix",
    ])
    .ok();
    let tiny = lh.file("tiny.csv", "k\n1\n");
    lh.run(&["table", "import", "raw.tiny", tiny.to_str().unwrap()])
        .ok();
    lh.run(&[
        "merge",
        "alice.fix",
        "--into",
        "main",
        "-m",
        "late orders get a reason",
    ])
    .ok();
    // A table whose values and a merge message that are hostile, on a branch of their own.
    lh.run(&["branch", "create", "evil", "--from", "main"]).ok();
    lh.run(&["branch", "create", "staging", "--from", "main"])
        .ok();
    let csv = lh.file(
        "evil.csv",
        &format!("id,note\n1,\"{}\"\n2,plain\n", HOSTILE.replace('"', "\"\"")),
    );
    lh.run(&[
        "table",
        "import",
        "raw.notes",
        csv.to_str().unwrap(),
        "--ref",
        "evil",
    ])
    .ok();
    lh.run(&[
        "table",
        "import",
        "raw.staged",
        tiny.to_str().unwrap(),
        "--ref",
        "staging",
    ])
    .ok();
    lh.run(&["merge", "evil", "--into", "staging", "-m", HOSTILE])
        .ok();
    // A branch that differs from main: one table changed, one added.
    lh.run(&["branch", "create", "feature", "--from", "main"])
        .ok();
    lh.run(&[
        "table",
        "import",
        "raw.customers",
        data.join("customers.csv").to_str().unwrap(),
        "--ref",
        "feature",
        "--mode",
        "append",
    ])
    .ok();
    let extra = lh.file("extra.csv", "k\n1\n");
    lh.run(&[
        "table",
        "import",
        "raw.extra",
        extra.to_str().unwrap(),
        "--ref",
        "feature",
    ])
    .ok();
    (server, lh, good, bad)
}

#[test]
fn the_console_shows_refs_tables_queries_runs_and_diffs() {
    let (server, lh, good, bad) = catalog();
    let token = server.token();

    // The page itself: no token needed, a strict policy, nothing else open.
    let r = ureq::get(&format!("{}/", server.url)).call().unwrap();
    let csp = r
        .headers()
        .get("content-security-policy")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(
        r.headers().get("x-content-type-options").unwrap(),
        "nosniff"
    );
    let r = ureq::get(&format!("{}/console/app.js", server.url))
        .call()
        .unwrap();
    assert!(
        r.headers()
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    // Only the console's own files, by exact name (ureq would resolve a literal `..`).
    for path in [
        "/console/x",
        "/console/%2e%2e%2fapp.js",
        "/console/..%2fCargo.toml",
    ] {
        let r = ureq::get(&format!("{}{path}", server.url))
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    // Another site's page still cannot call the API, even with the token.
    let cross = ureq::post(&format!("{}/api/v1/query", server.url))
        .config()
        .http_status_as_error(false)
        .build()
        .header("Authorization", &format!("Bearer {token}"))
        .header("Origin", "http://evil.example")
        .send_json(json!({"sql": "select 1"}))
        .unwrap();
    assert_eq!(cross.status(), 403);

    let b = Browser::start();
    // Without a token: the sign-in page; a wrong token is refused with the server's word.
    b.go(&format!("{}/", server.url));
    b.settle("signin");
    b.js(
        "document.querySelector('#token').value = 'lht_wrong'",
        json!([]),
    );
    b.click("#signin button[type=submit]");
    b.wait_for(
        "the refusal",
        "const e = document.querySelector('#error'); return e && e.textContent.length > 0",
        json!([]),
    );
    b.screenshot("signin");

    // Signed in through the address `lh console` prints; the token leaves the address.
    let console = lh.run(&["console", "--no-open"]);
    let address = console.ok().trim().to_string();
    assert_eq!(address, format!("{}/#token={token}", server.url));
    b.go(&address);
    b.settle("refs");
    b.watch_policy();
    let href = b.js("return location.href", json!([]));
    assert!(!href.as_str().unwrap().contains("token"), "{href}");
    for branch in ["main", "evil", "staging", "alice.fix", "feature"] {
        assert_eq!(
            b.count(&format!("table#branches tr.ref[data-ref='{branch}']")),
            1,
            "{branch}"
        );
    }
    b.screenshot("refs");

    // The commit graph of main: every commit of the log, the merges drawn as merges.
    b.open("#/graph/main", "graph");
    let log = api(&server, "/api/v1/log?ref=main&limit=50");
    let commits = log["commits"].as_array().unwrap();
    for c in commits {
        let id = c["id"].as_str().unwrap();
        assert_eq!(
            b.count(&format!("svg#graph g.commit[data-commit='{id}']")),
            1,
            "{id}"
        );
    }
    let merges: Vec<&Value> = commits
        .iter()
        .filter(|c| c["parents"].as_array().unwrap().len() > 1)
        .collect();
    assert_eq!(merges.len(), 2, "the run's publish and alice.fix: {log}");
    assert_eq!(b.count("svg#graph g.commit.merge"), merges.len());
    assert_eq!(b.count("svg#graph path.edge.merge"), merges.len());
    // The merged branches' own commits are drawn beside main's: the run's five models
    // and alice.fix's import.
    assert_eq!(b.count("svg#graph g.commit"), commits.len() + 6);
    // A merge's detail: the tables it brought.
    let fix_merge = merges
        .iter()
        .find(|c| c["message"] == "late orders get a reason")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    b.click(&format!("g.commit[data-commit='{fix_merge}']"));
    b.wait_for(
        "the changed tables",
        "return document.querySelector(\"#changed-tables li[data-table='raw.fixes']\")",
        json!([]),
    );
    b.js("window.scrollTo(0, 0)", json!([]));
    let graph_picture = b.screenshot("graph");

    // The hostile message is shown as text on its branch's graph, and ran nothing.
    b.open("#/graph/staging", "graph");
    assert!(
        b.js(
            "return document.body.textContent.includes(arguments[0])",
            json!([HOSTILE])
        ) == true
    );
    b.assert_not_pwned();
    let hostile = api(&server, "/api/v1/log?ref=staging&limit=1")["commits"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    b.click(&format!("g.commit[data-commit='{hostile}']"));
    b.wait_for(
        "the changed tables",
        "return document.querySelector(\"#changed-tables li[data-table='raw.notes']\")",
        json!([]),
    );
    b.assert_not_pwned();
    b.screenshot("graph-hostile");

    // Tables at a ref, and one table: schema, snapshots, partitioning, a preview.
    b.open("#/tables/main", "tables");
    let tables = api(&server, "/api/v1/tables?ref=main");
    for t in tables["tables"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert_eq!(
            b.count(&format!("table#tables tr[data-table='{name}']")),
            1,
            "{name}"
        );
    }
    b.screenshot("tables");
    b.open("#/table/main/analytics.customers", "table");
    let detail = api(&server, "/api/v1/tables/analytics.customers?ref=main");
    assert_eq!(
        b.count("table#schema tbody tr"),
        detail["columns"].as_array().unwrap().len()
    );
    assert_eq!(
        b.count("table#snapshots tbody tr"),
        detail["snapshots"].as_array().unwrap().len()
    );
    assert!(b.text("#partitioning").contains("unpartitioned"));
    assert_eq!(b.count("table#preview tbody tr"), 50);
    b.screenshot("table");
    // The hostile values preview as text.
    b.open("#/table/staging/raw.notes", "table");
    assert!(b.text("table#preview").contains(HOSTILE));
    b.assert_not_pwned();

    // The SQL editor: a query on a chosen ref, its result as `lh query` gives it.
    b.open("#/sql", "sql");
    let sql = "select status, count(*) as n from analytics.orders group by status order by status";
    b.js("document.querySelector('#sql').value = arguments[0]; document.querySelector('#query-ref-expr').value = 'main'", json!([sql]));
    b.click("#run-query");
    b.settle("sql");
    let expected = lh.rows(sql, "main");
    assert_eq!(b.count("table#result tbody tr"), expected.len());
    let cells = b.js("return [...document.querySelectorAll('table#result tbody tr')].map(r => [...r.querySelectorAll('td')].map(c => c.textContent))", json!([]));
    for (row, want) in cells.as_array().unwrap().iter().zip(&expected) {
        assert_eq!(row[0], want["status"], "{cells}");
        assert_eq!(row[1].as_str().unwrap(), want["n"].to_string(), "{cells}");
    }
    b.screenshot("sql");
    // Writes are refused on the server, and the error is shown.
    b.js(
        "document.querySelector('#sql').value = 'create table raw.x as select 1'",
        json!([]),
    );
    b.click("#run-query");
    b.wait_for("the refusal", "return document.documentElement.dataset.state === 'error' && document.querySelector('#error').textContent", json!([]));
    lh.run(&["table", "show", "raw.x"]).fails(3);

    // Runs: the list, and each run's DAG with its nodes' states and the edges between.
    b.open("#/runs", "runs");
    assert_eq!(
        b.count(&format!(
            "table#runs tr.run[data-run='{good}'][data-status='succeeded']"
        )),
        1
    );
    assert_eq!(
        b.count(&format!(
            "table#runs tr.run[data-run='{bad}'][data-status='failed']"
        )),
        1
    );
    b.screenshot("runs");
    let mut dag_picture = None;
    for id in [&bad, &good] {
        b.open(&format!("#/run/{id}"), "run");
        let run = api(&server, &format!("/api/v1/runs/{id}"));
        let nodes = run["nodes"].as_array().unwrap();
        assert_eq!(b.count("svg#dag g.node"), nodes.len());
        let mut edges = 0;
        for n in nodes {
            let name = n["name"].as_str().unwrap();
            let status = n["status"].as_str().unwrap();
            assert_eq!(
                b.count(&format!(
                    "svg#dag g.node[data-node='{name}'][data-status='{status}']"
                )),
                1,
                "{name} {status}"
            );
            edges += n["depends_on"].as_array().unwrap().len();
        }
        assert!(edges > 0, "{run}");
        assert_eq!(b.count("svg#dag path.dag-edge"), edges);
        if *id == bad {
            // The failed expectation's log and what it said.
            b.click("svg#dag g.node[data-node='no_orders']");
            b.wait_for("the node's log", "const e = document.querySelector('#node-logs'); return e && e.textContent.includes('checking')", json!([]));
            assert!(b.text("#node-detail").contains("orders"));
            b.screenshot("run-failed");
        } else {
            b.js("window.scrollTo(0, 0)", json!([]));
            dag_picture = Some(b.screenshot("run-dag"));
            b.click("svg#dag g.node[data-node='analytics.customers']");
            b.wait_for(
                "the node's detail",
                "return document.querySelector('#node-detail')",
                json!([]),
            );
            b.screenshot("run-node");
        }
    }

    // A diff of two refs.
    b.open("#/diff/main/feature", "diff");
    assert_eq!(
        b.count("table#diff tr[data-table='raw.customers'][data-change='changed']"),
        1
    );
    assert_eq!(
        b.count("table#diff tr[data-table='raw.extra'][data-change='added']"),
        1
    );
    b.screenshot("diff");
    b.assert_not_pwned();

    if std::env::var_os("LH_UPDATE_SCREENSHOTS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(dag_picture.unwrap(), docs.join("console-run.png")).unwrap();
        std::fs::copy(graph_picture, docs.join("console-graph.png")).unwrap();
    }
    eprintln!("console screenshots in {}", artifacts().display());
}
