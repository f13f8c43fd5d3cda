//! `kv serve`: the database as a KV Connect server (see the open-deno-kv-server crate).
//!
//! ```text
//! KV_ACCESS_TOKEN=$(openssl rand -hex 16) kv --db sqlite:./data.sqlite3 serve --addr 0.0.0.0:4512 \
//!     --tls-cert cert.pem --tls-key key.pem
//! # in Deno: DENO_KV_ACCESS_TOKEN=... Deno.openKv("https://kv.example.com:4512")
//! ```
//!
//! With `--tls-cert` and `--tls-key` it serves HTTPS and reloads both files on SIGHUP. Without
//! them it serves plaintext, and warns at start when the address is not loopback (the token and
//! every value would cross the network in the clear).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv::BackendUrl;
use open_deno_kv_engine_kit::SystemClock;
use open_deno_kv_model::{Backend, Clock};
use open_deno_kv_server::metrics::ShippingGauges;
use open_deno_kv_server::{Access, Databases, Explorer, ResourceLimits, Server, ServerConfig, Tls};

use crate::cli::{ServeArgs, ServeLimits};
use crate::error::CliError;
use crate::shipping::Shipping;
use crate::store::parse_url;

/// Deno's variable for the access token, read when KV_ACCESS_TOKEN and --token are not given.
const DENO_ACCESS_TOKEN_ENV: &str = "DENO_KV_ACCESS_TOKEN";

/// Runs the server until Ctrl-C or SIGTERM, then shuts down gracefully and closes the database.
/// Its notices and the server's events go to stderr through [`crate::logging`].
pub async fn serve(db: &str, args: ServeArgs) -> Result<(), CliError> {
    crate::logging::init(args.log_level, args.log_format)?;
    // --token, else KV_ACCESS_TOKEN (both through clap), else Deno's variable; --open-loopback
    // conflicts only with a token given as a flag or KV_ACCESS_TOKEN.
    let token = match (args.token, args.open_loopback) {
        (Some(token), _) => Some(token),
        (None, true) => None,
        (None, false) => std::env::var(DENO_ACCESS_TOKEN_ENV).ok(),
    };
    let access = match (token, args.open_loopback) {
        (Some(token), _) => Access::Token(token),
        (None, true) => Access::Open,
        (None, false) => {
            return Err(CliError::ServeRefused(format!(
                "kv serve needs an access token: set KV_ACCESS_TOKEN or \
                 {DENO_ACCESS_TOKEN_ENV} (or --token), or pass --open-loopback to serve without \
                 one on a loopback address"
            )));
        }
    };
    if access == Access::Open && !args.addr.ip().is_loopback() {
        return Err(open_deno_kv_server::ConfigError::OpenNotLoopback(args.addr).into());
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        // Read off the async runtime: the files are read whole (at most 1 MiB each).
        (Some(cert), Some(key)) => {
            let (cert, key) = (cert.clone(), key.clone());
            Some(
                tokio::task::spawn_blocking(move || Tls::load(cert, key))
                    .await
                    .map_err(|e| CliError::ServeRefused(format!("reading the TLS files: {e}")))??,
            )
        }
        _ => None,
    };
    let url = parse_url(db)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let default = url.open(clock.clone())?;
    let mut databases = Databases::new(default.clone());
    if let Some(dir) = &args.db_dir {
        std::fs::create_dir_all(dir).map_err(|source| CliError::Io {
            path: dir.clone(),
            source,
        })?;
        databases = databases.with_opener(opener(&url, dir, clock.clone()));
    }
    let resources = resource_limits(&args.limits, raise_open_file_limit())?;
    let shipping = match &args.backup_to {
        Some(to) => {
            let gauges = ShippingGauges::new();
            let shipping = Shipping::prepare(
                db,
                to,
                &*default,
                &args.shipping,
                resources.warning_interval,
                clock.clone(),
            )
            .await?
            .with_gauges(gauges.clone());
            Some((shipping, gauges))
        }
        None => None,
    };
    let mut config = ServerConfig::new(access);
    config.shipping = shipping.as_ref().map(|(_, gauges)| gauges.clone());
    config.ephemeral = args.ephemeral;
    config.resources = resources;
    config.tls = tls.clone();
    config.metrics = args.metrics;
    // --ui-write alone is the explorer, read-write: asking to edit asks for the page.
    config.ui = match (args.ui, args.ui_write) {
        (false, false) => Explorer::Off,
        (true, false) => Explorer::ReadOnly,
        (_, true) => Explorer::ReadWrite,
    };
    let open = config.access == Access::Open;
    let limits = config.resources.clone();
    let server = Server::new(config, databases)?;
    let serving = |source| CliError::Serve {
        addr: args.addr,
        source,
    };
    let listener = listen(args.addr).map_err(serving)?;
    let local = listener.local_addr().map_err(serving)?;
    if let Some(tls) = &tls {
        reload_on_sighup(tls.clone());
    } else if !local.ip().is_loopback() {
        tracing::warn!(
            "WARNING: serving plaintext HTTP on {local}, which is not a loopback address: the \
             access token and every value cross the network in the clear. Give --tls-cert and \
             --tls-key to serve HTTPS."
        );
    }
    tracing::info!(
        "at most {} connections, {} watches, {} --db-dir databases open; a connection has {:?} \
         to make a request with the token, and one address at most {} connections without it",
        limits.max_connections,
        limits.max_watches,
        limits.max_open_databases,
        limits.auth_timeout,
        limits.max_unauthorized_per_address
    );
    tracing::info!(
        "serving {db} at {}://{local}/ ({}){}{}{}{}",
        if tls.is_some() { "https" } else { "http" },
        if open {
            "open, no token"
        } else {
            "token required"
        },
        args.db_dir
            .as_ref()
            .map(|d| format!(", /db/NAME from {}", d.display()))
            .unwrap_or_default(),
        if args.ephemeral {
            ", /ephemeral/ on"
        } else {
            ""
        },
        if args.metrics {
            ", GET /metrics on (no token)"
        } else {
            ""
        },
        match (args.ui, args.ui_write) {
            (false, false) => "",
            (true, false) => ", explorer at /ui (read-only)",
            (_, true) => ", explorer at /ui (read-write)",
        },
    );
    // Shipping runs beside the server and stops with it: the shipper is cancel-safe.
    let shipper = shipping.map(|(shipping, _)| {
        let backend = default.clone();
        tokio::spawn(async move {
            if let Err(err) = shipping.run(backend).await {
                tracing::error!(
                    "shipping to {} stopped: {err}; commits are served but no longer shipped",
                    shipping.url()
                );
            }
        })
    });
    let outcome = server.serve(listener, shutdown_signal()).await;
    if let Some(shipper) = shipper {
        shipper.abort();
        let _ = shipper.await;
    }
    tracing::info!("stopped");
    let closed = default.close().await;
    outcome.map_err(serving)?;
    Ok(closed?)
}

