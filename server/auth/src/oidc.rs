//! OpenID Connect sign-in: a bearer token that is a JWT signed by the organisation's
//! identity provider (the issuer) instead of one of our own `lht_` tokens. The server
//! never talks to the issuer about a token: it checks the token's signature against the
//! issuer's public keys (its JWKS, read once at start and again when a token names a
//! key we have not seen, which is how issuers rotate keys), then the claims that say
//! whom the token is for and until when, and maps the user's groups to roles.
//!
//! Only asymmetric algorithms are accepted. `none` would let anyone write any claims,
//! and HMAC would need a secret shared with the issuer; worse, a verifier that takes the
//! algorithm from the token could be tricked into using the issuer's *public* key as an
//! HMAC secret, so the algorithm must also fit the key it is checked with.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::{Map, Value};

mod jwks;
use jwks::Fetcher;

/// A token longer than this is refused before any decoding: real ones are a few KiB
/// even with many groups, and the bound keeps a request from making us parse megabytes.
const MAX_TOKEN: usize = 16 * 1024;

/// A JWKS larger than this is refused: an issuer publishes a handful of keys.
const MAX_JWKS: usize = 1024 * 1024;

/// How far `exp` and `nbf` may be off, in seconds, for clocks that drift.
const LEEWAY: f64 = 60.0;

/// The keys are re-read for an unknown key id at most this often, so that a flood of
/// tokens with made-up key ids cannot make us hammer the issuer.
const REREAD_EVERY: Duration = Duration::from_secs(30);

/// How long reading the JWKS over HTTP may take, all of it.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The algorithms a token may be signed with, by their names in a JWT header.
const ALLOWED: [(&str, Algorithm); 9] = [
    ("RS256", Algorithm::RS256),
    ("RS384", Algorithm::RS384),
    ("RS512", Algorithm::RS512),
    ("PS256", Algorithm::PS256),
    ("PS384", Algorithm::PS384),
    ("PS512", Algorithm::PS512),
    ("ES256", Algorithm::ES256),
    ("ES384", Algorithm::ES384),
    ("EdDSA", Algorithm::EdDSA),
];

/// Why a token or the configuration was refused, in words for the person who can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcError(pub String);

impl fmt::Display for OidcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OidcError {}

fn err(message: impl Into<String>) -> OidcError {
    OidcError(message.into())
}

/// Where the issuer and its keys are, and how its groups become our roles.
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// Must equal the token's `iss`, character for character (a trailing slash counts).
    pub issuer: String,
    /// Must be one of the token's `aud`: the client id the issuer gave this server.
    pub audience: String,
    /// Where the issuer's signing keys are.
    pub jwks: JwksSource,
    /// The claim that names the user, a string: `sub` unless told otherwise (`email`,
    /// `preferred_username`). A name with dots that is not itself a claim is a path into
    /// nested objects.
    pub user_claim: String,
    /// The claim that lists the user's groups: an array of strings, or one string; a
    /// token without it has no groups. Dotted like `user_claim` (Keycloak puts roles in
    /// `realm_access.roles`).
    pub groups_claim: String,
    /// Group to role, in order: the user gets the role of every group they are in.
    pub group_roles: Vec<(String, String)>,
    /// The role of a user none of whose groups map to one; without it, such a user is
    /// refused.
    pub default_role: Option<String>,
}

impl OidcConfig {
    /// A configuration with the usual claims (`sub`, `groups`), no group mapped and no
    /// default role.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>, jwks: JwksSource) -> Self {
        OidcConfig {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks,
            user_claim: "sub".to_string(),
            groups_claim: "groups".to_string(),
            group_roles: Vec::new(),
            default_role: None,
        }
    }
}

/// Where the issuer's JWKS is: its `jwks_uri` (from the issuer's
/// `/.well-known/openid-configuration`), or a file for a server that cannot reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    Url(String),
    File(PathBuf),
}

impl fmt::Display for JwksSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwksSource::Url(url) => f.write_str(url),
            JwksSource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Who a valid token is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub user: String,
    /// The token's groups, as it lists them.
    pub groups: Vec<String>,
    /// Each role once, in the order of `group_roles`; or the default role alone.
    pub roles: Vec<String>,
}

/// A key the JWKS has that we can verify with.
struct Key {
    kid: Option<String>,
    /// The algorithm the JWKS restricts the key to, if it does.
    alg: Option<Algorithm>,
    kind: KeyKind,
    key: DecodingKey,
}

/// What kind of key: each algorithm works with one kind only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl KeyKind {
    fn of(alg: Algorithm) -> KeyKind {
        match alg {
            Algorithm::ES256 => KeyKind::P256,
            Algorithm::ES384 => KeyKind::P384,
            Algorithm::EdDSA => KeyKind::Ed25519,
            _ => KeyKind::Rsa,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            KeyKind::Rsa => "an RSA key",
            KeyKind::P256 => "a P-256 key",
            KeyKind::P384 => "a P-384 key",
            KeyKind::Ed25519 => "an Ed25519 key",
        }
    }
}

impl Key {
    /// Whether a token signed with `alg` may be checked with this key.
    fn fits(&self, alg: Algorithm) -> bool {
        self.kind == KeyKind::of(alg) && self.alg.is_none_or(|a| a == alg)
    }
}

fn alg_name(alg: Algorithm) -> &'static str {
    ALLOWED
        .iter()
        .find(|(_, a)| *a == alg)
        .map_or("?", |(name, _)| name)
}

fn allowed_names() -> String {
    ALLOWED.map(|(name, _)| name).join(", ")
}

/// Verifies the issuer's tokens; made once at start, shared by every request.
pub struct Oidc {
    config: OidcConfig,
    fetcher: Fetcher,
    keys: RwLock<Arc<Vec<Key>>>,
    /// When the keys were last read. A tokio mutex, held while they are re-read, so that
    /// the requests that all name a freshly rotated key wait for one read instead of
    /// each starting their own (or failing because another one is under way).
    last_read: tokio::sync::Mutex<Instant>,
    /// `REREAD_EVERY`, but for the tests.
    reread_every: Duration,
    /// How many times the keys were read, for the tests to see the rate limit.
    #[cfg(test)]
    reads: std::sync::atomic::AtomicUsize,
}

impl fmt::Debug for Oidc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.config.issuer)
            .field("audience", &self.config.audience)
            .field("jwks", &self.config.jwks)
            .field("keys", &self.snapshot().len())
            .finish()
    }
}

