//! One throwaway cluster: a primary and, optionally, a streaming replica in a temporary directory.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::binaries::{ServerBinaries, cluster_error};
use crate::PostgresError;

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Also start a streaming replica (a hot standby made with `pg_basebackup -R`).
    pub replica: bool,
    /// `fsync` on (the default, as in production). Turning it off makes commits cheaper on a
    /// loaded test machine; only tests that kill the server care about it being on.
    pub fsync: bool,
    /// The server's `max_connections`.
    pub max_connections: u32,
    /// Make the replica (implies `replica`) a synchronous standby: once it streams, the primary
    /// gets `synchronous_standby_names = '*'`, so a commit is answered only after the standby has
    /// flushed it (`synchronous_commit = on`). Set after the base backup, so the standby's own
    /// configuration has no synchronous standby to wait for once it is promoted.
    pub synchronous_replica: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            replica: false,
            fsync: true,
            max_connections: 300,
            synchronous_replica: false,
        }
    }
}

/// How to stop a server (`pg_ctl stop -m ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Roll back open transactions, disconnect clients, write a checkpoint, stop.
    Fast,
    /// Stop at once, as a crash would; the next start recovers from the WAL.
    Immediate,
}

impl Shutdown {
    fn mode(self) -> &'static str {
        match self {
            Shutdown::Fast => "fast",
            Shutdown::Immediate => "immediate",
        }
    }
}

/// One server of the cluster.
#[derive(Debug)]
struct Server {
    name: &'static str,
    data: PathBuf,
    port: u16,
}

/// A running throwaway cluster; dropping it stops the servers and deletes their files.
#[derive(Debug)]
pub struct TestCluster {
    bin: ServerBinaries,
    dir: tempfile::TempDir,
    primary: Server,
    replica: Option<Server>,
}

/// The user every test cluster is created with (trusted on loopback, no password).
const SUPERUSER: &str = "postgres";
/// The ordinary role the store's tests run as ([`TestCluster::store_url`]): no superuser, no
/// role or database creation, owning nothing but the schemas it creates. The one privilege it
/// has beyond a new role's is CREATE on the `postgres` database, so that each test can create
/// a schema of its own; tests/privileges.rs proves a role without it works too when its schema
/// is made for it.
pub const STORE_ROLE: &str = "kv_store";
/// How often to try another port when the one picked was taken meanwhile.
const PORT_ATTEMPTS: usize = 5;

impl TestCluster {
    /// Starts a cluster as `options` say (see the [module docs](super)).
    pub fn start(options: ClusterOptions) -> Result<Self, PostgresError> {
        let bin = ServerBinaries::find()?;
        let dir = tempfile::Builder::new()
            .prefix("kv-pg-")
            .tempdir()
            .map_err(|e| cluster_error("creating the temporary directory", e))?;
        let mut cluster = TestCluster {
            primary: Server {
                name: "primary",
                data: dir.path().join("primary"),
                port: 0,
            },
            replica: None,
            bin,
            dir,
        };
        cluster.hand_directory_to_server_user()?;
        cluster.init_primary(&options)?;
        cluster.primary.port = cluster.start_on_free_port(&cluster.primary)?;
        cluster.psql(
            "postgres",
            &format!(
                "CREATE ROLE {STORE_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE; \
                 GRANT CREATE ON DATABASE postgres TO {STORE_ROLE};"
            ),
        )?;
        if options.replica || options.synchronous_replica {
            cluster.start_replica()?;
        }
        if options.synchronous_replica {
            cluster.make_replica_synchronous()?;
        }
        Ok(cluster)
    }

    /// [`TestCluster::start`] for a test: `None` (after saying so loudly on stderr) when
    /// PostgreSQL is missing and `KV_POSTGRES_TESTS=skip` is set; panics with what to install
    /// when it is missing otherwise, or with the reason when the cluster does not start.
    pub fn start_or_skip(options: ClusterOptions) -> Option<Self> {
        match Self::start(options) {
            Ok(cluster) => Some(cluster),
            Err(err @ PostgresError::ServerMissing { .. }) if ServerBinaries::skip_requested() => {
                eprintln!(
                    "\n*** SKIPPED: PostgreSQL tests do not run on this machine ({err}) ***\n"
                );
                None
            }
            Err(err) => panic!("cannot start a PostgreSQL test cluster: {err}"),
        }
    }

