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
    # The server binaries, for tests that run (and restart) a PostgreSQL of their own.
    echo "export LH_TEST_POSTGRES_BIN=/usr/lib/postgresql/$ver/bin"
}

# The virtualenv $1 with the packages of the requirements file $2, made if missing and
# reinstalled only when that file changes.
venv_of() {
    local venv="$1" req="$2"
    local stamp="$venv/.requirements"
    if [ ! -x "$venv/bin/python" ]; then
        command -v python3 >/dev/null || apt_install python3 python3-venv
        python3 -m venv "$venv" >&2 || { apt_install python3-venv; python3 -m venv "$venv" >&2; }
    fi
    if ! cmp -s "$req" "$stamp"; then
        log "installing the Python packages of $req into $venv"
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
        cp "$req" "$stamp"
    fi
}

# A virtualenv with the Python packages of scripts/python-requirements.txt (pyiceberg,
# DuckDB, pyspark, tpchgen-cli), reinstalled only when that file changes.
python() {
    local cache="${LH_CACHE_DIR:-$HOME/.cache/lh}"
    local venv="$cache/venv"
    venv_of "$venv" "$(cd "$(dirname "$0")" && pwd)/python-requirements.txt"
    echo "export LH_TEST_PYTHON=$venv/bin/python"
    echo "export PATH=$venv/bin:\$PATH"
}

