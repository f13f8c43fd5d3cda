//! What every connection shares: the configuration, the databases, the shutdown signal, the
//! queue messages held by network consumers, the resource budgets and the metrics.

use tokio::sync::watch as signal;

use crate::config::ServerConfig;
use crate::databases::Databases;
use crate::deliveries::Deliveries;
use crate::{metrics, resources};

/// Shared by every connection.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) databases: Databases,
    pub(crate) shutdown: signal::Receiver<bool>,
    /// Queue messages held by network consumers.
    pub(crate) deliveries: Deliveries,
    /// What clients hold of the [`crate::ResourceLimits`].
    pub(crate) budgets: resources::Budgets,
    /// What the server counts, for `GET /metrics`.
    pub(crate) metrics: metrics::Metrics,
}
