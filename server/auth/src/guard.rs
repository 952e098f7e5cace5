//! The check in front of every route: the Host header (a DNS-rebinding page reaches a
//! loopback server under its own name), the Origin header (no browser page may call
//! the API unless its origin is allowed or is the server's own web console), the bearer token, and the action the route
//! is declared with. Refusals are answered in the surface's own error model: lh's body
//! under `/api`, the Iceberg REST spec's under `/iceberg`.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Identity;
use super::roles::Roles;
use super::routes::{self, Route};
use super::tokens::Tokens;
use crate::error::{Code, Error, Kind};
use crate::http::{ApiError, IcebergError};

/// What the guard checks requests against.
pub struct Guard {
    /// `None`: `--no-auth` (a loopback bind only): every request is an admin.
    pub tokens: Option<Arc<Tokens>>,
    /// What a token's role grants.
    pub roles: Arc<Roles>,
    /// JWTs of an OpenID Connect issuer, accepted besides lh's tokens (`--oidc-*`).
    pub oidc: Option<Arc<super::oidc::Oidc>>,
    /// The host names (no port) requests may be addressed to; `None`: any.
    pub allowed_hosts: Option<Vec<String>>,
    /// The origins (`scheme://host[:port]`) browser pages may call from; they also get
    /// CORS headers.
    pub allowed_origins: Vec<String>,
    pub routes: Vec<Route>,
    /// The largest JSON body a request may carry.
    pub max_request_bytes: usize,
    /// Where requests that change something are recorded (none in unit tests).
    pub audit: Option<Arc<super::audit::AuditLog>>,
    /// The catalog whose history limits reads through a REST prefix
    /// (`auth::history`); none in unit tests.
    pub catalog: Option<lh_catalog::Catalog>,
}

impl Guard {
    /// The default host names of a server bound to `bind`: on a loopback address, only
    /// the loopback names, and `extra`; elsewhere any, unless `extra` names some.
    pub fn hosts_for(bind: IpAddr, extra: &[String]) -> Option<Vec<String>> {
        let mut hosts: Vec<String> = extra.iter().map(|h| h.to_ascii_lowercase()).collect();
        if bind.is_loopback() {
            hosts.extend(["localhost", "127.0.0.1", "[::1]"].map(String::from));
        } else if hosts.is_empty() {
            return None;
        }
        Some(hosts)
    }

    fn refuse(&self, path: &str, e: Error) -> Response {
        if path.starts_with("/iceberg/") {
            IcebergError(e).into_response()
        } else {
            ApiError(e).into_response()
        }
    }

    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(allowed) = &self.allowed_hosts else {
            return true;
        };
        let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let name = strip_port(host).to_ascii_lowercase();
        allowed.contains(&name)
    }

    /// Whether a browser's `Origin` is this server's own web console: the origin of the
    /// Host the request addressed, when that Host is one of the names the server
    /// serves. A server that serves any name (`allowed_hosts` is `None`) cannot tell its
    /// own page from a page whose name was rebound to it: it lets no origin through
    /// this way (`--allowed-host` or `--allowed-origin` then names its console).
    fn own_console(&self, origin: &str, headers: &HeaderMap) -> bool {
        own_console(self.allowed_hosts.is_some(), origin, headers)
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        self.allowed_origins
            .iter()
            .any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }

    async fn identify(&self, headers: &HeaderMap) -> Result<Identity, Error> {
        let Some(tokens) = &self.tokens else {
            return Ok(Identity::admin(crate::http::author(headers)));
        };
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Err(Error::new(
                Kind::Unauthenticated,
                Code::Unauthenticated,
                "this server needs a token (Authorization: Bearer ...)",
            )
            .with_remedy(lh_api::remedy::Remedy::PresentToken));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                // The scheme's name is case-insensitive (RFC 7235).
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then_some(rest)
            })
            .map(str::trim)
            .ok_or_else(|| {
                Error::new(
                    Kind::Unauthenticated,
                    Code::Unauthenticated,
                    "the Authorization header must be 'Bearer <token>'",
                )
            })?;
        if let Some(oidc) = &self.oidc
            && !token.starts_with(super::tokens::PREFIX)
            && super::oidc::Oidc::looks_like_jwt(token)
        {
            let v = oidc.verify(token).await.map_err(|e| {
                Error::new(
                    Kind::Unauthenticated,
                    Code::Unauthenticated,
                    format!("the identity provider's token is not accepted: {}", e.0),
                )
            })?;
            super::tokens::validate_user(&v.user).map_err(|e| {
                Error::new(
                    Kind::Unauthenticated,
                    Code::Unauthenticated,
                    format!("the token's user claim is not a usable name: {}", e.message),
                )
                .with_hint("point --oidc-user-claim at a claim such as email or preferred_username")
            })?;
            return Ok(Identity {
                access: self.roles.access(&v.roles).await?,
                user: v.user,
                token_id: None,
            });
        }
        let who = tokens.authenticate(token).await?;
        Ok(Identity {
            access: self.roles.access(std::slice::from_ref(&who.role)).await?,
            user: who.user,
            token_id: Some(who.token_id),
        })
    }
}

