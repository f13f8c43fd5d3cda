//! `GET /metrics`: what the server counts, and its answer in the Prometheus text exposition
//! format (version 0.0.4). Off unless [`crate::ServerConfig::metrics`] is set; then it is served
//! without the access token, as Prometheus scrapers usually carry none (it shows counts, never
//! keys, values or tokens).
//!
//! The handlers report through a narrow, crate-private API (`Metrics::request`, `commit`,
//! `delivery`, `storage_error`); the gauges (connections, watches and
//! databases open, queue depth) are read at scrape time from what the server already keeps, so
//! nothing has to remember to decrement them.
//!
//! | Family | Type | Labels | Meaning |
//! |---|---|---|---|
//! | `kv_requests_total` | counter | `endpoint`, `status` | requests answered |
//! | `kv_request_duration_seconds` | histogram | `endpoint` | time to the response head (a watch: until its stream starts) |
//! | `kv_commits_total` | counter | | atomic writes committed |
//! | `kv_failed_checks_total` | counter | | atomic writes refused because a check failed |
//! | `kv_queue_depth` | gauge | `database` | messages queued, waiting or being delivered |
//! | `kv_queue_deliveries_total` | counter | `outcome` | network deliveries settled: `ok`, `failed`, `lease_expired` |
//! | `kv_watches_open` | gauge | | watch streams open |
//! | `kv_connections_open` | gauge | | client connections open |
//! | `kv_databases_open` | gauge | | databases open in the server's table |
//! | `kv_storage_errors_total` | counter | | requests answered 500 for a backend failure |
//! | `kv_backup_shipping` | gauge | | 1 while this process ships the store to object storage (holds the shipping lock), else 0 |
//! | `kv_backup_lag_seconds` | gauge | | how long the oldest commit not yet in the bucket has waited (0: caught up) |
//! | `kv_backup_commits_behind` | gauge | | commits acknowledged that the bucket does not hold yet |
//! | `kv_backup_failing` | gauge | | 1 while shipping fails (the bucket unreachable or refusing writes), else 0 |
//! | `kv_backup_segments_total` | counter | | log segments this process wrote to the bucket |
//!
//! The `kv_backup_` families are there only when the server is given [`ShippingGauges`]
//! ([`crate::ServerConfig::shipping`]: `kv serve --backup-to`); whoever ships sets them.
//!
//! `/metrics` needs no token, so a scrape must cost little whatever the store holds and however
//! often it comes. The connection, watch and database gauges are counts the server keeps (its
//! semaphores and its database table). The queue depths are read from each open database
//! ([`Backend::queue_depth`]: a count the engine keeps, or counts natively) at most once per [`crate::ResourceLimits::metrics_refresh`] (5 s): the
//! values are kept, and a scrape within the interval answers them as they were; scrapes are
//! answered one at a time, so concurrent scrapes share one reading instead of each making
//! their own. Deliveries are only those the server hands out over the
//! network (the `queue/1` extension, [`crate::queue`]); whether a failed one is retried or
//! dead-lettered is decided inside the engine, which the server does not see.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use open_deno_kv_model::Backend;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use tokio::time::Instant;

use crate::resources::Budgets;

/// The content type of the answer (Prometheus text format 0.0.4).
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// What a request asked for, as the `endpoint` label (a fixed set, so that no client can
/// create label values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `GET /health`.
    Health,
    /// `GET /metrics`.
    Metrics,
    /// The metadata exchange (`POST` to a database path).
    Metadata,
    /// `POST /v2/snapshot_read`.
    SnapshotRead,
    /// `POST /v2/atomic_write`.
    AtomicWrite,
    /// `POST /v2/watch`.
    Watch,
    /// `POST /v2/queue/dequeue`.
    QueueDequeue,
    /// `POST /v2/queue/finish`.
    QueueFinish,
    /// `POST /v2/queue/keepalive`.
    QueueKeepAlive,
    /// `POST /v2/range/count` (`count/1`).
    RangeCount,
    /// `POST /v2/range/watch` (`watch-range/1`).
    RangeWatch,
    /// `POST /v2/snapshot/export` (`snapshot/1`).
    SnapshotExport,
    /// `POST /v2/snapshot/import` (`snapshot/1`).
    SnapshotImport,
    /// `POST /v2/change_log/status` (`change-log/1`).
    ChangeLogStatus,
    /// `POST /v2/change_log/read` (`change-log/1`).
    ChangeLogRead,
    /// `POST /v2/change_log/configure` (`change-log/1`).
    ChangeLogConfigure,
    /// The explorer's page, script and style (`GET /ui...`).
    Ui,
    /// The explorer's JSON calls and event streams (`POST /ui/api/...`).
    UiApi,
    /// Anything else (answered 404 or 405).
    Other,
}

