# Fetches one source distribution for a sandboxed source build, running no code of any
# package: lh runs it with the environment's bare interpreter (`-I -S`: no site, no
# `.pth` file) in the step that has the network, before anything is built.
#
#     python -I -S -c <this> NAME VERSION OUT_DIR
#
# It looks where uv looks: the find-links (`UV_FIND_LINKS`: folders or pages of links),
# then the indexes in uv's order (`UV_INDEX`, `UV_EXTRA_INDEX_URL`, then
# `UV_DEFAULT_INDEX` or `UV_INDEX_URL` or PyPI), each a PEP 691 (JSON) or PEP 503 (HTML)
# simple index; as uv does (unless `UV_INDEX_STRATEGY` says otherwise), only the first
# index that lists the project is asked, so that another index cannot slip in a package
# of the same name. It takes `NAME-VERSION` as a source archive, over HTTP(S) only,
# checks the index's sha256 when the index gives one, writes it to OUT_DIR within
# DEADLINE seconds, and prints one line of JSON: the file and the build requirements of
# its pyproject.toml (read from the archive, never unpacked; setuptools when it declares
# none, as PEP 517 says).
import base64
import hashlib
import html.parser
import json
import os
import re
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import time

MAX_BYTES = 2 << 30
MAX_MEMBERS = 100_000
DEADLINE = 600
STARTED = time.monotonic()
DEFAULT_REQUIRES = ["setuptools>=40.8.0"]
SDIST = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")


def fail(message):
    sys.stderr.write(message + "\n")
    sys.exit(2)


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def words(var, sep):
    return [w for w in re.split(sep, os.environ.get(var, "")) if w]


def indexes():
    found = []
    for entry in words("UV_INDEX", r"\s+"):
        head, _, tail = entry.partition("=")
        found.append(tail if tail and "://" not in head else entry)
    found += words("UV_EXTRA_INDEX_URL", r"\s+")
    found.append(
        os.environ.get("UV_DEFAULT_INDEX")
        or os.environ.get("UV_INDEX_URL")
        or "https://pypi.org/simple"
    )
    return found


def request(url, accept=None):
    """A request for `url`, its credentials (user:password@) moved into a header that
    is not passed on to where the server redirects."""
    parts = urllib.parse.urlsplit(url)
    auth = None
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        auth = base64.b64encode(f"{user}:{password}".encode()).decode()
        netloc = parts.netloc.rsplit("@", 1)[1]
        url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    req = urllib.request.Request(url, headers={"User-Agent": "lh-source-build"})
    if accept:
        req.add_header("Accept", accept)
    if auth:
        req.add_unredirected_header("Authorization", "Basic " + auth)
    return req


class HttpOnly(urllib.request.HTTPRedirectHandler):
    """Redirects to HTTP(S) only (urllib would follow one to ftp: or file:)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            fail(f"{index_name(req.full_url)} redirects to a non-HTTP address")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


OPENER = urllib.request.OpenerDirector()
for handler in (
    urllib.request.ProxyHandler(),
    urllib.request.HTTPHandler(),
    urllib.request.HTTPSHandler(),
    HttpOnly(),
    urllib.request.HTTPDefaultErrorHandler(),
    urllib.request.HTTPErrorProcessor(),
):
    OPENER.add_handler(handler)


def left():
    """The seconds left of the fetch's DEADLINE, for one network operation."""
    remaining = DEADLINE - (time.monotonic() - STARTED)
    if remaining <= 0:
        fail(f"the fetch ran past its {DEADLINE} s")
    return min(remaining, 30)


def read_bounded(resp, limit, what):
    """A response's body, read in small pieces within the deadline, at most `limit`."""
    parts, size = [], 0
    while chunk := resp.read1(1 << 16):
        left()
        size += len(chunk)
        if size > limit:
            fail(f"{what} is larger than {limit >> 20} MiB")
        parts.append(chunk)
    return b"".join(parts)


def with_auth(url, base):
    """`url` carrying `base`'s credentials when both are on one host."""
    b, u = urllib.parse.urlsplit(base), urllib.parse.urlsplit(url)
    if b.username is None or u.username is not None or (u.scheme, u.hostname, u.port) != (b.scheme, b.hostname, b.port):
        return url
    creds = b.netloc.rsplit("@", 1)[0]
    return urllib.parse.urlunsplit((u.scheme, f"{creds}@{u.netloc}", u.path, u.query, u.fragment))


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self._href, self._text = [], None, ""

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href, self._text = dict(attrs).get("href"), ""

    def handle_data(self, data):
        if self._href is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.links.append((self._href, self._text.strip()))
            self._href = None