/// A Host header's name without its port (`[::1]:7878` is `[::1]`).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // `[addr]` or `[addr]:port`, nothing else (anything else matches no name).
        return match host.find(']') {
            Some(end)
                if host[end + 1..].is_empty()
                    || host[end + 1..].strip_prefix(':').is_some_and(|p| {
                        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
                    }) =>
            {
                &host[..=end]
            }
            _ => host,
        };
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

pub async fn guard(State(g): State<Arc<Guard>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if !g.host_allowed(req.headers()) {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("(none)")
            .chars()
            .take(200)
            .collect::<String>();
        return g.refuse(
            &path,
            Error::new(
                Kind::Forbidden,
                Code::HostNotAllowed,
                format!("requests to host '{host}' are not served here"),
            )
            .with_hint("start the server with --allowed-host NAME to serve that name"),
        );
    }
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .map(|o| o.to_str().unwrap_or("(not text)").to_string());
    if let Some(origin) = &origin {
        if !g.origin_allowed(origin) && !g.own_console(origin, req.headers()) {
            return g.refuse(
                &path,
                Error::new(
                    Kind::Forbidden,
                    Code::OriginNotAllowed,
                    format!(
                        "requests from web pages of '{}' are refused",
                        origin.chars().take(200).collect::<String>()
                    ),
                )
                .with_hint("start the server with --allowed-origin ORIGIN to allow one"),
            );
        }
        // A browser's preflight carries no token: answered here, for allowed origins.
        if req.method() == Method::OPTIONS
            && req
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            let mut r = StatusCode::NO_CONTENT.into_response();
            cors(r.headers_mut(), origin);
            let h = r.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("authorization, content-type, x-request-id"),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
            return r;
        }
    }
    let matched = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let declared = matched
        .as_deref()
        .map(|m| routes::lookup(&g.routes, req.method(), m));
    // What the audit log records: requests of routes that change something.
    let audited = match (&declared, &matched) {
        (Some(Ok(Some(action))), Some(route)) if *action != super::Action::Read => Some(Audited {
            action: *action,
            method: req.method().to_string(),
            route: route.clone(),
            path: path.clone(),
            remote: req
                .extensions()
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip().to_string()),
            request_id: req
                .headers()
                .get(lh_api::REQUEST_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        }),
        _ => None,
    };
    let mut identity_seen: Option<Identity> = None;
    // The token exchange authenticates with the credentials in its body.
    if !matches!(declared, Some(Ok(None))) {
        let mut identity = match g.identify(req.headers()).await {
            Ok(i) => i,
            Err(e) => {
                let r = g.refuse(&path, e);
                g.record(audited.as_ref(), None, r.status()).await;
                return r;
            }
        };
        match declared {
            Some(Ok(Some(action))) => {
                let what = matched
                    .as_deref()
                    .and_then(|m| routes::what(&g.routes, req.method(), m))
                    .map(String::from)
                    .unwrap_or_else(|| format!("{} {}", req.method(), path));
                let (mut parts, body) = req.into_parts();
                let params = RawPathParams::from_request_parts(&mut parts, &()).await;
                req = Request::from_parts(parts, body);
                // The Iceberg REST catalog's routes name their ref (`{prefix}`) in the
                // path: parsed once, here.
                let prefix = match &params {
                    Ok(p) if path.starts_with("/iceberg/") => {
                        match p.iter().find(|(k, _)| *k == "prefix") {
                            Some((_, text)) => match lh_catalog::RefExpr::parse(text) {
                                Ok(expr) => Some(expr),
                                Err(e) => return g.refuse(&path, e.into()),
                            },
                            None => None,
                        }
                    }
                    _ => None,
                };
                // A REST prefix's commit may lie in the history of refs on which the
                // identity reads less: those limits hold for the whole request.
                if let (Some(prefix), Some(catalog)) = (&prefix, &g.catalog) {
                    match super::history::scoped(catalog, &identity, prefix).await {
                        Ok(i) => identity = i,
                        Err(e) => return g.refuse(&path, e),
                    }
                }
                let scoped = match (&params, &prefix) {
                    (Ok(p), Some(prefix)) => scope_check(&identity, action, prefix, p, &what),
                    _ => Ok(()),
                };
                if let Err(e) = identity.require(action, &what).and(scoped) {
                    let r = g.refuse(&path, e);
                    g.record(audited.as_ref(), Some(&identity), r.status())
                        .await;
                    return r;
                }
            }
            Some(Ok(None)) => {}
            Some(Err(true)) => {
                return StatusCode::METHOD_NOT_ALLOWED.into_response();
            }
            // Routed, but not in the table: refused to everyone until it is declared.
            Some(Err(false)) => {
                return g.refuse(
                    &path,
                    Error::internal(format!(
                        "the route {} {} declares no permission",
                        req.method(),
                        matched.as_deref().unwrap_or(&path)
                    )),
                );
            }
            // No route: the router answers 404 (to an authenticated caller only).
            None => {}
        }
        identity_seen = Some(identity.clone());
        req.extensions_mut().insert(identity);
    }
    let mut response = next.run(req).await;
    g.record(audited.as_ref(), identity_seen.as_ref(), response.status())
        .await;
    if let Some(origin) = &origin {
        cors(response.headers_mut(), origin);
    }
    response
}

