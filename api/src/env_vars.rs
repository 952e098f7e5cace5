//! Every environment variable lh reads, declared once: the CLI (`lh`) and the server
//! (`lh server`, the `lh-server` executable) read some of the same ones.

use std::path::PathBuf;

/// The lh server's URL (overrides the profile's).
pub const LH_ENDPOINT: &str = "LH_ENDPOINT";
/// The profile of the config file to use.
pub const LH_PROFILE: &str = "LH_PROFILE";
/// Where lh keeps its config file (`config.yaml`) and, for `lh server`, its data
/// [default: ~/.lh].
pub const LH_HOME: &str = "LH_HOME";
/// `lh server --data-dir`.
pub const LH_DATA_DIR: &str = "LH_DATA_DIR";
/// `lh server --bind`.
pub const LH_BIND: &str = "LH_BIND";
/// `lh server --catalog`.
pub const LH_CATALOG_URL: &str = "LH_CATALOG_URL";
/// `lh server --warehouse`.
pub const LH_WAREHOUSE: &str = "LH_WAREHOUSE";
/// The author recorded in commits by a server started with `--no-auth` [default:
/// $USER]; with authentication, the author is the token's user.
pub const LH_USER: &str = "LH_USER";
/// The bearer token `lh` sends (overrides the profile's).
pub const LH_TOKEN: &str = "LH_TOKEN";
/// Log filter for `lh server` (tracing's `EnvFilter` syntax) [default: info].
pub const LH_LOG: &str = "LH_LOG";
/// `lh server --env-cache`: where Python environments are built and kept.
pub const LH_ENV_CACHE: &str = "LH_ENV_CACHE";

/// Where lh keeps its config file and, by default, the server's data: `LH_HOME`, else
/// `~/.lh`.
pub fn lh_home() -> PathBuf {
    match std::env::var_os(LH_HOME) {
        Some(h) if !h.is_empty() => PathBuf::from(h),
        _ => std::env::home_dir()
            .unwrap_or_else(|| PathBuf::from("."))
            .join(".lh"),
    }
}