def page(url):
    """The files a simple-index page (or a page of find-links) lists, as (filename, url,
    sha256 or None); None when the page does not exist."""
    accept = "application/vnd.pypi.simple.v1+json, text/html;q=0.2"
    try:
        with OPENER.open(request(url, accept), timeout=left()) as resp:
            kind = resp.headers.get("Content-Type", "")
            body = read_bounded(resp, 16 << 20, f"the page of {index_name(url)}")
            base = resp.geturl()
    except urllib.error.HTTPError as e:
        if e.code in (404, 410):
            return None
        where = urllib.parse.urlsplit(url)
        fail(f"{where.hostname} answered {e.code} for {where.path}")
    files = []
    if "json" in kind:
        # Each object costs far more memory than its bytes: counted before parsing.
        if body.count(b"{") > 200_000:
            fail(f"the page of {index_name(url)} lists too many files")
        doc = json.loads(body)
        entries = doc.get("files") if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            fail(f"the page of {index_name(url)} is not a simple index page")
        for f in entries:
            if not isinstance(f, dict):
                continue
            name, link, hashes = f.get("filename"), f.get("url"), f.get("hashes")
            if not isinstance(name, str) or not isinstance(link, str):
                continue
            digest = hashes.get("sha256") if isinstance(hashes, dict) else None
            files.append((name, urllib.parse.urljoin(base, link), digest if isinstance(digest, str) else None))
        return files
    parser = Links()
    parser.feed(body.decode("utf-8", "replace"))
    for href, text in parser.links:
        target = urllib.parse.urljoin(base, href)
        split = urllib.parse.urlsplit(target)
        fragment = urllib.parse.parse_qs(split.fragment)
        name = urllib.parse.unquote(split.path.rsplit("/", 1)[-1]) or text
        files.append((name, split._replace(fragment="").geturl(), (fragment.get("sha256") or [None])[0]))
    return files


def norm_version(v):
    """PEP 440's spelling of the pre-release, post and dev parts (`1.0-Alpha1` is
    `1.0a1`), enough to match a file's version to the one uv names."""
    v = v.lower().lstrip("v")
    for long, short in (("alpha", "a"), ("beta", "b"), ("preview", "rc"), ("pre", "rc")):
        v = re.sub(rf"[-_.]?{long}[-_.]?(?=\d|$)", short, v)
    v = re.sub(r"[-_.]?(post|rev|r)[-_.]?(?=\d|$)", ".post", v)
    v = re.sub(r"[-_.]?dev[-_.]?(?=\d|$)", ".dev", v)
    return v


def wanted(filename, name, version):
    for ext in SDIST:
        if filename.lower().endswith(ext):
            stem = filename[: -len(ext)]
            dist, _, ver = stem.rpartition("-")
            return norm(dist) == norm(name) and norm_version(ver) == norm_version(version)
    return False


def candidates(name, version):
    for link in words("UV_FIND_LINKS", r"[,\s]+"):
        if "://" not in link or link.startswith("file://"):
            folder = urllib.parse.unquote(link[len("file://"):]) if link.startswith("file://") else link
            if os.path.isdir(folder):
                for f in sorted(os.listdir(folder)):
                    if wanted(f, name, version):
                        yield f, os.path.join(folder, f), None, None
            continue
        for f, url, digest in page(link) or []:
            if wanted(f, name, version):
                yield f, url, digest, link
    best_match = os.environ.get("UV_INDEX_STRATEGY", "first-index") != "first-index"
    for index in indexes():
        files = page(index.rstrip("/") + "/" + norm(name) + "/")
        if files is None:
            continue
        for f, url, digest in files:
            if wanted(f, name, version):
                yield f, url, digest, index
        if not best_match:
            fail(
                f"{index_name(index)} lists {name} but has no source archive of {version} "
                f"({', '.join(SDIST)}); uv takes {name} from there only"
            )