    /// The primary's URL, for the superuser and the default `postgres` database.
    pub fn url(&self) -> String {
        self.url_of(&self.primary, "postgres")
    }

    /// The primary's URL for [`STORE_ROLE`], the ordinary role the store runs as in tests, and
    /// the default `postgres` database.
    pub fn store_url(&self) -> String {
        self.role_url(STORE_ROLE, "postgres")
    }

    /// The primary's URL for `role` and `database` (no password; append `?...` for
    /// parameters).
    pub fn role_url(&self, role: &str, database: &str) -> String {
        format!(
            "postgres://{role}@127.0.0.1:{}/{database}",
            self.primary.port
        )
    }

    /// Turns TLS on at every server of the cluster (the primary and the replica, if any),
    /// without a restart: writes the server's certificate chain and key (PEM) into each data
    /// directory, readable by the server's user only, and, if given, the CA whose client
    /// certificates `cert` lines of pg_hba.conf accept (`ssl_ca_file`); sets `ssl = on` in
    /// each server's configuration and reloads it. (`ALTER SYSTEM` would do on the primary, but
    /// a standby has configuration files of its own, which replication does not copy.)
    pub fn enable_tls(
        &self,
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: Option<&str>,
    ) -> Result<(), PostgresError> {
        for server in std::iter::once(&self.primary).chain(self.replica.as_ref()) {
            write_private(&self.bin, &server.data.join("server.crt"), cert_pem)?;
            write_private(&self.bin, &server.data.join("server.key"), key_pem)?;
            let mut settings =
                "ssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n".to_owned();
            if let Some(ca) = client_ca_pem {
                write_private(&self.bin, &server.data.join("client-ca.crt"), ca)?;
                settings.push_str("ssl_ca_file = 'client-ca.crt'\n");
            }
            settings.push_str("ssl = on\n");
            append(&server.data.join("postgresql.conf"), &settings)?;
            self.reload_server(server)?;
        }
        Ok(())
    }

    /// Replaces the primary's pg_hba.conf with `lines` (which must keep the superuser's
    /// access: `local all postgres trust` and `host all postgres 127.0.0.1/32 trust` are put
    /// first) and reloads it.
    pub fn set_hba(&self, lines: &str) -> Result<(), PostgresError> {
        let hba = format!(
            "local all {SUPERUSER} trust\n\
             host all {SUPERUSER} 127.0.0.1/32 trust\n\
             local replication all trust\n\
             host replication all 127.0.0.1/32 trust\n\
             {lines}\n"
        );
        std::fs::write(self.primary.data.join("pg_hba.conf"), hba)
            .map_err(|e| cluster_error("writing pg_hba.conf", e))?;
        self.reload()
    }

    /// Makes the primary read its configuration files again.
    pub fn reload(&self) -> Result<(), PostgresError> {
        self.reload_server(&self.primary)
    }

    fn reload_server(&self, server: &Server) -> Result<(), PostgresError> {
        let answer = self.psql_on(server, "postgres", "SELECT pg_reload_conf()")?;
        if answer != "t" {
            return Err(cluster_error("reloading the configuration", answer));
        }
        // The postmaster reloads on SIGHUP; new connections see the new files once it has.
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    }

    /// The primary's URL for another database of the cluster.
    pub fn database_url(&self, database: &str) -> String {
        self.url_of(&self.primary, database)
    }

    /// The replica's URL, if the cluster has one.
    pub fn replica_url(&self) -> Option<String> {
        self.replica.as_ref().map(|r| self.url_of(r, "postgres"))
    }

