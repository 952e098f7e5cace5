//! Credential vending: what an Iceberg REST client is given to reach a table's files.
//!
//! An access decision and a secret's handling, so a service of its own rather than a
//! part of the REST catalog's wire types: the REST handlers say whether the client asked
//! (`X-Iceberg-Access-Delegation: vended-credentials`) and serialize what this answers.
//!
//! - A local warehouse needs no credential and no setting: locations are absolute
//!   `file://` URLs that every client's file IO opens. Its answer stays empty on
//!   purpose: DuckDB's iceberg extension (1.5.5) takes any entry as vended S3
//!   credentials and then fails for want of a region (measured; tested).
//! - An S3 warehouse: the endpoint, region and addressing style always, as the spec's
//!   `s3.*` properties (which pyiceberg, DuckDB's iceberg extension and Spark's S3FileIO
//!   read); the server's key only when the client asks for it, the server vends (not
//!   `--no-vend-credentials`), and the caller holds at least the role the operator chose
//!   (`--vend-credentials-to`, admins by default).
//!
//! The key is the server's own: the S3-compatible stores lh is tested with have no STS
//! to scope a short-lived one to a table, so whoever holds it can change or delete
//! anything in the warehouse past every permission. Give the server a key limited to the
//! warehouse's bucket and prefix.

use std::collections::BTreeMap;

use crate::auth::{Identity, Role};
use crate::warehouse::Warehouse;
use crate::warehouse::s3::S3Settings;

/// Who gets the warehouse's key.
#[derive(Clone)]
pub struct Vending {
    s3: Option<S3Settings>,
    enabled: bool,
    least: Role,
}

/// What a client is given: settings (`s3.region`, `s3.endpoint`, ... and, when vended,
/// the key) and the same key by location prefix (the spec's `storage-credentials`).
#[derive(Debug, Clone, Default)]
pub struct StorageAccess {
    pub config: BTreeMap<String, String>,
    pub credentials: Vec<VendedCredential>,
}

/// A key, for the files under `prefix`.
#[derive(Clone)]
pub struct VendedCredential {
    pub prefix: String,
    pub config: BTreeMap<String, String>,
}

impl std::fmt::Debug for VendedCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VendedCredential")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Vending {
    /// Vending from `warehouse` (an S3 one; a local one has nothing to vend), when
    /// `enabled`, to callers holding at least `least`.
    pub fn new(warehouse: &Warehouse, enabled: bool, least: Role) -> Vending {
        Vending {
            s3: warehouse.s3().map(|b| b.settings.clone()),
            enabled,
            least,
        }
    }

    /// What `identity` is given to reach the warehouse's files; the key only when it
    /// `asked` for vended credentials and may have them.
    pub fn storage_for(&self, identity: &Identity, asked: bool) -> StorageAccess {
        let Some(st) = &self.s3 else {
            return StorageAccess::default();
        };
        let mut config = BTreeMap::new();
        config.insert("s3.region".to_string(), st.region.clone());
        config.insert("client.region".to_string(), st.region.clone());
        if let Some(e) = &st.endpoint {
            config.insert("s3.endpoint".to_string(), e.clone());
        }
        config.insert(
            "s3.path-style-access".to_string(),
            st.path_style.to_string(),
        );
        let mut credentials = Vec::new();
        if asked && self.vends_to(identity) {
            let mut secret = BTreeMap::new();
            secret.insert("s3.access-key-id".to_string(), st.access_key_id.clone());
            secret.insert(
                "s3.secret-access-key".to_string(),
                st.secret_access_key.clone(),
            );
            if let Some(t) = &st.session_token {
                secret.insert("s3.session-token".to_string(), t.clone());
            }
            config.extend(secret);
            credentials.push(VendedCredential {
                prefix: st.url(),
                config: config.clone(),
            });
        }
        StorageAccess {
            config,
            credentials,
        }
    }

    /// Whether `identity` would be given the key if it asked.
    pub fn vends_to(&self, identity: &Identity) -> bool {
        self.s3.is_some() && self.enabled && identity.access.covers(self.least)
    }
}
