//! The server's key: what pipeline secrets and webhook signing secrets are encrypted
//! with at rest (AES-256-GCM, a fresh random nonce per value, the value's name as
//! associated data so a ciphertext cannot be moved to another name).
//!
//! It comes from `--secret-key-file FILE` or `LH_SECRET_KEY` (64 hex characters). The
//! embedded default makes one at first start in `<data-dir>/secret.key` (mode 0600), so
//! a local server needs no set-up; a team keeps it out of the database's backups (a
//! stolen database alone reveals no secret) and gives every control plane the same one.

use std::path::Path;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::{Error, Result};

pub struct ServerKey {
    key: LessSafeKey,
    /// A short fingerprint (not the key): which key sealed what, in logs.
    pub id: String,
}

fn parse_hex(text: &str) -> Option<[u8; 32]> {
    let t = text.trim();
    if t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl ServerKey {
    pub fn from_bytes(bytes: [u8; 32]) -> ServerKey {
        let id = hex(&blake3::hash(&bytes).as_bytes()[..4]);
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &bytes).expect("a 32-byte key"));
        ServerKey { key, id }
    }

    /// The key from `LH_SECRET_KEY`, else `file`, else a new one written to `file`.
    pub fn load(file: &Path, from_env: Option<String>) -> anyhow::Result<ServerKey> {
        if let Some(text) = from_env {
            let bytes = parse_hex(&text).ok_or_else(|| {
                anyhow::anyhow!("LH_SECRET_KEY must be 64 hex characters (32 bytes)")
            })?;
            return Ok(ServerKey::from_bytes(bytes));
        }
        match std::fs::read_to_string(file) {
            Ok(text) => {
                let bytes = parse_hex(&text).ok_or_else(|| {
                    anyhow::anyhow!("{} must hold 64 hex characters (32 bytes)", file.display())
                })?;
                Ok(ServerKey::from_bytes(bytes))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; 32];
                SystemRandom::new()
                    .fill(&mut bytes)
                    .map_err(|_| anyhow::anyhow!("no randomness for the server key"))?;
                write_private(file, &format!("{}\n", hex(&bytes)))?;
                tracing::info!(file = %file.display(), "made the server key that encrypts secrets");
                Ok(ServerKey::from_bytes(bytes))
            }
            Err(e) => Err(anyhow::anyhow!(
                "cannot read the server key {}: {e}",
                file.display()
            )),
        }
    }

    /// Encrypts `value` for `name`: `v1:<nonce>:<ciphertext and tag>`, hex.
    pub fn seal(&self, name: &str, value: &[u8]) -> Result<String> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| Error::internal("no randomness to encrypt with"))?;
        let mut buf = value.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut buf,
            )
            .map_err(|_| Error::internal("cannot encrypt"))?;
        Ok(format!("v1:{}:{}", hex(&nonce), hex(&buf)))
    }

    /// Decrypts what [`seal`](Self::seal) made for `name`.
    pub fn open(&self, name: &str, sealed: &str) -> Result<Vec<u8>> {
        let bad = || {
            Error::internal(format!(
                "the secret '{name}' cannot be decrypted: it was sealed with another server key \
                 (this server's is {}) or is corrupt",
                self.id
            ))
        };
        let mut parts = sealed.split(':');
        let (Some("v1"), Some(nonce), Some(ct), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let nonce = unhex(nonce)
            .filter(|n| n.len() == NONCE_LEN)
            .ok_or_else(bad)?;
        let mut buf = unhex(ct).ok_or_else(bad)?;
        let nonce = Nonce::try_assume_unique_for_key(&nonce).map_err(|_| bad())?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(name.as_bytes()), &mut buf)
            .map_err(|_| bad())?;
        Ok(plain.to_vec())
    }
}

/// The name the catalog's key check is sealed under.
const CHECK_NAME: &str = "lh.server-key-check";

/// Checks that this server's key is the one every server of the catalog seals secrets
/// with: the first server stores a value sealed with its key, every later one must open
/// it. A server with another key would seal secrets the others cannot open, and open
/// none of theirs: it refuses to start instead.
pub async fn agree(pool: &sqlx::AnyPool, key: &ServerKey) -> anyhow::Result<()> {
    use sqlx::Row;
    let read = || async {
        sqlx::query("SELECT check_value FROM lh_server_key WHERE id = 1")
            .fetch_optional(pool)
            .await
            .map(|r| r.map(|r| r.get::<String, _>(0)))
    };
    let stored = match read().await? {
        Some(v) => v,
        None => {
            // A catalog with secrets from before the check: the key must open them
            // before it becomes the catalog's.
            if let Some(r) = sqlx::query("SELECT name, sealed FROM lh_secrets LIMIT 1")
                .fetch_optional(pool)
                .await?
            {
                let (name, sealed): (String, String) = (r.get(0), r.get(1));
                if key.open(&format!("secret:{name}"), &sealed).is_err() {
                    anyhow::bail!(
                        "this server's secret key ({}) cannot open the secrets stored in this catalog\n\
                         hint: start it with the key that sealed them (--secret-key-file FILE or LH_SECRET_KEY)",
                        key.id
                    );
                }
            }
            let sealed = key
                .seal(CHECK_NAME, b"lh")
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            // Another server starting at the same moment may be first: then its value.
            let _ = sqlx::query("INSERT INTO lh_server_key (id, check_value) VALUES (1, $1)")
                .bind(&sealed)
                .execute(pool)
                .await;
            read()
                .await?
                .ok_or_else(|| anyhow::anyhow!("cannot store the secret key's check"))?
        }
    };
    if key.open(CHECK_NAME, &stored).is_err() {
        anyhow::bail!(
            "this server's secret key ({}) is not the one the servers of this catalog seal secrets with\n\
             hint: give every server of the catalog the same key (--secret-key-file FILE or LH_SECRET_KEY); \
             the first server made it at <its data dir>/secret.key",
            key.id
        );
    }
    Ok(())
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Writes a file only its owner can read (made so, not chmodded after).
pub fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_under_their_name_and_key() {
        let k = ServerKey::from_bytes([7; 32]);
        let sealed = k.seal("STRIPE_KEY", b"sk_live_123").unwrap();
        assert!(!sealed.contains("sk_live"));
        assert_eq!(k.open("STRIPE_KEY", &sealed).unwrap(), b"sk_live_123");
        // Another name, another key, a flipped byte: refused.
        assert!(k.open("OTHER", &sealed).is_err());
        assert!(
            ServerKey::from_bytes([8; 32])
                .open("STRIPE_KEY", &sealed)
                .is_err()
        );
        let mut flipped = sealed.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        assert!(
            k.open("STRIPE_KEY", &String::from_utf8(flipped).unwrap())
                .is_err()
        );
        // Two seals of one value differ (fresh nonces).
        assert_ne!(sealed, k.seal("STRIPE_KEY", b"sk_live_123").unwrap());
    }

    #[test]
    fn a_new_key_file_is_private_and_reread() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret.key");
        let a = ServerKey::load(&file, None).unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = ServerKey::load(&file, None).unwrap();
        assert_eq!(a.id, b.id);
        assert!(ServerKey::load(&file, Some("nothex".into())).is_err());
    }
}