impl Oidc {
    /// Loads the keys once (fails if the JWKS cannot be read or has no usable key).
    pub async fn new(config: OidcConfig) -> Result<Oidc, OidcError> {
        for (what, value) in [
            ("issuer", &config.issuer),
            ("audience", &config.audience),
            ("user claim", &config.user_claim),
            ("groups claim", &config.groups_claim),
        ] {
            if value.trim().is_empty() {
                return Err(err(format!(
                    "the OIDC {what} is empty: set it to what the issuer puts in its tokens"
                )));
            }
        }
        let fetcher = Fetcher::new(&config.jwks)?;
        let keys = fetcher.read().await?;
        tracing::info!(
            issuer = %config.issuer,
            jwks = %config.jwks,
            keys = keys.len(),
            "read the OIDC issuer's signing keys"
        );
        Ok(Oidc {
            config,
            fetcher,
            keys: RwLock::new(Arc::new(keys)),
            last_read: tokio::sync::Mutex::new(Instant::now()),
            reread_every: REREAD_EVERY,
            #[cfg(test)]
            reads: std::sync::atomic::AtomicUsize::new(1),
        })
    }

    /// Whether a presented bearer looks like a JWT (three base64url parts) — cheap, no crypto.
    ///
    /// The signature part may be empty, so that an unsigned (`alg: none`) token is sent
    /// to [`Oidc::verify`] and refused for what it is rather than as an unknown token.
    pub fn looks_like_jwt(token: &str) -> bool {
        let base64url = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        let mut parts = token.split('.');
        matches!(
            (parts.next(), parts.next(), parts.next(), parts.next()),
            (Some(h), Some(p), Some(s), None)
                if !h.is_empty() && !p.is_empty() && base64url(h) && base64url(p) && base64url(s)
        )
    }

    /// Verifies signature (by `kid`; a token without kid is tried against every key of a
    /// matching alg), iss, aud, exp, nbf (60 s leeway), alg in an allow-list
    /// (RS256/384/512, PS256/384/512, ES256/384, EdDSA; never `none`, never HMAC), and
    /// maps groups to roles. A valid token that maps to no role and has no default role
    /// is refused.
    ///
    /// Nothing in the token is trusted before its signature verifies: the claims are
    /// not even decoded until then.
    pub async fn verify(&self, jwt: &str) -> Result<Verified, OidcError> {
        let token = Jwt::parse(jwt)?;
        self.check_signature(&token).await?;
        let claims = token.claims()?;
        self.check_claims(&claims, now())?;
        self.identity(&claims)
    }

    fn snapshot(&self) -> Arc<Vec<Key>> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn check_signature(&self, token: &Jwt<'_>) -> Result<(), OidcError> {
        let alg = token.alg;
        let mut keys = self.snapshot();
        let Some(kid) = &token.kid else {
            let fitting: Vec<&Key> = keys.iter().filter(|k| k.fits(alg)).collect();
            if fitting.is_empty() {
                return Err(err(format!(
                    "the token names no key id and is signed with {}, but the issuer has no key for {0}",
                    alg_name(alg)
                )));
            }
            return if fitting.iter().any(|k| token.verifies_with(k)) {
                Ok(())
            } else {
                Err(bad_signature())
            };
        };
        if !has_kid(&keys, kid) {
            keys = self.reread_for(kid).await;
            if !has_kid(&keys, kid) {
                return Err(err(format!(
                    "unknown key id '{}': the issuer has no such signing key (if it has just \
                     rotated its keys, try again in a minute)",
                    shown(kid)
                )));
            }
        }
        let named: Vec<&Key> = keys
            .iter()
            .filter(|k| k.kid.as_deref() == Some(kid.as_str()))
            .collect();
        let fitting: Vec<&Key> = named.iter().copied().filter(|k| k.fits(alg)).collect();
        if fitting.is_empty() {
            let key = named[0];
            let what = match key.alg {
                Some(a) => format!("{} for {}", key.kind.describe(), alg_name(a)),
                None => key.kind.describe().to_string(),
            };
            return Err(err(format!(
                "the token's algorithm {} does not fit the issuer's key '{}', which is {what}",
                alg_name(alg),
                shown(kid)
            )));
        }
        if fitting.iter().any(|k| token.verifies_with(k)) {
            Ok(())
        } else {
            Err(bad_signature())
        }
    }

    /// Re-reads the keys because a token named `kid`, unless they were read less than
    /// `reread_every` ago; returns the keys as they are then. A failed read keeps the
    /// keys we had: the issuer being down must not sign everyone out.
    async fn reread_for(&self, kid: &str) -> Arc<Vec<Key>> {
        let mut last_read = self.last_read.lock().await;
        let keys = self.snapshot();
        if has_kid(&keys, kid) {
            // Another request re-read them while this one waited.
            return keys;
        }
        if last_read.elapsed() < self.reread_every {
            tracing::debug!(
                kid = %shown(kid),
                jwks = %self.config.jwks,
                "not re-reading the OIDC issuer's keys for an unknown key id: read them less than {} s ago",
                self.reread_every.as_secs()
            );
            return keys;
        }
        *last_read = Instant::now();
        #[cfg(test)]
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.fetcher.read().await {
            Ok(fresh) => {
                tracing::info!(
                    kid = %shown(kid),
                    jwks = %self.config.jwks,
                    keys = fresh.len(),
                    "re-read the OIDC issuer's signing keys for a token with a new key id"
                );
                let fresh = Arc::new(fresh);
                *self.keys.write().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
                fresh
            }
            Err(e) => {
                tracing::warn!(
                    kid = %shown(kid),
                    error = %e,
                    "cannot re-read the OIDC issuer's signing keys; keeping the ones read before"
                );
                keys
            }
        }
    }