impl Endpoint {
    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Endpoint::Health => "health",
            Endpoint::Metrics => "metrics",
            Endpoint::Metadata => "metadata",
            Endpoint::SnapshotRead => "snapshot_read",
            Endpoint::AtomicWrite => "atomic_write",
            Endpoint::Watch => "watch",
            Endpoint::QueueDequeue => "queue_dequeue",
            Endpoint::QueueFinish => "queue_finish",
            Endpoint::QueueKeepAlive => "queue_keepalive",
            Endpoint::RangeCount => "range_count",
            Endpoint::RangeWatch => "range_watch",
            Endpoint::SnapshotExport => "snapshot_export",
            Endpoint::SnapshotImport => "snapshot_import",
            Endpoint::ChangeLogStatus => "change_log_status",
            Endpoint::ChangeLogRead => "change_log_read",
            Endpoint::ChangeLogConfigure => "change_log_configure",
            Endpoint::Ui => "ui",
            Endpoint::UiApi => "ui_api",
            Endpoint::Other => "other",
        }
    }
}

/// How a queue message handed out over the network was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The consumer reported success: the message is gone.
    Ok,
    /// The consumer reported failure: the engine retries it or dead-letters it.
    Failed,
    /// The consumer went silent past its lease: a failed delivery, as above.
    LeaseExpired,
}

impl Delivery {
    fn label(self) -> &'static str {
        match self {
            Delivery::Ok => "ok",
            Delivery::Failed => "failed",
            Delivery::LeaseExpired => "lease_expired",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DatabaseLabels {
    database: String,
}

/// Latency buckets: 0.5 ms doubling to about 16 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The server's metric families (one set per running server).
/// The continuous backup's gauges (the `kv_backup_` families): the shipper's owner sets them,
/// `GET /metrics` reports them. Clones share their values.
#[derive(Debug, Clone, Default)]
pub struct ShippingGauges {
    shipping: Gauge,
    lag_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    commits_behind: Gauge,
    failing: Gauge,
    segments: Counter,
}

/// One reading of a shipper, for [`ShippingGauges::record`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShippingReading {
    /// Whether this process ships (holds the shipping lock).
    pub shipping: bool,
    /// How long the oldest commit not yet shipped has waited.
    pub lag: Duration,
    /// Commits acknowledged that the bucket does not hold yet.
    pub commits_behind: u64,
    /// Whether shipping is failing now.
    pub failing: bool,
}

impl ShippingGauges {
    /// Gauges at zero.
    pub fn new() -> Self {
        ShippingGauges::default()
    }

    /// Sets the gauges to `reading`.
    pub fn record(&self, reading: ShippingReading) {
        self.shipping.set(i64::from(reading.shipping));
        self.lag_seconds.set(reading.lag.as_secs_f64());
        self.commits_behind
            .set(i64::try_from(reading.commits_behind).unwrap_or(i64::MAX));
        self.failing.set(i64::from(reading.failing));
    }

    /// Counts `n` more segments written.
    pub fn segments_written(&self, n: u64) {
        self.segments.inc_by(n);
    }

    fn register(&self, registry: &mut Registry) {
        let backup = registry.sub_registry_with_prefix("backup");
        backup.register(
            "shipping",
            "1 while this process ships the store to object storage (holds the shipping lock)",
            self.shipping.clone(),
        );
        backup.register_with_unit(
            "lag",
            "How long the oldest commit not yet in the bucket has waited (0: caught up)",
            Unit::Seconds,
            self.lag_seconds.clone(),
        );
        backup.register(
            "commits_behind",
            "Commits acknowledged that the bucket does not hold yet",
            self.commits_behind.clone(),
        );
        backup.register(
            "failing",
            "1 while shipping to the bucket fails, else 0",
            self.failing.clone(),
        );
        backup.register(
            "segments",
            "Log segments this process wrote to the bucket",
            self.segments.clone(),
        );
    }
}

pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<EndpointLabels, Histogram, fn() -> Histogram>,
    commits: Counter,
    failed_checks: Counter,
    deliveries: Family<OutcomeLabels, Counter>,
    storage_errors: Counter,
    queue_depth: Family<DatabaseLabels, Gauge>,
    watches_open: Gauge,
    connections_open: Gauge,
    databases_open: Gauge,
    /// One scrape at a time: a scrape sets the gauges, then encodes them; it holds the queue
    /// depths last read, and when.
    scraping: tokio::sync::Mutex<QueueDepths>,
}

