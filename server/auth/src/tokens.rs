//! Bearer tokens: `lht_<id>_<secret>`, where the id (16 hex digits) names the token in
//! listings and the secret (64 hex digits, 256 random bits) is never stored, only its
//! BLAKE3 hash. A token can expire and be revoked; it authenticates one user with one
//! role. The rows live in `lh_tokens`, next to the catalog (see `db.rs`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use rand::RngCore;
use sqlx::{AnyPool, Row};

use crate::error::{Code, Error, Kind, Result};

pub const PREFIX: &str = "lht_";

/// How often a token's `last_used_at` is written, at most.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

pub struct Tokens {
    pool: AnyPool,
    /// When each token's use was last recorded, so that a request writes nothing.
    touched: Mutex<HashMap<String, Instant>>,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("token storage", e)
}

/// A token as the store knows it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    pub name: String,
    pub user: String,
    pub role: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// When it last authenticated a request (to the minute).
    pub last_used_at: Option<DateTime<Utc>>,
}

fn unauthenticated(message: &str) -> Error {
    Error::new(Kind::Unauthenticated, Code::Unauthenticated, message).with_hint(
        "pass a token: `lh` reads it from the profile in ~/.lh/config.yaml or LH_TOKEN; \
         Iceberg clients take it as their `token` property",
    )
}

fn time(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(|ms| Utc.timestamp_millis_opt(ms).single())
}

/// A user's name: what commits record as their author.
pub fn validate_user(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._@+-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::bad_request(
            Code::InvalidName,
            format!(
                "invalid user name '{}': use 1 to 100 letters, digits and . _ @ + -",
                name.chars().take(120).collect::<String>()
            ),
        ))
    }
}

fn validate_token_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
        return Err(Error::bad_request(
            Code::InvalidName,
            "a token's name has 1 to 100 characters, none of them control characters",
        ));
    }
    Ok(())
}

/// What a new token is.
/// What a valid token says: its user and its role's name.
pub struct Authenticated {
    pub user: String,
    pub role: String,
    pub token_id: String,
}

pub struct NewToken<'a> {
    pub name: &'a str,
    pub user: &'a str,
    /// A role's name: built in, or defined (checked by the caller).
    pub role: &'a str,
    pub created_by: &'a str,
    pub expires_in: Option<Duration>,
}

impl Tokens {
    pub fn new(pool: AnyPool) -> Tokens {
        Tokens {
            pool,
            touched: Mutex::new(HashMap::new()),
        }
    }

