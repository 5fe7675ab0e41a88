#!/usr/bin/env bash
# Single-node Slurm for CI and development: install (Debian packages), configure, start, stop.
#
#   bash scripts/ci-slurm.sh start    # install if missing, write configs, start daemons, wait
#   bash scripts/ci-slurm.sh status   # which daemons run; sinfo
#   bash scripts/ci-slurm.sh stop     # kill the daemons this script started
#
# Runs as root, without systemd: munged, mariadbd, slurmdbd, slurmctld and slurmd are started
# by hand. State, logs, pid files and the MariaDB data directory live under $EPCAP_SLURM_DIR
# (default /var/lib/epcap-slurm). Configs go to /etc/slurm (where the Slurm clients look);
# an existing slurm.conf that this script did not write is never overwritten.
# Idempotent: a second `start` leaves running daemons alone and only waits for them.
set -euo pipefail

STATE="${EPCAP_SLURM_DIR:-/var/lib/epcap-slurm}"
CONF_DIR=/etc/slurm
MARK="# written by epcap scripts/ci-slurm.sh"
CLUSTER=epcap
DB_PORT="${EPCAP_SLURM_DB_PORT:-3307}"
CPUS="${EPCAP_SLURM_CPUS:-16}"           # declared CPUs, more than present: 4 ranks per cell, and
# tests/e2e/test_slurm.py's failing jobs (12 tasks waiting out their limits) beside a campaign
MEM_PER_CPU="${EPCAP_SLURM_MEM_PER_CPU:-2048}"   # MiB; DefMemPerCPU, so jobs share the node
NODE="$(hostname -s)"
# the linter package checks the generated batch scripts in the tests
PKGS=(slurm-wlm munge slurmdbd mariadb-server shellcheck)

log() { echo "ci-slurm: $*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"; }

install_packages() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurm-wlm)
  command -v munged >/dev/null || missing+=(munge)
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  command -v shellcheck >/dev/null || missing+=(shellcheck)
  [ "${#missing[@]}" = 0 ] && return 0
  log "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
}

alive() {  # alive PIDFILE: the process named in the pid file runs
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_for() {  # wait_for SECONDS WHAT CMD...: retry CMD every 0.3 s until it succeeds
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || die "$what did not come up within ${limit}s (logs: $STATE/log)"
    sleep 0.3
  done
}

real_memory() {  # MiB a bit under physical
  local kib; kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
  echo $(( kib / 1024 - 1024 ))
}

write_configs() {
  mkdir -p "$STATE"/{log,run,ctld,spool,mysql-run} "$CONF_DIR"
  if [ -f "$CONF_DIR/slurm.conf" ] && ! grep -qF "$MARK" "$CONF_DIR/slurm.conf"; then
    die "$CONF_DIR/slurm.conf exists and was not written by this script; not touching it"
  fi
  [ -s "$STATE/dbpass" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$STATE/dbpass")
  local tmp
  tmp=$(mktemp "$CONF_DIR/.slurm.conf.XXXXXX")
  cat > "$tmp" <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$MEM_PER_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
MpiDefault=none
SchedulerType=sched/backfill
# the main scheduling loop every second (the test campaigns submit one job as the last ends:
# 1.72 s a 2-task job at 2 s, 0.80 s at 1, measured here 2026-12-01)
SchedulerParameters=sched_interval=1
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
JobCompType=jobcomp/none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$(real_memory) State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  chmod 644 "$tmp"; mv -f "$tmp" "$CONF_DIR/slurm.conf"
  tmp=$(mktemp "$CONF_DIR/.slurmdbd.conf.XXXXXX")
  cat > "$tmp" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$STATE/dbpass")
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$tmp"; mv -f "$tmp" "$CONF_DIR/slurmdbd.conf"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  [ -s /etc/munge/munge.key ] || { (umask 077; head -c 1024 /dev/urandom > /etc/munge/munge.key); }
  chown munge:munge /etc/munge/munge.key; chmod 600 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged --force
  wait_for 10 munged sh -c 'munge -n | unmunge'
}

db() { mariadb --socket="$STATE/mysql-run/mysqld.sock" -u root "$@"; }

start_mariadb() {
  local pidf="$STATE/mysql-run/mysqld.pid"
  chown mysql:mysql "$STATE/mysql-run"
  if ! alive "$pidf"; then
    if [ ! -d "$STATE/mysql/mysql" ]; then
      log "initialising MariaDB in $STATE/mysql"
      mkdir -p "$STATE/mysql"; chown mysql:mysql "$STATE/mysql"
      mariadb-install-db --user=mysql --datadir="$STATE/mysql" --skip-test-db \
        --auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1
    fi
    setsid mariadbd --user=mysql --datadir="$STATE/mysql" --port="$DB_PORT" \
      --bind-address=127.0.0.1 --socket="$STATE/mysql-run/mysqld.sock" --pid-file="$pidf" \
      --innodb-buffer-pool-size=64M --log-error="$STATE/log/mariadb.log" \
      </dev/null >/dev/null 2>&1 &
  fi
  wait_for 30 mariadbd db -e 'SELECT 1'
  local pass; pass=$(cat "$STATE/dbpass")
  db <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
}

start_slurmdbd() {
  alive "$STATE/run/slurmdbd.pid" || slurmdbd
  wait_for 30 slurmdbd sacctmgr -n -P show cluster format=cluster
  if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
}

start_slurm() {
  alive "$STATE/run/slurmctld.pid" || slurmctld
  wait_for 30 slurmctld scontrol ping
  alive "$STATE/run/slurmd.pid" || slurmd -N "$NODE"
  wait_for 30 "node $NODE" node_ready
  wait_for 30 sacct sacct -n -X -S now-1hours -o JobID
}

node_ready() {  # the node takes jobs; resumes it if a restart left it down or drained
  local st; st=$(sinfo -h -N -n "$NODE" -o %T 2>/dev/null) || return 1
  case "$st" in
    idle*|mixed*|allocated*|completing*) return 0 ;;
    down*|drain*|fail*) scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
                        return 1 ;;
    *) return 1 ;;
  esac
}

stop_pidfile() {  # stop_pidfile NAME PIDFILE: TERM, wait up to 10 s, then KILL
  local name=$1 pidf=$2 pid i
  alive "$pidf" || return 0
  pid=$(cat "$pidf"); kill "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || { log "stopped $name"; return 0; }; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true; log "killed $name"
}

do_start() {
  need_root
  local t0=$SECONDS
  install_packages
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurm
  log "Slurm up in $((SECONDS - t0))s (node $NODE, $CPUS CPUs declared, state $STATE)"
}

do_stop() {
  need_root
  stop_pidfile slurmd "$STATE/run/slurmd.pid"
  stop_pidfile slurmctld "$STATE/run/slurmctld.pid"
  stop_pidfile slurmdbd "$STATE/run/slurmdbd.pid"
  stop_pidfile mariadbd "$STATE/mysql-run/mysqld.pid"
  stop_pidfile munged /run/munge/munged.pid
}

do_status() {
  local rc=0 name pidf
  for name in munged:/run/munge/munged.pid mariadbd:"$STATE/mysql-run/mysqld.pid" \
              slurmdbd:"$STATE/run/slurmdbd.pid" slurmctld:"$STATE/run/slurmctld.pid" \
              slurmd:"$STATE/run/slurmd.pid"; do
    pidf=${name#*:}
    if alive "$pidf"; then echo "${name%%:*}: running (pid $(cat "$pidf"))"
    else echo "${name%%:*}: stopped"; rc=1; fi
  done
  sinfo 2>/dev/null || rc=1
  return "$rc"
}

case "${1:-}" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
