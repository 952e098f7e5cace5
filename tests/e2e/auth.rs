//! Authentication and permissions: every route against every role (generated from the
//! server's route table), tokens that expire and are revoked, forged and malformed
//! tokens, Host and Origin checks, the body limit, `--no-auth`, and commit authors.

use std::time::Duration;

use lh_control_plane::auth::Role;
use lh_control_plane::auth::routes;
use lh_e2e::{Server, lh_bin};
use serde_json::{Value, json};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// A request with optional bearer token and headers; the status and the JSON body.
pub(crate) fn call(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value, Vec<(String, String)>) {
    let url = format!("{}{path}", server.url);
    let a = agent();
    let mut req = ureq::http::Request::builder().method(method).uri(&url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = match body {
        Some(b) => a.run(
            req.header("content-type", "application/json")
                .body(b.to_string())
                .unwrap(),
        ),
        None => a.run(req.body(()).unwrap()),
    }
    .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = res.status().as_u16();
    let hs = res
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let text = res.into_body().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        hs,
    )
}

/// A route's path with its parameters filled in with names that exist nowhere.
fn concrete(path: &str) -> String {
    path.replace("{prefix}", "main")
        .replace("{ns}", "no_such_ns")
        .replace("{table}", "no_such_table")
        .replace("{name}", "no-such-ref")
        .replace("{id}", "0123456789abcdef")
}

