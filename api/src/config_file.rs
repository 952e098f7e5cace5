//! The config file `lh` reads (`$LH_HOME/config.yaml`, `~/.lh/config.yaml` by default):
//! profiles, each with an endpoint, the active branch (`lh checkout`) and the token
//! that authenticates its requests. The CLI reads and updates it; `lh server` writes
//! the admin token it creates at its first start into it, so that `lh` on the same
//! machine needs no set-up.
//!
//! ```yaml
//! profile: default
//! profiles:
//!   default:
//!     endpoint: http://127.0.0.1:7878
//!     branch: main
//!     token: lht_...
//! ```
//!
//! It holds secrets: it is written with mode 0600 (its folder 0700), whole (a
//! temporary file renamed over it), so a reader never sees half of it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ConfigFile {
    /// The active profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

#[derive(Clone, Default, Serialize, Deserialize)]
pub struct Profile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The active branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The bearer token sent with every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("endpoint", &self.endpoint)
            .field("branch", &self.branch)
            .field("token", &self.token.as_ref().map(|_| "[hidden]"))
            .finish()
    }
}

impl ConfigFile {
    /// The file at `path`; an empty one when there is none.
    pub fn load(path: &Path) -> Result<ConfigFile, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_yaml_ng::from_str(&text)
                .map_err(|e| format!("cannot read {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Writes the file whole, readable by its owner only.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let fail = |e: &dyn std::fmt::Display| format!("cannot write {}: {e}", path.display());
        let text = serde_yaml_ng::to_string(self).map_err(|e| fail(&e))?;
        if let Some(dir) = path.parent() {
            create_private_dir(dir).map_err(|e| fail(&e))?;
        }
        let tmp = path.with_extension("yaml.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut f = private_file(&tmp).map_err(|e| fail(&e))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| fail(&e))?;
        std::fs::rename(&tmp, path).map_err(|e| fail(&e))?;
        // A file from before tokens were kept in it may be readable by others.
        set_mode(path, 0o600).map_err(|e| fail(&e))
    }
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> std::io::Result<()> {
    Ok(())
}

/// Creates `dir` (mode 0700 when new): lh's home holds secrets.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}
