//! Settings from flags, environment and the config file (`lh_api::config_file`: its
//! profiles, each with an endpoint, the active branch and a token), resolved in one
//! place.

use std::path::PathBuf;

use anyhow::Result;

use crate::args::{GlobalArgs, OutputFormat};
use lh_api::config_file::ConfigFile;
use lh_api::env_vars::{self, lh_home};

/// What a command runs with.
#[derive(Clone)]
pub struct Settings {
    pub config_path: PathBuf,
    pub profile: String,
    pub endpoint: String,
    /// The profile's active branch (`lh checkout`): the default of every `--ref`. Without
    /// one, the server's default branch applies ([`crate::client::Client::resolve_ref`]).
    pub branch: Option<String>,
    pub output: OutputFormat,
    pub user: String,
    /// The bearer token: `LH_TOKEN`, else the profile's.
    pub token: Option<String>,
    file: ConfigFile,
}

impl Settings {
    pub fn resolve(global: &GlobalArgs) -> Result<Settings> {
        let config_path = lh_home().join("config.yaml");
        let file = ConfigFile::load(&config_path).map_err(anyhow::Error::msg)?;
        let profile = global
            .profile
            .clone()
            .or_else(|| file.profile.clone())
            .unwrap_or_else(|| "default".to_string());
        if global.profile.is_some() && !file.profiles.contains_key(&profile) && profile != "default"
        {
            anyhow::bail!(
                "no profile '{profile}' in {} (profiles: {})",
                config_path.display(),
                file.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let p = file.profiles.get(&profile).cloned().unwrap_or_default();
        let endpoint = global
            .endpoint
            .clone()
            .or(p.endpoint.clone())
            .unwrap_or_else(|| format!("http://127.0.0.1:{}", lh_api::DEFAULT_PORT));
        let user = std::env::var(env_vars::LH_USER)
            .or_else(|_| std::env::var("USER"))
            .unwrap_or_else(|_| "anonymous".to_string());
        let endpoint = endpoint.trim_end_matches('/').to_string();
        // The profile's token goes only to the profile's server: an endpoint given by
        // flag or variable (a pasted command, a script) gets LH_TOKEN or nothing.
        let default = format!("http://127.0.0.1:{}", lh_api::DEFAULT_PORT);
        let profile_server = p
            .endpoint
            .as_deref()
            .map_or(default, |e| e.trim_end_matches('/').to_string());
        let token = std::env::var(env_vars::LH_TOKEN)
            .ok()
            .filter(|t| !t.is_empty())
            .or(p.token.filter(|_| profile_server == endpoint));
        Ok(Settings {
            config_path,
            profile,
            endpoint,
            branch: p.branch,
            output: global.output,
            user,
            token,
            file,
        })
    }

    /// `--ref`, or the active branch; `None` leaves the choice to the server.
    pub fn reference(&self, given: &Option<String>) -> Option<String> {
        given.clone().or_else(|| self.branch.clone())
    }

    /// Makes `branch` the active branch of the profile and saves the config file.
    pub fn set_active_branch(&mut self, branch: &str) -> Result<()> {
        let entry = self.file.profiles.entry(self.profile.clone()).or_default();
        entry.branch = Some(branch.to_string());
        self.file
            .save(&self.config_path)
            .map_err(anyhow::Error::msg)?;
        self.branch = Some(branch.to_string());
        Ok(())
    }
}