/// The permission matrix: each role against each route of lh's API and the REST
/// catalog, from the server's own route table (a route missing there is refused to
/// everyone, so none can be missed): no token and a forged one get 401; a role without
/// the route's action gets 403 `permission_denied` (in the surface's error model); a
/// role with it gets past the guard (whatever the handler then answers).
#[test]
fn every_route_answers_each_role_as_its_table_says() {
    let server = Server::start_with(&["--runtime", "process"]);
    let tokens: Vec<(Role, String)> = Role::ALL
        .into_iter()
        .map(|r| {
            (
                r,
                server.token_for(&format!("u-{}", r.as_str()), r.as_str()),
            )
        })
        .collect();
    // Well formed, with the id of a real token, but the wrong secret.
    let real = &tokens[0].1;
    let forged = format!("{}{}", &real[..real.len() - 64], "0".repeat(64));
    let mut checked = 0;
    for route in routes::all() {
        let path = concrete(route.path);
        let method = route.method.as_str();
        let body = (method == "POST").then(|| json!({}));
        let rest = route.path.starts_with("/iceberg/");
        let Some(action) = route.action else {
            // The token exchange checks the credentials in its body instead; the web
            // console's files hold no data.
            let (s, v, _) = call(&server, method, &path, None, &[], None);
            assert!(s != 401 && s != 403, "{method} {path}: {s} {v}");
            continue;
        };
        for token in [None, Some("lht_nonsense"), Some(forged.as_str())] {
            let (s, v, h) = call(&server, method, &path, token, &[], body.clone());
            assert_eq!(s, 401, "{method} {path} with {token:?}: {v}");
            assert!(
                h.iter()
                    .any(|(k, v)| k == "www-authenticate" && v.starts_with("Bearer")),
                "{h:?}"
            );
            if method != "HEAD" {
                if rest {
                    assert_eq!(v["error"]["type"], "NotAuthorizedException", "{v}");
                } else {
                    assert_eq!(v["error"]["kind"], "unauthenticated", "{v}");
                }
            }
        }
        for (role, token) in &tokens {
            let (s, v, _) = call(&server, method, &path, Some(token), &[], body.clone());
            if role.allows(action) {
                assert!(
                    s != 401 && s != 403,
                    "{method} {path} as {}: {s} {v}",
                    role.as_str()
                );
            } else {
                assert_eq!(s, 403, "{method} {path} as {}: {v}", role.as_str());
                if method != "HEAD" {
                    let message = if rest {
                        assert_eq!(v["error"]["type"], "ForbiddenException", "{v}");
                        v["error"]["message"].as_str().unwrap().to_string()
                    } else {
                        assert_eq!(v["error"]["kind"], "permission_denied", "{v}");
                        v["error"]["message"].as_str().unwrap().to_string()
                    };
                    assert!(
                        message.contains(action.as_str()) && message.contains(role.as_str()),
                        "{message}"
                    );
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 150, "{checked}");
}

/// The route table covers every path of lh's API as its OpenAPI document lists them.
#[test]
fn the_route_table_covers_the_documented_api() {
    let doc: Value = serde_json::from_str(&lh_control_plane::api::openapi::document()).unwrap();
    let table = routes::all();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            assert!(
                table
                    .iter()
                    .any(|r| r.path == path && r.method.as_str().eq_ignore_ascii_case(method)),
                "{method} {path} is not in auth::routes"
            );
        }
    }
}

#[test]
fn tokens_expire_are_revoked_and_are_never_shown_again() {
    let server = Server::start();
    let lh = server.lh();
    let out = lh.run(&[
        "token",
        "create",
        "--user",
        "bob",
        "--role",
        "writer",
        "--expires",
        "10s",
    ]);
    // Long enough for a busy machine to use it before it expires.
    let made = std::time::Instant::now();
    let bob = out.ok().trim().to_string();
    assert!(bob.starts_with("lht_"), "{bob}");
    assert!(
        out.stderr.contains("shown only this once"),
        "{}",
        out.stderr
    );
    let carol = server.token_for("carol", "reader");
    let as_bob = lh.with_token(&bob);
    let as_carol = lh.with_token(&carol);
    as_bob.run(&["branch", "create", "bobs"]).ok();
    as_carol.run(&["branch", "ls"]).ok();

    // The listing shows who, which role and the state; never a secret.
    let listed = lh.run(&["token", "ls", "-o", "json"]);
    let text = listed.ok();
    assert!(
        !text.contains(&bob[20..]) && !text.contains(&carol[20..]),
        "{text}"
    );
    let v: Value = serde_json::from_str(text).unwrap();
    let carol_id = v
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["user"] == "carol")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(carol.contains(&carol_id));

    // Revoked: refused at once, 401 and exit 9.
    lh.run(&["token", "revoke", &carol_id]).ok();
    let err = as_carol.run(&["branch", "ls"]).fails(9).to_string();
    assert!(err.contains("not valid"), "{err}");
    // Expired: refused too.
    std::thread::sleep(Duration::from_millis(10_500).saturating_sub(made.elapsed()));
    as_bob.run(&["branch", "ls"]).fails(9);
    let table = lh.run(&["token", "ls"]).ok().to_string();
    assert!(
        table
            .lines()
            .any(|l| l.contains("carol") && l.contains("revoked")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("bob") && l.contains("expired")),
        "{table}"
    );
    // Only admins manage tokens; a writer may not make itself an admin.
    let dave = server.token_for("dave", "writer");
    let err = lh
        .with_token(&dave)
        .run(&["token", "create", "--role", "admin"])
        .fails(9)
        .to_string();
    assert!(err.contains("'admin' permission"), "{err}");
    // Bad input: an unknown role (not found), a bad user name, a zero lifetime.
    let err = lh
        .run(&["token", "create", "--role", "root"])
        .fails(3)
        .to_string();
    assert!(err.contains("no role 'root'"), "{err}");
    lh.run(&["token", "create", "--user", "a b"]).fails(5);
    lh.run(&["token", "create", "--expires", "0s"]).fails(2);
    lh.run(&["token", "revoke", "0123456789abcdef"]).fails(3);
    // Nothing of any secret reaches the server's log.
    let log = server.log();
    for t in [&bob, &carol, &dave, &server.token()] {
        assert!(
            !log.contains(&t[21..]),
            "a token secret is in the server log"
        );
    }
}

