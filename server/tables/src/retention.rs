//! Retention: which commits stay readable, and so which table versions and files
//! (`lh table expire` and `lh gc` act on the rest).
//!
//! A commit is kept when it is the head of a ref (a branch or a tag), or when it is no
//! older than its window: the longest window of the branches it is reachable from, by
//! the first rule whose pattern matches the branch's name; a commit no branch reaches
//! (a deleted branch's, a tag's history) has the window of the catch-all rule `*`. The
//! rules are the server's (`lh server --retain 'PATTERN=DURATION'`, repeatable, before
//! the defaults): `main` keeps 90 days, `run/*` (the runs' temporary branches) 7, any
//! other branch 30.
//!
//! A kept commit reads, of each of its tables, the snapshot its pointer names: that
//! snapshot, its manifests and files stay. A ref's head reads its tables' metadata
//! whole: every snapshot still listed in it stays (what Iceberg clients may time-travel
//! to through the REST catalog). Snapshots no kept commit reads go from a table's
//! metadata with `lh table expire`, and then their files with `lh gc`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::Tables;
use crate::error::Result;

/// A window longer than any commit's age.
const FOREVER: Duration = Duration::from_secs(100 * 366 * 86400);

/// The rules after the server's own.
const DEFAULTS: [(&str, u64); 3] = [("main", 90), ("run/*", 7), ("*", 30)];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Pattern (`*` matches any run of characters) and window, the first match wins.
    rules: Vec<(String, Duration)>,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            rules: DEFAULTS
                .iter()
                .map(|(p, days)| (p.to_string(), Duration::from_secs(days * 86400)))
                .collect(),
        }
    }
}

impl Retention {
    /// The rules `PATTERN=DURATION` (`main=180d`, `dev/*=2w`), before the defaults.
    pub fn parse(given: &[String]) -> std::result::Result<Retention, String> {
        let mut rules = Vec::new();
        for g in given {
            let (pattern, window) = g
                .split_once('=')
                .ok_or_else(|| format!("--retain '{g}': write PATTERN=DURATION (main=90d)"))?;
            let pattern = pattern.trim();
            let ok = !pattern.is_empty()
                && pattern.len() <= 256
                && pattern
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "*/_-.".contains(c));
            if !ok {
                return Err(format!(
                    "--retain '{g}': '{pattern}' is not a branch name pattern"
                ));
            }
            // `0s` keeps the heads alone; `forever` keeps every commit.
            let window = match window.trim() {
                "0" | "0s" => Duration::ZERO,
                "forever" => FOREVER,
                w => {
                    lh_api::units::parse_duration(w).map_err(|e| format!("--retain '{g}': {e}"))?
                }
            };
            rules.push((pattern.to_string(), window));
        }
        rules.extend(Retention::default().rules);
        Ok(Retention { rules })
    }

    /// How long commits reachable from `branch` stay.
    pub fn window(&self, branch: &str) -> Duration {
        self.rules
            .iter()
            .find(|(p, _)| crate::auth::roles::glob(p.as_bytes(), branch.as_bytes()))
            .map_or(Duration::ZERO, |r| r.1)
    }

    /// How long commits no branch reaches stay.
    pub fn unreachable(&self) -> Duration {
        self.window("*")
    }

    /// The rules, as `pattern=window` (`main=90d`).
    pub fn describe(&self) -> Vec<String> {
        self.rules
            .iter()
            .map(|(p, w)| match *w {
                FOREVER => format!("{p}=forever"),
                w => format!("{p}={}", lh_api::units::format_duration(w)),
            })
            .collect()
    }
}

/// What the kept commits read.
#[derive(Debug, Default)]
pub struct Kept {
    /// Table versions (metadata locations) a ref's head reads: whole.
    pub whole: BTreeSet<String>,
    /// Other table versions, with the snapshots kept commits read of them (`None`: the
    /// version's current one).
    pub snapshots: BTreeMap<String, BTreeSet<Option<i64>>>,
    /// By table uuid, the snapshots kept commits (heads included) read (`None`: the
    /// current one of the version they point at).
    pub read: BTreeMap<String, BTreeSet<(String, Option<i64>)>>,
    /// How many commits are kept.
    pub commits: usize,
}

impl Kept {
    /// Every table version kept.
    pub fn locations(&self) -> BTreeSet<String> {
        let mut all = self.whole.clone();
        all.extend(self.snapshots.keys().cloned());
        all
    }
}

impl Tables {
    /// What the commits the server's retention keeps read.
    pub async fn kept(&self) -> Result<Kept> {
        let retention = self.retention();
        let retained = self
            .catalog
            .retained_commits(
                &|b: &str| retention.window(b),
                retention.unreachable(),
                chrono::Utc::now(),
            )
            .await?;
        let mut kept = Kept {
            commits: retained.heads.len() + retained.commits.len(),
            ..Default::default()
        };
        for c in retained.heads.iter().chain(&retained.commits) {
            for t in self.catalog.tables_in(c, None).await? {
                let p = t.pointer;
                kept.read
                    .entry(p.table_uuid.clone())
                    .or_default()
                    .insert((p.metadata_location.clone(), p.snapshot_id));
            }
        }
        for c in &retained.heads {
            for t in self.catalog.tables_in(c, None).await? {
                kept.whole.insert(t.pointer.metadata_location);
            }
        }
        for c in &retained.commits {
            for t in self.catalog.tables_in(c, None).await? {
                if !kept.whole.contains(&t.pointer.metadata_location) {
                    kept.snapshots
                        .entry(t.pointer.metadata_location)
                        .or_default()
                        .insert(t.pointer.snapshot_id);
                }
            }
        }
        Ok(kept)
    }

    /// The server's retention rules.
    pub fn retention(&self) -> Retention {
        self.retention.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_rule_decides() {
        let r = Retention::parse(&["dev/*=2d".into(), "main=180d".into()]).unwrap();
        let days = |b: &str| r.window(b).as_secs() / 86400;
        assert_eq!(days("main"), 180);
        assert_eq!(days("dev/x"), 2);
        assert_eq!(days("run/0123"), 7);
        assert_eq!(days("feature"), 30);
        assert_eq!(r.unreachable().as_secs() / 86400, 30);
        let d = Retention::default();
        assert_eq!(d.window("main").as_secs() / 86400, 90);
        assert_eq!(d.describe(), ["main=90d", "run/*=7d", "*=30d"]);
        assert_eq!(
            Retention::parse(&["main=forever".into()])
                .unwrap()
                .describe()[0],
            "main=forever"
        );
        for bad in ["main", "=1d", "ma in=1d", "main=always", "main=-1d"] {
            assert!(Retention::parse(&[bad.into()]).is_err(), "{bad}");
        }
        // A catch-all of the server's own comes first.
        let r = Retention::parse(&["*=0s".into()]).unwrap();
        assert_eq!(r.window("main"), Duration::ZERO);
        assert_eq!(r.unreachable(), Duration::ZERO);
    }
}
