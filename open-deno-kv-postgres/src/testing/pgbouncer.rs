//! A throwaway PgBouncer in front of a [`TestCluster`], for tests of the store behind a pooler.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::binaries::cluster_error;
use super::cluster::TestCluster;
use crate::PostgresError;

/// Where `pgbouncer` is looked for when `PGBOUNCER_BIN` is not set (Debian's package installs it
/// in `/usr/sbin`).
const PLACES: [&str; 2] = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"];

/// PgBouncer's `pool_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A client keeps one server connection for as long as it is connected.
    Session,
    /// A client holds a server connection only during a transaction (or a statement outside
    /// one): session state — prepared statements, `LISTEN`, `SET` — does not follow it.
    Transaction,
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        })
    }
}

/// A running PgBouncer on 127.0.0.1 and a free port, forwarding every database to a
/// [`TestCluster`]'s primary with `trust` authentication; stopped (by its process id) and its
/// directory removed when dropped. It runs as the cluster's server user when this process is
/// root (PgBouncer refuses to run as root), detached, with its own configuration, log and pid
/// files in a temporary directory: it never touches a system-wide PgBouncer or its port.
#[derive(Debug)]
pub struct TestPgBouncer {
    dir: tempfile::TempDir,
    port: u16,
    mode: PoolMode,
}

impl TestPgBouncer {
    /// Starts a PgBouncer in `mode` in front of `cluster`'s primary.
    pub fn start(cluster: &TestCluster, mode: PoolMode) -> Result<Self, PostgresError> {
        let program = find()?;
        let dir = tempfile::Builder::new()
            .prefix("kv-pgbouncer-")
            .tempdir()
            .map_err(|e| cluster_error("creating the PgBouncer directory", e))?;
        let run_as = cluster.binaries().run_as().map(str::to_owned);
        if run_as.is_some() {
            // PgBouncer, running as the server user, writes its log and pid file here.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
                .map_err(|e| cluster_error("opening the PgBouncer directory", e))?;
        }
        let mut last = None;
        for _ in 0..5 {
            let port = super::cluster::free_port()?;
            write_config(dir.path(), port, cluster.port(), mode)?;
            let mut command = match &run_as {
                Some(user) => {
                    let mut command = Command::new("runuser");
                    command.args(["-u", user, "--"]).arg(&program);
                    command
                }
                None => Command::new(&program),
            };
            command.arg("-d").arg(dir.path().join("pgbouncer.ini"));
            let started = cluster
                .binaries()
                .run("pgbouncer", &mut command)
                .and_then(|_| wait_for_port(port, dir.path()));
            match started {
                Ok(()) => return Ok(TestPgBouncer { dir, port, mode }),
                Err(err) => {
                    stop(dir.path());
                    last = Some(err);
                }
            }
        }
        Err(last.unwrap_or_else(|| cluster_error("starting PgBouncer", "no port tried")))
    }

    /// [`TestPgBouncer::start`], or `None` when PostgreSQL tests are skipped
    /// (`KV_POSTGRES_TESTS=skip`, said loudly); a missing PgBouncer fails otherwise.
    pub fn start_or_skip(cluster: &TestCluster, mode: PoolMode) -> Option<Self> {
        match TestPgBouncer::start(cluster, mode) {
            Ok(bouncer) => Some(bouncer),
            Err(err) if super::ServerBinaries::skip_requested() => {
                eprintln!("SKIPPED: PgBouncer test ({err}); KV_POSTGRES_TESTS=skip is set");
                None
            }
            Err(err) => panic!("{err}"),
        }
    }

    /// The port PgBouncer listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its pool mode.
    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    /// A URL through PgBouncer for the `postgres` superuser and `database`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The last lines of PgBouncer's log (for failure messages).
    pub fn log_tail(&self) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for TestPgBouncer {
    fn drop(&mut self) {
        stop(self.dir.path());
    }
}

/// `PGBOUNCER_BIN`, else Debian's place.
fn find() -> Result<PathBuf, PostgresError> {
    if let Some(path) = std::env::var_os("PGBOUNCER_BIN") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(missing(&path.display().to_string()))
        };
    }
    PLACES
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .ok_or_else(|| missing(&PLACES.join(", ")))
}

fn missing(searched: &str) -> PostgresError {
    cluster_error(
        "finding pgbouncer",
        format!(
            "not found (looked in: {searched}). Install it (Debian: `apt-get install pgbouncer`; \
             the tests start their own, so Debian's service may stay stopped), or point \
             PGBOUNCER_BIN at it; set KV_POSTGRES_TESTS=skip to skip these tests instead"
        ),
    )
}

fn write_config(
    dir: &Path,
    port: u16,
    server_port: u16,
    mode: PoolMode,
) -> Result<(), PostgresError> {
    let dir_text = dir.display();
    let config = format!(
        "[databases]\n\
         * = host=127.0.0.1 port={server_port}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {dir_text}/userlist.txt\n\
         pool_mode = {mode}\n\
         max_client_conn = 500\n\
         default_pool_size = 100\n\
         logfile = {dir_text}/pgbouncer.log\n\
         pidfile = {dir_text}/pgbouncer.pid\n"
    );
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .map_err(|e| cluster_error(&format!("writing PgBouncer's {name}"), e))
    };
    write("userlist.txt", "\"postgres\" \"\"\n")?;
    write("pgbouncer.ini", &config)
}

/// Waits until PgBouncer accepts connections on `port`.
fn wait_for_port(port: u16, dir: &Path) -> Result<(), PostgresError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
            return Err(cluster_error(
                "starting PgBouncer",
                format!("not listening on port {port} after 10 s; log:\n{log}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the PgBouncer whose pid file is in `dir` (the one this helper started), and waits a
/// moment for it to go.
fn stop(dir: &Path) {
    let Ok(text) = std::fs::read_to_string(dir.join("pgbouncer.pid")) else {
        return;
    };
    let Ok(pid) = text.trim().parse::<u32>() else {
        return;
    };
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}
