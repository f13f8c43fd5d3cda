//! [`ShippingLease`]: at most one process at a time does a store's singleton work (shipping its
//! change log to object storage), however many processes share the store.
//!
//! The lease is a PostgreSQL *session-level* advisory lock (`pg_try_advisory_lock`) taken on a
//! connection of its own. PostgreSQL holds it for as long as that session lives and releases it
//! the moment the session ends — the holder releasing it, closing the connection, or dying (a
//! `kill -9` closes its sockets, and the server ends the session at once). A process that wants
//! the work tries the lock from time to time; the one that gets it works, and the others take
//! over when it is gone. No table is written, and nothing needs cleaning up after a crash.
//!
//! The lock's key is the store's: the object id of its `kv_meta` table, which PostgreSQL never
//! gives to two tables of one database at once (advisory locks are per database), in the high
//! 32 bits a constant of this crate (`odkv`). Two stores in two schemas of one database have two
//! leases.
//!
//! The holder confirms the lease before each piece of work ([`ShippingLease::confirm`]): a
//! lease whose connection was lost is gone (the server ended the session, so another process may
//! hold it already), and the holder must stop and try again. A holder cut off from the server by
//! the network keeps the lock on the server's side until the server notices (TCP keepalive),
//! during which nobody else takes over: the lease errs towards nobody working, never towards two.

use std::time::Duration;

use tokio_postgres::Client;

use crate::PostgresError;
use crate::connect::connect;
use crate::sql::Sql;
use crate::target::Target;

/// The high 32 bits of every lease key of this crate: `odkv` in ASCII.
const KEY_SPACE: i64 = 0x6F64_6B76;
/// How long [`ShippingLease::confirm`] waits for the server before it gives the lease up.
const CONFIRM_WAIT: Duration = Duration::from_secs(10);

/// The right to ship one PostgreSQL store's changes (see the [module docs](self)): held by at
/// most one session of the database at a time, and released when it is dropped or its
/// connection ends.
///
/// ```no_run
/// # async fn demo() -> Result<(), open_deno_kv_postgres::PostgresError> {
/// use open_deno_kv_postgres::ShippingLease;
/// let url = "postgres://app@db.internal:5432/app";
/// loop {
///     match ShippingLease::try_acquire(url).await? {
///         Some(lease) => {
///             // ... before each piece of work:
///             lease.confirm().await?;
///             break;
///         }
///         // Another process ships; try again later.
///         None => tokio::time::sleep(std::time::Duration::from_secs(1)).await,
///     }
/// }
/// # Ok(()) }
/// ```
pub struct ShippingLease {
    client: Client,
    key: i64,
    schema: String,
}

impl std::fmt::Debug for ShippingLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShippingLease")
            .field("schema", &self.schema)
            .field("key", &format_args!("{:#018x}", self.key))
            .finish()
    }
}

impl ShippingLease {
    /// Tries to take the lease of the store at `url` (libpq's URL, with this crate's `schema`
    /// parameter naming the store's schema, `public` by default): `Some` when this call took
    /// it, `None` when another session holds it.
    ///
    /// The store's tables must exist (open the store first): a schema without a store is
    /// refused with [`PostgresError::NotOurs`]. Cancel-safe: dropping the future before it
    /// completes closes its connection, which releases a lock it may have taken.
    pub async fn try_acquire(url: &str) -> Result<Option<Self>, PostgresError> {
        let parsed = crate::url::parse(url)?;
        let schema = parsed.schema.clone().unwrap_or_else(|| "public".to_owned());
        // Checks the name is an identifier before it goes into the statement.
        Sql::new(&schema)?;
        let client = connect(&Target::new(parsed)).await?;
        // The catalog, not `to_regclass`: it answers without any privilege on the schema.
        let row = client
            .query_opt(
                "SELECT c.oid::bigint FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = 'kv_meta'",
                &[&schema],
            )
            .await?;
        let Some(oid) = row.map(|row| row.get::<_, i64>(0)) else {
            return Err(PostgresError::NotOurs {
                reason: format!(
                    "schema {schema:?} holds no Deno KV store (no table kv_meta); open the store \
                     before taking its shipping lease"
                ),
            });
        };
        let key = (KEY_SPACE << 32) | oid;
        let taken: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await?
            .get(0);
        Ok(taken.then_some(ShippingLease {
            client,
            key,
            schema,
        }))
    }

    /// Checks that the lease is still held: its session answers. A lost connection (or a
    /// server that does not answer within 10 seconds) is [`PostgresError::LeaseLost`]: the
    /// server ended the session or will, so another process may take the lease; stop the work
    /// and try to acquire it again.
    pub async fn confirm(&self) -> Result<(), PostgresError> {
        let lost = |detail: String| PostgresError::LeaseLost {
            schema: self.schema.clone(),
            detail,
        };
        if self.client.is_closed() {
            return Err(lost("its connection is closed".to_owned()));
        }
        match tokio::time::timeout(CONFIRM_WAIT, self.client.simple_query("SELECT 1")).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(lost(err.to_string())),
            Err(_) => Err(lost(format!(
                "the server did not answer within {CONFIRM_WAIT:?}"
            ))),
        }
    }

    /// The schema of the store this lease is for.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Gives the lease up at once, so another process can take it without waiting for this
    /// one to exit. (Dropping the lease gives it up too, when its connection closes.)
    pub async fn release(self) -> Result<(), PostgresError> {
        self.client
            .query_one("SELECT pg_advisory_unlock($1)", &[&self.key])
            .await?;
        Ok(())
    }
}