# pyiceberg's own integration suite (tests/pyiceberg/run.py) and what its tests import,
# in a virtualenv of its own (its pins differ from lh's), reinstalled when the list
# changes.
pyiceberg_suite() {
    local venv="${LH_CACHE_DIR:-$HOME/.cache/lh}/pyiceberg-venv"
    venv_of "$venv" "$(cd "$(dirname "$0")/.." && pwd)/tests/pyiceberg/requirements.txt"
    echo "export LH_TEST_SUITE_PYTHON=$venv/bin/python"
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

# A second Docker engine on loopback that stands for another machine: its own data root,
# exec root and containerd namespace, no bridge, reached only over TCP with TLS (client
# certificates made here with openssl), and lh's runtime image copied to it over the
# wire (no registry). Needs the first engine (for the image). `docker-spare` is a third
# one, the same way, that the fault tests kill and start again (its pid file is
# exported).
DOCKER_REMOTE_PORT=39016
DOCKER_SPARE_PORT=39017
docker_remote() {
    tls_engine remote "$DOCKER_REMOTE_PORT" REMOTE
}
docker_spare() {
    tls_engine spare "$DOCKER_SPARE_PORT" SPARE
}
tls_engine() {
    local name=$1 port=$2 var=$3
    local cache="${LH_CACHE_DIR:-$HOME/.cache/lh}"
    local dir="$cache/docker-$name"
    local tls="$cache/docker-remote/tls"
    if [ ! -f "$tls/key.pem" ]; then
        log "making the TLS certificates of the Docker engines on loopback in $tls"
        mkdir -p "$tls"
        (
            cd "$tls"
            openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=lh-test-ca" \
                -keyout ca-key.pem -out ca.pem
            openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server-key.pem -out server.csr
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
                -out server-cert.pem -extfile server.ext
            openssl req -newkey rsa:2048 -nodes -subj "/CN=lh" -keyout key.pem -out client.csr
            printf 'extendedKeyUsage=clientAuth\n' >client.ext
            openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
                -out cert.pem -extfile client.ext
        ) >/dev/null 2>&1 || { log "cannot make the TLS certificates"; exit 1; }
    fi
    local host="tcp://127.0.0.1:$port"
    local pidfile="/run/lh-docker-$name.pid"
    local remote=(docker --host "$host" --tlsverify --tlscacert "$tls/ca.pem" --tlscert "$tls/cert.pem" --tlskey "$tls/key.pem")
    if ! "${remote[@]}" info >/dev/null 2>&1; then
        log "starting the Docker engine '$name' on $host (TLS)"
        as_root mkdir -p "$dir/root" "/run/lh-docker-$name"
        as_root sh -c "nohup dockerd --data-root '$dir/root' --exec-root /run/lh-docker-$name \
            --pidfile $pidfile --host '$host' --tlsverify \
            --tlscacert '$tls/ca.pem' --tlscert '$tls/server-cert.pem' --tlskey '$tls/server-key.pem' \
            --containerd-namespace lh-$name --containerd-plugins-namespace lh-$name-plugins \
            --bridge none --iptables=false --ip6tables=false >>'$dir/dockerd.log' 2>&1 &"
        for _ in $(seq 1 60); do
            "${remote[@]}" info >/dev/null 2>&1 && break
            sleep 0.5
        done
        "${remote[@]}" info >/dev/null 2>&1 || { log "the dockerd '$name' did not start (see $dir/dockerd.log)"; exit 1; }
    fi
    local want
    want=$(docker image inspect -f '{{.Id}}' lh-runtime:3.11)
    if [ "$("${remote[@]}" image inspect -f '{{.Id}}' lh-runtime:3.11 2>/dev/null)" != "$want" ]; then
        log "copying lh-runtime:3.11 to the Docker engine '$name'"
        docker save lh-runtime:3.11 | "${remote[@]}" load >&2
    fi
    echo "export LH_TEST_DOCKER_$var=$host"
    echo "export LH_TEST_DOCKER_${var}_CERTS=$tls"
    echo "export LH_TEST_DOCKER_${var}_PID=$pidfile"
}

# A Docker engine reached over SSH, as `--docker-host ssh://...` reaches one: an sshd of
# its own on loopback (port 39022, keys only, its keys in the cache), and a Host entry
# `lh-ssh-engine` for it in /etc/ssh/ssh_config.d (the ssh client lh runs reads it: the
# port and the key, which an ssh:// URL does not carry through). The engine behind it
# is this machine's (`docker system dial-stdio` in the SSH session).
SSHD_PORT=39022
sshd_engine() {
    apt_install openssh-server openssh-client
    local dir="${LH_CACHE_DIR:-$HOME/.cache/lh}/sshd"
    mkdir -p "$dir"
    [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_ed25519"
    [ -f "$dir/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/client_ed25519"
    # The key may do one thing: talk to the engine.
    echo "restrict,command=\"docker system dial-stdio\" $(cat "$dir/client_ed25519.pub")" >"$dir/authorized_keys"
    chmod 600 "$dir/authorized_keys"
    local root_login=no
    [ "$(id -u)" = 0 ] && root_login=forced-commands-only
    cat >"$dir/sshd_config" <<CONF
Port $SSHD_PORT
ListenAddress 127.0.0.1
HostKey $dir/host_ed25519
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $(id -un)
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin $root_login
DisableForwarding yes
PermitTTY no
StrictModes no
UsePAM no
CONF
    as_root mkdir -p /run/sshd /etc/ssh/ssh_config.d
    as_root tee /etc/ssh/ssh_config.d/lh-ssh-engine.conf >/dev/null <<CONF
Host lh-ssh-engine
    HostName 127.0.0.1
    Port $SSHD_PORT
    User $(id -un)
    IdentityFile $dir/client_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $dir/known_hosts
CONF
    # Started again when its configuration changed.
    if [ -f "$dir/sshd.pid" ] && as_root kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null &&
        ! cmp -s "$dir/sshd_config" "$dir/sshd_config.running"; then
        as_root kill "$(cat "$dir/sshd.pid")"
        sleep 0.5
    fi
    if ! { [ -f "$dir/sshd.pid" ] && as_root kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; }; then
        log "starting sshd on 127.0.0.1:$SSHD_PORT (a Docker engine over SSH)"
        as_root /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
        cp "$dir/sshd_config" "$dir/sshd_config.running"
    fi
    # The engine answers through the key's one command (a ping over dial-stdio).
    local probe='GET /_ping HTTP/1.0\r\n\r\n'
    for _ in $(seq 1 20); do
        printf "$probe" | ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new lh-ssh-engine 2>/dev/null | grep -q OK && break
        sleep 0.25
    done
    printf "$probe" | ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new lh-ssh-engine 2>/dev/null | grep -q OK ||
        { log "cannot reach the Docker engine over ssh (see $dir/sshd.log)"; exit 1; }
    echo "export LH_TEST_DOCKER_SSH=ssh://lh-ssh-engine"
}

# A Java runtime for Spark (pyspark comes with the Python packages).
java_runtime() {
    type -P java >/dev/null || apt_install openjdk-17-jre-headless
}

# bubblewrap, the sandbox of the process runtime.
bubblewrap() {
    apt_install bubblewrap
}

# Headless Chromium and its WebDriver (Debian's chromium-driver), for the web console's
# tests in a real browser.
chromium() {
    apt_install chromium chromium-driver
    echo "export LH_TEST_CHROMIUM=$(type -P chromium)"
    echo "export LH_TEST_CHROMEDRIVER=$(type -P chromedriver)"
}

# A real S3 server on loopback for the suite's S3 warehouse: s3s-fs (a Rust S3 server
# over a folder, from crates.io), whose objects the tests can see and age in that folder
# as they do a local warehouse's files. Built once into the cache.
S3_PORT=39014
s3() {
    local cache="${LH_CACHE_DIR:-$HOME/.cache/lh}"
    local bin="$cache/tools/s3s-fs/bin/s3s-fs"
    local root="$cache/s3s-fs-data"
    if [ ! -x "$bin" ]; then
        log "building s3s-fs 0.14.1 (the test S3 server) into $cache/tools"
        cargo install -q s3s-fs@0.14.1 --features binary --locked --root "$cache/tools/s3s-fs" >&2
    fi
    if ! curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/"; then
        log "starting s3s-fs on 127.0.0.1:$S3_PORT"
        rm -rf "$root"
        mkdir -p "$root/lhb"
        # From a folder that stays: s3s-fs resolves every object against its working
        # directory, and a clone removed under it would fail every request.
        nohup env -C "$cache" "$bin" --host 127.0.0.1 --port "$S3_PORT" --access-key lh-test-key \
            --secret-key lh-test-secret "$root" >"$cache/s3s-fs.log" 2>&1 &
        for _ in $(seq 1 60); do
            curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/" && break
            sleep 0.2
        done
        curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/" || { log "s3s-fs did not start (see $cache/s3s-fs.log)"; exit 1; }
    fi
    mkdir -p "$root/lhb"
    echo "export LH_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT"
    echo "export LH_TEST_S3_BUCKET=lhb"
    echo "export LH_TEST_S3_KEY=lh-test-key"
    echo "export LH_TEST_S3_SECRET=lh-test-secret"
    echo "export LH_TEST_S3_ROOT=$root"
    echo "export LH_TEST_S3S_FS=$bin"
}

# Garage (a production S3 store, from crates.io), single node on loopback, for what a
# folder-backed server cannot show: per-key permissions (a read-only key) and the S3
# benchmarks. Its first build takes long (see BENCHMARKS.md); it is kept in the cache.
GARAGE_VERSION=2.5.0
GARAGE_RW_SECRET=1111111111111111111111111111111111111111111111111111111111111111
GARAGE_RO_SECRET=2222222222222222222222222222222222222222222222222222222222222222
garage() {
    local cache="${LH_CACHE_DIR:-$HOME/.cache/lh}"
    local bin="$cache/tools/garage/bin/garage"
    local dir="$cache/garage"
    if [ ! -x "$bin" ]; then
        log "building garage $GARAGE_VERSION (the S3 store of the permission tests and benchmarks) into $cache/tools"
        cargo install -q "garage@$GARAGE_VERSION" --locked --root "$cache/tools/garage" >&2
    fi
    local g=("$bin" -c "$dir/garage.toml")
    if ! curl -s -o /dev/null "http://127.0.0.1:39900/"; then
        log "starting garage on 127.0.0.1:39900"
        rm -rf "$dir"
        mkdir -p "$dir"
        {
            echo "metadata_dir = \"$dir/meta\""
            echo "data_dir = \"$dir/data\""
            echo 'db_engine = "sqlite"'
            # Parquet is compressed already: Garage's zstd pass over each block only
            # costs CPU, here taken from the server and DuckDB on the same two cores.
            echo 'compression_level = "none"'
            echo 'replication_factor = 1'
            echo 'rpc_bind_addr = "127.0.0.1:39901"'
            echo 'rpc_public_addr = "127.0.0.1:39901"'
            echo "rpc_secret = \"$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')\""
            echo '[s3_api]'
            echo 's3_region = "garage"'
            echo 'api_bind_addr = "127.0.0.1:39900"'
            echo 'root_domain = ".s3.garage.localhost"'
        } >"$dir/garage.toml"
        nohup "${g[@]}" server >"$cache/garage.log" 2>&1 &
        local id=""
        for _ in $(seq 1 100); do
            id=$("${g[@]}" status 2>/dev/null | awk '/NO ROLE ASSIGNED/ {print $1; exit}' || true)
            [ -n "$id" ] && break
            sleep 0.2
        done
        [ -n "$id" ] || { log "garage did not start (see $cache/garage.log)"; exit 1; }
        "${g[@]}" layout assign -z dc1 -c 1G "$id" >/dev/null
        "${g[@]}" layout apply --version 1 >/dev/null
        "${g[@]}" key import --yes -n lh-rw GK00000000000000000000000a "$GARAGE_RW_SECRET" >/dev/null
        "${g[@]}" key import --yes -n lh-ro GK00000000000000000000000b "$GARAGE_RO_SECRET" >/dev/null
        "${g[@]}" bucket create lh-garage >/dev/null
        "${g[@]}" bucket allow --read --write --owner lh-garage --key lh-rw >/dev/null
        "${g[@]}" bucket allow --read lh-garage --key lh-ro >/dev/null
    fi
    echo "export LH_TEST_GARAGE_ENDPOINT=http://127.0.0.1:39900"
    echo "export LH_TEST_GARAGE_BUCKET=lh-garage"
    echo "export LH_TEST_GARAGE_KEY=GK00000000000000000000000a"
    echo "export LH_TEST_GARAGE_SECRET=$GARAGE_RW_SECRET"
    echo "export LH_TEST_GARAGE_RO_KEY=GK00000000000000000000000b"
    echo "export LH_TEST_GARAGE_RO_SECRET=$GARAGE_RO_SECRET"
}

for svc in "$@"; do
    case "$svc" in
        postgres) postgres ;;
        python) python ;;
        pyiceberg-suite) pyiceberg_suite ;;
        bubblewrap) bubblewrap ;;
        chromium) chromium ;;
        java) java_runtime ;;
        dbt) dbt ;;
        docker) docker_engine ;;
        docker-remote) docker_remote ;;
        docker-spare) docker_spare ;;
        sshd) sshd_engine ;;
        s3) s3 ;;
        garage) garage ;;
        *) log "unknown service $svc"; exit 2 ;;
    esac
done