/// The queue depths of the open databases as last read.
#[derive(Default)]
struct QueueDepths {
    read_at: Option<Instant>,
    depths: Vec<(String, usize)>,
}

impl Metrics {
    pub(crate) fn new(shipping: Option<&ShippingGauges>) -> Self {
        let mut registry = Registry::with_prefix("kv");
        if let Some(shipping) = shipping {
            shipping.register(&mut registry);
        }
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by endpoint and HTTP status",
            requests.clone(),
        );
        let latency: Family<EndpointLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "request_duration",
            "Time from a request's arrival to its response head, by endpoint (a watch: until \
             its stream starts)",
            Unit::Seconds,
            latency.clone(),
        );
        let commits = Counter::default();
        registry.register("commits", "Atomic writes committed", commits.clone());
        let failed_checks = Counter::default();
        registry.register(
            "failed_checks",
            "Atomic writes refused because one of their checks failed",
            failed_checks.clone(),
        );
        let queue_depth = Family::<DatabaseLabels, Gauge>::default();
        registry.register(
            "queue_depth",
            "Queue messages waiting or being delivered, per open database that can list them",
            queue_depth.clone(),
        );
        let deliveries = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "queue_deliveries",
            "Queue messages handed out over the network and settled, by outcome (ok; failed \
             or lease_expired: the engine retries or dead-letters them)",
            deliveries.clone(),
        );
        let watches_open = Gauge::default();
        registry.register("watches_open", "Watch streams open", watches_open.clone());
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "Client connections open",
            connections_open.clone(),
        );
        let databases_open = Gauge::default();
        registry.register(
            "databases_open",
            "Databases open in the server's table (default, named, --db-dir and scratch; not \
             per-connection ephemeral ones)",
            databases_open.clone(),
        );
        let storage_errors = Counter::default();
        registry.register(
            "storage_errors",
            "Requests answered 500 because the backend failed",
            storage_errors.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
            commits,
            failed_checks,
            deliveries,
            storage_errors,
            queue_depth,
            watches_open,
            connections_open,
            databases_open,
            scraping: tokio::sync::Mutex::new(QueueDepths::default()),
        }
    }

    /// A request to `endpoint` was answered `status` after `elapsed`.
    pub(crate) fn request(&self, endpoint: Endpoint, status: StatusCode, elapsed: Duration) {
        let endpoint = endpoint.label();
        self.requests
            .get_or_create(&RequestLabels {
                endpoint,
                status: status.as_u16(),
            })
            .inc();
        self.latency
            .get_or_create(&EndpointLabels { endpoint })
            .observe(elapsed.as_secs_f64());
    }

    /// An atomic write was committed (`true`) or refused by a failed check (`false`).
    pub(crate) fn commit(&self, committed: bool) {
        if committed {
            self.commits.inc();
        } else {
            self.failed_checks.inc();
        }
    }

    /// A delivery over the network was settled.
    pub(crate) fn delivery(&self, outcome: Delivery) {
        self.deliveries
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
    }

    /// A request failed because the backend did.
    pub(crate) fn storage_error(&self) {
        self.storage_errors.inc();
    }

    /// The exposition: reads the gauges from `budgets` and the `open` databases (their queue
    /// depths at most once per `refresh`, [`crate::ResourceLimits::metrics_refresh`]), then
    /// encodes every family.
    pub(crate) async fn render(
        &self,
        budgets: &Budgets,
        open: OpenDatabases,
        refresh: Duration,
    ) -> Result<String, std::fmt::Error> {
        let mut queues = self.scraping.lock().await;
        self.connections_open
            .set(gauge_value(budgets.connections_open()));
        self.watches_open.set(gauge_value(budgets.watches_open()));
        self.databases_open.set(gauge_value(open.len()));
        let now = Instant::now();
        if queues
            .read_at
            .is_none_or(|at| now.saturating_duration_since(at) >= refresh)
        {
            let mut depths = Vec::with_capacity(open.len());
            for (database, backend) in open {
                if let Some(depth) = queue_depth(&database, backend.as_ref()).await {
                    depths.push((database, depth));
                }
            }
            *queues = QueueDepths {
                read_at: Some(now),
                depths,
            };
        }
        self.queue_depth.clear();
        for (database, depth) in &queues.depths {
            self.queue_depth
                .get_or_create(&DatabaseLabels {
                    database: database.clone(),
                })
                .set(gauge_value(*depth));
        }
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)?;
        // A scrape answer ends with a newline in every case (an empty registry included).
        if !text.ends_with('\n') {
            text.write_char('\n')?;
        }
        Ok(text)
    }
}