    fn check_claims(&self, claims: &Map<String, Value>, now: f64) -> Result<(), OidcError> {
        let issuer = &self.config.issuer;
        match claims.get("iss") {
            Some(Value::String(iss)) if iss == issuer => {}
            Some(Value::String(iss)) => {
                return Err(err(format!(
                    "the token was issued by '{}', not '{issuer}'",
                    shown(iss)
                )));
            }
            _ => {
                return Err(err(format!(
                    "the token names no issuer ('iss'); this server accepts tokens issued by '{issuer}'"
                )));
            }
        }

        let audience = &self.config.audience;
        let auds: Vec<&str> = match claims.get("aud") {
            Some(Value::String(aud)) => vec![aud.as_str()],
            Some(Value::Array(auds)) => auds.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if auds.is_empty() {
            return Err(err(format!(
                "the token names no audience ('aud'); this server accepts tokens for '{audience}'"
            )));
        }
        if !auds.contains(&audience.as_str()) {
            return Err(err(format!(
                "the token is for audience [{}], not '{audience}'",
                quoted_list(&auds)
            )));
        }

        match numeric_claim(claims, "exp")? {
            None => {
                return Err(err(
                    "the token has no expiry ('exp'); this server accepts only tokens that expire",
                ));
            }
            Some(exp) if now >= exp + LEEWAY => {
                return Err(err(format!(
                    "the token expired at {}; get a new one from the issuer",
                    rfc3339(exp)
                )));
            }
            Some(_) => {}
        }
        if let Some(nbf) = numeric_claim(claims, "nbf")?
            && nbf > now + LEEWAY
        {
            return Err(err(format!(
                "the token is not valid before {}; if that is wrong, check the clocks of this \
                 server and of the issuer",
                rfc3339(nbf)
            )));
        }
        Ok(())
    }

    fn identity(&self, claims: &Map<String, Value>) -> Result<Verified, OidcError> {
        let config = &self.config;
        let user = match claim(claims, &config.user_claim) {
            Some(Value::String(user)) if !user.is_empty() => user.clone(),
            _ => {
                return Err(err(format!(
                    "the token has no '{}' claim naming the user",
                    config.user_claim
                )));
            }
        };
        let groups: Vec<String> = match claim(claims, &config.groups_claim) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(group)) => vec![group.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|g| g.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| not_groups(&config.groups_claim))?,
            Some(_) => return Err(not_groups(&config.groups_claim)),
        };
        let mut roles: Vec<String> = Vec::new();
        for (group, role) in &config.group_roles {
            if groups.contains(group) && !roles.contains(role) {
                roles.push(role.clone());
            }
        }
        if roles.is_empty() {
            match &config.default_role {
                Some(role) => roles.push(role.clone()),
                None if groups.is_empty() => {
                    return Err(err(format!(
                        "user {} is in no group that maps to a role: the token's '{}' claim names \
                         no group, and this server has no default role",
                        shown(&user),
                        config.groups_claim
                    )));
                }
                None => {
                    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
                    return Err(err(format!(
                        "user {} is in no group that maps to a role: their groups are [{}], and \
                         this server has no default role",
                        shown(&user),
                        quoted_list(&groups)
                    )));
                }
            }
        }
        Ok(Verified {
            user,
            groups,
            roles,
        })
    }
}

fn bad_signature() -> OidcError {
    err("the token's signature does not verify against the issuer's keys")
}

fn not_groups(claim: &str) -> OidcError {
    err(format!(
        "the token's '{claim}' claim is neither a string nor a list of strings"
    ))
}

fn has_kid(keys: &[Key], kid: &str) -> bool {
    keys.iter().any(|k| k.kid.as_deref() == Some(kid))
}

/// A claim by name; a name with dots that is not itself a claim is a path into nested
/// objects. (Namespaced claims such as `https://example.com/groups` have dots and are
/// found by their whole name first.)
fn claim<'a>(claims: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(value) = claims.get(name) {
        return Some(value);
    }
    let (first, rest) = name.split_once('.')?;
    rest.split('.')
        .try_fold(claims.get(first)?, |value, part| value.get(part))
}

/// A NumericDate claim, in seconds since 1970 (which may have a fraction).
fn numeric_claim(claims: &Map<String, Value>, name: &str) -> Result<Option<f64>, OidcError> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| err(format!("the token's '{name}' claim is not a number"))),
        Some(_) => Err(err(format!(
            "the token's '{name}' claim is not a number of seconds since 1970"
        ))),
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Text from a token or a JWKS, fit to quote in a message or a log: at most 100
/// characters, none of them control characters.
fn shown(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(100)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().nth(100).is_some() {
        out.push('…');
    }
    out
}

/// `'a', 'b'`, and no more than 20 of them.
fn quoted_list(items: &[&str]) -> String {
    let mut out: Vec<String> = items
        .iter()
        .take(20)
        .map(|i| format!("'{}'", shown(i)))
        .collect();
    if items.len() > 20 {
        out.push(format!("and {} more", items.len() - 20));
    }
    out.join(", ")
}

/// A time as RFC 3339, in UTC, to the second.
fn rfc3339(secs: f64) -> String {
    // Years 0000 to 9999; beyond them a token's dates are nonsense anyway.
    if !(-62_167_219_200.0..253_402_300_800.0).contains(&secs) {
        return format!("{secs} s after 1970-01-01T00:00:00Z");
    }
    let secs = secs.floor() as i64;
    let (days, time) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days: the proleptic Gregorian date of a day number.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        time / 3_600,
        time % 3_600 / 60,
        time % 60
    )
}

/// A token split into its parts, its header read and its algorithm allowed.
struct Jwt<'a> {
    alg: Algorithm,
    kid: Option<String>,
    /// `header.payload`: what the signature is over.
    signed: &'a str,
    payload: &'a str,
    signature: &'a str,
}

impl<'a> Jwt<'a> {
    fn parse(jwt: &'a str) -> Result<Jwt<'a>, OidcError> {
        if jwt.len() > MAX_TOKEN {
            return Err(err(format!(
                "the token is {} bytes long; this server accepts tokens of at most 16 KiB",
                jwt.len()
            )));
        }
        let mut parts = jwt.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(err(
                "the token is not a JWT: a JWT is three base64url parts separated by dots",
            ));
        };
        let header: Value = URL_SAFE_NO_PAD
            .decode(header)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .filter(Value::is_object)
            .ok_or_else(|| err("the token's header is not base64url-encoded JSON object"))?;
        let alg = match header.get("alg") {
            Some(Value::String(alg)) => alg.as_str(),
            _ => return Err(err("the token's header names no algorithm ('alg')")),
        };
        let Some(alg) = ALLOWED
            .iter()
            .find(|(name, _)| *name == alg)
            .map(|(_, a)| *a)
        else {
            let why = if alg.eq_ignore_ascii_case("none") {
                "an unsigned token proves nothing"
            } else if alg.starts_with("HS") {
                "HMAC needs a secret shared with the issuer, which this server does not have"
            } else {
                "this server does not support it"
            };
            return Err(err(format!(
                "the token's algorithm '{}' is not allowed: {why}; allowed are {}",
                shown(alg),
                allowed_names()
            )));
        };
        let kid = match header.get("kid") {
            None | Some(Value::Null) => None,
            Some(Value::String(kid)) => Some(kid.clone()),
            Some(_) => return Err(err("the token's key id ('kid') is not a string")),
        };
        if header.get("crit").is_some() {
            // RFC 7515: a verifier must refuse extensions it is told are critical and
            // does not understand, and we understand none.
            return Err(err(
                "the token's header marks extensions as critical ('crit'), which this server \
                 does not understand",
            ));
        }
        Ok(Jwt {
            alg,
            kid,
            signed: &jwt[..jwt.len() - signature.len() - 1],
            payload,
            signature,
        })
    }

