//! The issuer's keys: where they may be read from (HTTPS, or plain HTTP to this
//! machine, or a file), read within bounds of time and size, and parsed into the keys a
//! token can be verified with (keys lh cannot use are skipped, not fatal).

use tokio::io::AsyncReadExt;

use super::*;

/// Reads the JWKS from where it is.
pub(super) enum Fetcher {
    Url {
        url: String,
        client: reqwest::Client,
    },
    File(PathBuf),
}

/// Whether the keys may be read from `url`: over HTTPS, or plain HTTP to this machine
/// (a test issuer, or a sidecar). Keys read over plain HTTP from elsewhere could be
/// swapped by anyone on the path, who could then sign in as anyone.
pub(super) fn check_jwks_url(url: &url::Url) -> Result<(), String> {
    match url.scheme() {
        "https" if url.host().is_some() => Ok(()),
        "http" if is_loopback(url) => Ok(()),
        "http" => Err(
            "plain http:// is accepted only to this machine (127.0.0.1, ::1, localhost), since \
             keys read over it from elsewhere could be replaced on the way by anyone who could \
             then sign in as anyone: use https://"
                .to_string(),
        ),
        scheme => Err(format!(
            "'{scheme}:' is not a scheme the keys can be read with: use https://"
        )),
    }
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(host)) => host.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

impl Fetcher {
    pub(super) fn new(source: &JwksSource) -> Result<Fetcher, OidcError> {
        let address = match source {
            JwksSource::File(path) => return Ok(Fetcher::File(path.clone())),
            JwksSource::Url(address) => address,
        };
        let parsed = url::Url::parse(address).map_err(|e| {
            err(format!(
                "the OIDC JWKS URL '{}' is not a URL: {e}",
                shown(address)
            ))
        })?;
        check_jwks_url(&parsed).map_err(|why| {
            err(format!(
                "the OIDC JWKS URL '{}' is refused: {why}",
                shown(address)
            ))
        })?;
        let mut builder = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .user_agent(concat!("lh/", env!("CARGO_PKG_VERSION")))
            // A redirect must go where a configured URL could.
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                if attempt.previous().len() >= 5 {
                    attempt.error("more than 5 redirects")
                } else if let Err(why) = check_jwks_url(attempt.url()) {
                    let to = attempt.url().to_string();
                    attempt.error(format!("redirected to {to}: {why}"))
                } else {
                    attempt.follow()
                }
            }));
        if is_loopback(&parsed) {
            // A proxy from the environment cannot reach this machine's loopback.
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|e| {
            err(format!(
                "cannot make the HTTP client for the OIDC JWKS: {}",
                chain(&e)
            ))
        })?;
        Ok(Fetcher::Url {
            url: address.clone(),
            client,
        })
    }

    /// Reads and parses the keys.
    pub(super) async fn read(&self) -> Result<Vec<Key>, OidcError> {
        let (body, source) = match self {
            Fetcher::Url { url, client } => (fetch(client, url).await?, url.clone()),
            Fetcher::File(path) => (read_file(path).await?, path.display().to_string()),
        };
        parse_jwks(&body, &source)
    }
}

