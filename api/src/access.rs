//! Who may do what: the server's authentication, tokens, the audit log, roles and
//! secrets.

#[allow(unused_imports)]
use super::*;

/// How requests are authenticated, and who is asking.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthInfo {
    /// `tokens` (bearer tokens), or `off` (`--no-auth`, on a loopback address only).
    pub mode: String,
    /// The identity of the request that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// `POST /api/v1/tokens`: a new bearer token.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TokenCreate {
    /// What the token is for [default: the user's name].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The user it authenticates (the author of its changes) [default: the caller].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A built-in role (`reader`, `writer`, `maintainer`, `admin`) or one an admin
    /// defined (`lh role set`) [default: `reader`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Seconds until it expires [default: never].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_secs: Option<u64>,
}

/// A token as listed: never its secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub user: String,
    pub role: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
    /// When it last authenticated a request (to the minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<DateTime<Utc>>,
}

/// One request of the audit log (`lh audit`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    pub at: DateTime<Utc>,
    pub user: String,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// The permission the route needs: write, run, merge or admin.
    pub action: String,
    pub method: String,
    /// The route as the server declares it (`/api/v1/refs/{name}/assign`).
    pub route: String,
    /// The path as asked (`/api/v1/refs/main/assign`).
    pub path: String,
    /// The answer's status: 2xx done, 401/403 refused, others failed.
    pub status: u16,
    /// The peer address the request came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditList {
    pub entries: Vec<AuditEntry>,
}

/// A role: its grants, each `ACTIONS on REFS [in NAMESPACES]` (`lh role ls`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RoleInfo {
    pub name: String,
    /// One of `reader`, `writer`, `maintainer`, `admin` (not changeable).
    pub builtin: bool,
    pub grants: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RoleList {
    pub roles: Vec<RoleInfo>,
}

/// `PUT /api/v1/roles/{name}`: the role's grants (replacing any it had).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RoleSet {
    /// Each `ACTIONS on REFS [in NAMESPACES]`: `write,run on team-a.* in sales`.
    pub grants: Vec<String>,
}

/// A pipeline secret, as listed: never its value.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SecretInfo {
    pub name: String,
    /// Grows with each `lh secret set` (functions using it run again).
    pub version: i64,
    /// The branches whose runs get it (a pattern: `main`, `team-a.*`, `*`).
    pub refs: String,
    pub updated_by: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

/// `PUT /api/v1/secrets/{name}`.
#[derive(Deserialize, Serialize, ToSchema)]
pub struct SecretSet {
    pub value: String,
    /// The branches whose runs get it [default: `*`, every run].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<String>,
}

impl std::fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretSet { value: *** }")
    }
}

/// A new token: the secret is in this answer and nowhere else.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    pub token: String,
    pub info: TokenInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}