/// How many connections the kernel may hold, accepted by it but not yet by the server. A flood
/// of connections comes in bursts: beyond this queue the kernel drops new connections' SYNs, and
/// a client (with the token or not) waits a whole second to retry (tokio's own default is 1024).
/// The kernel caps it at `net.core.somaxconn` (4096 by default since Linux 5.4).
const LISTEN_BACKLOG: u32 = 4096;

/// The listening socket on `addr` (address reuse on, as tokio's `TcpListener::bind` sets it).
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Raises the soft open-file limit to the hard limit (the default soft limit, often 1024, is what
/// a server runs out of first); returns the limit in force, if known.
fn raise_open_file_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(err) => {
            tracing::warn!(error = %err, "cannot raise the open-file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE)
                .ok()
                .map(|(soft, _)| soft)
        }
    }
}

/// The server's limits from the flags; `max_connections` is lowered to half the open-file
/// limit, so that the other half stays for databases, watches' files and refusals.
fn resource_limits(
    flags: &ServeLimits,
    open_files: Option<u64>,
) -> Result<ResourceLimits, CliError> {
    let seconds = |name: &str, secs: f64| {
        Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                CliError::ServeRefused(format!("--{name} must be a positive number of seconds"))
            })
    };
    if flags.max_unauthorized_per_address == 0 {
        return Err(CliError::ServeRefused(
            "--max-unauthorized-per-address must be at least 1 (every connection starts \
             unauthorized)"
                .into(),
        ));
    }
    let half_of_files = open_files
        .and_then(|n| usize::try_from(n / 2).ok())
        .unwrap_or(usize::MAX);
    Ok(ResourceLimits {
        max_connections: flags.max_connections.min(half_of_files),
        header_timeout: seconds("header-timeout", flags.header_timeout)?,
        body_timeout: seconds("body-timeout", flags.body_timeout)?,
        idle_timeout: seconds("idle-timeout", flags.idle_timeout)?,
        max_body_memory: flags.max_body_memory,
        max_watches: flags.max_watches,
        max_open_databases: flags.max_open_databases,
        database_idle_timeout: seconds("database-idle-timeout", flags.database_idle_timeout)?,
        auth_timeout: seconds("auth-timeout", flags.auth_timeout)?,
        max_unauthorized_per_address: flags.max_unauthorized_per_address,
        warning_interval: seconds("warning-interval", flags.warning_interval)?,
        metrics_refresh: Duration::try_from_secs_f64(flags.metrics_refresh).map_err(|_| {
            CliError::ServeRefused(
                "--metrics-refresh must be a number of seconds (0 or more)".into(),
            )
        })?,
    })
}

/// Opens `/db/NAME` as DIR/NAME.<ext> with --db's backend and options (memory: a new store).
fn opener(
    url: &BackendUrl,
    dir: &Path,
    clock: Arc<dyn Clock>,
) -> open_deno_kv_server::DatabaseOpener {
    let url = url.clone();
    let dir: PathBuf = dir.to_path_buf();
    Arc::new(
        move |name: &str| -> Result<Arc<dyn Backend>, open_deno_kv_model::KvError> {
            let file = match url.scheme() {
                "redb" => format!("{name}.redb"),
                _ => format!("{name}.sqlite3"),
            };
            url.with_path(dir.join(file))
                .open(clock.clone())
                .map_err(|e| match e {
                    // The store's own answer (a file it cannot open, a newer schema) as itself.
                    open_deno_kv::Error::Kv(err) => err,
                    other => open_deno_kv_model::KvError::storage(other),
                })
        },
    )
}

/// Reloads the certificate and key on every SIGHUP, for as long as the process runs: new
/// connections get the new certificate; a file that does not load is refused with a message and
/// the certificate in force stays.
fn reload_on_sighup(tls: Tls) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hangups) => {
                tokio::spawn(async move {
                    while hangups.recv().await.is_some() {
                        match tls.reload().await {
                            Ok(()) => tracing::info!(
                                "SIGHUP: reloaded the TLS certificate {} and key {}; new \
                                 connections use them",
                                tls.cert_path().display(),
                                tls.key_path().display()
                            ),
                            Err(err) => tracing::error!(
                                error = %err,
                                "SIGHUP: TLS reload refused, still serving the previous \
                                 certificate"
                            ),
                        }
                    }
                });
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGHUP (no TLS reload)");
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tls;
    }
}

/// Completes on Ctrl-C, or SIGTERM on Unix.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