async fn fetch(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, OidcError> {
    let failed = |e: reqwest::Error| {
        err(format!(
            "cannot read the OIDC issuer's keys from {url}: {}",
            chain(&e)
        ))
    };
    let mut response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(failed)?;
    let status = response.status();
    if !status.is_success() {
        return Err(err(format!(
            "cannot read the OIDC issuer's keys from {url}: it answered {status}"
        )));
    }
    let too_large = || {
        err(format!(
            "the OIDC JWKS at {url} is larger than 1 MiB, which no set of signing keys is"
        ))
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_JWKS as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        if body.len() + chunk.len() > MAX_JWKS {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn read_file(path: &std::path::Path) -> Result<Vec<u8>, OidcError> {
    let failed = |e: std::io::Error| {
        err(format!(
            "cannot read the OIDC issuer's keys from {}: {e}",
            path.display()
        ))
    };
    let file = tokio::fs::File::open(path).await.map_err(failed)?;
    let mut body = Vec::new();
    file.take(MAX_JWKS as u64 + 1)
        .read_to_end(&mut body)
        .await
        .map_err(failed)?;
    if body.len() > MAX_JWKS {
        return Err(err(format!(
            "the OIDC JWKS file {} is larger than 1 MiB, which no set of signing keys is",
            path.display()
        )));
    }
    Ok(body)
}

/// An error and its causes, which reqwest's message leaves out ("error sending request"
/// says nothing of the refused connection or the bad certificate).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

/// The keys of a JWKS that we can verify signatures with. A key we cannot use (one for
/// encryption, a symmetric key, a curve we do not support) is skipped rather than
/// failing the set: issuers publish such keys next to their signing keys.
fn parse_jwks(body: &[u8], source: &str) -> Result<Vec<Key>, OidcError> {
    let jwks: Value = serde_json::from_slice(body)
        .map_err(|e| err(format!("the OIDC JWKS at {source} is not JSON: {e}")))?;
    let Some(entries) = jwks.get("keys").and_then(Value::as_array) else {
        return Err(err(format!(
            "the OIDC JWKS at {source} has no \"keys\" array: is it the issuer's jwks_uri?"
        )));
    };
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        match parse_jwk(entry) {
            Ok(key) => keys.push(key),
            Err(why) => {
                let name = match entry.get("kid").and_then(Value::as_str) {
                    Some(kid) => format!("key '{}'", shown(kid)),
                    None => format!("key #{}", i + 1),
                };
                tracing::debug!(jwks = %source, key = %name, "skipping a key of the OIDC JWKS: {why}");
                skipped.push(format!("{name}: {why}"));
            }
        }
    }
    if keys.is_empty() {
        let why = if skipped.is_empty() {
            "it has none".to_string()
        } else {
            skipped.truncate(5);
            skipped.join("; ")
        };
        return Err(err(format!(
            "the OIDC JWKS at {source} has no key this server can verify signatures with ({why})"
        )));
    }
    Ok(keys)
}

fn parse_jwk(entry: &Value) -> Result<Key, String> {
    let Some(jwk) = entry.as_object() else {
        return Err("it is not a JSON object".to_string());
    };
    let text = |name: &str| -> Result<Option<&str>, String> {
        match jwk.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(format!("its '{name}' is not a string")),
        }
    };
    let kid = text("kid")?.map(str::to_string);
    if let Some(usage) = text("use")?
        && usage != "sig"
    {
        return Err(format!("it is for '{}', not for signatures", shown(usage)));
    }
    if let Some(ops) = jwk.get("key_ops").and_then(Value::as_array)
        && !ops.iter().any(|op| op == "verify")
    {
        return Err("its key_ops do not include 'verify'".to_string());
    }
    let alg = match text("alg")? {
        None => None,
        Some(name) => match ALLOWED.iter().find(|(n, _)| *n == name) {
            Some((_, alg)) => Some(*alg),
            None => {
                return Err(format!(
                    "its algorithm '{}' is not one this server accepts",
                    shown(name)
                ));
            }
        },
    };
    let bytes = |name: &str| -> Result<Vec<u8>, String> {
        let value = text(name)?.ok_or_else(|| format!("it has no '{name}'"))?;
        // Some issuers pad their base64url; the padding carries nothing.
        URL_SAFE_NO_PAD
            .decode(value.trim_end_matches('='))
            .map_err(|_| format!("its '{name}' is not base64url"))
    };
    let curve = || text("crv").map(|c| c.unwrap_or_default().to_string());
    let (kind, key) = match text("kty")?.unwrap_or_default() {
        "RSA" => {
            let n = bytes("n")?;
            let e = bytes("e")?;
            let n = &n[n.iter().take_while(|b| **b == 0).count()..];
            let bits = n.len() * 8 - n.first().map_or(8, |b| b.leading_zeros() as usize);
            if !(2048..=8192).contains(&bits) {
                return Err(format!(
                    "its modulus has {bits} bits, and only 2048 to 8192 are accepted"
                ));
            }
            if e.is_empty() {
                return Err("its exponent is empty".to_string());
            }
            (KeyKind::Rsa, DecodingKey::from_rsa_raw_components(n, &e))
        }
        "EC" => {
            let (kind, len) = match curve()?.as_str() {
                "P-256" => (KeyKind::P256, 32),
                "P-384" => (KeyKind::P384, 48),
                other => {
                    return Err(format!(
                        "its curve '{}' is not supported (P-256 and P-384 are)",
                        shown(other)
                    ));
                }
            };
            let (x, y) = (bytes("x")?, bytes("y")?);
            if x.len() != len || y.len() != len {
                return Err(format!("its coordinates are not {len} bytes long"));
            }
            // The uncompressed point, 0x04 || x || y, which is what ring verifies with
            // (and what `from_ec_components` would build after a stricter decoding).
            let point = [&[0x04][..], &x, &y].concat();
            (kind, DecodingKey::from_ec_der(&point))
        }
        "OKP" => {
            let crv = curve()?;
            if crv != "Ed25519" {
                return Err(format!(
                    "its curve '{}' is not supported (Ed25519 is)",
                    shown(&crv)
                ));
            }
            let x = bytes("x")?;
            if x.len() != 32 {
                return Err("its public key is not 32 bytes long".to_string());
            }
            (KeyKind::Ed25519, DecodingKey::from_ed_der(&x))
        }
        "oct" => {
            return Err("it is a symmetric key, and HMAC tokens are never accepted".to_string());
        }
        "" => return Err("it has no key type ('kty')".to_string()),
        other => return Err(format!("its key type '{}' is not supported", shown(other))),
    };
    if let Some(alg) = alg
        && KeyKind::of(alg) != kind
    {
        return Err(format!(
            "its algorithm {} does not fit {}",
            alg_name(alg),
            kind.describe()
        ));
    }
    Ok(Key {
        kid,
        alg,
        kind,
        key,
    })
}