fn own_console(hosts_checked: bool, origin: &str, headers: &HeaderMap) -> bool {
    hosts_checked && same_origin(origin, headers)
}

/// Whether a browser's `Origin` is the origin of the Host header the request carries.
fn same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    ["http://", "https://"].iter().any(|scheme| {
        origin
            .strip_prefix(scheme)
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
    })
}

/// The Iceberg REST catalog's routes name their ref (`{prefix}`) and namespace (`{ns}`)
/// in the path: the action is checked on them here, before the handler reads anything,
/// so a refusal says nothing of whether they exist. (lh's own routes name theirs in
/// queries and bodies: their handlers check.)
fn scope_check(
    identity: &Identity,
    action: super::Action,
    prefix: &lh_catalog::RefExpr,
    params: &RawPathParams,
    what: &str,
) -> Result<(), Error> {
    identity.require_ref(action, prefix, what)?;
    if let Some((_, ns)) = params.iter().find(|(k, _)| *k == "ns") {
        // Spelled as the namespace is everywhere (`"sandbox.priv"` is not `sandbox`'s).
        let levels: Vec<&str> = ns.split('\u{1f}').collect();
        let ns = lh_catalog::names::join_levels(&levels);
        identity.require_namespace(action, prefix, &ns, what)?;
    }
    Ok(())
}

/// A request the audit log records, as the guard saw it.
struct Audited {
    action: super::Action,
    method: String,
    route: String,
    path: String,
    remote: Option<String>,
    request_id: Option<String>,
}

impl Guard {
    /// Records a request that changes something (best effort: a failure is logged, the
    /// answer stands).
    async fn record(&self, a: Option<&Audited>, who: Option<&Identity>, status: StatusCode) {
        let (Some(log), Some(a)) = (&self.audit, a) else {
            return;
        };
        let r = log
            .record(super::audit::Record {
                user: who.map_or("(no valid token)", |i| i.user.as_str()),
                role: who.map_or("-", |i| i.role_name()),
                token_id: who.and_then(|i| i.token_id.as_deref()),
                action: a.action.as_str(),
                method: &a.method,
                route: &a.route,
                path: &a.path,
                status: status.as_u16(),
                remote: a.remote.clone(),
                request_id: a.request_id.as_deref(),
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e.message, route = %a.route, "cannot write the audit log");
        }
    }
}

fn cors(h: &mut HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(strip_port("localhost:7878"), "localhost");
        assert_eq!(strip_port("127.0.0.1"), "127.0.0.1");
        assert_eq!(strip_port("[::1]:7878"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("[::1]junk"), "[::1]junk");
        assert_eq!(strip_port("[::1]:"), "[::1]:");
        assert_eq!(strip_port("evil.example:80"), "evil.example");
    }

    #[test]
    fn only_the_servers_own_origin_is_same_origin() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7878"));
        assert!(same_origin("http://127.0.0.1:7878", &h));
        assert!(same_origin("https://127.0.0.1:7878", &h));
        assert!(!same_origin("http://127.0.0.1:7879", &h));
        assert!(!same_origin("http://127.0.0.1", &h));
        assert!(!same_origin("http://evil.example", &h));
        assert!(!same_origin("null", &h));
        assert!(!same_origin("http://127.0.0.1:7878.evil.example", &h));
        assert!(!same_origin("http://127.0.0.1:7878", &HeaderMap::new()));
    }

    #[test]
    fn a_server_of_any_name_lets_no_page_in_as_its_console() {
        let mut h = HeaderMap::new();
        h.insert(
            header::HOST,
            HeaderValue::from_static("rebound.example:7878"),
        );
        // Any name served: a rebound page's Origin equals its Host, and is refused.
        assert!(!own_console(false, "http://rebound.example:7878", &h));
        assert!(own_console(true, "http://rebound.example:7878", &h));
    }

    #[test]
    fn a_loopback_server_answers_only_to_loopback_names() {
        let lo = Guard::hosts_for("127.0.0.1".parse().unwrap(), &[]).unwrap();
        assert!(lo.contains(&"localhost".to_string()));
        assert!(!lo.contains(&"evil.example".to_string()));
        assert!(Guard::hosts_for("0.0.0.0".parse().unwrap(), &[]).is_none());
        let named = Guard::hosts_for("0.0.0.0".parse().unwrap(), &["LH.Example".into()]);
        assert_eq!(named, Some(vec!["lh.example".to_string()]));
    }
}
