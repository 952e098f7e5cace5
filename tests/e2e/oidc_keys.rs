//! Test kit for end-to-end tests of OIDC sign-in: an ES256 signing key with its JWK,
//! the JWKS to serve, and tokens signed with the key. For tests only: the keys are
//! made on the spot and never leave the test.
//!
//! ```ignore
//! let (key, jwk) = testkit::new_es256_key();
//! let jwks = testkit::jwks(&[("k1", &jwk)]); // serve it, or write it to a file
//! let token = testkit::sign(&key, "k1", &serde_json::json!({
//!     "iss": "https://id.example.com", "aud": "lh", "sub": "alice",
//!     "exp": testkit::now() + 3600, "groups": ["admins"],
//! }));
//! ```
//!
//! Needs `ring = "0.17"`, `jsonwebtoken = { version = "9", default-features = false }`,
//! `serde_json = "1"` and `base64 = "0.22"`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// A new P-256 key: its PKCS#8 DER (to sign with) and its public JWK, which names no
/// key id (`jwks` adds it).
pub fn new_es256_key() -> (Vec<u8>, Value) {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .expect("ring makes a P-256 key");
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
        .expect("ring reads the key it made");
    // The uncompressed point: 0x04 || x || y, 32 bytes each.
    let point = pair.public_key().as_ref();
    let jwk = json!({
        "kty": "EC",
        "crv": "P-256",
        "use": "sig",
        "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
    });
    (pkcs8.as_ref().to_vec(), jwk)
}

/// A JWKS (`{"keys": [...]}`) of JWKs, each given the key id it is paired with.
pub fn jwks(keys: &[(&str, &Value)]) -> Value {
    let keys: Vec<Value> = keys
        .iter()
        .map(|(kid, jwk)| {
            let mut jwk = (*jwk).clone();
            jwk["kid"] = json!(kid);
            jwk
        })
        .collect();
    json!({ "keys": keys })
}

/// A JWT with these claims, signed ES256 with the key (PKCS#8 DER from `new_es256_key`)
/// and naming `kid` in its header.
pub fn sign(pkcs8_der: &[u8], kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_der(pkcs8_der))
        .expect("an ES256 key from new_es256_key signs")
}

/// Seconds since 1970, for `exp`, `nbf` and `iat`.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
