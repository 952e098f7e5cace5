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

pub mod audit;
pub mod bootstrap;
pub mod guard;
pub mod protected;
pub mod routes;
pub mod tokens;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};

use crate::error::{Code, Error, Kind, Result};

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

    /// Whether this role has every permission of `other` (roles are ordered).
    pub fn at_least(self, other: Role) -> bool {
        let rank = |r: Role| Role::ALL.iter().position(|x| *x == r).unwrap_or(0);
        rank(self) >= rank(other)
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
    /// The user: a token's, or with `--no-auth` the `x-lh-user` header's.
    pub user: String,
    pub role: Role,
    /// The token it came with (none with `--no-auth`).
    pub token_id: Option<String>,
}

impl Identity {
    /// Refuses (403) unless the identity's role allows `action`; `what` says what was
    /// asked for, in the message.
    pub fn require(&self, action: Action, what: &str) -> Result<()> {
        if self.role.allows(action) {
            return Ok(());
        }
        Err(Error::new(
            Kind::Forbidden,
            Code::PermissionDenied,
            format!(
                "{what} needs the '{}' permission, which user '{}' (role {}) does not have",
                action.as_str(),
                self.user,
                self.role.as_str()
            ),
        )
        .with_hint("ask an admin for a token with a role that has it (lh token create --role ...)"))
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
