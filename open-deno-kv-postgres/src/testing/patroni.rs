//! A throwaway high-availability cluster: one etcd and three PostgreSQL nodes, each run by
//! Patroni, in synchronous mode, for failover tests.
//!
//! Everything runs from a temporary directory on free 127.0.0.1 ports: etcd (Debian's
//! `etcd-server`, binary `etcd`), and per node a Patroni (Debian's `patroni`) with its REST API
//! and its PostgreSQL. Each process is this process's child, known by its id; dropping the
//! cluster stops them (Patroni with `SIGTERM`, which stops its PostgreSQL; then `SIGKILL` for
//! whatever still runs) and deletes the directory — also when a test panics.
//!
//! The Patroni settings are those [`PatroniSettings`] holds (short ones by default, as
//! `docs/postgres.md` explains). Logs: `etcd.log` and `nodeN/patroni.log` (Patroni's own lines
//! and its PostgreSQL's, each line with a timestamp), kept in the directory until the drop;
//! [`PatroniCluster::log_of`] reads them for a test's report.

use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::binaries::{ServerBinaries, cluster_error};
use super::cluster::{kill_process_tree, postmaster_pid, process_alive};
use crate::PostgresError;

/// Where Patroni is looked for when `PATRONI_BIN` is unset (Debian's `patroni` package).
const PATRONI: &str = "/usr/bin/patroni";
/// Where etcd is looked for when `ETCD_BIN` is unset (Debian's `etcd-server` package).
const ETCD: &str = "/usr/bin/etcd";
/// How many PostgreSQL nodes the cluster has.
pub const NODES: usize = 3;
/// The cluster's name in etcd (Patroni's `scope`).
const SCOPE: &str = "kv-test";
/// Patroni's `maximum_lag_on_failover`: a standby further behind (in bytes of WAL) may not
/// promote itself.
const MAX_LAG_ON_FAILOVER: u64 = 1_048_576;
/// The superuser every node is reached as (trusted on loopback).
const SUPERUSER: &str = "postgres";

/// Patroni's timing settings (its `bootstrap.dcs` section), in seconds.
#[derive(Debug, Clone, Copy)]
pub struct PatroniSettings {
    /// How long the leader key lives in etcd without being renewed: a leader that stops renewing
    /// it (its machine died) is replaced this long after its last renewal, at the latest.
    pub ttl: u32,
    /// How long each Patroni sleeps between two runs of its loop; the leader renews its key once
    /// per loop.
    pub loop_wait: u32,
    /// How long Patroni retries etcd and PostgreSQL operations before giving up on them (a
    /// leader that cannot reach etcd for this long demotes itself).
    pub retry_timeout: u32,
}

impl Default for PatroniSettings {
    /// `ttl` 10, `loop_wait` 2, `retry_timeout` 4: Patroni's defaults are 30 / 10 / 10. Shorter
    /// is safe as long as `loop_wait + 2 × retry_timeout <= ttl` (so a leader gives up its key,
    /// and demotes, before another node can take it).
    fn default() -> Self {
        PatroniSettings {
            ttl: 10,
            loop_wait: 2,
            retry_timeout: 4,
        }
    }
}

/// One node: its ports, its directory, and its Patroni process while it runs.
#[derive(Debug)]
struct Node {
    name: String,
    dir: PathBuf,
    pg_port: u16,
    api_port: u16,
    patroni: Option<Child>,
}

impl Node {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn config(&self) -> PathBuf {
        self.dir.join("patroni.yml")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("patroni.log")
    }
}

/// A running etcd and three Patroni nodes; dropping it stops them all.
#[derive(Debug)]
pub struct PatroniCluster {
    bin: ServerBinaries,
    patroni: PathBuf,
    /// The OS user (uid, gid) Patroni and etcd run as, when this process is root.
    run_as: Option<(u32, u32)>,
    etcd: Option<Child>,
    nodes: Vec<Node>,
    // Last: removed after the processes above are stopped (see `Drop`).
    dir: tempfile::TempDir,
}