#[test]
fn the_author_of_a_change_is_the_token_user_and_roles_limit_what_they_do() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("a.csv", "id,v\n1,10\n");
    let alice = lh.with_token(&server.token_for("alice", "writer"));
    let rita = lh.with_token(&server.token_for("rita", "reader"));
    let mark = lh.with_token(&server.token_for("mark", "maintainer"));
    // The LH_USER a client claims is ignored: the token says who it is.
    alice
        .run(&["table", "import", "shop.a", csv.to_str().unwrap()])
        .ok();
    let log: Value = serde_json::from_str(lh.run(&["log", "main", "-o", "json"]).ok()).unwrap();
    assert_eq!(log[0]["author"], "alice", "{log}");
    // A reader reads and queries, and changes nothing.
    assert!(
        rita.run(&["query", "select count(*) n from shop.a"])
            .ok()
            .contains('1')
    );
    let head = lh.head("main");
    let err = rita
        .run(&["table", "import", "shop.b", csv.to_str().unwrap()])
        .fails(9)
        .to_string();
    // Said in the user's terms: what they did, never the API's route.
    assert!(
        err.contains("uploading a file to import needs the 'write' permission")
            && err.contains("rita")
            && !err.contains("/api/"),
        "{err}"
    );
    let err = rita.run(&["branch", "create", "r"]).fails(9).to_string();
    assert!(
        err.contains("creating a branch or tag needs the 'write' permission")
            && !err.contains("/api/"),
        "{err}"
    );
    assert_eq!(lh.head("main"), head);
    // A writer branches and writes, and may not merge or move refs.
    alice.run(&["branch", "create", "feature"]).ok();
    alice
        .run(&[
            "table",
            "import",
            "shop.b",
            csv.to_str().unwrap(),
            "--ref",
            "feature",
        ])
        .ok();
    let err = alice
        .run(&["merge", "feature", "--into", "main"])
        .fails(9)
        .to_string();
    assert!(err.contains("'merge' permission"), "{err}");
    alice.run(&["branch", "delete", "feature"]).fails(9);
    assert_eq!(lh.head("main"), head);
    // A maintainer merges, as itself (main moved meanwhile: a merge commit).
    lh.run(&["table", "import", "shop.c", csv.to_str().unwrap()])
        .ok();
    mark.run(&["merge", "feature", "--into", "main"]).ok();
    let log: Value = serde_json::from_str(lh.run(&["log", "main", "-o", "json"]).ok()).unwrap();
    assert_eq!(log[0]["author"], "mark", "{log}");
    mark.run(&["gc", "--dry-run"]).fails(9);
    lh.run(&["gc", "--dry-run"]).ok();
}

#[test]
fn only_loopback_names_and_allowed_origins_reach_a_loopback_server() {
    let server = Server::start_with(&["--allowed-origin", "http://app.example:8080"]);
    let token = server.token();
    let t = Some(token.as_str());
    // A DNS-rebinding page reaches 127.0.0.1 under its own name: refused, token or not.
    for host in ["evil.example", "evil.example:80", "127.0.0.1.evil.example"] {
        let (s, v, _) = call(&server, "GET", "/api/v1/refs", t, &[("Host", host)], None);
        assert_eq!(s, 403, "{host}: {v}");
        assert_eq!(v["error"]["kind"], "host_not_allowed", "{v}");
    }
    let port = server.url.rsplit(':').next().unwrap().to_string();
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]".into(),
    ] {
        let (s, v, _) = call(&server, "GET", "/api/v1/refs", t, &[("Host", &host)], None);
        assert_eq!(s, 200, "{host}: {v}");
    }
    // A page of another origin is refused, on both surfaces, before its token counts.
    let (s, v, _) = call(
        &server,
        "POST",
        "/api/v1/refs",
        t,
        &[("Origin", "http://evil.example")],
        Some(json!({"name": "x"})),
    );
    assert_eq!(s, 403, "{v}");
    assert_eq!(v["error"]["kind"], "origin_not_allowed", "{v}");
    let (s, v, _) = call(
        &server,
        "GET",
        "/iceberg/v1/config?warehouse=main",
        t,
        &[("Origin", "null")],
        None,
    );
    assert_eq!(
        (s, v["error"]["type"].as_str()),
        (403, Some("ForbiddenException")),
        "{v}"
    );
    assert_eq!(
        server
            .lh()
            .run(&["branch", "ls"])
            .ok()
            .matches('\n')
            .count(),
        2
    );
    // The allowed origin gets CORS headers, and its preflight an answer without a token.
    let origin = ("Origin", "http://app.example:8080");
    let (s, _, h) = call(&server, "GET", "/api/v1/refs", t, &[origin], None);
    assert_eq!(s, 200);
    assert!(
        h.contains(&(
            "access-control-allow-origin".into(),
            "http://app.example:8080".into()
        )),
        "{h:?}"
    );
    let (s, _, h) = call(
        &server,
        "OPTIONS",
        "/api/v1/refs",
        None,
        &[origin, ("Access-Control-Request-Method", "POST")],
        None,
    );
    assert_eq!(s, 204);
    assert!(
        h.iter()
            .any(|(k, v)| k == "access-control-allow-headers" && v.contains("authorization")),
        "{h:?}"
    );
    // No CORS headers for anyone else.
    let (_, _, h) = call(&server, "GET", "/api/v1/refs", t, &[], None);
    assert!(
        !h.iter().any(|(k, _)| k.starts_with("access-control")),
        "{h:?}"
    );
}