    fn verifies_with(&self, key: &Key) -> bool {
        match jsonwebtoken::crypto::verify(
            self.signature,
            self.signed.as_bytes(),
            &key.key,
            self.alg,
        ) {
            Ok(ok) => ok,
            Err(e) => {
                tracing::debug!(error = %e, "a token's signature cannot be checked");
                false
            }
        }
    }

    /// The claims; only to be called once the signature verified.
    fn claims(&self) -> Result<Map<String, Value>, OidcError> {
        URL_SAFE_NO_PAD
            .decode(self.payload)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(|| err("the token's claims are not a base64url-encoded JSON object"))
    }
}

#[cfg(test)]
mod tests {
    use super::jwks::check_jwks_url;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;

    use jsonwebtoken::{EncodingKey, Header};
    use ring::rand::SystemRandom;
    use ring::signature::{
        ECDSA_P256_SHA256_FIXED_SIGNING, ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair,
        Ed25519KeyPair, KeyPair,
    };
    use serde_json::json;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    use super::*;

    const ISSUER: &str = "https://id.example.com/realms/lh";
    const AUDIENCE: &str = "lh";

    /// A 2048-bit RSA key (PKCS#1), made with `openssl genrsa -traditional 2048` for
    /// these tests only.
    const RSA_PEM: &str = "\
-----BEGIN RSA PRIVATE KEY-----\n\
MIIEogIBAAKCAQEAy6FGSXmCqn7kFpkoA+kNxHSQcS7nCeDMKGad9cNXB1N07bof\n\
akXi34cH8jw8jiJl+snN1DfbK6f9LOFuI4EIh/b2SQS3qJYyJKIGhtRUPszVZhS1\n\
Cyk84li90e7wetXj2QYTU7usu3DrZk0dmZULtIKLl+BJ+gdMHisf8bH3kiprxWLF\n\
FeoIXTTqTiHP6lLwBiHvI9g5dq9/3nVVXm1P+RPZe8H5E23/eAAAtmKuH3q04Hqv\n\
wsxznLN2b2rbV4W6F6DSPLWeBxy1vBPUA/v7SkCAA15jYVT7dLVFp5KhMA9Rd2B/\n\
KZ9tUU9syMAifbW3fGgZIOJ6mwEm/mOmaQjG/QIDAQABAoH/HNtAhbIKl0dkuyUK\n\
215NZNTtKD7lSoH9DWeY5r+5L68ZIjGscvPv+IoqKsG+3wcGFq/XKBuo4DjoVU0E\n\
oEwyJnhHBQfghw/CG0GcELYTFrq6xp/NdG/6FZSp2/IXU15nkZ7SloiDYKY4NAOG\n\
icMjmLvx8Qz+8CJPCyMn/i5WUFkNN+WBNPH09qVZP8QbdvrP9Tbg7zxZegUIWGV6\n\
zdS6DrkoIShqTStBUPLIUn63eyer97BVsC0JO+302qynCFoKKyoN7WRMFC1v1f1F\n\
MLBwWVRsSzA9trSki1UJ11UTxcpcVsrALkg2ZuUFe8pKw7FDAuykD4bJVIo7h6TZ\n\
tQp9AoGBAP30nPzODoKPtcRBSdjP/NTou3Z0FC7UHI6Pl1Mv+MpCYR63veIGMELZ\n\
wULeLc5jQAQulrJ3RItsxDIVbzLn3YAhn0He8VICrM80zfQA8rk0nGF0r91QsiZ5\n\
vYrFD5Itwu8cByT+Xq5+UuQkcOdQIkLCe1SUJFWsUOk60xP0Rh33AoGBAM1E8Ych\n\
1reKO0vJEaM/vJDEmsQaW6d0EeZCg/jVcWaF094ztCqu5rC9DFh+gEPZ0O1VNGKg\n\
0CGu9Y+A6Ezc6l6WmOyX3iEueGkLFO1dKyuzjf7zn/vkfUL3c7CU8jQ5QZZ/bQdX\n\
49qMbqqdA50502mSQoRwNlmQl0kvD2S+zpWrAoGAIrhOvkFtumvrbel/LyVAa9tl\n\
xcwY9k4JmXQIPFdSrFRm8swsKbqu3nTm9z1pBc6L8gZsk/m6ZVV5fV9w1ITew6XV\n\
ICxa0duLxMhzX+jBRpDq0Ggjox5lPN1oDJDkkBexjv9F+sjMKQ8cRhS1WuqZxIbS\n\
Vb3rOctVRI3GTfQXogECgYEAwEL7Ft8TBgZrU6iY5JcmP1Jmw5cMkeOdgFZ81ezV\n\
snlW4KD8952qZZAsqBaUfPjfP+y2jEqjp2kAh9DtxFCHFOFpivEUFXA5R+ohR9Ik\n\
RWKAdXQrPPved4Le0V4xHckjLZtcu6wOtv0iCpvWbsVix1c/Bl00Ct/rU5jIikxN\n\
otECgYEAu14XuatYtP539I7/U8HYgCjtEp8zErDqU+mzLuXup55JRribtBnW4Vmf\n\
1SmNyvxLclVBwN4MdDtvTXCYKOr8MMwMsm26xP4qF3NbANQOWdRLcJLI0NfdRN2R\n\
hyNv9kM47Sjt/0JBsLWgDsYWlhilNdzrXU3/wwac+Zpjay1PZe8=\n\
-----END RSA PRIVATE KEY-----\n";