    /// A libpq multi-host URL naming the primary, then the replica (if any), with
    /// `target_session_attrs=read-write`: a client tries the hosts in order and keeps the first
    /// that accepts writes, so it follows a [promoted](TestCluster::promote_replica) replica.
    pub fn multi_host_url(&self, database: &str) -> String {
        let hosts: Vec<String> = std::iter::once(&self.primary)
            .chain(self.replica.as_ref())
            .map(|server| format!("127.0.0.1:{}", server.port))
            .collect();
        format!(
            "postgres://{SUPERUSER}@{}/{database}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The replica's port on 127.0.0.1, if the cluster has one.
    pub fn replica_port(&self) -> Option<u16> {
        self.replica.as_ref().map(|r| r.port)
    }

    /// The primary's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.primary.port
    }

    /// The server programs the cluster runs, and the OS user it runs them as.
    pub fn binaries(&self) -> &ServerBinaries {
        &self.bin
    }

    /// The cluster's directory (data directories, logs and sockets).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs SQL on the primary's `database` with `psql` (for test setup: creating databases,
    /// planting foreign tables). Returns what it printed, unaligned and without headers.
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, PostgresError> {
        self.psql_on(&self.primary, database, sql)
    }

    /// Runs SQL on the replica's `database` with `psql`, as [`TestCluster::psql`] does on the
    /// primary: e.g. `SELECT pg_wal_replay_pause()` to hold the replica at a point in time.
    pub fn replica_psql(&self, database: &str, sql: &str) -> Result<String, PostgresError> {
        let replica = self
            .replica
            .as_ref()
            .ok_or_else(|| cluster_error("psql on the replica", "the cluster has no replica"))?;
        self.psql_on(replica, database, sql)
    }

    fn psql_on(&self, server: &Server, database: &str, sql: &str) -> Result<String, PostgresError> {
        let mut command = Command::new(self.bin.dir().join("psql"));
        command
            .args(["-h", "127.0.0.1", "-U", SUPERUSER, "-X", "-Atq"])
            .args(["-v", "ON_ERROR_STOP=1", "-p"])
            .arg(server.port.to_string())
            .args(["-d", database, "-c", sql]);
        let output = self.bin.run("psql", &mut command)?;
        Ok(String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned())
    }

    /// Stops the primary (`how`) and starts it again on the same port, as a fault test does:
    /// connections are cut; after [`Shutdown::Immediate`] the start replays the WAL.
    pub fn restart_primary(&self, how: Shutdown) -> Result<(), PostgresError> {
        self.stop_primary(how)?;
        self.start_primary()
    }

    /// Stops the primary (`how`), leaving it down until [`TestCluster::start_primary`].
    pub fn stop_primary(&self, how: Shutdown) -> Result<(), PostgresError> {
        self.stop(&self.primary, how)
    }

    /// Starts the primary again after [`TestCluster::stop_primary`].
    pub fn start_primary(&self) -> Result<(), PostgresError> {
        self.pg_ctl_start(&self.primary)
    }

    /// Kills the primary as a crash of its machine would: `SIGKILL` to the postmaster and to
    /// every process it started, at once, with no shutdown of any kind. Its data directory stays
    /// as the crash left it. Returns when the processes are gone.
    pub fn kill_primary(&self) -> Result<(), PostgresError> {
        let pid = postmaster_pid(&self.primary.data)?;
        kill_process_tree(pid)
    }

    /// Promotes the replica (`pg_ctl promote`, waiting until it accepts writes): after
    /// [`TestCluster::kill_primary`], the failover an operator or an HA manager performs.
    pub fn promote_replica(&self) -> Result<(), PostgresError> {
        let replica = self
            .replica
            .as_ref()
            .ok_or_else(|| cluster_error("promoting the replica", "the cluster has no replica"))?;
        let mut promote = self.bin.command("pg_ctl");
        promote
            .arg("-D")
            .arg(&replica.data)
            .args(["-w", "-t", "60", "promote"]);
        self.bin.run("pg_ctl promote", &mut promote).map(drop)
    }

    fn url_of(&self, server: &Server, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{}/{database}",
            server.port
        )
    }

    /// The servers run as another user (root cannot run them): that user must own the directory.
    fn hand_directory_to_server_user(&self) -> Result<(), PostgresError> {
        let Some(user) = self.bin.run_as() else {
            return Ok(());
        };
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.dir(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| cluster_error("opening the directory to the server user", e))?;
        let mut chown = Command::new("chown");
        chown.arg(format!("{user}:")).arg(self.dir());
        self.bin.run("chown", &mut chown).map(drop)
    }

