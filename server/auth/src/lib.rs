//! Who may do what. Every request but the token exchange carries a bearer token
//! (`tokens`); the guard (`guard`) checks the Host and Origin headers, finds the
//! request's identity, and checks the action its route is declared with (`routes`)
//! against the identity's role, before any handler runs. Handlers take the
//! [`Identity`] as an extractor: the author of every change is the authenticated user.
//!
//! Roles are built in for now, each granting actions on every ref:
//!
//! | role | read | write | run | merge | admin |
//! |---|---|---|---|---|---|
//! | `reader` | yes | | | | |
//! | `writer` | yes | yes | yes | | |
//! | `maintainer` | yes | yes | yes | yes | |
//! | `admin` | yes | yes | yes | yes | yes |
//!
//! A server started with `--no-auth` (only on a loopback address) gives every request
//! the `admin` role, and takes the author from the `x-lh-user` header, as lh did before
//! it had authentication.

use lh_core::{db, error, http};

pub mod audit;
pub mod bootstrap;
pub mod guard;
pub mod history;
pub mod key;
pub mod oidc;
pub mod protected;
pub mod roles;
pub mod routes;
pub mod secrets;
pub mod tokens;

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use lh_catalog::RefExpr;
use serde::{Deserialize, Serialize};

pub use roles::Access;

/// Who last changed a stored thing (a role, a secret), and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    pub by: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

impl Updated {
    /// `by` at the stored time `ms` (Unix milliseconds).
    pub fn new(by: String, ms: i64) -> Updated {
        use chrono::TimeZone;
        let at = chrono::Utc
            .timestamp_millis_opt(ms)
            .single()
            .unwrap_or_default();
        Updated { by, at }
    }
}

use crate::error::{Code, Error, Result};

/// What a request does, as permissions name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Read refs, tables, runs; query.
    Read,
    /// Change tables and create branches: imports, drops, Iceberg REST commits.
    Write,
    /// Start, cancel and re-run pipelines (their code runs on the server's workers).
    Run,
    /// Move or delete refs: merges, assignments, deleting a branch or tag.
    Merge,
    /// Tokens, garbage collection.
    Admin,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Write => "write",
            Action::Run => "run",
            Action::Merge => "merge",
            Action::Admin => "admin",
        }
    }
}

/// A built-in role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Reader,
    Writer,
    Maintainer,
    Admin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Reader, Role::Writer, Role::Maintainer, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Writer => "writer",
            Role::Maintainer => "maintainer",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Result<Role> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                Error::bad_request(
                    Code::InvalidArgument,
                    format!(
                        "unknown role '{s}': the roles are {}",
                        Role::ALL.map(Role::as_str).join(", ")
                    ),
                )
            })
    }

    pub fn allows(self, action: Action) -> bool {
        match self {
            Role::Reader => action == Action::Read,
            Role::Writer => matches!(action, Action::Read | Action::Write | Action::Run),
            Role::Maintainer => action != Action::Admin,
            Role::Admin => true,
        }
    }
}

/// Who makes a request.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The user: a token's, an OIDC token's claim, or with `--no-auth` the `x-lh-user`
    /// header's.
    pub user: String,
    /// What the user's roles grant.
    pub access: Arc<Access>,
    /// The lh token it came with (none with `--no-auth` or an OIDC token).
    pub token_id: Option<String>,
}

impl Identity {
    /// The ref expression a request reads after `auth::history::scoped` checked `expr`
    /// for this identity: the very commit the check found its limits for, when history
    /// limits it (the ref may have moved since), else `expr` itself. Grants still go
    /// by `expr`'s ref.
    pub fn reads(&self, expr: &RefExpr) -> RefExpr {
        match &self.access.ceilings_at {
            Some(hash) => RefExpr::Hash(hash.clone()),
            None => expr.clone(),
        }
    }

    /// An identity with every permission: `--no-auth`, and lh's own work.
    pub fn admin(user: impl Into<String>) -> Identity {
        Identity {
            user: user.into(),
            access: Arc::new(Access::builtin(Role::Admin)),
            token_id: None,
        }
    }

    /// An identity with a built-in role (tests).
    pub fn with_role(user: impl Into<String>, role: Role) -> Identity {
        Identity {
            user: user.into(),
            access: Arc::new(Access::builtin(role)),
            token_id: None,
        }
    }