#[test]
fn a_request_body_over_the_limit_is_refused_and_changes_nothing() {
    let server = Server::start_with(&["--max-request", "64k"]);
    let token = server.token();
    let big = json!({"sql": format!("select '{}'", "x".repeat(100_000))});
    let (s, _, _) = call(
        &server,
        "POST",
        "/api/v1/query",
        Some(&token),
        &[],
        Some(big),
    );
    assert_eq!(s, 413);
    let (s, v, _) = call(
        &server,
        "POST",
        "/api/v1/query",
        Some(&token),
        &[],
        Some(json!({"sql": "select 42 as n"})),
    );
    assert_eq!(s, 200, "{v}");
}

#[test]
fn no_auth_only_on_loopback_and_it_says_so() {
    // Refused on any other address, before anything is opened.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(lh_bin())
        .args(["server", "--no-auth", "--bind", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("LH_HOME", dir.path().join("home"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--no-auth is only allowed on a loopback address"),
        "{err}"
    );
    assert!(!dir.path().join("data").join("catalog.db").exists());

    let server = Server::start_with(&["--no-auth"]);
    let lh = server.lh();
    // No token is made, none is needed; the author is the one the client names.
    assert!(
        !std::fs::read_to_string(lh.home.join("config.yaml"))
            .unwrap_or_default()
            .contains("token"),
    );
    let (s, _, _) = call(&server, "GET", "/api/v1/refs", None, &[], None);
    assert_eq!(s, 200);
    assert!(
        lh.run(&["info"])
            .ok()
            .contains("auth           off (--no-auth")
    );
    let csv = lh.file("a.csv", "id\n1\n");
    lh.run(&["table", "import", "s.t", csv.to_str().unwrap()])
        .ok();
    let log: Value = serde_json::from_str(lh.run(&["log", "main", "-o", "json"]).ok()).unwrap();
    assert_eq!(log[0]["author"], "tester");
    // Host and Origin are checked all the same: the page of another site is refused.
    let (s, _, _) = call(
        &server,
        "GET",
        "/api/v1/refs",
        None,
        &[("Host", "evil.example")],
        None,
    );
    assert_eq!(s, 403);
    let (s, _, _) = call(
        &server,
        "GET",
        "/api/v1/refs",
        None,
        &[("Origin", "http://evil.example")],
        None,
    );
    assert_eq!(s, 403);
}

/// A command pointed at another server (a pasted `--endpoint`, a script's LH_ENDPOINT)
/// does not take the profile's token there.
#[test]
fn the_profile_token_goes_only_to_the_profile_server() {
    let server = Server::start();
    let lh = server.lh();
    // The profile's own server gets it.
    let out = lh
        .command(&["branch", "ls"])
        .env_remove("LH_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another one does not.
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = trap.local_addr().unwrap().port();
    let seen = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut conn, _) = trap.accept().unwrap();
        let mut buf = vec![0u8; 16384];
        let n = conn.read(&mut buf).unwrap();
        let body = r#"{"error":{"kind":"unauthenticated","message":"no"}}"#;
        let _ = write!(
            conn,
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        String::from_utf8_lossy(&buf[..n]).to_string()
    });
    let out = lh
        .command(&[
            "branch",
            "ls",
            "--endpoint",
            &format!("http://127.0.0.1:{port}"),
        ])
        .env_remove("LH_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(9));
    let request = seen.join().unwrap().to_ascii_lowercase();
    assert!(request.starts_with("get /api/v1/refs"), "{request}");
    assert!(!request.contains("authorization"), "{request}");
    assert!(!request.contains(&server.token()[21..]), "{request}");
}

#[test]
fn a_lost_admin_token_is_replaced_by_the_machine_owner() {
    let mut server = Server::start();
    let lh = server.lh();
    let first = server.token();
    lh.run(&["branch", "create", "kept"]).ok();
    // The profile loses its token; a restart makes none (tokens exist)...
    let config = lh.home.join("config.yaml");
    std::fs::write(&config, "profiles: {}\n").unwrap();
    server.restart();
    let lh = server.lh();
    lh.run(&["branch", "ls"]).fails(9);
    // ...unless asked, by whoever can start the server on its data.
    server.restart_with(&["--new-admin-token"]);
    let lh = server.lh();
    assert!(lh.run(&["branch", "ls"]).ok().contains("kept"));
    assert_ne!(server.token(), first);
    // The old token still works until revoked: it was not lost, only forgotten here.
    assert_eq!(lh.with_token(&first).run(&["branch", "ls"]).code, 0);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&config).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
}

/// The S3 key the REST catalog vends is the server's own: it goes to the roles the
/// operator chose (admins by default), never to a reader.
#[test]
fn vended_credentials_go_only_to_the_roles_allowed() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("a.csv", "id\n1\n");
    lh.run(&["table", "import", "shop.a", csv.to_str().unwrap()])
        .ok();
    let path = "/iceberg/v1/main/namespaces/shop/tables/a";
    let ask = [("X-Iceberg-Access-Delegation", "vended-credentials")];
    let has_key = |token: &str| {
        let (s, v, _) = call(&server, "GET", path, Some(token), &ask, None);
        assert_eq!(s, 200, "{v}");
        let text = v.to_string();
        text.contains("s3.secret-access-key")
    };
    for role in ["reader", "writer", "maintainer"] {
        assert!(!has_key(&server.token_for("u", role)), "{role} got the key");
    }
    // On S3 the admin gets it (a local warehouse has none to give).
    assert_eq!(has_key(&server.token()), server.warehouse.is_s3());
}

#[test]
fn rest_clients_need_a_token_and_write_as_its_user() {
    // On S3 the reader reads data files with the key the catalog vends (this server
    // trusts readers with it; see the test above for the default).
    let server = Server::start_with(&["--vend-credentials-to", "reader"]);
    let lh = server.lh();
    let csv = lh.file("a.csv", "id,v\n1,10\n2,20\n");
    lh.run(&["table", "import", "shop.a", csv.to_str().unwrap()])
        .ok();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/rest_clients.py");
    let run = |scenario: &str, envs: &[(&str, &str)], args: &[&str]| {
        std::process::Command::new(lh_e2e::python())
            .arg(script)
            .arg(scenario)
            .arg(format!("{}/iceberg", server.url))
            .arg("main")
            .args(args)
            .env_remove("LH_TEST_TOKEN")
            .env_remove("LH_TEST_OAUTH")
            .envs(envs.iter().copied())
            .output()
            .unwrap()
    };
    // Without a token pyiceberg and DuckDB are refused; with a bad one too.
    for envs in [&[][..], &[("LH_TEST_TOKEN", "lht_nonsense")][..]] {
        let out = run("read", envs, &["shop.a"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("401") || err.contains("NotAuthorized") || err.contains("Unauthorized"),
            "{err}"
        );
        let out = run(
            "duckdb_read",
            envs,
            &["select count(*) as n from lake.shop.a"],
        );
        assert!(!out.status.success());
    }
    // The exchange refuses a bad client secret, as OAuth says.
    let (s, v, _) = {
        let a = agent();
        let res = a
            .post(&format!("{}/iceberg/v1/oauth/tokens", server.url))
            .send_form([
                ("grant_type", "client_credentials"),
                ("client_secret", "lht_nonsense"),
            ])
            .unwrap();
        let s = res.status().as_u16();
        let text = res.into_body().read_to_string().unwrap();
        (s, serde_json::from_str::<Value>(&text).unwrap(), ())
    };
    assert_eq!(
        (s, v["error"].as_str()),
        (401, Some("invalid_client")),
        "{v}"
    );
    // A reader's token reads through both clients, and may not write.
    let reader = server.token_for("reporting", "reader");
    let out = run("read", &[("LH_TEST_TOKEN", &reader)], &["shop.a"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(
        "duckdb_read",
        &[("LH_TEST_TOKEN", &reader)],
        &["select count(*) as n from lake.shop.a"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rows"], json!([[2]]), "{v}");
    let out = run("write_error", &[("LH_TEST_TOKEN", &reader)], &["shop.a"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Forbidden"), "{text}");
}

/// A protected branch changes only by a merge, by a role that may merge: no direct
/// write (import, table removal, Iceberg REST commit) of anyone, admins included, no
/// reassignment or deletion, and a run publishing to it starts only for a role that may
/// merge.
#[test]
fn a_protected_branch_changes_only_by_a_merge() {
    let server = Server::start_with(&["--runtime", "process"]);
    let lh = server.lh();
    let csv = lh.file("a.csv", "id,v\n1,10\n");
    lh.run(&["table", "import", "shop.a", csv.to_str().unwrap()])
        .ok();
    let alice = lh.with_token(&server.token_for("alice", "writer"));
    let mark = lh.with_token(&server.token_for("mark", "maintainer"));
    // Only admins protect.
    mark.run(&["branch", "protect", "main"]).fails(9);
    lh.run(&["branch", "protect", "main"]).ok();
    lh.run(&["tag", "create", "v1"]).ok();
    lh.run(&["tag", "protect", "v1"]).fails(5);
    assert!(lh.run(&["branch", "ls"]).ok().contains("main (protected)"));
    let listed: Value = serde_json::from_str(lh.run(&["branch", "ls", "-o", "json"]).ok()).unwrap();
    assert_eq!(listed[0]["protected"], true, "{listed}");
    let head = lh.head("main");

    // Direct writes are refused, the admin's too, and leave nothing behind.
    let err = lh
        .run(&["table", "import", "shop.b", csv.to_str().unwrap()])
        .fails(9)
        .to_string();
    assert!(err.contains("branch 'main' is protected"), "{err}");
    assert!(
        err.contains("hint: make the change on another branch"),
        "{err}"
    );
    lh.run(&["table", "rm", "shop.a"]).fails(9);
    lh.run(&["branch", "rm", "main"]).fails(9);
    // A repeated kind is refused rather than read two ways.
    let (s, v, _) = call(
        &server,
        "DELETE",
        "/api/v1/refs/main?kind=branch&kind=tag",
        Some(&server.token()),
        &[],
        None,
    );
    assert_eq!(s, 400, "{v}");
    let (s, v, _) = call(
        &server,
        "DELETE",
        "/iceberg/v1/main/namespaces/shop/tables/a",
        Some(&server.token()),
        &[],
        None,
    );
    assert_eq!(
        (s, v["error"]["type"].as_str()),
        (403, Some("ForbiddenException")),
        "{v}"
    );
    let (s, v, _) = call(
        &server,
        "POST",
        "/api/v1/refs/main/assign",
        Some(&server.token()),
        &[],
        Some(json!({"expected": head, "to": "v1"})),
    );
    assert_eq!(
        (s, v["error"]["kind"].as_str()),
        (403, Some("branch_protected")),
        "{v}"
    );
    assert_eq!(lh.head("main"), head);
    let tables: Value = serde_json::from_str(lh.run(&["table", "ls", "-o", "json"]).ok()).unwrap();
    assert_eq!(tables["tables"].as_array().unwrap().len(), 1, "{tables}");

    // The way in: a branch, and a merge by a role that may merge.
    alice.run(&["branch", "create", "fix"]).ok();
    alice
        .run(&[
            "table",
            "import",
            "shop.b",
            csv.to_str().unwrap(),
            "--ref",
            "fix",
        ])
        .ok();
    alice.run(&["merge", "fix", "--into", "main"]).fails(9);
    mark.run(&["merge", "fix", "--into", "main"]).ok();
    assert_ne!(lh.head("main"), head);

    // A run publishing to main is a merge: a writer may not start one, a maintainer may.
    let dir = lh.cwd.join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lh_project.yml"),
        "name: shop\nnamespace: analytics\n",
    )
    .unwrap();
    std::fs::write(dir.join("a.sql"), "select count(*) as n from shop.b\n").unwrap();
    let err = alice
        .run(&["run", dir.to_str().unwrap()])
        .fails(9)
        .to_string();
    assert!(err.contains("'merge' permission"), "{err}");
    alice
        .run(&["run", dir.to_str().unwrap(), "--ref", "fix"])
        .ok();
    mark.run(&["run", dir.to_str().unwrap()]).ok();
    assert!(
        lh.run(&["table", "ls"]).ok().contains("analytics.a"),
        "the run published to main"
    );

    // Unprotected (admins only), main takes direct writes again.
    mark.run(&["branch", "unprotect", "main"]).fails(9);
    lh.run(&["branch", "unprotect", "main"]).ok();
    lh.run(&["table", "import", "shop.c", csv.to_str().unwrap()])
        .ok();
}

/// Every request that changes something, or tried to, is in the audit log: who, when,
/// from where, what, and how it ended; only admins read it.
#[test]
fn the_audit_log_records_every_change_and_every_refusal() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("a.csv", "id\n1\n");
    let rita = lh.with_token(&server.token_for("rita", "reader"));
    let alice = lh.with_token(&server.token_for("alice", "writer"));
    alice
        .run(&["table", "import", "shop.a", csv.to_str().unwrap()])
        .ok();
    alice.run(&["branch", "create", "dev"]).ok();
    rita.run(&["branch", "create", "nope"]).fails(9);
    let (s, _, _) = call(
        &server,
        "POST",
        "/api/v1/refs",
        Some("lht_bad"),
        &[],
        Some(json!({"name": "nope", "kind": "branch"})),
    );
    assert_eq!(s, 401);
    rita.run(&["query", "select 1"]).ok();
    let out = lh.run(&["audit", "-o", "json"]);
    let entries: Value = serde_json::from_str(out.ok()).unwrap();
    let entries = entries.as_array().unwrap();
    let find = |user: &str, route: &str, status: u64| {
        entries.iter().find(|e| {
            e["user"] == user && e["route"] == route && e["status"].as_u64() == Some(status)
        })
    };
    let import = find("alice", "/api/v1/tables/{name}/import", 200)
        .or_else(|| find("alice", "/api/v1/tables/{name}/import", 201))
        .unwrap_or_else(|| panic!("no import by alice in {entries:?}"));
    assert_eq!(import["path"], "/api/v1/tables/shop.a/import");
    assert_eq!(import["action"], "write");
    assert_eq!(import["remote"], "127.0.0.1");
    assert!(import["request_id"].as_str().is_some_and(|r| r.len() > 10));
    assert!(find("alice", "/api/v1/refs", 201).is_some(), "{entries:?}");
    // Refusals too: a role that may not, and a token that is not one.
    assert!(find("rita", "/api/v1/refs", 403).is_some(), "{entries:?}");
    assert!(
        find("(no valid token)", "/api/v1/refs", 401).is_some(),
        "{entries:?}"
    );
    // Reads are not changes.
    assert!(
        !entries.iter().any(|e| e["route"] == "/api/v1/query"),
        "{entries:?}"
    );
    // Newest first, filtered by user and time.
    let alice_only: Value =
        serde_json::from_str(lh.run(&["audit", "--user", "alice", "-o", "json"]).ok()).unwrap();
    assert!(
        alice_only
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["user"] == "alice")
    );
    assert_eq!(alice_only[0]["route"], "/api/v1/refs", "{alice_only}");
    let table = lh.run(&["audit", "--since", "1h"]).ok().to_string();
    assert!(table.contains("alice") && table.contains("403"), "{table}");
    // Only admins read it.
    rita.run(&["audit"]).fails(9);
    alice.run(&["audit"]).fails(9);
}

/// A branch protected while a writer's run works on it does not take that run's
/// publish: the run fails, the branch stays, the run branch is kept.
#[test]
fn a_run_does_not_publish_to_a_branch_protected_while_it_ran() {
    let server = Server::start_with(&["--runtime", "process"]);
    let lh = server.lh();
    let csv = lh.file("o.csv", "id\n1\n2\n");
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    lh.run(&["branch", "create", "staging"]).ok();
    let alice = lh.with_token(&server.token_for("alice", "writer"));
    let dir = lh.cwd.join("slow");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lh_project.yml"),
        "name: shop\nnamespace: analytics\npython: \"3.11\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("m.py"),
        "import lh, time\n\n@lh.model()\ndef c(o=lh.Model(\"raw.orders\")):\n    time.sleep(4)\n    return o\n",
    )
    .unwrap();
    let head = lh.head("staging");
    let run = alice
        .command(&["run", dir.to_str().unwrap(), "--ref", "staging"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    lh.run(&["branch", "protect", "staging"]).ok();
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{err}");
    assert!(err.contains("the protected branch 'staging'"), "{err}");
    assert_eq!(lh.head("staging"), head);
}
