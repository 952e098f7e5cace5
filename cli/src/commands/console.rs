//! `lh console`: the server's web console in a browser, signed in with the profile's
//! token. The token travels in the address's fragment (`#token=...`), which browsers
//! never send to a server; the page moves it to the tab's session storage and removes
//! it from the address bar and the history.

use std::io::IsTerminal;
use std::process::{Command, Stdio};

use crate::args::ConsoleArgs;
use crate::client::Client;
use crate::error::CliResult;
use crate::settings::Settings;

pub async fn run(client: &Client, settings: &Settings, args: ConsoleArgs) -> CliResult<()> {
    // The server answers and takes the token, or the error says why not.
    let info = client.info().await?;
    let base = format!("{}/", client.endpoint().trim_end_matches('/'));
    let url = match &settings.token {
        Some(token) => format!("{base}#token={}", fragment_escape(token)),
        None => base.clone(),
    };
    let who = info
        .auth
        .as_ref()
        .and_then(|a| a.user.clone())
        .unwrap_or_else(|| settings.user.clone());
    if !args.no_open && std::io::stdout().is_terminal() && open_browser(&url)? {
        eprintln!(
            "opening the console of {base} in your browser, as {who} \
             (if none opens: `lh console --no-open` prints the address)"
        );
        return Ok(());
    }
    // Printed for a browser elsewhere (the address holds the token: keep it private).
    println!("{url}");
    if std::io::stdout().is_terminal() {
        eprintln!(
            "open this address in a browser to use the console as {who}; it holds your token"
        );
    }
    Ok(())
}

/// Starts the user's browser (`BROWSER`, else the desktop's opener), detached, on a
/// private file of lh's home that sends it on to `url`: the token stays out of the
/// process list, where other users could read a command line. False when there is no
/// browser to start.
fn open_browser(url: &str) -> CliResult<bool> {
    let mut candidates: Vec<String> = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .into_iter()
        .collect();
    if cfg!(target_os = "macos") {
        candidates.push("open".into());
    } else if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
    {
        candidates.push("xdg-open".into());
    }
    if candidates.is_empty() {
        return Ok(false);
    }
    let home = lh_api::env_vars::lh_home();
    lh_api::config_file::create_private_dir(&home)?;
    let page = home.join("console.html");
    let _ = std::fs::remove_file(&page);
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut file, 0o600);
    // The URL is made of the endpoint and an escaped token: no quote or bracket in it
    // can come from the token; the endpoint is the user's own setting.
    let html = format!(
        "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=\"0;url={}\">\
         <title>lh console</title><a href=\"{}\">open the lh console</a>\n",
        attr_escape(url),
        attr_escape(url)
    );
    std::io::Write::write_all(&mut file.open(&page)?, html.as_bytes())?;
    let target = page.to_string_lossy().into_owned();
    Ok(candidates.into_iter().any(|program| {
        Command::new(program.trim())
            .arg(&target)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .is_ok()
    }))
}

fn attr_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A token as a URL fragment: lh's tokens are URL-safe already; anything else (an
/// identity provider's token) is percent-encoded.
fn fragment_escape(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_safe_in_a_fragment() {
        assert_eq!(fragment_escape("lht_abc.DEF-1~_"), "lht_abc.DEF-1~_");
        assert_eq!(fragment_escape("a b&c#d%"), "a%20b%26c%23d%25");
    }
}
