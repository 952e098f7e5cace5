//! Every route of the server with the action it needs: the one table the guard checks
//! requests against and the permission tests are generated from. A route missing here
//! is refused to everyone (the guard fails closed), so a new route cannot slip through
//! unguarded.

use axum::http::Method;

use super::Action;

/// A route: its method, its path as the router declares it, what it needs (`None`:
/// open without a token: the token exchange, which checks its own credentials, and the
/// web console's files, which hold no data), and what it does in a user's words (a
/// refusal says "importing into a table needs ...", never the route).
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub action: Option<Action>,
    pub what: &'static str,
}

macro_rules! routes {
    ($($method:ident $path:literal => $action:expr, $what:literal,)*) => {
        /// Every route of lh's API and of the Iceberg REST catalog.
        pub fn all() -> Vec<Route> {
            vec![$(Route { method: Method::$method, path: $path, action: $action, what: $what },)*]
        }
    };
}

use Action::{Admin, Merge, Read, Run, Write};

routes! {
    GET "/" => None, "opening the console",
    GET "/console/{file}" => None, "opening the console",
    GET "/api/v1/info" => Some(Read), "reading the server's details",
    GET "/api/v1/openapi.json" => Some(Read), "reading the API's description",
    GET "/api/v1/refs" => Some(Read), "listing branches and tags",
    POST "/api/v1/refs" => Some(Write), "creating a branch or tag",
    GET "/api/v1/refs/{name}" => Some(Read), "reading a branch or tag",
    DELETE "/api/v1/refs/{name}" => Some(Merge), "deleting a branch or tag",
    POST "/api/v1/refs/{name}/assign" => Some(Merge), "resetting a branch",
    POST "/api/v1/refs/{name}/protect" => Some(Admin), "protecting a branch",
    DELETE "/api/v1/refs/{name}/protect" => Some(Admin), "unprotecting a branch",
    GET "/api/v1/log" => Some(Read), "reading the log",
    GET "/api/v1/commits/{id}" => Some(Read), "reading a commit",
    GET "/api/v1/diff" => Some(Read), "comparing refs",
    GET "/api/v1/diff/rows" => Some(Read), "comparing a table's rows",
    POST "/api/v1/merge" => Some(Merge), "merging",
    POST "/api/v1/merge/preview" => Some(Merge), "previewing a merge",
    GET "/api/v1/tables" => Some(Read), "listing tables",
    GET "/api/v1/tables/{name}" => Some(Read), "reading a table",
    DELETE "/api/v1/tables/{name}" => Some(Write), "dropping a table",
    POST "/api/v1/tables/{name}/import" => Some(Write), "importing into a table",
    POST "/api/v1/tables/{name}/compact" => Some(Write), "compacting a table",
    POST "/api/v1/tables/{name}/expire" => Some(Write), "expiring a table's snapshots",
    POST "/api/v1/uploads" => Some(Write), "uploading a file to import",
    POST "/api/v1/gc" => Some(Admin), "collecting unreferenced files",
    POST "/api/v1/query" => Some(Read), "querying",
    GET "/api/v1/query/progress/{id}" => Some(Read), "following a query's progress",
    GET "/api/v1/runs" => Some(Read), "listing runs",
    POST "/api/v1/runs" => Some(Run), "running a pipeline",
    POST "/api/v1/runs/plan" => Some(Run), "planning a pipeline",
    GET "/api/v1/lineage" => Some(Read), "reading lineage",
    GET "/api/v1/runs/{id}" => Some(Read), "reading a run",
    GET "/api/v1/runs/{id}/logs" => Some(Read), "reading a run's logs",
    POST "/api/v1/runs/{id}/cancel" => Some(Run), "cancelling a run",
    POST "/api/v1/runs/{id}/rerun" => Some(Run), "rerunning a run",
    GET "/api/v1/audit" => Some(Admin), "reading the audit log",
    GET "/api/v1/tokens" => Some(Admin), "listing tokens",
    POST "/api/v1/tokens" => Some(Admin), "creating a token",
    DELETE "/api/v1/tokens/{id}" => Some(Admin), "revoking a token",
    GET "/api/v1/roles" => Some(Read), "listing roles",
    PUT "/api/v1/roles/{name}" => Some(Admin), "defining a role",
    DELETE "/api/v1/roles/{name}" => Some(Admin), "deleting a role",
    GET "/api/v1/checks" => Some(Admin), "listing checks",
    POST "/api/v1/checks" => Some(Admin), "adding a check",
    DELETE "/api/v1/checks/{name}" => Some(Admin), "removing a check",
    GET "/api/v1/hooks" => Some(Admin), "listing hooks",
    POST "/api/v1/hooks" => Some(Admin), "adding a hook",
    DELETE "/api/v1/hooks/{name}" => Some(Admin), "removing a hook",
    GET "/api/v1/secrets" => Some(Run), "listing secrets",
    PUT "/api/v1/secrets/{name}" => Some(Admin), "setting a secret",
    DELETE "/api/v1/secrets/{name}" => Some(Admin), "deleting a secret",
    GET "/iceberg/v1/config" => Some(Read), "reading the Iceberg REST catalog's configuration",
    POST "/iceberg/v1/oauth/tokens" => None, "exchanging a token",
    GET "/iceberg/v1/{prefix}/namespaces" => Some(Read), "listing namespaces through the Iceberg REST catalog",
    POST "/iceberg/v1/{prefix}/namespaces" => Some(Write), "creating a namespace through the Iceberg REST catalog",
    GET "/iceberg/v1/{prefix}/namespaces/{ns}" => Some(Read), "reading a namespace through the Iceberg REST catalog",
    HEAD "/iceberg/v1/{prefix}/namespaces/{ns}" => Some(Read), "reading a namespace through the Iceberg REST catalog",
    DELETE "/iceberg/v1/{prefix}/namespaces/{ns}" => Some(Write), "dropping a namespace through the Iceberg REST catalog",
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/properties" => Some(Write), "setting a namespace's properties through the Iceberg REST catalog",
    GET "/iceberg/v1/{prefix}/namespaces/{ns}/tables" => Some(Read), "listing tables through the Iceberg REST catalog",
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/tables" => Some(Write), "creating a table through the Iceberg REST catalog",
    GET "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}" => Some(Read), "loading a table through the Iceberg REST catalog",
    HEAD "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}" => Some(Read), "loading a table through the Iceberg REST catalog",
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}" => Some(Write), "committing to a table through the Iceberg REST catalog",
    DELETE "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}" => Some(Write), "dropping a table through the Iceberg REST catalog",
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/register" => Some(Write), "registering a table through the Iceberg REST catalog",
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}/metrics" => Some(Read), "reporting metrics through the Iceberg REST catalog",
    POST "/iceberg/v1/{prefix}/tables/rename" => Some(Write), "renaming a table through the Iceberg REST catalog",
    POST "/iceberg/v1/{prefix}/transactions/commit" => Some(Write), "committing a transaction through the Iceberg REST catalog",
}

/// What a request to `path` (as matched) with `method` needs: `Err(true)` when the path
/// is known but not with this method (405), `Err(false)` when the path is not in the
/// table at all.
pub fn lookup(routes: &[Route], method: &Method, path: &str) -> Result<Option<Action>, bool> {
    // HEAD is answered by a GET route unless one of its own is declared.
    let found = |m: &Method| routes.iter().find(|r| r.path == path && r.method == *m);
    if let Some(r) = found(method) {
        return Ok(r.action);
    }
    if method == Method::HEAD
        && let Some(r) = found(&Method::GET)
    {
        return Ok(r.action);
    }
    Err(routes.iter().any(|r| r.path == path))
}

/// What a request to `path` (as matched) with `method` does, in a user's words.
pub fn what(routes: &[Route], method: &Method, path: &str) -> Option<&'static str> {
    let found = |m: &Method| routes.iter().find(|r| r.path == path && r.method == *m);
    found(method)
        .or_else(|| {
            (method == Method::HEAD)
                .then(|| found(&Method::GET))
                .flatten()
        })
        .map(|r| r.what)
}