    /// A key to sign test tokens with, and its JWK.
    struct TestKey {
        alg: Algorithm,
        kid: String,
        encoding: EncodingKey,
        jwk: Value,
    }

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    impl TestKey {
        fn ec(alg: Algorithm, kid: &str) -> TestKey {
            let (signing, crv, len) = match alg {
                Algorithm::ES256 => (&ECDSA_P256_SHA256_FIXED_SIGNING, "P-256", 32),
                _ => (&ECDSA_P384_SHA384_FIXED_SIGNING, "P-384", 48),
            };
            let rng = SystemRandom::new();
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(signing, &rng).unwrap();
            let pair = EcdsaKeyPair::from_pkcs8(signing, pkcs8.as_ref(), &rng).unwrap();
            let point = pair.public_key().as_ref();
            assert_eq!(point.len(), 1 + 2 * len);
            TestKey {
                alg,
                kid: kid.to_string(),
                encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
                jwk: json!({
                    "kty": "EC", "crv": crv, "use": "sig", "alg": alg_name(alg), "kid": kid,
                    "x": b64(&point[1..=len]), "y": b64(&point[len + 1..]),
                }),
            }
        }

        fn es256(kid: &str) -> TestKey {
            TestKey::ec(Algorithm::ES256, kid)
        }

        fn ed25519(kid: &str) -> TestKey {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
            let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
            TestKey {
                alg: Algorithm::EdDSA,
                kid: kid.to_string(),
                encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
                jwk: json!({
                    "kty": "OKP", "crv": "Ed25519", "kid": kid,
                    "x": b64(pair.public_key().as_ref()),
                }),
            }
        }

        /// The fixed RSA key; its JWK names no algorithm, so RS* and PS* both fit.
        fn rsa(alg: Algorithm, kid: &str) -> TestKey {
            let body: String = RSA_PEM
                .lines()
                .filter(|l| !l.starts_with("-----"))
                .collect();
            let der = base64::engine::general_purpose::STANDARD
                .decode(body)
                .unwrap();
            let pair = ring::rsa::KeyPair::from_der(&der).unwrap();
            let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public());
            TestKey {
                alg,
                kid: kid.to_string(),
                encoding: EncodingKey::from_rsa_der(&der),
                jwk: json!({"kty": "RSA", "kid": kid, "n": b64(&public.n), "e": b64(&public.e)}),
            }
        }

        fn sign(&self, claims: &Value) -> String {
            self.sign_as(Some(&self.kid), claims)
        }