impl PatroniCluster {
    /// Starts etcd and three Patroni nodes with `settings`, and waits (3 min at most) until one
    /// node leads and both others stream from it, one of them as its synchronous standby.
    ///
    /// Fails with [`PostgresError::ServerMissing`] when the PostgreSQL server programs are not
    /// installed, and with [`PostgresError::Cluster`] naming the Debian package when Patroni or
    /// etcd is not.
    pub fn start(settings: PatroniSettings) -> Result<Self, PostgresError> {
        let bin = ServerBinaries::find()?;
        let patroni = program("PATRONI_BIN", PATRONI, "patroni").map_err(missing)?;
        let etcd = program("ETCD_BIN", ETCD, "etcd-server").map_err(missing)?;
        let dir = tempfile::Builder::new()
            .prefix("kv-patroni-")
            .tempdir()
            .map_err(|e| cluster_error("creating the temporary directory", e))?;
        let run_as = match bin.run_as() {
            Some(user) => Some((id_of(user, "-u")?, id_of(user, "-g")?)),
            None => None,
        };
        let mut cluster = PatroniCluster {
            bin,
            patroni,
            run_as,
            etcd: None,
            nodes: Vec::new(),
            dir,
        };
        cluster.hand_directory_to_server_user()?;
        let etcd_port = cluster.start_etcd(&etcd)?;
        for index in 0..NODES {
            let node = cluster.write_node(index, etcd_port, settings)?;
            cluster.nodes.push(node);
        }
        for index in 0..NODES {
            cluster.start_node(index)?;
            if index == 0 {
                // The first node bootstraps the cluster (initdb); the others copy it once it leads.
                cluster.wait_for_leader(Duration::from_secs(120))?;
            }
        }
        cluster.wait_until_healthy(Duration::from_secs(180))?;
        Ok(cluster)
    }

    /// [`PatroniCluster::start`] for a test: `None` (after saying so loudly on stderr) when a
    /// program is missing and `KV_POSTGRES_TESTS=skip` is set; panics with what to install when
    /// one is missing otherwise, or with the reason when the cluster does not start.
    pub fn start_or_skip(settings: PatroniSettings) -> Option<Self> {
        let missing = [
            ServerBinaries::find().err().map(|err| err.to_string()),
            program("PATRONI_BIN", PATRONI, "patroni").err(),
            program("ETCD_BIN", ETCD, "etcd-server").err(),
        ];
        let missing: Vec<String> = missing.into_iter().flatten().collect();
        if !missing.is_empty() {
            let missing = missing.join("; ");
            if ServerBinaries::skip_requested() {
                eprintln!(
                    "\n*** SKIPPED: the Patroni failover test does not run on this machine \
                     ({missing}) ***\n"
                );
                return None;
            }
            panic!(
                "cannot start a Patroni test cluster: {missing} (set KV_POSTGRES_TESTS=skip to \
                 skip instead)"
            );
        }
        match Self::start(settings) {
            Ok(cluster) => Some(cluster),
            Err(err) => panic!("cannot start a Patroni test cluster: {err}"),
        }
    }