    pub fn role_name(&self) -> &str {
        &self.access.name
    }

    fn refuse(&self, action: Action, what: &str, on: &str) -> Error {
        roles::refused(&self.user, &self.access, action, what, on)
    }

    /// Refuses (403) unless some grant of the identity gives `action`; `what` says what
    /// was asked for, in the message.
    pub fn require(&self, action: Action, what: &str) -> Result<()> {
        if self.access.anywhere(action) {
            return Ok(());
        }
        Err(self.refuse(action, what, ""))
    }

    /// Whether `action` is granted on the ref that `expr` reads.
    pub fn can_ref(&self, action: Action, expr: &RefExpr) -> bool {
        match expr.ref_name() {
            Some(name) => self.access.on_ref(action, name),
            None => self.access.on_every_ref(action),
        }
    }

    /// Refuses unless `action` is granted on the ref `expr` names (a bare commit hash
    /// names none: it needs the action on every ref).
    pub fn require_ref(&self, action: Action, expr: &RefExpr, what: &str) -> Result<()> {
        if self.can_ref(action, expr) {
            return Ok(());
        }
        let on = match expr.ref_name() {
            Some(name) => format!(" on ref '{name}'"),
            None => " on every ref (a commit by hash belongs to no ref)".to_string(),
        };
        Err(self.refuse(action, what, &on))
    }

    /// Whether `action` is granted on `table` at the ref `expr` names.
    pub fn can_table(&self, action: Action, expr: &RefExpr, table: &str) -> bool {
        self.can_namespace(action, expr, roles::namespace_of(table))
    }

    /// Whether `action` is granted on namespace `ns` at the ref `expr` names.
    pub fn can_namespace(&self, action: Action, expr: &RefExpr, ns: &str) -> bool {
        match expr.ref_name() {
            Some(name) => self.access.on_namespace(action, name, ns),
            None => self.access.on_every_ref_namespace(action, ns),
        }
    }

    /// Refuses unless `action` is granted on `table` at the ref `expr` names.
    pub fn require_table(
        &self,
        action: Action,
        expr: &RefExpr,
        table: &str,
        what: &str,
    ) -> Result<()> {
        if self.can_table(action, expr, table) {
            return Ok(());
        }
        let r = expr.ref_name().unwrap_or("every ref");
        Err(self.refuse(action, what, &format!(" on table '{table}' of ref '{r}'")))
    }

    /// Refuses unless `action` is granted on namespace `ns` of every ref (namespaces and
    /// their properties are shared by every ref).
    pub fn require_namespace_everywhere(&self, action: Action, ns: &str, what: &str) -> Result<()> {
        if self.access.on_every_ref_namespace(action, ns) {
            return Ok(());
        }
        Err(self.refuse(
            action,
            what,
            &format!(" on namespace '{ns}' of every ref (a namespace is shared by all refs)"),
        ))
    }

    /// Refuses unless `action` is granted on ref `name` in every namespace.
    pub fn require_ref_whole(&self, action: Action, name: &str, what: &str) -> Result<()> {
        if self.access.on_ref_every_namespace(action, name) {
            return Ok(());
        }
        Err(self.refuse(
            action,
            what,
            &format!(" on ref '{name}' in every namespace"),
        ))
    }

    /// Refuses unless `action` is granted on namespace `ns` at the ref `expr` names.
    pub fn require_namespace(
        &self,
        action: Action,
        expr: &RefExpr,
        ns: &str,
        what: &str,
    ) -> Result<()> {
        if self.can_namespace(action, expr, ns) {
            return Ok(());
        }
        let r = expr.ref_name().unwrap_or("every ref");
        Err(self.refuse(action, what, &format!(" on namespace '{ns}' of ref '{r}'")))
    }
}

/// Handlers take the identity the guard found; a route the guard did not see (which
/// cannot happen: it wraps every route) is an internal error, never an anonymous one.
impl<S: Send + Sync> FromRequestParts<S> for Identity {
    type Rejection = crate::http::ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> std::result::Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Identity>()
            .cloned()
            .ok_or_else(|| Error::internal("the request has no identity").into())
    }
}
