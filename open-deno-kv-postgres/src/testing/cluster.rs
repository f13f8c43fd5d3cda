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
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            replica: false,
            fsync: true,
            max_connections: 300,
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
        if options.replica {
            cluster.start_replica()?;
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

    /// The primary's URL for another database of the cluster.
    pub fn database_url(&self, database: &str) -> String {
        self.url_of(&self.primary, database)
    }

    /// The replica's URL, if the cluster has one.
    pub fn replica_url(&self) -> Option<String> {
        self.replica.as_ref().map(|r| self.url_of(r, "postgres"))
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

    fn wait_for_streaming(&self) -> Result<(), PostgresError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = self.psql(
                "postgres",
                "select state from pg_stat_replication where state = 'streaming' limit 1",
            )?;
            if state == "streaming" {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(cluster_error(
                    "waiting for the replica to stream",
                    format!("state {state:?} after 30 s"),
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
        if !server.data.join("postmaster.pid").exists() {
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