    fn init_primary(&self, options: &ClusterOptions) -> Result<(), PostgresError> {
        let mut initdb = self.bin.command("initdb");
        initdb
            .arg("-D")
            .arg(&self.primary.data)
            .args(["-U", SUPERUSER, "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-sync", "--no-instructions"]);
        self.bin.run("initdb", &mut initdb)?;
        let fsync = if options.fsync { "on" } else { "off" };
        let config = format!(
            "\n# open-deno-kv-postgres test cluster\n\
             listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{dir}'\n\
             max_connections = {max}\n\
             wal_level = replica\n\
             max_wal_senders = 10\n\
             max_replication_slots = 10\n\
             hot_standby = on\n\
             hot_standby_feedback = on\n\
             synchronous_commit = on\n\
             fsync = {fsync}\n\
             shared_buffers = 64MB\n\
             logging_collector = off\n",
            dir = self.dir().display(),
            max = options.max_connections,
        );
        append(&self.primary.data.join("postgresql.conf"), &config)?;
        // Trust, but from this machine's loopback only: a throwaway cluster.
        let hba = "local all all trust\n\
                   host all all 127.0.0.1/32 trust\n\
                   local replication all trust\n\
                   host replication all 127.0.0.1/32 trust\n";
        std::fs::write(self.primary.data.join("pg_hba.conf"), hba)
            .map_err(|e| cluster_error("writing pg_hba.conf", e))
    }

    /// Picks a free port, writes it into the server's configuration and starts the server;
    /// tries again with another port when the start fails (the port may have been taken since).
    fn start_on_free_port(&self, server: &Server) -> Result<u16, PostgresError> {
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            append(
                &server.data.join("postgresql.conf"),
                &format!("port = {port}\n"),
            )?;
            let candidate = Server {
                name: server.name,
                data: server.data.clone(),
                port,
            };
            match self.pg_ctl_start(&candidate) {
                Ok(()) => return Ok(port),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| cluster_error("starting the server", "no port tried")))
    }

    fn start_replica(&mut self) -> Result<(), PostgresError> {
        let data = self.dir().join("replica");
        let mut backup = self.bin.command("pg_basebackup");
        backup
            .args(["-h", "127.0.0.1", "-U", SUPERUSER, "-p"])
            .arg(self.primary.port.to_string())
            .arg("-D")
            .arg(&data)
            .args(["-X", "stream", "-R", "-C", "-S", "replica1"])
            .arg("--checkpoint=fast");
        self.bin.run("pg_basebackup", &mut backup)?;
        let mut replica = Server {
            name: "replica",
            data,
            port: 0,
        };
        replica.port = self.start_on_free_port(&replica)?;
        self.replica = Some(replica);
        self.wait_for_streaming()
    }

    /// Names every standby synchronous on the primary and waits until the replica is reported
    /// as `sync`.
    fn make_replica_synchronous(&self) -> Result<(), PostgresError> {
        // ALTER SYSTEM refuses to run inside a transaction block: one statement per call.
        self.psql(
            "postgres",
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
        )?;
        self.psql("postgres", "SELECT pg_reload_conf()")?;
        self.wait_for_replication("sync_state", "sync")
    }

    fn wait_for_streaming(&self) -> Result<(), PostgresError> {
        self.wait_for_replication("state", "streaming")
    }

    /// Waits (30 s at most) until a row of the primary's `pg_stat_replication` has `column`
    /// equal to `wanted`.
    fn wait_for_replication(&self, column: &str, wanted: &str) -> Result<(), PostgresError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = self.psql(
                "postgres",
                &format!(
                    "select {column} from pg_stat_replication where {column} = '{wanted}' limit 1"
                ),
            )?;
            if state == wanted {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(cluster_error(
                    &format!("waiting for the replica's {column} to be {wanted}"),
                    format!("{column} {state:?} after 30 s"),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pg_ctl_start(&self, server: &Server) -> Result<(), PostgresError> {
        let log = self.dir().join(format!("{}.log", server.name));
        let mut start = self.bin.command("pg_ctl");
        start
            .arg("-D")
            .arg(&server.data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "start"]);
        self.bin
            .run("pg_ctl start", &mut start)
            .map(drop)
            .map_err(|err| {
                cluster_error(
                    &format!("starting the {}", server.name),
                    format!("{err}\nlog:\n{}", tail(&log)),
                )
            })
    }

    fn stop(&self, server: &Server, how: Shutdown) -> Result<(), PostgresError> {
        let mut stop = self.bin.command("pg_ctl");
        stop.arg("-D")
            .arg(&server.data)
            .args(["-m", how.mode(), "-w", "-t", "60", "stop"]);
        self.bin.run("pg_ctl stop", &mut stop).map(drop)
    }

    /// Stops a server if it runs: fast, then immediate if fast did not work.
    fn stop_if_running(&self, server: &Server) {
        // A killed server leaves its postmaster.pid behind: only a live postmaster is stopped.
        if !postmaster_pid(&server.data).is_ok_and(process_alive) {
            return;
        }
        if let Err(fast) = self.stop(server, Shutdown::Fast)
            && let Err(immediate) = self.stop(server, Shutdown::Immediate)
        {
            eprintln!(
                "open-deno-kv-postgres: could not stop the test {} ({fast}; then {immediate})",
                server.name
            );
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Some(replica) = &self.replica {
            self.stop_if_running(replica);
        }
        self.stop_if_running(&self.primary);
    }
}

fn append(path: &Path, text: &str) -> Result<(), PostgresError> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| cluster_error(&format!("opening {}", path.display()), e))?;
    file.write_all(text.as_bytes())
        .map_err(|e| cluster_error(&format!("writing {}", path.display()), e))
}

