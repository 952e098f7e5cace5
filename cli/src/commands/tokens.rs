//! `lh token`: bearer tokens, made and revoked by admins; `lh audit`: the log of who
//! changed what.

use chrono::{DateTime, Utc};
use lh_api::{TokenCreate, TokenInfo};

use crate::args::{AuditArgs, OutputFormat, TokenCommand};
use crate::client::Client;
use crate::error::CliResult;
use crate::output;
use crate::settings::Settings;

fn when(t: &Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".to_string(),
        |t| t.format("%Y-%m-%d %H:%M").to_string(),
    )
}

fn state(t: &TokenInfo) -> &'static str {
    if t.revoked_at.is_some() {
        "revoked"
    } else if t.expires_at.is_some_and(|e| e <= Utc::now()) {
        "expired"
    } else {
        "active"
    }
}

pub async fn run(client: &Client, settings: &Settings, cmd: TokenCommand) -> CliResult<()> {
    match cmd {
        TokenCommand::Create(args) => {
            let created = client
                .create_token(&TokenCreate {
                    name: args.name,
                    user: args.user,
                    role: Some(args.role),
                    expires_in_secs: args.expires,
                })
                .await?;
            let i = &created.info;
            match settings.output {
                OutputFormat::Table => {
                    // The secret alone on stdout (for `$(lh token create ...)`); the rest
                    // for people, on stderr.
                    println!("{}", created.token);
                    eprintln!(
                        "made token {} for user '{}' (role {}, expires {}): it is shown only this once",
                        i.id,
                        i.user,
                        i.role,
                        i.expires_at
                            .map_or_else(|| "never".to_string(), |t| t.to_rfc3339())
                    );
                    Ok(())
                }
                format => output::item(
                    format,
                    &created,
                    &[("token", created.token.clone()), ("id", i.id.clone())],
                ),
            }
        }
        TokenCommand::Ls => {
            let list = client.list_tokens().await?;
            output::listing(
                settings.output,
                &[
                    "id",
                    "name",
                    "user",
                    "role",
                    "state",
                    "created",
                    "expires",
                    "last used",
                ],
                &list.tokens,
                |t| {
                    vec![
                        t.id.clone(),
                        t.name.clone(),
                        t.user.clone(),
                        t.role.clone(),
                        state(t).to_string(),
                        when(&Some(t.created_at)),
                        when(&t.expires_at),
                        when(&t.last_used_at),
                    ]
                },
            )
        }
        TokenCommand::Revoke { id } => {
            let t = client.revoke_token(&id).await?;
            eprintln!("revoked token {} of user '{}'", t.id, t.user);
            Ok(())
        }
    }
}

pub async fn audit(client: &Client, settings: &Settings, args: AuditArgs) -> CliResult<()> {
    let since = args
        .since
        .map(|s| (Utc::now() - chrono::Duration::seconds(s as i64)).to_rfc3339());
    let limit = args.limit.to_string();
    let mut query = vec![("limit", limit.as_str())];
    if let Some(s) = &since {
        query.push(("since", s.as_str()));
    }
    if let Some(u) = &args.user {
        query.push(("user", u.as_str()));
    }
    let list = client.audit(&query).await?;
    output::listing(
        settings.output,
        &[
            "at", "user", "role", "action", "method", "path", "status", "from",
        ],
        &list.entries,
        |e| {
            vec![
                e.at.format("%Y-%m-%d %H:%M:%S").to_string(),
                e.user.clone(),
                e.role.clone(),
                e.action.clone(),
                e.method.clone(),
                e.path.clone(),
                e.status.to_string(),
                e.remote.clone().unwrap_or_default(),
            ]
        },
    )
}
