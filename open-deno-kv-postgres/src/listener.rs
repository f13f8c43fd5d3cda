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
//! **Only while someone waits.** A session that listens on the channel costs every commit of
//! every process on it: PostgreSQL signals each listening backend, which wakes, reads the
//! notification queue and sends the notification on. Measured on this project's machine, a
//! lone durable commit took about twice as long with one listener as with none, and
//! open-deno-kv-postgres's sequential sets ran about 10% faster, its contended check-and-sets
//! about 20% (BENCHMARKS.md). So the connection listens only while the handle has a watch stream,
//! or a dequeue waiting ([`Events::interested`]), and for [`LINGER`] after the last one ends
//! (a consumer that dequeues again at once does not make it stop and start). When it starts
//! listening again, it wakes every waiter once, exactly as after a reconnection: what was
//! committed before the `LISTEN` took effect is re-read, never missed.
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

/// A live session of the listener, listening on its channel or not.
struct Listening {
    client: Client,
    notifications: mpsc::UnboundedReceiver<Notification>,
}

/// How long the connection keeps listening after the last waiter that needed it is gone.
pub(crate) const LINGER: Duration = Duration::from_millis(250);

/// How long the probe notification sent at open may take to arrive.
pub(crate) const PROBE_WAIT: Duration = Duration::from_secs(5);

/// Starts listening on `channel` (the first connection is made before this returns, so no
/// commit after it is missed), checks that a notification sent on another connection arrives,
/// and keeps the session on a task until the handle closes, listening while a waiter needs it.
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

/// A new session of the listener, listening on `channel`.
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
        client,
        notifications,
    })
}

/// Wakes this handle's waiters for a commit of another process (its own are skipped).
fn announce(note: &Notification, origin: &str, events: &Events) {
    let (from, entries, queue) = parse_payload(note.payload());
    if from == origin {
        return;
    }
    if entries {
        events.notifier.notify_watchers(&ChangedKeys::all());
    }
    if queue {
        events.notifier.bump_queue();
    }
}

async fn run(
    mut current: Listening,
    target: Arc<Target>,
    channel: String,
    origin: String,
    events: Arc<Events>,
) {
    let mut interest = events.interest();
    let mut listening = true;
    // When the connection stops listening if no waiter comes: at once after the probe.
    let mut quiet_until = tokio::time::Instant::now();
    loop {
        let wanted = *interest.borrow_and_update() > 0;
        let statement = match (wanted, listening) {
            (true, false) => Some(format!("LISTEN \"{channel}\"")),
            (false, true) if tokio::time::Instant::now() >= quiet_until => {
                Some(format!("UNLISTEN \"{channel}\""))
            }
            _ => None,
        };
        let mut lost = false;
        if let Some(statement) = statement {
            if current.client.batch_execute(&statement).await.is_ok() {
                listening = wanted;
                if listening {
                    // Whatever was committed before the LISTEN took effect was not announced.
                    events.notifier.notify_everything();
                }
            } else {
                lost = true;
            }
        }
        if !lost {
            tokio::select! {
                note = current.notifications.recv() => match note {
                    Some(note) => announce(&note, &origin, &events),
                    None => lost = true,
                },
                changed = interest.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *interest.borrow() == 0 {
                        quiet_until = tokio::time::Instant::now() + LINGER;
                    }
                }
                () = tokio::time::sleep_until(quiet_until), if listening && !wanted => {}
            }
        }
        if !lost {
            continue;
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
        listening = true;
        quiet_until = tokio::time::Instant::now() + LINGER;
        // Whatever was committed while the connection was down was not announced to us.
        events.notifier.notify_everything();
    }
}