/// A port nothing listens on right now (the server may still lose a race for it: the caller
/// retries).
pub(crate) fn free_port() -> Result<u16, PostgresError> {
    let listener =
        TcpListener::bind(("127.0.0.1", 0)).map_err(|e| cluster_error("finding a free port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| cluster_error("finding a free port", e))
}

/// The postmaster's process id, from the first line of `data`/postmaster.pid.
pub(crate) fn postmaster_pid(data: &Path) -> Result<u32, PostgresError> {
    let file = data.join("postmaster.pid");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| cluster_error(&format!("reading {}", file.display()), e))?;
    text.lines()
        .next()
        .and_then(|line| line.trim().parse().ok())
        .ok_or_else(|| cluster_error(&format!("reading {}", file.display()), "no process id"))
}

/// Whether a process with this id exists (and is not a zombie).
pub(crate) fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat_field(&stat, 0).is_some_and(|state| state != "Z"))
}

/// The `index`-th field after the command name of a `/proc/PID/stat` line (0: state, 1: ppid).
fn stat_field(stat: &str, index: usize) -> Option<&str> {
    // The command name is in parentheses and may hold spaces: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(index)
}

/// The ids of `pid`'s child processes.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                stat_field(&stat, 1).and_then(|ppid| ppid.parse::<u32>().ok()) == Some(pid)
            })
        })
        .collect()
}

/// Sends `SIGKILL` to `pid` and to its children (listed first, so none is re-parented before it
/// is found), and waits (10 s at most) until they are gone.
pub(crate) fn kill_process_tree(pid: u32) -> Result<(), PostgresError> {
    let mut doomed = children_of(pid);
    doomed.push(pid);
    let mut kill = Command::new("kill");
    kill.arg("-KILL").args(doomed.iter().map(u32::to_string));
    // A child may have exited on its own meanwhile: kill's status is not the test.
    let _ = kill.output();
    let deadline = Instant::now() + Duration::from_secs(10);
    while doomed.iter().any(|pid| process_alive(*pid)) {
        if Instant::now() > deadline {
            return Err(cluster_error(
                "killing a server",
                format!("processes {doomed:?} still run 10 s after SIGKILL"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// The last lines of a server log, for error messages.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for line in &lines[lines.len().saturating_sub(20)..] {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// Writes `path` (in a data directory), owned by the server's user, mode 0600: PostgreSQL
/// refuses a key file others may read.
fn write_private(bin: &ServerBinaries, path: &Path, text: &str) -> Result<(), PostgresError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)
        .map_err(|e| cluster_error(&format!("writing {}", path.display()), e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| cluster_error(&format!("protecting {}", path.display()), e))?;
    if let Some(user) = bin.run_as() {
        let mut chown = Command::new("chown");
        chown.arg(format!("{user}:")).arg(path);
        bin.run("chown", &mut chown)?;
    }
    Ok(())
}
