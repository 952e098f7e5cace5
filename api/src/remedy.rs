//! What a user can do about an error, typed, with its arguments: the server says what,
//! each client words it for its users. `prose` is the wording for everyone who talks
//! to the server without lh's CLI (the console, pyiceberg, Spark, the Python client),
//! and it is what the error body's `hint` holds; the CLI words each as its own command
//! (`lh-cli`'s `error.rs`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum Remedy {
    /// List the branches and tags.
    ListRefs,
    /// List the tables at a ref (`at`; the ref the user means when none).
    ListTables {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<String>,
    },
    /// Show the table's schema.
    ShowSchema,
    /// A replace replaces the table and its schema.
    ReplaceTable,
    /// Import in mode append or replace (the table exists).
    AppendOrReplace,
    /// Import in mode create (the table does not exist).
    CreateTable,
    /// A replace with a new partitioning repartitions the table.
    Repartition,
    /// Replace the whole table, or compact it first.
    ReplaceOrCompact,
    /// Create a branch from `from` (the ref named when none) and work there.
    BranchFrom {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    },
    /// Make the change on another branch and merge it into `into`.
    MergeInto {
        into: String,
    },
    /// Change tables by imports or pipeline runs (queries only read).
    WriteByImportOrRun,
    /// Bring files in by importing them into a table.
    ImportFiles,
    /// Read another commit of the ref (`main@<hash>`, `main@<time>`).
    ChooseCommit,
    ListRoles,
    /// An admin defines the role, or gives another.
    DefineRole,
    ListTokens,
    /// Present a token (the CLI reads it from its profile or `LH_TOKEN`).
    PresentToken,
    /// An admin sets the secret `name`, or (`widen`) lets more branches use it.
    SetSecret {
        name: String,
        widen: bool,
    },
    ListChecks,
    ListRuns,
}

impl Remedy {
    /// The remedy in words for any client.
    pub fn prose(&self) -> String {
        match self {
            Remedy::ListRefs => "list the branches and tags to see the refs".into(),
            Remedy::ListTables { at: Some(at) } => format!("list the tables at '{at}'"),
            Remedy::ListTables { at: None } => "list the ref's tables".into(),
            Remedy::ShowSchema => "the table's details show its schema".into(),
            Remedy::ReplaceTable => {
                "an import in mode replace replaces the table and its schema".into()
            }
            Remedy::AppendOrReplace => "import in mode append or replace".into(),
            Remedy::CreateTable => "import in mode create to create it".into(),
            Remedy::Repartition => {
                "a replace with a new partitioning repartitions the table".into()
            }
            Remedy::ReplaceOrCompact => "replace the whole table, or compact it first".into(),
            Remedy::BranchFrom { from: Some(from) } => {
                format!("create a branch from '{from}' and work there")
            }
            Remedy::BranchFrom { from: None } => "create a branch from it and work there".into(),
            Remedy::MergeInto { into } => format!(
                "make the change on another branch and merge it into '{into}' (a role that may merge)"
            ),
            Remedy::WriteByImportOrRun => "change tables by imports or pipeline runs".into(),
            Remedy::ImportFiles => "bring files in by importing them into a table".into(),
            Remedy::ChooseCommit => {
                "read another commit of the ref (main@<hash>, main@<time>)".into()
            }
            Remedy::ListRoles => "an admin lists the roles".into(),
            Remedy::DefineRole => "an admin defines it, or gives you another".into(),
            Remedy::ListTokens => "list the tokens to find them".into(),
            Remedy::PresentToken => {
                "send a token (Authorization: Bearer); an admin makes one".into()
            }
            Remedy::SetSecret { widen: true, .. } => {
                "run on such a branch, or an admin lets more branches use it".into()
            }
            Remedy::SetSecret { name, widen: false } => format!("an admin sets '{name}'"),
            Remedy::ListChecks => "list the checks, or add one".into(),
            Remedy::ListRuns => "list the runs".into(),
        }
    }
}

/// The hint of an error body: the error's own hint, then its remedies, in words for any
/// client.
pub fn hint_text(hint: Option<&str>, remedies: &[Remedy]) -> Option<String> {
    let parts: Vec<String> = hint
        .map(str::to_string)
        .into_iter()
        .chain(remedies.iter().map(Remedy::prose))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The part of a body's `hint` that is the error's own (what [`hint_text`] put before
/// the remedies), for a client that words the remedies itself.
pub fn own_hint<'a>(hint: Option<&'a str>, remedies: &[Remedy]) -> Option<&'a str> {
    let hint = hint?;
    if remedies.is_empty() {
        return Some(hint);
    }
    let words = remedies
        .iter()
        .map(Remedy::prose)
        .collect::<Vec<_>>()
        .join("; ");
    if hint == words {
        return None;
    }
    match hint.strip_suffix(words.as_str()) {
        Some(own) => own.strip_suffix("; ").or(Some(own)),
        None => Some(hint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that words remedies itself finds the error's own hint in the body's.
    #[test]
    fn the_own_hint_is_found_again_in_the_body() {
        let remedies = [
            Remedy::ListTables {
                at: Some("main".into()),
            },
            Remedy::ListRoles,
        ];
        for own in [None, Some("ask an admin for a role that grants it")] {
            let body = hint_text(own, &remedies);
            assert_eq!(own_hint(body.as_deref(), &remedies), own);
        }
        assert_eq!(hint_text(None, &[]), None);
        assert_eq!(own_hint(Some("retry"), &[]), Some("retry"));
        // A body from a server that words its remedies otherwise: shown as it is.
        assert_eq!(
            own_hint(Some("something else"), &remedies),
            Some("something else")
        );
        let json = serde_json::to_value(&remedies[0]).unwrap();
        assert_eq!(json, serde_json::json!({"do": "list_tables", "at": "main"}));
    }
}