        fn sign_as(&self, kid: Option<&str>, claims: &Value) -> String {
            let mut header = Header::new(self.alg);
            header.kid = kid.map(str::to_string);
            jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
        }
    }

    fn jwks(keys: &[&TestKey]) -> String {
        json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()}).to_string()
    }

    fn claims() -> Value {
        let now = now() as i64;
        json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 3600,
            "groups": ["eng", "admins"],
        })
    }

    fn with(mut claims: Value, changes: Value) -> Value {
        for (name, value) in changes.as_object().unwrap() {
            if value.is_null() {
                claims.as_object_mut().unwrap().remove(name);
            } else {
                claims[name] = value.clone();
            }
        }
        claims
    }

    fn config(jwks: JwksSource) -> OidcConfig {
        OidcConfig {
            group_roles: vec![
                ("admins".into(), "admin".into()),
                ("eng".into(), "writer".into()),
                ("staff".into(), "writer".into()),
            ],
            ..OidcConfig::new(ISSUER, AUDIENCE, jwks)
        }
    }

    /// Serves a JWKS (which the test may change) over HTTP on loopback, counting requests.
    struct Server {
        url: String,
        body: Arc<Mutex<String>>,
        hits: Arc<AtomicUsize>,
    }

    impl Server {
        async fn start(body: String) -> Server {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/jwks", listener.local_addr().unwrap());
            let body = Arc::new(Mutex::new(body));
            let hits = Arc::new(AtomicUsize::new(0));
            let (served, counted) = (body.clone(), hits.clone());
            tokio::spawn(async move {
                while let Ok((mut socket, _)) = listener.accept().await {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let body = served.lock().unwrap().clone();
                    tokio::spawn(async move {
                        let mut request = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16384
                        {
                            match socket.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => request.extend_from_slice(&buf[..n]),
                            }
                        }
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = socket.write_all(head.as_bytes()).await;
                        let _ = socket.write_all(body.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    });
                }
            });
            Server { url, body, hits }
        }

        fn source(&self) -> JwksSource {
            JwksSource::Url(self.url.clone())
        }
    }

    /// A JWKS file in the temp directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &str) -> TempFile {
            let path =
                std::env::temp_dir().join(format!("lh-oidc-{}-{name}.json", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            TempFile(path)
        }

        fn write(&self, contents: &str) {
            std::fs::write(&self.0, contents).unwrap();
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    async fn oidc_for(keys: &[&TestKey]) -> (Oidc, Server) {
        let server = Server::start(jwks(keys)).await;
        let oidc = Oidc::new(config(server.source())).await.unwrap();
        (oidc, server)
    }

    async fn refused(oidc: &Oidc, token: &str, fragment: &str) {
        match oidc.verify(token).await {
            Ok(v) => panic!("expected an error with {fragment:?}, got {v:?}"),
            Err(e) => {
                assert!(e.0.contains(fragment), "expected {fragment:?} in {:?}", e.0);
                assert!(
                    !e.0.contains(token),
                    "the error echoes the token: {:?}",
                    e.0
                );
            }
        }
    }

    fn reads(oidc: &Oidc) -> usize {
        oidc.reads.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn a_valid_es256_token_names_the_user_groups_and_roles() {
        let key = TestKey::es256("k1");
        let (oidc, server) = oidc_for(&[&key]).await;
        let verified = oidc.verify(&key.sign(&claims())).await.unwrap();
        assert_eq!(
            verified,
            Verified {
                user: "alice".into(),
                groups: vec!["eng".into(), "admins".into()],
                // In the order of group_roles, not of the token's groups.
                roles: vec!["admin".into(), "writer".into()],
            }
        );
        // Read once, at start; a known key id reads nothing.
        assert_eq!(server.hits.load(Ordering::SeqCst), 1);
        assert!(Oidc::looks_like_jwt(&key.sign(&claims())));
    }

    #[tokio::test]
    async fn groups_map_to_roles_once_or_to_the_default_role() {
        let key = TestKey::es256("k1");
        let (mut oidc, _server) = oidc_for(&[&key]).await;
        let roles = |v: Verified| v.roles;

        let token = key.sign(&with(claims(), json!({"groups": ["staff", "eng"]})));
        assert_eq!(roles(oidc.verify(&token).await.unwrap()), ["writer"]);
        let token = key.sign(&with(claims(), json!({"groups": "admins"})));
        let verified = oidc.verify(&token).await.unwrap();
        assert_eq!(
            (verified.groups, verified.roles),
            (vec!["admins".to_string()], vec!["admin".to_string()])
        );

        let visitor = key.sign(&with(claims(), json!({"groups": ["visitors"]})));
        refused(
            &oidc,
            &visitor,
            "user alice is in no group that maps to a role: their groups are ['visitors']",
        )
        .await;
        let no_groups = key.sign(&with(claims(), json!({"groups": null})));
        refused(
            &oidc,
            &no_groups,
            "user alice is in no group that maps to a role",
        )
        .await;
        let bad_groups = key.sign(&with(claims(), json!({"groups": [1, 2]})));
        refused(
            &oidc,
            &bad_groups,
            "'groups' claim is neither a string nor a list",
        )
        .await;

        oidc.config.default_role = Some("reader".into());
        assert_eq!(roles(oidc.verify(&visitor).await.unwrap()), ["reader"]);
        let verified = oidc.verify(&no_groups).await.unwrap();
        assert_eq!(
            (verified.groups.len(), verified.roles),
            (0, vec!["reader".to_string()])
        );
        // The default is for users no group maps, not an extra role.
        let token = key.sign(&claims());
        assert_eq!(
            roles(oidc.verify(&token).await.unwrap()),
            ["admin", "writer"]
        );

        // Keycloak's roles, by a dotted path.
        oidc.config.groups_claim = "realm_access.roles".into();
        let token = key.sign(&with(claims(), json!({"realm_access": {"roles": ["eng"]}})));
        assert_eq!(roles(oidc.verify(&token).await.unwrap()), ["writer"]);
    }

    #[tokio::test]
    async fn a_token_signed_by_another_key_with_the_same_kid_is_refused() {
        let key = TestKey::es256("k1");
        let impostor = TestKey::es256("k1");
        let (oidc, _server) = oidc_for(&[&key]).await;
        refused(
            &oidc,
            &impostor.sign(&claims()),
            "the token's signature does not verify against the issuer's keys",
        )
        .await;
        // Nor one whose claims were changed after signing.
        let token = key.sign(&claims());
        let forged = with(claims(), json!({"sub": "mallory"}));
        let mut parts: Vec<&str> = token.split('.').collect();
        let payload = b64(forged.to_string().as_bytes());
        parts[1] = &payload;
        refused(&oidc, &parts.join("."), "signature does not verify").await;
    }

    #[tokio::test]
    async fn audience_issuer_and_user_are_checked() {
        let key = TestKey::es256("k1");
        let (mut oidc, _server) = oidc_for(&[&key]).await;
        let token = |changes| key.sign(&with(claims(), changes));

        refused(
            &oidc,
            &token(json!({"aud": "grafana"})),
            "the token is for audience ['grafana'], not 'lh'",
        )
        .await;
        refused(
            &oidc,
            &token(json!({"aud": ["grafana", "kibana"]})),
            "the token is for audience ['grafana', 'kibana'], not 'lh'",
        )
        .await;
        refused(&oidc, &token(json!({"aud": null})), "names no audience").await;
        assert!(
            oidc.verify(&token(json!({"aud": ["grafana", "lh"]})))
                .await
                .is_ok()
        );

        refused(
            &oidc,
            &token(json!({"iss": "https://evil.example.com"})),
            "the token was issued by 'https://evil.example.com', not 'https://id.example.com/realms/lh'",
        )
        .await;
        refused(
            &oidc,
            &token(json!({"iss": format!("{ISSUER}/")})),
            "was issued by",
        )
        .await;
        refused(&oidc, &token(json!({"iss": null})), "names no issuer").await;

        refused(
            &oidc,
            &token(json!({"sub": null})),
            "the token has no 'sub' claim naming the user",
        )
        .await;
        refused(&oidc, &token(json!({"sub": ""})), "has no 'sub' claim").await;
        oidc.config.user_claim = "email".into();
        refused(
            &oidc,
            &token(json!({})),
            "the token has no 'email' claim naming the user",
        )
        .await;
        let verified = oidc
            .verify(&token(json!({"email": "alice@example.com"})))
            .await
            .unwrap();
        assert_eq!(verified.user, "alice@example.com");
    }

    #[tokio::test]
    async fn expiry_and_not_before_are_checked_with_a_minute_of_leeway() {
        let key = TestKey::es256("k1");
        let (oidc, _server) = oidc_for(&[&key]).await;
        let now = now() as i64;
        let token = |changes| key.sign(&with(claims(), changes));

        let exp = now - 3600;
        refused(
            &oidc,
            &token(json!({"exp": exp})),
            &format!("the token expired at {}", rfc3339(exp as f64)),
        )
        .await;
        refused(
            &oidc,
            &token(json!({"exp": 1_000_000_000})),
            "expired at 2001-09-09T01:46:40Z",
        )
        .await;
        refused(&oidc, &token(json!({"exp": null})), "has no expiry").await;
        refused(
            &oidc,
            &token(json!({"exp": "tomorrow"})),
            "'exp' claim is not a number",
        )
        .await;
        assert!(oidc.verify(&token(json!({"exp": now - 30}))).await.is_ok());

        let nbf = now + 600;
        refused(
            &oidc,
            &token(json!({"nbf": nbf})),
            &format!("the token is not valid before {}", rfc3339(nbf as f64)),
        )
        .await;
        assert!(oidc.verify(&token(json!({"nbf": now + 30}))).await.is_ok());
        assert!(oidc.verify(&token(json!({"nbf": now - 30}))).await.is_ok());
    }

    #[tokio::test]
    async fn unsigned_and_hmac_tokens_are_refused() {
        let key = TestKey::es256("k1");
        let (oidc, _server) = oidc_for(&[&key]).await;
        let payload = b64(claims().to_string().as_bytes());

        let header = b64(br#"{"alg":"none","kid":"k1"}"#);
        let unsigned = format!("{header}.{payload}.");
        assert!(Oidc::looks_like_jwt(&unsigned));
        refused(
            &oidc,
            &unsigned,
            "the token's algorithm 'none' is not allowed: an unsigned token proves nothing",
        )
        .await;
        let header = b64(br#"{"alg":"None","typ":"JWT"}"#);
        refused(
            &oidc,
            &format!("{header}.{payload}."),
            "algorithm 'None' is not allowed",
        )
        .await;

        let hmac = |secret: &[u8]| {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some("k1".into());
            jsonwebtoken::encode(&header, &claims(), &EncodingKey::from_secret(secret)).unwrap()
        };
        refused(
            &oidc,
            &hmac(b"secret"),
            "the token's algorithm 'HS256' is not allowed: HMAC needs a secret shared",
        )
        .await;
        // The classic confusion: the issuer's public key as the HMAC secret.
        let public = key.jwk.to_string();
        refused(&oidc, &hmac(public.as_bytes()), "'HS256' is not allowed").await;

        let header = b64(br#"{"alg":"ES256","kid":"k1","crit":["exp"]}"#);
        refused(
            &oidc,
            &format!("{header}.{payload}.AAAA"),
            "marks extensions as critical",
        )
        .await;
    }

    #[tokio::test]
    async fn an_unknown_kid_rereads_the_jwks_file_at_most_every_30_seconds() {
        let k1 = TestKey::es256("k1");
        let k2 = TestKey::es256("k2");
        let k3 = TestKey::es256("k3");
        let file = TempFile::new("rotation", &jwks(&[&k1]));
        let mut oidc = Oidc::new(config(JwksSource::File(file.0.clone())))
            .await
            .unwrap();
        assert_eq!(reads(&oidc), 1);

        // The issuer rotates: k2 appears. Read just now, so not re-read yet.
        file.write(&jwks(&[&k1, &k2]));
        refused(&oidc, &k2.sign(&claims()), "unknown key id 'k2'").await;
        assert_eq!(reads(&oidc), 1);

        // Half a minute later: one re-read, and k2 verifies.
        *oidc.last_read.lock().await = Instant::now() - Duration::from_secs(31);
        assert_eq!(
            oidc.verify(&k2.sign(&claims())).await.unwrap().user,
            "alice"
        );
        assert_eq!(reads(&oidc), 2);
        assert_eq!(
            oidc.verify(&k1.sign(&claims())).await.unwrap().user,
            "alice"
        );
        assert!(oidc.verify(&k2.sign(&claims())).await.is_ok(), "k2 is kept");
        assert_eq!(reads(&oidc), 2);

        // Made-up key ids right after do not read again...
        for kid in ["bogus", "bogus2", "k3"] {
            refused(
                &oidc,
                &k3.sign_as(Some(kid), &claims()),
                &format!("unknown key id '{kid}'"),
            )
            .await;
        }
        file.write(&jwks(&[&k1, &k2, &k3]));
        refused(&oidc, &k3.sign(&claims()), "unknown key id 'k3'").await;
        assert_eq!(reads(&oidc), 2);

        // ...until the interval has passed.
        oidc.reread_every = Duration::ZERO;
        assert!(oidc.verify(&k3.sign(&claims())).await.is_ok());
        assert_eq!(reads(&oidc), 3);

        // A JWKS that cannot be read keeps the keys we had.
        file.write("not json");
        refused(
            &oidc,
            &k3.sign_as(Some("k4"), &claims()),
            "unknown key id 'k4'",
        )
        .await;
        assert_eq!(reads(&oidc), 4);
        assert!(oidc.verify(&k1.sign(&claims())).await.is_ok());
    }

    #[tokio::test]
    async fn an_unknown_kid_refetches_the_jwks_url() {
        let k1 = TestKey::es256("k1");
        let k2 = TestKey::es256("k2");
        let (mut oidc, server) = oidc_for(&[&k1]).await;
        oidc.reread_every = Duration::ZERO;
        *server.body.lock().unwrap() = jwks(&[&k1, &k2]);
        assert!(oidc.verify(&k2.sign(&claims())).await.is_ok());
        assert_eq!(server.hits.load(Ordering::SeqCst), 2);
        refused(
            &oidc,
            &k2.sign_as(Some("k9"), &claims()),
            "unknown key id 'k9'",
        )
        .await;
        assert_eq!(server.hits.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn rsa_eddsa_and_es384_tokens_verify() {
        let rs256 = TestKey::rsa(Algorithm::RS256, "rsa");
        let ps256 = TestKey::rsa(Algorithm::PS256, "rsa");
        let ps512 = TestKey::rsa(Algorithm::PS512, "rsa");
        let ed = TestKey::ed25519("ed");
        let es384 = TestKey::ec(Algorithm::ES384, "p384");
        let file = TempFile::new("algorithms", &jwks(&[&rs256, &ed, &es384]));
        let oidc = Oidc::new(config(JwksSource::File(file.0.clone())))
            .await
            .unwrap();
        for key in [&rs256, &ps256, &ps512, &ed, &es384] {
            let verified = oidc.verify(&key.sign(&claims())).await;
            assert_eq!(verified.unwrap().user, "alice", "{:?}", key.alg);
        }
    }

    #[tokio::test]
    async fn the_algorithm_must_fit_the_key() {
        let rsa = TestKey::rsa(Algorithm::RS256, "rsa");
        let mut pinned = TestKey::rsa(Algorithm::RS256, "pinned");
        pinned.jwk["alg"] = json!("RS256");
        let ec = TestKey::es256("ec");
        let ed = TestKey::ed25519("ed");
        let (oidc, _server) = oidc_for(&[&rsa, &pinned, &ec, &ed]).await;

        // An RSA signature presented under the EC key's id.
        let token = rsa.sign_as(Some("ec"), &claims());
        refused(
            &oidc,
            &token,
            "the token's algorithm RS256 does not fit the issuer's key 'ec', which is a P-256 key for ES256",
        )
        .await;
        // The Ed25519 key's JWK names no algorithm: its type alone decides.
        refused(
            &oidc,
            &rsa.sign_as(Some("ed"), &claims()),
            "the token's algorithm RS256 does not fit the issuer's key 'ed', which is an Ed25519 key",
        )
        .await;
        let ps = TestKey::rsa(Algorithm::PS256, "pinned");
        refused(
            &oidc,
            &ps.sign(&claims()),
            "PS256 does not fit the issuer's key 'pinned'",
        )
        .await;
        assert!(oidc.verify(&pinned.sign(&claims())).await.is_ok());
    }

    #[tokio::test]
    async fn a_token_without_kid_is_tried_against_every_key_of_its_algorithm() {
        let k1 = TestKey::es256("k1");
        let k2 = TestKey::es256("k2");
        let ed = TestKey::ed25519("ed");
        let (oidc, _server) = oidc_for(&[&k1, &k2]).await;
        assert!(oidc.verify(&k2.sign_as(None, &claims())).await.is_ok());
        assert!(oidc.verify(&k1.sign_as(None, &claims())).await.is_ok());
        let other = TestKey::es256("k1");
        refused(
            &oidc,
            &other.sign_as(None, &claims()),
            "signature does not verify",
        )
        .await;
        refused(
            &oidc,
            &ed.sign_as(None, &claims()),
            "the issuer has no key for EdDSA",
        )
        .await;
    }

    #[tokio::test]
    async fn unusable_jwks_keys_are_skipped() {
        let good = TestKey::es256("good");
        let mut enc = TestKey::rsa(Algorithm::RS256, "enc");
        enc.jwk["use"] = json!("enc");
        let mut oaep = TestKey::rsa(Algorithm::RS256, "oaep");
        oaep.jwk["alg"] = json!("RSA-OAEP");
        let mut wrong_alg = TestKey::es256("wrong-alg");
        wrong_alg.jwk["alg"] = json!("RS256");
        let unusable = json!([
            enc.jwk,
            oaep.jwk,
            wrong_alg.jwk,
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "EC", "crv": "P-521", "kid": "p521", "x": "AA", "y": "AA"},
            {"kty": "RSA", "kid": "short", "n": b64(&[0xff; 128]), "e": "AQAB"},
            {"kty": "dunno", "kid": "dunno"},
            "not a key",
        ]);
        let mut keys = unusable.as_array().unwrap().clone();
        keys.push(good.jwk.clone());
        let file = TempFile::new("skipped", &json!({ "keys": keys }).to_string());
        let oidc = Oidc::new(config(JwksSource::File(file.0.clone())))
            .await
            .unwrap();
        assert_eq!(oidc.snapshot().len(), 1);
        assert!(oidc.verify(&good.sign(&claims())).await.is_ok());

        file.write(&json!({ "keys": unusable }).to_string());
        let e = Oidc::new(config(JwksSource::File(file.0.clone())))
            .await
            .unwrap_err();
        assert!(
            e.0.contains("has no key this server can verify signatures with"),
            "{e}"
        );
        assert!(
            e.0.contains("key 'enc': it is for 'enc', not for signatures"),
            "{e}"
        );
        assert!(
            e.0.contains("key 'oaep': its algorithm 'RSA-OAEP' is not one"),
            "{e}"
        );
        assert!(e.0.contains("key 'hmac': it is a symmetric key"), "{e}");

        for (keys, fragment) in [
            ("[]", "has no \"keys\" array"),
            ("{\"keys\": []}", "(it has none)"),
            ("{", "is not JSON"),
        ] {
            file.write(keys);
            let e = Oidc::new(config(JwksSource::File(file.0.clone())))
                .await
                .unwrap_err();
            assert!(e.0.contains(fragment), "{e}");
        }
        let path = file.0.with_extension("missing");
        let e = Oidc::new(config(JwksSource::File(path))).await.unwrap_err();
        assert!(
            e.0.contains("cannot read the OIDC issuer's keys from"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn only_https_or_loopback_http_urls_are_accepted() {
        for (url, fragment) in [
            (
                "http://id.example.com/jwks",
                "plain http:// is accepted only to this machine",
            ),
            ("http://10.0.0.1/jwks", "plain http:// is accepted only"),
            ("ftp://id.example.com/jwks", "'ftp:' is not a scheme"),
            ("id.example.com/jwks", "is not a URL"),
        ] {
            let e = Oidc::new(config(JwksSource::Url(url.into())))
                .await
                .unwrap_err();
            assert!(e.0.contains(fragment), "{url}: {e}");
        }
        for url in [
            "https://id.example.com/jwks",
            "http://127.0.0.1:1/jwks",
            "http://[::1]:1/jwks",
            "http://localhost:1/jwks",
        ] {
            assert!(
                check_jwks_url(&url::Url::parse(url).unwrap()).is_ok(),
                "{url}"
            );
        }
        // Accepted, but nothing listens there.
        let e = Oidc::new(config(JwksSource::Url("http://127.0.0.1:1/jwks".into())))
            .await
            .unwrap_err();
        assert!(
            e.0.contains("cannot read the OIDC issuer's keys from http://127.0.0.1:1/jwks"),
            "{e}"
        );
        let e = Oidc::new(OidcConfig::new("", AUDIENCE, JwksSource::File("x".into())))
            .await
            .unwrap_err();
        assert!(e.0.contains("the OIDC issuer is empty"), "{e}");
    }

    #[tokio::test]
    async fn sizes_are_bounded() {
        let key = TestKey::es256("k1");
        let (oidc, server) = oidc_for(&[&key]).await;
        let padding = "x".repeat(MAX_TOKEN);
        let token = key.sign(&with(claims(), json!({ "padding": padding })));
        refused(&oidc, &token, "accepts tokens of at most 16 KiB").await;

        let huge = format!(
            "{{\"keys\": [{}], \"padding\": \"{}\"}}",
            key.jwk,
            "x".repeat(MAX_JWKS)
        );
        *server.body.lock().unwrap() = huge.clone();
        let e = Oidc::new(config(server.source())).await.unwrap_err();
        assert!(e.0.contains("is larger than 1 MiB"), "{e}");
        let file = TempFile::new("huge", &huge);
        let e = Oidc::new(config(JwksSource::File(file.0.clone())))
            .await
            .unwrap_err();
        assert!(e.0.contains("is larger than 1 MiB"), "{e}");
    }

    #[tokio::test]
    async fn malformed_tokens_are_refused_without_echoing_them() {
        let key = TestKey::es256("k1");
        let (oidc, _server) = oidc_for(&[&key]).await;
        refused(&oidc, "abc.def", "the token is not a JWT").await;
        refused(&oidc, "a.b.c.d", "the token is not a JWT").await;
        refused(&oidc, "%%%.e30.AA", "the token's header is not base64url").await;
        let payload = b64(b"[1,2]");
        let header = b64(br#"{"alg":"ES256"}"#);
        refused(
            &oidc,
            &format!("{header}.{payload}.AA"),
            "signature does not verify",
        )
        .await;
        let header = b64(br#"{"typ":"JWT"}"#);
        refused(
            &oidc,
            &format!("{header}.{payload}.AA"),
            "names no algorithm",
        )
        .await;
    }

    /// The server shares one verifier between requests, and axum wants Send futures.
    #[test]
    fn the_verifier_is_shareable() {
        fn shareable<T: Send + Sync>(_: &T) {}
        fn send<T: Send>(_: T) {}
        fn check(oidc: &Oidc) {
            shareable(oidc);
            send(oidc.verify("a.b.c"));
        }
        let _ = check;
    }

    #[test]
    fn looks_like_jwt_is_a_cheap_shape_check() {
        assert!(Oidc::looks_like_jwt("eyJh.eyJz.c2ln"));
        assert!(Oidc::looks_like_jwt("eyJh.eyJz."));
        assert!(!Oidc::looks_like_jwt("lht_0123456789abcdef_0123"));
        assert!(!Oidc::looks_like_jwt("eyJh.eyJz"));
        assert!(!Oidc::looks_like_jwt("eyJh.eyJz.c2ln.eA"));
        assert!(!Oidc::looks_like_jwt(".eyJz.c2ln"));
        assert!(!Oidc::looks_like_jwt("eyJh.eyJz.c2l+"));
        assert!(!Oidc::looks_like_jwt("eyJh.eyJz.c2ln="));
        assert!(!Oidc::looks_like_jwt(""));
    }

    #[test]
    fn times_are_shown_as_rfc3339() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(-1.0), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000.5), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(253_402_300_799.0), "9999-12-31T23:59:59Z");
        assert!(rfc3339(1e300).contains("s after 1970"));
    }
}