def index_name(url):
    """An index's address without its credentials."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()


def fetch(name, version, out):
    for filename, url, digest, base in candidates(name, version):
        filename = os.path.basename(filename)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+!-]*\.(tar\.gz|tgz|tar\.bz2|tar\.xz|zip)", filename, re.I):
            continue
        if base is not None and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            fail(f"{index_name(base)} links {filename} at a non-HTTP address")
        path = os.path.join(out, filename)
        h = hashlib.sha256()
        size = 0
        with open(path, "wb") as dst:
            if base is None:
                src = open(url, "rb")
            else:
                src = OPENER.open(request(with_auth(url, base)), timeout=left())
            read = src.read1 if base is not None else src.read
            with src:
                while chunk := read(1 << 16):
                    left()
                    size += len(chunk)
                    if size > MAX_BYTES:
                        fail(f"{filename} is larger than {MAX_BYTES >> 30} GiB")
                    h.update(chunk)
                    dst.write(chunk)
        if digest and h.hexdigest() != digest.lower():
            fail(f"{filename} does not match the sha256 its index gives")
        return path
    fail(f"no source distribution of {name} {version} in the find-links or the package indexes")


def build_requires(path):
    """`[build-system] requires` of the archive's top-level pyproject.toml."""
    text = None
    if path.lower().endswith(".zip"):
        check_zip(path)
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                parts = info.filename.split("/")
                if len(parts) == 2 and parts[1] == "pyproject.toml" and info.file_size < (1 << 20):
                    text = z.read(info).decode("utf-8", "replace")
                    break
    else:
        text = tar_pyproject(path)
    if text is None:
        return DEFAULT_REQUIRES
    try:
        import tomllib

        system = tomllib.loads(text).get("build-system")
    except ImportError:
        match = re.search(r"^\[build-system\][^\[]*?^requires\s*=\s*\[(.*?)\]", text, re.S | re.M)
        system = {"requires": re.findall(r"[\"']([^\"']+)[\"']", match.group(1))} if match else None
    except ValueError as e:
        fail(f"{os.path.basename(path)}: pyproject.toml is not valid TOML: {e}")
    if not isinstance(system, dict) or "requires" not in system:
        return DEFAULT_REQUIRES
    requires = system["requires"]
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        fail(f"{os.path.basename(path)}: build-system.requires is not a list of strings")
    return requires


def tar_pyproject(path):
    """The top-level pyproject.toml of a tar archive, read header by header from the
    decompressed stream: tarfile would read a long-name or pax header of any size into
    memory. At most MAX_MEMBERS members; extended headers of at most 64 KiB."""
    import bz2
    import gzip
    import lzma

    lower = path.lower()
    opener = gzip.open if lower.endswith((".gz", ".tgz")) else bz2.open if lower.endswith(".bz2") else lzma.open
    with opener(path, "rb") as f:
        long_name = None
        for _ in range(MAX_MEMBERS):
            left()
            header = f.read(512)
            if len(header) < 512 or header == bytes(512):
                return None
            field = header[124:136]
            if field[0] & 0x80:
                fail(f"{os.path.basename(path)} has a member too large to read")
            size = int(field.rstrip(b"\0 ").decode("ascii") or "0", 8)
            kind = header[156:157]
            name = header[0:100].split(b"\0")[0]
            prefix = header[345:500].split(b"\0")[0]
            if kind in (b"L", b"x", b"g"):
                if size > (64 << 10):
                    fail(f"{os.path.basename(path)} has an extended header of {size} bytes")
                data = f.read(size)
                f.read(-size % 512)
                if kind == b"L":
                    long_name = data.split(b"\0")[0]
                elif kind == b"x":
                    for record in re.findall(rb"\d+ path=([^\n]*)\n", data):
                        long_name = record
                continue
            full = long_name or (prefix + b"/" + name if prefix else name)
            long_name = None
            parts = full.decode("utf-8", "replace").split("/")
            if len(parts) == 2 and parts[1] == "pyproject.toml" and kind in (b"0", b"\0") and size < (1 << 20):
                return f.read(size).decode("utf-8", "replace")
            # Skipped in pieces (a gzip stream cannot seek cheaply).
            remaining = size + (-size % 512)
            while remaining > 0:
                step = f.read(min(remaining, 1 << 20))
                if not step:
                    return None
                remaining -= len(step)
        fail(f"{os.path.basename(path)} holds more than {MAX_MEMBERS} files")


def check_zip(path):
    """A zip's entry count, from its end record, before zipfile reads the whole
    directory: at most MAX_MEMBERS (a zip64 archive is refused)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - (1 << 16) - 22))
        tail = f.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or tail.rfind(b"PK\x06\x06") >= 0:
        fail(f"{os.path.basename(path)} is not a zip archive lh reads (no end record, or zip64)")
    entries = int.from_bytes(tail[at + 10 : at + 12], "little")
    # The directory's size too: zipfile reads it all, whatever the count says.
    directory = int.from_bytes(tail[at + 12 : at + 16], "little")
    if entries >= min(MAX_MEMBERS, 0xFFFF) or directory > (8 << 20):
        fail(f"{os.path.basename(path)} holds too many files")


def main():
    name, version, out = sys.argv[1:4]
    try:
        path = fetch(name, version, out)
        requires = build_requires(path)
    except SystemExit:
        raise
    except RecursionError:
        fail(f"cannot fetch {name} {version}: something it read nests too deep")
    except Exception as e:  # One line, never a traceback, whatever a server sent.
        fail(f"cannot fetch {name} {version}: {type(e).__name__}: {e}"[:2000])
    print(json.dumps({"sdist": path, "requires": requires}))


main()
