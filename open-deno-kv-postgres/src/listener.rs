//! The LISTEN connection: other processes' commits wake this handle's watches and consumers.
//!
//! Every write transaction ends with `pg_notify(channel, "<origin> <k|q>")`; PostgreSQL delivers
//! it after the commit, in commit order. This handle's own commits wake its waiters directly (with
//! the exact keys), so its own notifications are skipped; any other commit wakes every watch of
//! the handle (the payload does not name keys) and, if it touched the queue, every waiting
//! consumer. When the connection is lost, the listener reconnects by itself and then wakes
//! everything once, since notifications sent meanwhile are lost: a watch may re-read for nothing,
//! but never misses a change. `LISTEN` only works on the primary (a standby refuses it).
//!
//! **Poolers.** `LISTEN` belongs to a session: behind a pooler that lends server connections per
//! transaction (PgBouncer's `pool_mode = transaction` or `statement`), the session that ran it is
//! handed to other clients and its notifications never reach this connection — watches and
//! consumers of other processes' commits would wait forever, silently. So the store checks at open
//! that a notification it sends reaches its listener ([`PROBE_WAIT`]), and refuses to open with
//! [`PostgresError::NotificationsLost`] otherwise.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_engine_kit::ChangedKeys;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, Notification};

use crate::PostgresError;
use crate::connect::connect;
use crate::events::{Events, parse_payload};
use crate::target::Target;

/// A live LISTEN session.
struct Listening {
    /// Kept so the session stays open.
    _client: Client,
    notifications: mpsc::UnboundedReceiver<Notification>,
}

/// How long the probe notification sent at open may take to arrive.
pub(crate) const PROBE_WAIT: Duration = Duration::from_secs(5);

/// Starts listening on `channel` (the first connection is made before this returns, so no
/// commit after it is missed), checks that a notification sent on another connection arrives,
/// and keeps listening on a task until the handle closes.
pub(crate) async fn start(
    target: Arc<Target>,
    channel: String,
    origin: String,
    events: Arc<Events>,
) -> Result<JoinHandle<()>, PostgresError> {
    let mut first = listen(&target, &channel).await?;
    probe(&target, &channel, &origin, &mut first).await?;
    Ok(tokio::spawn(run(first, target, channel, origin, events)))
}

/// Sends a notification from another connection and waits for it on `listening` (see the module
/// docs). Its payload names this handle as the sender and nothing as changed, so every listener
/// skips it.
async fn probe(
    target: &Target,
    channel: &str,
    origin: &str,
    listening: &mut Listening,
) -> Result<(), PostgresError> {
    let text = format!("{origin} probe");
    let sender = connect(target).await?;
    sender
        .execute("SELECT pg_notify($1, $2)", &[&channel, &text])
        .await?;
    let arrived = tokio::time::timeout(PROBE_WAIT, async {
        while let Some(note) = listening.notifications.recv().await {
            if note.payload() == text {
                return true;
            }
        }
        false
    })
    .await;
    match arrived {
        Ok(true) => Ok(()),
        Ok(false) => Err(PostgresError::NotificationsLost {
            reason: "the LISTEN connection closed before the check's notification arrived"
                .to_owned(),
        }),
        Err(_) => Err(PostgresError::NotificationsLost {
            reason: format!(
                "a notification sent on another connection did not arrive within {PROBE_WAIT:?}"
            ),
        }),
    }
}

async fn listen(target: &Target, channel: &str) -> Result<Listening, PostgresError> {
    let (client, mut connection) = target.connect().await?;
    let (sender, notifications) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        // Polling the messages also drives the connection; it ends when the connection does.
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(note) = message
                && sender.send(note).is_err()
            {
                return;
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"{channel}\""))
        .await?;
    Ok(Listening {
        _client: client,
        notifications,
    })
}

async fn run(
    mut current: Listening,
    target: Arc<Target>,
    channel: String,
    origin: String,
    events: Arc<Events>,
) {
    loop {
        while let Some(note) = current.notifications.recv().await {
            let (from, entries, queue) = parse_payload(note.payload());
            if from == origin {
                continue;
            }
            if entries {
                events.notifier.notify_watchers(&ChangedKeys::all());
            }
            if queue {
                events.notifier.bump_queue();
            }
        }
        let mut pause = Duration::from_millis(50);
        current = loop {
            if events.signal.is_closed() {
                return;
            }
            match listen(&target, &channel).await {
                Ok(listening) => break listening,
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        };
        // Whatever was committed while the connection was down was not announced to us.
        events.notifier.notify_everything();
    }
}