    /// A libpq multi-host URL naming every node, with `target_session_attrs=read-write`: a
    /// client connects to whichever node leads.
    pub fn multi_host_url(&self, database: &str) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.pg_port))
            .collect();
        format!(
            "postgres://{SUPERUSER}@{}/{database}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The node that leads now (the one PostgreSQL not in recovery), if any answers.
    pub fn leader(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&index| {
            self.psql(index, "select pg_is_in_recovery()")
                .is_ok_and(|answer| answer == "f")
        })
    }

    /// Kills the leading node as the loss of its machine would: `SIGKILL` to its Patroni
    /// first (so nothing restarts PostgreSQL there, and its leader key is left to expire), then
    /// to its postmaster and every PostgreSQL process. Returns the node's index.
    pub fn kill_leader(&mut self) -> Result<usize, PostgresError> {
        let index = self
            .leader()
            .ok_or_else(|| cluster_error("killing the leader", "no node leads"))?;
        let node = &mut self.nodes[index];
        if let Some(mut patroni) = node.patroni.take() {
            let _ = patroni.kill();
            let _ = patroni.wait();
        }
        let pid = postmaster_pid(&node.data())?;
        kill_process_tree(pid)?;
        Ok(index)
    }

    /// Starts node `index`'s Patroni again (after [`PatroniCluster::kill_leader`]): it rewinds
    /// its PostgreSQL onto the new leader's timeline and rejoins as a standby.
    pub fn restart_node(&mut self, index: usize) -> Result<(), PostgresError> {
        self.start_node(index)
    }

    /// Waits until one node leads and every other streams from it, one of them as its
    /// synchronous standby — in PostgreSQL's view (`pg_stat_replication` on the leader) *and* in
    /// Patroni's (the leader's REST API, `GET /cluster`, which reads the `/sync` key in etcd).
    ///
    /// Both are needed before the leader may be killed. PostgreSQL reports a standby as `sync`
    /// as soon as `synchronous_standby_names` names it, but Patroni writes the `/sync` key only
    /// on a later run of its loop; in synchronous mode only the node that key names may promote
    /// itself. A leader killed in between leaves a key that names no live node, and the cluster
    /// then has no leader at all, by design (seen in CI: killed 2 s after the standby was
    /// assigned, no node promoted within 90 s).
    pub fn wait_until_healthy(&self, within: Duration) -> Result<(), PostgresError> {
        let deadline = Instant::now() + within;
        let mut seen = String::new();
        while Instant::now() < deadline {
            if let Some(leader) = self.leader() {
                let query = "select count(*) filter (where state = 'streaming') || ' ' || \
                             count(*) filter (where sync_state = 'sync') from pg_stat_replication";
                if let Ok(answer) = self.psql(leader, query) {
                    if answer == format!("{} 1", NODES - 1) {
                        match self.patroni_sync_standby(leader) {
                            Ok(()) => return Ok(()),
                            Err(view) => {
                                seen = format!("node{leader} leads; Patroni's view: {view}");
                            }
                        }
                    } else {
                        seen = format!("node{leader} leads; streaming, sync: {answer}");
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(cluster_error(
            "waiting for the Patroni cluster to be healthy",
            format!(
                "not healthy after {within:?} ({seen}); last log lines:\n{}",
                self.log_tails()
            ),
        ))
    }

    /// Whether Patroni, asked on the leader's REST API, names a synchronous standby that may
    /// take over: one member with the role `sync_standby`, replicating, no further behind than
    /// `maximum_lag_on_failover` (1 MiB, as [`PatroniCluster::write_node`] configures). `Err`
    /// says what it saw instead.
    fn patroni_sync_standby(&self, leader: usize) -> Result<(), String> {
        let body = http_get(self.nodes[leader].api_port, "/cluster")?;
        let cluster: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("GET /cluster: {e}: {body}"))?;
        let members = cluster["members"]
            .as_array()
            .ok_or_else(|| format!("GET /cluster without members: {body}"))?;
        let leader_name = &self.nodes[leader].name;
        let leads = members
            .iter()
            .any(|m| m["role"] == "leader" && m["name"] == leader_name.as_str());
        let standbys: Vec<&serde_json::Value> = members
            .iter()
            .filter(|m| m["role"] == "sync_standby")
            .collect();
        let ready = |m: &serde_json::Value| {
            matches!(m["state"].as_str(), Some("running" | "streaming"))
                && m["lag"]
                    .as_u64()
                    .is_some_and(|lag| lag <= MAX_LAG_ON_FAILOVER)
        };
        if leads && standbys.len() == 1 && standbys.iter().all(|m| ready(m)) {
            Ok(())
        } else {
            Err(format!("members {}", cluster["members"]))
        }
    }

    /// Node `index`'s log (Patroni's and its PostgreSQL's lines).
    pub fn log_of(&self, index: usize) -> String {
        std::fs::read_to_string(self.nodes[index].log()).unwrap_or_default()
    }

    /// Runs SQL on node `index`'s `postgres` database with `psql`; what it printed.
    pub fn psql(&self, index: usize, sql: &str) -> Result<String, PostgresError> {
        let mut command = Command::new(self.bin.dir().join("psql"));
        command
            .args(["-h", "127.0.0.1", "-U", SUPERUSER, "-X", "-Atq"])
            .args(["-v", "ON_ERROR_STOP=1", "-p"])
            .arg(self.nodes[index].pg_port.to_string())
            .args(["-d", "postgres", "-c", sql])
            .env("PGCONNECT_TIMEOUT", "2");
        let output = self.bin.run("psql", &mut command)?;
        Ok(String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned())
    }

    /// The servers run as another user (root cannot run PostgreSQL): that user must own the
    /// directory.
    fn hand_directory_to_server_user(&self) -> Result<(), PostgresError> {
        let Some(user) = self.bin.run_as() else {
            return Ok(());
        };
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| cluster_error("opening the directory to the server user", e))?;
        let mut chown = Command::new("chown");
        chown.arg(format!("{user}:")).arg(self.dir.path());
        self.bin.run("chown", &mut chown).map(drop)
    }

    /// A command run as the servers' OS user, directly (not through `runuser`, so the child's
    /// id is the program's own and killing it kills the program).
    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        command
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path())
            // Patroni stamps its lines in local time: UTC, as PostgreSQL's (`log_timezone`).
            .env("TZ", "UTC")
            .stdin(Stdio::null());
        command
    }

    /// A log file of the directory, for a child's stdout and stderr.
    fn log_file(&self, path: &Path) -> Result<(Stdio, Stdio), PostgresError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| cluster_error(&format!("opening {}", path.display()), e))?;
        let copy = file
            .try_clone()
            .map_err(|e| cluster_error(&format!("opening {}", path.display()), e))?;
        if let Some((uid, gid)) = self.run_as {
            // Patroni's PostgreSQL writes to it too, as the servers' user.
            let _ = std::os::unix::fs::chown(path, Some(uid), Some(gid));
        }
        Ok((Stdio::from(file), Stdio::from(copy)))
    }

    /// Starts etcd on two free ports and waits until its client port accepts connections.
    fn start_etcd(&mut self, etcd: &Path) -> Result<u16, PostgresError> {
        let data = self.dir.path().join("etcd");
        let (client, peer) = (free_port()?, free_port()?);
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let (stdout, stderr) = self.log_file(&self.dir.path().join("etcd.log"))?;
        let child = self
            .command(etcd)
            .arg("--name=kv-test")
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=kv-test={peer_url}"))
            .arg("--initial-cluster-state=new")
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| cluster_error("starting etcd", e))?;
        self.etcd = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", client)).is_err() {
            if Instant::now() > deadline {
                return Err(cluster_error(
                    "starting etcd",
                    format!("port {client} not open after 30 s:\n{}", self.etcd_log()),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(client)
    }

    fn etcd_log(&self) -> String {
        tail(&std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default())
    }

    /// Writes node `index`'s directory and Patroni configuration.
    fn write_node(
        &self,
        index: usize,
        etcd_port: u16,
        settings: PatroniSettings,
    ) -> Result<Node, PostgresError> {
        let node = Node {
            name: format!("node{index}"),
            dir: self.dir.path().join(format!("node{index}")),
            pg_port: free_port()?,
            api_port: free_port()?,
            patroni: None,
        };
        std::fs::create_dir(&node.dir)
            .map_err(|e| cluster_error(&format!("creating {}", node.dir.display()), e))?;
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(&node.dir, Some(uid), Some(gid))
                .map_err(|e| cluster_error(&format!("handing over {}", node.dir.display()), e))?;
        }
        let PatroniSettings {
            ttl,
            loop_wait,
            retry_timeout,
        } = settings;
        let config = format!(
            r#"# open-deno-kv-postgres failover test: node {index}
scope: {SCOPE}
name: {name}
log:
  level: INFO
  format: '%(asctime)s %(levelname)s: %(message)s'
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd3:
  hosts: 127.0.0.1:{etcd_port}
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry_timeout}
    maximum_lag_on_failover: {max_lag}
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 200
        synchronous_commit: 'on'
        fsync: 'on'
        shared_buffers: 32MB
  initdb:
  - encoding: UTF8
  - locale: C
  - auth: trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {dir}/pgpass
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser:
      username: {SUPERUSER}
      password: test
    replication:
      username: replicator
      password: test
  parameters:
    unix_socket_directories: '{dir}'
    logging_collector: 'off'
    log_line_prefix: '%m [%p] '
    log_timezone: UTC
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - local replication all trust
  - host replication all 127.0.0.1/32 trust
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
"#,
            name = node.name,
            max_lag = MAX_LAG_ON_FAILOVER,
            api = node.api_port,
            pg = node.pg_port,
            data = node.data().display(),
            bin = self.bin.dir().display(),
            dir = node.dir.display(),
        );
        std::fs::write(node.config(), config)
            .map_err(|e| cluster_error("writing patroni.yml", e))?;
        Ok(node)
    }

    /// Starts node `index`'s Patroni, its output appended to the node's log.
    fn start_node(&mut self, index: usize) -> Result<(), PostgresError> {
        let (stdout, stderr) = self.log_file(&self.nodes[index].log())?;
        let child = self
            .command(&self.patroni)
            .arg(self.nodes[index].config())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| cluster_error("starting patroni", e))?;
        self.nodes[index].patroni = Some(child);
        Ok(())
    }

    fn wait_for_leader(&self, within: Duration) -> Result<usize, PostgresError> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader() {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                return Err(cluster_error(
                    "waiting for a Patroni leader",
                    format!(
                        "none after {within:?}; last log lines:\n{}",
                        self.log_tails()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The last lines of etcd's log and of every node's, for a failure message.
    pub fn log_tails(&self) -> String {
        let mut out = format!("--- etcd ---\n{}", self.etcd_log());
        for (index, node) in self.nodes.iter().enumerate() {
            out.push_str(&format!(
                "--- {} ---\n{}",
                node.name,
                tail(&self.log_of(index))
            ));
        }
        out
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        // Patroni stops its PostgreSQL on SIGTERM; give every node the signal at once.
        for node in &self.nodes {
            if let Some(patroni) = &node.patroni {
                let _ = Command::new("kill")
                    .args(["-TERM", &patroni.id().to_string()])
                    .output();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &mut self.nodes {
            if let Some(mut patroni) = node.patroni.take() {
                while matches!(patroni.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = patroni.kill();
                let _ = patroni.wait();
            }
            // A PostgreSQL whose Patroni was killed (or did not stop it in time).
            if let Ok(pid) = postmaster_pid(&node.data())
                && process_alive(pid)
                && let Err(err) = kill_process_tree(pid)
            {
                eprintln!("open-deno-kv-postgres: could not stop {}: {err}", node.name);
            }
        }
        if let Some(mut etcd) = self.etcd.take() {
            let _ = etcd.kill();
            let _ = etcd.wait();
        }
    }
}

/// The program in the variable `variable` if set (and only there), else at `default`; missing,
/// what to install.
fn program(variable: &str, default: &str, package: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os(variable).map_or_else(|| PathBuf::from(default), PathBuf::from);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: install Debian's `{package}` package (`apt-get install {package}`), \
             or point {variable} at the program",
            path.display()
        ))
    }
}

fn missing(what: String) -> PostgresError {
    cluster_error("finding the HA programs", what)
}

/// `id -u USER` or `id -g USER`.
fn id_of(user: &str, flag: &str) -> Result<u32, PostgresError> {
    let output = Command::new("id")
        .args([flag, user])
        .output()
        .map_err(|e| cluster_error("looking up the server user", e))?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(|_| cluster_error("looking up the server user", format!("id {flag} {user}")))
}

/// A port nothing listens on right now, outside the range the kernel hands out to clients.
fn free_port() -> Result<u16, PostgresError> {
    // Below Linux's ephemeral range (32768-60999 by default): a port bound to 0 comes from that
    // range, and so does the local end of every client connection. A node's port is chosen
    // minutes before its PostgreSQL starts (a replica starts after its base backup) and is free
    // again while a killed node is down; in the ephemeral range, the store's own connections
    // to the other nodes took it meanwhile (seen: "could not bind ... Address already in use").
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_768;
    let start = uuid::Uuid::new_v4().as_u128() % u128::from(SPAN);
    let start = u16::try_from(start).unwrap_or(0);
    (0..SPAN)
        .map(|step| LOW + (start + step) % SPAN)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .ok_or_else(|| {
            cluster_error(
                "finding a free port",
                format!("every port from {LOW} to {} is taken", LOW + SPAN - 1),
            )
        })
}

/// The body of `GET path` on 127.0.0.1:`port` (Patroni's REST API), read within 2 s.
fn http_get(port: u16, path: &str) -> Result<String, String> {
    use std::io::{Read as _, Write as _};
    let fail = |e: std::io::Error| format!("GET {path} on port {port}: {e}");
    let timeout = Duration::from_secs(2);
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(fail)?;
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    stream.set_write_timeout(Some(timeout)).map_err(fail)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(fail)?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(fail)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no end of headers in {response:?}"))?;
    if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") {
        Ok(body.to_owned())
    } else {
        Err(format!("GET {path}: {}", head.lines().next().unwrap_or("")))
    }
}

/// The last 30 lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..]
        .iter()
        .map(|line| format!("  {line}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_names_the_package_to_install() {
        let err = program(
            "KV_TEST_NEVER_SET_PATRONI_BIN",
            "/nonexistent/patroni",
            "patroni",
        )
        .expect_err("no such program");
        assert!(
            err.contains("/nonexistent/patroni") && err.contains("apt-get install patroni"),
            "{err}"
        );
    }
}
