//! `lh role`, `lh check`, `lh hook` and `lh secret`: who may do what, what a protected
//! branch requires before a merge, who is told of merges, and pipelines' secrets.

use std::io::Read;

use lh_api::{CheckCreate, HookCreate};

use crate::args::{CheckCommand, HookCommand, RoleCommand, SecretCommand};
use crate::client::Client;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::settings::Settings;

pub async fn role(client: &Client, settings: &Settings, cmd: RoleCommand) -> CliResult<()> {
    match cmd {
        RoleCommand::Ls => {
            let list = client.list_roles().await?;
            output::listing(
                settings.output,
                &["role", "grants", "built in", "updated by"],
                &list.roles,
                |r| {
                    vec![
                        r.name.clone(),
                        r.grants.join("; "),
                        if r.builtin { "yes" } else { "" }.to_string(),
                        r.updated_by.clone().unwrap_or_default(),
                    ]
                },
            )
        }
        RoleCommand::Set { name, grants } => {
            let r = client.set_role(&name, &grants).await?;
            eprintln!("role '{}': {}", r.name, r.grants.join("; "));
            Ok(())
        }
        RoleCommand::Rm { name } => {
            client.remove("roles", &name).await?;
            eprintln!("removed role '{name}'");
            Ok(())
        }
    }
}

/// A secret named by an environment variable, read here (never a command-line value,
/// which other users of the machine can see).
fn secret_from_env(var: Option<String>) -> CliResult<Option<String>> {
    match var {
        None => Ok(None),
        Some(v) => match std::env::var(&v) {
            Ok(s) if !s.is_empty() => Ok(Some(s)),
            _ => Err(CliError::invalid(
                format!("the environment variable {v} holds no secret"),
                None,
            )),
        },
    }
}

pub async fn check(client: &Client, settings: &Settings, cmd: CheckCommand) -> CliResult<()> {
    match cmd {
        CheckCommand::Add(args) => {
            let upload = match &args.expectations {
                Some(dir) => Some(super::runs::upload_project(client, dir).await?),
                None => None,
            };
            let c = client
                .add_check(&CheckCreate {
                    name: args.name,
                    webhook: args.webhook,
                    upload,
                    secret: secret_from_env(args.secret_env)?,
                    timeout_secs: args.timeout,
                })
                .await?;
            eprintln!(
                "check '{}' ({}{}): require it with lh branch protect BRANCH --require-checks {}",
                c.name,
                c.kind,
                if c.signed { ", signed" } else { "" },
                c.name
            );
            Ok(())
        }
        CheckCommand::Ls => {
            let list = client.list_checks().await?;
            output::listing(
                settings.output,
                &[
                    "check",
                    "kind",
                    "target",
                    "timeout",
                    "signed",
                    "required by",
                ],
                &list.checks,
                |c| {
                    vec![
                        c.name.clone(),
                        c.kind.clone(),
                        c.target.clone(),
                        format!("{} s", c.timeout_secs),
                        if c.signed { "yes" } else { "" }.to_string(),
                        c.branches.join(", "),
                    ]
                },
            )
        }
        CheckCommand::Rm { name } => {
            client.remove("checks", &name).await?;
            eprintln!("removed check '{name}'");
            Ok(())
        }
    }
}

pub async fn hook(client: &Client, settings: &Settings, cmd: HookCommand) -> CliResult<()> {
    match cmd {
        HookCommand::Add {
            name,
            url,
            refs,
            secret_env,
        } => {
            let h = client
                .add_hook(&HookCreate {
                    name,
                    url,
                    refs,
                    secret: secret_from_env(secret_env)?,
                })
                .await?;
            eprintln!(
                "hook '{}': merges into {} are POSTed to {}{}",
                h.name,
                h.refs,
                h.url,
                if h.signed { " (signed)" } else { "" }
            );
            Ok(())
        }
        HookCommand::Ls => {
            let list = client.list_hooks().await?;
            output::listing(
                settings.output,
                &["hook", "url", "on", "signed"],
                &list.hooks,
                |h| {
                    vec![
                        h.name.clone(),
                        h.url.clone(),
                        h.refs.clone(),
                        if h.signed { "yes" } else { "" }.to_string(),
                    ]
                },
            )
        }
        HookCommand::Rm { name } => {
            client.remove("hooks", &name).await?;
            eprintln!("removed hook '{name}'");
            Ok(())
        }
    }
}

pub async fn secret(client: &Client, settings: &Settings, cmd: SecretCommand) -> CliResult<()> {
    match cmd {
        SecretCommand::Set { name, refs } => {
            let mut value = String::new();
            if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                // Typed: asked for, and not shown.
                value = rpassword::prompt_password(format!(
                    "value of secret '{name}' (not shown; Enter to end): "
                ))
                .map_err(|e| {
                    CliError::invalid(
                        format!("cannot read the secret from the terminal: {e}"),
                        None,
                    )
                })?;
            } else {
                std::io::stdin().read_to_string(&mut value).map_err(|e| {
                    CliError::invalid(format!("cannot read the secret from stdin: {e}"), None)
                })?;
            }
            // `echo value | lh secret set` and a file alike: one final newline is not the value's.
            if value.ends_with('\n') {
                value.pop();
                if value.ends_with('\r') {
                    value.pop();
                }
            }
            if value.is_empty() {
                return Err(CliError::invalid(
                    "no secret on standard input",
                    Some(
                        "lh secret set NAME < file (or: printf %s \"$VALUE\" | lh secret set NAME)",
                    ),
                ));
            }
            let s = client.set_secret(&name, value, refs).await?;
            eprintln!(
                "secret '{}' set (version {}), for runs on {}",
                s.name, s.version, s.refs
            );
            Ok(())
        }
        SecretCommand::Ls => {
            let list = client.list_secrets().await?;
            output::listing(
                settings.output,
                &["secret", "version", "runs on", "updated by", "updated at"],
                &list.secrets,
                |s| {
                    vec![
                        s.name.clone(),
                        s.version.to_string(),
                        s.refs.clone(),
                        s.updated_by.clone(),
                        s.updated_at.clone(),
                    ]
                },
            )
        }
        SecretCommand::Rm { name } => {
            client.remove("secrets", &name).await?;
            eprintln!("removed secret '{name}'");
            Ok(())
        }
    }
}
