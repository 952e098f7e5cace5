//! Every route of the server with the action it needs: the one table the guard checks
//! requests against and the permission tests are generated from. A route missing here
//! is refused to everyone (the guard fails closed), so a new route cannot slip through
//! unguarded.

use axum::http::Method;

use super::Action;

/// A route: its method, its path as the router declares it, and what it needs (`None`:
/// open without a token: the token exchange, which checks its own credentials, and the
/// web console's files, which hold no data).
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub action: Option<Action>,
}

macro_rules! routes {
    ($($method:ident $path:literal => $action:expr,)*) => {
        /// Every route of lh's API and of the Iceberg REST catalog.
        pub fn all() -> Vec<Route> {
            vec![$(Route { method: Method::$method, path: $path, action: $action },)*]
        }
    };
}

use Action::{Admin, Merge, Read, Run, Write};

routes! {
    GET "/" => None,
    GET "/console/{file}" => None,
    GET "/api/v1/info" => Some(Read),
    GET "/api/v1/openapi.json" => Some(Read),
    GET "/api/v1/refs" => Some(Read),
    POST "/api/v1/refs" => Some(Write),
    GET "/api/v1/refs/{name}" => Some(Read),
    DELETE "/api/v1/refs/{name}" => Some(Merge),
    POST "/api/v1/refs/{name}/assign" => Some(Merge),
    POST "/api/v1/refs/{name}/protect" => Some(Admin),
    DELETE "/api/v1/refs/{name}/protect" => Some(Admin),
    GET "/api/v1/log" => Some(Read),
    GET "/api/v1/commits/{id}" => Some(Read),
    GET "/api/v1/diff" => Some(Read),
    GET "/api/v1/diff/rows" => Some(Read),
    POST "/api/v1/merge" => Some(Merge),
    POST "/api/v1/merge/preview" => Some(Merge),
    GET "/api/v1/tables" => Some(Read),
    GET "/api/v1/tables/{name}" => Some(Read),
    DELETE "/api/v1/tables/{name}" => Some(Write),
    POST "/api/v1/tables/{name}/import" => Some(Write),
    POST "/api/v1/tables/{name}/compact" => Some(Write),
    POST "/api/v1/tables/{name}/expire" => Some(Write),
    POST "/api/v1/uploads" => Some(Write),
    POST "/api/v1/gc" => Some(Admin),
    POST "/api/v1/query" => Some(Read),
    GET "/api/v1/runs" => Some(Read),
    POST "/api/v1/runs" => Some(Run),
    POST "/api/v1/runs/plan" => Some(Run),
    GET "/api/v1/lineage" => Some(Read),
    GET "/api/v1/runs/{id}" => Some(Read),
    GET "/api/v1/runs/{id}/logs" => Some(Read),
    POST "/api/v1/runs/{id}/cancel" => Some(Run),
    POST "/api/v1/runs/{id}/rerun" => Some(Run),
    GET "/api/v1/audit" => Some(Admin),
    GET "/api/v1/tokens" => Some(Admin),
    POST "/api/v1/tokens" => Some(Admin),
    DELETE "/api/v1/tokens/{id}" => Some(Admin),
    GET "/api/v1/roles" => Some(Read),
    PUT "/api/v1/roles/{name}" => Some(Admin),
    DELETE "/api/v1/roles/{name}" => Some(Admin),
    GET "/api/v1/checks" => Some(Admin),
    POST "/api/v1/checks" => Some(Admin),
    DELETE "/api/v1/checks/{name}" => Some(Admin),
    GET "/api/v1/hooks" => Some(Admin),
    POST "/api/v1/hooks" => Some(Admin),
    DELETE "/api/v1/hooks/{name}" => Some(Admin),
    GET "/api/v1/secrets" => Some(Run),
    PUT "/api/v1/secrets/{name}" => Some(Admin),
    DELETE "/api/v1/secrets/{name}" => Some(Admin),
    GET "/iceberg/v1/config" => Some(Read),
    POST "/iceberg/v1/oauth/tokens" => None,
    GET "/iceberg/v1/{prefix}/namespaces" => Some(Read),
    POST "/iceberg/v1/{prefix}/namespaces" => Some(Write),
    GET "/iceberg/v1/{prefix}/namespaces/{ns}" => Some(Read),
    HEAD "/iceberg/v1/{prefix}/namespaces/{ns}" => Some(Read),
    DELETE "/iceberg/v1/{prefix}/namespaces/{ns}" => Some(Write),
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/properties" => Some(Write),
    GET "/iceberg/v1/{prefix}/namespaces/{ns}/tables" => Some(Read),
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/tables" => Some(Write),
    GET "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}" => Some(Read),
    HEAD "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}" => Some(Read),
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}" => Some(Write),
    DELETE "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}" => Some(Write),
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/register" => Some(Write),
    POST "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}/metrics" => Some(Read),
    POST "/iceberg/v1/{prefix}/tables/rename" => Some(Write),
    POST "/iceberg/v1/{prefix}/transactions/commit" => Some(Write),
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
