//! Settings from flags, environment and the config file, resolved in one place.
//!
//! `~/.lh/config.yaml` (or `$LH_HOME/config.yaml`) holds profiles; each has an endpoint
//! and the active branch that `lh checkout` sets:
//!
//! ```yaml
//! profile: default
//! profiles:
//!   default:
//!     endpoint: http://127.0.0.1:7878
//!     branch: main
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::args::{GlobalArgs, OutputFormat};
use lh_api::env_vars::{self, lh_home};

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ConfigFile {
    /// The active profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Profile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The active branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// What a command runs with.
#[derive(Debug)]
pub struct Settings {
    pub home: PathBuf,
    pub config_path: PathBuf,
    pub profile: String,
    pub endpoint: String,
    /// The profile's active branch (`lh checkout`): the default of every `--ref`. Without
    /// one, the server's default branch applies ([`crate::client::Client::resolve_ref`]).
    pub branch: Option<String>,
    pub output: OutputFormat,
    pub user: String,
    file: ConfigFile,
}

impl Settings {
    pub fn resolve(global: &GlobalArgs) -> Result<Settings> {
        let home = lh_home();
        let config_path = home.join("config.yaml");
        let file: ConfigFile = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_yaml_ng::from_str(&text)
                .with_context(|| format!("cannot read {}", config_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ConfigFile::default(),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", config_path.display()));
            }
        };
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
            .or(p.endpoint)
            .unwrap_or_else(|| format!("http://127.0.0.1:{}", lh_api::DEFAULT_PORT));
        let user = std::env::var(env_vars::LH_USER)
            .or_else(|_| std::env::var("USER"))
            .unwrap_or_else(|_| "anonymous".to_string());
        Ok(Settings {
            home,
            config_path,
            profile,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            branch: p.branch,
            output: global.output,
            user,
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
        std::fs::create_dir_all(&self.home)
            .with_context(|| format!("cannot create {}", self.home.display()))?;
        let text = serde_yaml_ng::to_string(&self.file)?;
        let tmp = self.config_path.with_extension("yaml.tmp");
        std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.config_path)
            .with_context(|| format!("cannot write {}", self.config_path.display()))?;
        self.branch = Some(branch.to_string());
        Ok(())
    }
}
