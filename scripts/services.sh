#!/usr/bin/env bash
# Installs (from Debian's packages) and starts the services lh's tests need, then
# prints the environment that points the tests at them, as `export` lines:
#
#     eval "$(scripts/services.sh postgres)"
#
# Idempotent: a service already running is left alone. Needs root (or sudo) only to
# install packages and start system services.
set -euo pipefail

log() { echo "services: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        log "need root to run: $*"; exit 1; fi
}

apt_install() {
    local missing=()
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]} from Debian's packages"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

postgres() {
    apt_install postgresql
    local ver
    ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
    if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$ver main$"; then
        as_root pg_createcluster "$ver" main >&2
    fi
    if ! pg_lsclusters -h | awk -v v="$ver" '$1==v && $2=="main" {print $4}' | grep -q online; then
        log "starting PostgreSQL $ver"
        as_root pg_ctlcluster "$ver" main start >&2
    fi
    local port
    port=$(pg_lsclusters -h | awk -v v="$ver" '$1==v && $2=="main" {print $3}')
    for _ in $(seq 1 60); do
        pg_isready -q -h 127.0.0.1 -p "$port" && break
        sleep 0.5
    done
    pg_isready -q -h 127.0.0.1 -p "$port" || { log "PostgreSQL did not come up"; exit 1; }
    # A password for TCP logins on loopback (the default pg_hba asks for one).
    as_root su postgres -c "psql -q -p $port -c \"ALTER USER postgres PASSWORD 'postgres'\"" >&2
    echo "export LH_TEST_POSTGRES_URL=postgres://postgres:postgres@127.0.0.1:$port/postgres"
}

# A virtualenv with the Python packages of scripts/python-requirements.txt (pyiceberg,
# DuckDB, pyspark, tpchgen-cli), reinstalled only when that file changes.
python() {
    local cache="${LH_CACHE_DIR:-$HOME/.cache/lh}"
    local venv="$cache/venv"
    local req
    req="$(cd "$(dirname "$0")" && pwd)/python-requirements.txt"
    local stamp="$venv/.requirements"
    if [ ! -x "$venv/bin/python" ]; then
        command -v python3 >/dev/null || apt_install python3 python3-venv
        python3 -m venv "$venv" >&2 || { apt_install python3-venv; python3 -m venv "$venv" >&2; }
    fi
    if ! cmp -s "$req" "$stamp"; then
        log "installing Python packages into $venv"
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
        cp "$req" "$stamp"
    fi
    echo "export LH_TEST_PYTHON=$venv/bin/python"
    echo "export PATH=$venv/bin:\$PATH"
}

# dbt with dbt-duckdb, the peer of the pipeline benchmark, in a virtualenv of its own.
dbt() {
    local venv="${LH_CACHE_DIR:-$HOME/.cache/lh}/dbt-venv"
    if [ ! -x "$venv/bin/dbt" ]; then
        log "installing dbt-duckdb into $venv"
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install -q --disable-pip-version-check dbt-duckdb==1.11.1 'dbt-core<1.12' >&2
    fi
    echo "export LH_DBT=$venv/bin/dbt"
}

# A Docker engine (Debian's docker.io), started in the background if none answers, and
# lh's runtime image, built without a registry (images/build.sh; skipped when current).
docker_engine() {
    apt_install docker.io debootstrap
    if ! docker info >/dev/null 2>&1; then
        log "starting dockerd"
        as_root sh -c 'nohup dockerd >/var/log/lh-dockerd.log 2>&1 &'
        for _ in $(seq 1 60); do
            docker info >/dev/null 2>&1 && break
            sleep 0.5
        done
        docker info >/dev/null 2>&1 || { log "dockerd did not start (see /var/log/lh-dockerd.log)"; exit 1; }
    fi
    "$(cd "$(dirname "$0")/.." && pwd)/images/build.sh"
}

# A Java runtime for Spark (pyspark comes with the Python packages).
java_runtime() {
    type -P java >/dev/null || apt_install openjdk-17-jre-headless
}

# bubblewrap, the sandbox of the process runtime.
bubblewrap() {
    apt_install bubblewrap
}

for svc in "$@"; do
    case "$svc" in
        postgres) postgres ;;
        python) python ;;
        bubblewrap) bubblewrap ;;
        java) java_runtime ;;
        dbt) dbt ;;
        docker) docker_engine ;;
        *) log "unknown service $svc"; exit 2 ;;
    esac
done