    /// Makes a token; its secret is in the returned string and nowhere else.
    pub async fn create(&self, t: NewToken<'_>) -> Result<(String, Token)> {
        validate_user(t.user)?;
        validate_token_name(t.name)?;
        let mut id = [0u8; 8];
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut id);
        rand::rng().fill_bytes(&mut secret);
        let id = hex(&id);
        let secret = hex(&secret);
        let now = Utc::now();
        let expires = match t.expires_in {
            Some(d) => {
                let d = chrono::Duration::from_std(d).ok().filter(|d| {
                    *d > chrono::Duration::zero()
                        && d.num_seconds() < lh_api::units::MAX_CLIENT_SECS as i64
                });
                Some(
                    now + d.ok_or_else(|| {
                        Error::bad_request(
                            Code::InvalidArgument,
                            "a token's lifetime must be positive and below 100 years",
                        )
                    })?,
                )
            }
            None => None,
        };
        if expires.is_some_and(|e| e > now + chrono::Duration::days(36_500)) {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                "a token's lifetime must be positive and below 100 years",
            ));
        }
        sqlx::query(
            "INSERT INTO lh_tokens (id, secret_hash, name, user_name, role, created_by, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&id)
        .bind(blake3::hash(secret.as_bytes()).to_hex().to_string())
        .bind(t.name)
        .bind(t.user)
        .bind(t.role)
        .bind(t.created_by)
        .bind(now.timestamp_millis())
        .bind(expires.map(|e| e.timestamp_millis()))
        .execute(&self.pool)
        .await
        .map_err(db)?;
        let info = Token {
            id: id.clone(),
            name: t.name.to_string(),
            user: t.user.to_string(),
            role: t.role.to_string(),
            created_by: t.created_by.to_string(),
            created_at: time(Some(now.timestamp_millis())).unwrap_or(now),
            expires_at: expires,
            revoked_at: None,
            last_used_at: None,
        };
        Ok((format!("{PREFIX}{id}_{secret}"), info))
    }

    /// Who a presented token authenticates; a 401 for anything else (the message never
    /// says whether a token id exists).
    pub async fn authenticate(&self, presented: &str) -> Result<Authenticated> {
        let bad =
            || unauthenticated("the token is not valid (unknown, revoked, expired or malformed)");
        let (id, secret) = presented
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once('_'))
            .filter(|(id, secret)| {
                id.len() == 16 && secret.len() == 64 && is_hex(id) && is_hex(secret)
            })
            .ok_or_else(bad)?;
        let row = sqlx::query(
            "SELECT secret_hash, user_name, role, expires_at, revoked_at FROM lh_tokens WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        let Some(row) = row else {
            return Err(bad());
        };
        // `blake3::Hash` compares in constant time.
        let presented_hash = blake3::hash(secret.as_bytes());
        let stored: String = row.try_get("secret_hash").map_err(db)?;
        let stored = blake3::Hash::from_hex(stored.as_bytes())
            .map_err(|_| Error::internal(format!("token {id} has a corrupt hash")))?;
        if presented_hash != stored {
            return Err(bad());
        }
        let revoked: Option<i64> = row.try_get("revoked_at").map_err(db)?;
        let expires: Option<i64> = row.try_get("expires_at").map_err(db)?;
        let now = Utc::now().timestamp_millis();
        if revoked.is_some() || expires.is_some_and(|e| e <= now) {
            return Err(bad());
        }
        let who = Authenticated {
            user: row.try_get("user_name").map_err(db)?,
            role: row.try_get("role").map_err(db)?,
            token_id: id.to_string(),
        };
        self.touch(id, now).await;
        Ok(who)
    }

    /// Records a token's use, at most once a minute (best effort).
    async fn touch(&self, id: &str, now_ms: i64) {
        {
            let mut touched = self.touched.lock().unwrap_or_else(|e| e.into_inner());
            if touched.get(id).is_some_and(|t| t.elapsed() < TOUCH_EVERY) {
                return;
            }
            touched.insert(id.to_string(), Instant::now());
        }
        let r = sqlx::query("UPDATE lh_tokens SET last_used_at = $1 WHERE id = $2")
            .bind(now_ms)
            .bind(id)
            .execute(&self.pool)
            .await;
        if let Err(e) = r {
            tracing::warn!(token = %id, error = %e, "cannot record a token's use");
        }
    }

    pub async fn list(&self) -> Result<Vec<Token>> {
        let rows = sqlx::query(
            "SELECT id, name, user_name, role, created_by, created_at, expires_at, revoked_at, last_used_at \
             FROM lh_tokens ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| {
                Ok(Token {
                    id: r.try_get("id").map_err(db)?,
                    name: r.try_get("name").map_err(db)?,
                    user: r.try_get("user_name").map_err(db)?,
                    role: r.try_get("role").map_err(db)?,
                    created_by: r.try_get("created_by").map_err(db)?,
                    created_at: time(Some(r.try_get("created_at").map_err(db)?))
                        .unwrap_or_default(),
                    expires_at: time(r.try_get("expires_at").map_err(db)?),
                    revoked_at: time(r.try_get("revoked_at").map_err(db)?),
                    last_used_at: time(r.try_get("last_used_at").map_err(db)?),
                })
            })
            .collect()
    }

    /// Revokes a token (from its next request on); revoking one twice is no error.
    pub async fn revoke(&self, id: &str) -> Result<Token> {
        sqlx::query("UPDATE lh_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(Utc::now().timestamp_millis())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        self.list()
            .await?
            .into_iter()
            .find(|t| t.id == id)
            .ok_or_else(|| Error::not_found(Code::TokenNotFound, format!("no token '{id}'")))
    }

    /// Whether any token was ever made (a new server makes the first admin token).
    pub async fn any(&self) -> Result<bool> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM lh_tokens")
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        let n: i64 = row.try_get("n").map_err(db)?;
        Ok(n > 0)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
