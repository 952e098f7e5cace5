//! The first admin token: a server with no token makes one at start, for the user who
//! started it, and writes it into that user's lh profile (`$LH_HOME/config.yaml`,
//! mode 0600), so that `lh` on the same machine works with no set-up and nothing
//! answers without a token. `lh server --new-admin-token` makes another (the way back
//! in when the profile lost it). The token is never printed.

use std::net::SocketAddr;

use lh_api::config_file::ConfigFile;
use lh_api::env_vars;

use super::Role;
use super::tokens::{NewToken, Tokens, validate_user};

/// Makes the first admin token when there is none (or `force`), and says where it went.
pub async fn first_admin(
    tokens: &Tokens,
    addr: SocketAddr,
    force: bool,
) -> anyhow::Result<Option<String>> {
    if !force && tokens.any().await.map_err(|e| anyhow::anyhow!("{e}"))? {
        return Ok(None);
    }
    let user = std::env::var("USER")
        .ok()
        .filter(|u| validate_user(u).is_ok())
        .unwrap_or_else(|| "admin".to_string());
    let (token, info) = tokens
        .create(NewToken {
            name: "admin (made by lh server)",
            user: &user,
            role: Role::Admin.as_str(),
            created_by: "lh server",
            expires_in: None,
        })
        .await
        .map_err(|e| anyhow::anyhow!("cannot make the first admin token: {e}"))?;
    let path = env_vars::lh_home().join("config.yaml");
    let mut file = ConfigFile::load(&path).map_err(anyhow::Error::msg)?;
    let url = format!("http://{addr}");
    let default_url = format!("http://127.0.0.1:{}", lh_api::DEFAULT_PORT);
    let wanted = std::env::var(env_vars::LH_PROFILE)
        .ok()
        .filter(|p| !p.is_empty())
        .or_else(|| file.profile.clone())
        .unwrap_or_else(|| "default".to_string());
    // A profile that points at another server keeps its token: this one gets its own.
    let points_elsewhere = file
        .profiles
        .get(&wanted)
        .and_then(|p| p.endpoint.as_deref())
        .is_some_and(|e| e.trim_end_matches('/') != url);
    let name = if points_elsewhere {
        format!("local-{}", addr.port())
    } else {
        wanted
    };
    let profile = file.profiles.entry(name.clone()).or_default();
    if profile.endpoint.is_none() && url != default_url {
        profile.endpoint = Some(url);
    }
    profile.token = Some(token);
    file.save(&path).map_err(|e| {
        anyhow::anyhow!(
            "{e}\nthe admin token {} was made but cannot be written: revoke it, and \
             start again with --new-admin-token once the file can be written",
            info.id
        )
    })?;
    tracing::info!(id = %info.id, user = %user, path = %path.display(), profile = %name, "admin token made");
    Ok(Some(format!(
        "an admin token for '{user}' is in {}, profile '{name}'",
        path.display()
    )))
}