/// The messages queued in `backend`, if it can list them (a failure is logged, and the
/// database left out of this scrape).
async fn queue_depth(database: &str, backend: &dyn Backend) -> Option<usize> {
    if !backend.capabilities().queue_inspection {
        return None;
    }
    match backend.queue_depth().await {
        Ok(depth) => Some(depth),
        Err(err) => {
            tracing::warn!(database, error = %err, "metrics: cannot read the queue depth");
            None
        }
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Every database open in the server's table, by the name the `database` label gives it.
pub(crate) type OpenDatabases = Vec<(String, Arc<dyn Backend>)>;

#[cfg(test)]
mod tests {
    use super::Endpoint;

    /// Every endpoint, in the order of the enum.
    const ALL: [Endpoint; 19] = [
        Endpoint::Health,
        Endpoint::Metrics,
        Endpoint::Metadata,
        Endpoint::SnapshotRead,
        Endpoint::AtomicWrite,
        Endpoint::Watch,
        Endpoint::QueueDequeue,
        Endpoint::QueueFinish,
        Endpoint::QueueKeepAlive,
        Endpoint::RangeCount,
        Endpoint::RangeWatch,
        Endpoint::SnapshotExport,
        Endpoint::SnapshotImport,
        Endpoint::ChangeLogStatus,
        Endpoint::ChangeLogRead,
        Endpoint::ChangeLogConfigure,
        Endpoint::Ui,
        Endpoint::UiApi,
        Endpoint::Other,
    ];

    /// The position of `endpoint` in [`ALL`]: a match with no wildcard, so a new endpoint does
    /// not compile until it is listed there (and so checked against the README below).
    fn position(endpoint: Endpoint) -> usize {
        match endpoint {
            Endpoint::Health => 0,
            Endpoint::Metrics => 1,
            Endpoint::Metadata => 2,
            Endpoint::SnapshotRead => 3,
            Endpoint::AtomicWrite => 4,
            Endpoint::Watch => 5,
            Endpoint::QueueDequeue => 6,
            Endpoint::QueueFinish => 7,
            Endpoint::QueueKeepAlive => 8,
            Endpoint::RangeCount => 9,
            Endpoint::RangeWatch => 10,
            Endpoint::SnapshotExport => 11,
            Endpoint::SnapshotImport => 12,
            Endpoint::ChangeLogStatus => 13,
            Endpoint::ChangeLogRead => 14,
            Endpoint::ChangeLogConfigure => 15,
            Endpoint::Ui => 16,
            Endpoint::UiApi => 17,
            Endpoint::Other => 18,
        }
    }

    /// Issue 32: `/metrics` reported `endpoint="snapshot_export"`, which the repository
    /// README's list of endpoints lacked. Every label the server emits is now in it.
    #[test]
    fn the_readme_lists_every_endpoint_label() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
        let readme = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let row = readme
            .lines()
            .find(|line| line.starts_with("| `kv_requests_total{endpoint, status}`"))
            .unwrap_or_else(|| panic!("no kv_requests_total row in {path}"));
        for (index, endpoint) in ALL.into_iter().enumerate() {
            assert_eq!(position(endpoint), index, "ALL is out of order");
            let label = endpoint.label();
            assert!(
                row.contains(&format!("`{label}`")),
                "the README's list of endpoints lacks {label}: {row}"
            );
        }
    }
}
