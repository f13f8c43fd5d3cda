//! The server under test, as the conformance kit sees it: a [`BackendFactory`] whose every open
//! is a new KV Connect connection to the one server, confined to a key prefix of the current
//! case ([`Prefixed`]), and which deletes that prefix once the case is over.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use num_bigint::BigInt;
use open_deno_kv_conformance::{BackendFactory, Prefixed, TestContext};
use open_deno_kv_engine_kit::SystemClock;
use open_deno_kv_model::async_trait;
use open_deno_kv_model::{Backend, Capabilities, Clock, Key, KeyPart, KvError, Limits, encode_key};
use open_deno_kv_remote::{RemoteBackend, RemoteOptions};

/// The first part of every key the suite writes: whoever finds one on their server knows what
/// left it.
pub const ROOT: &str = "kv-conformance";

/// Bytes a prefix may add to a key: the client's own limits are widened by this much, so that
/// [`Prefixed`] (which checks Deno's limits on the case's keys, and again on the prefixed ones)
/// decides, not the client below it.
const PREFIX_ALLOWANCE: usize = 256;

/// Opens the server for the suite, one key prefix per case.
pub struct ServerUnderTest {
    url: String,
    options: RemoteOptions,
    run: String,
    case: AtomicU64,
    context: AtomicU64,
    owns_queue: bool,
}

/// A context's own prefix, kept in its slot so that a reopen finds the same keys.
struct ContextPrefix(Vec<u8>);

impl ServerUnderTest {
    /// The server at `url`; `run` names this run in the prefixes (so two runs never share keys).
    pub fn new(url: &str, options: RemoteOptions, run: String) -> Self {
        Self::with_queue(url, options, run, false)
    }

    /// Like [`ServerUnderTest::new`]; `owns_queue`: the server's queue is the suite's alone (it
    /// was empty when the run began), so what a case leaves in it is taken out after the case.
    pub fn with_queue(url: &str, options: RemoteOptions, run: String, owns_queue: bool) -> Self {
        let mut options = options;
        options.limits = widened(Limits::deno());
        ServerUnderTest {
            url: url.to_owned(),
            options,
            run,
            case: AtomicU64::new(0),
            context: AtomicU64::new(0),
            owns_queue,
        }
    }

    /// The prefix of the current case (every context it opens lives under it).
    fn case_prefix(&self) -> Result<Key, KvError> {
        Ok(Key::new(vec![
            KeyPart::String(ROOT.to_owned()),
            KeyPart::String(self.run.clone()),
            KeyPart::Int(BigInt::from(self.case.load(Ordering::SeqCst))),
        ]))
    }

    fn context_prefix(&self) -> Result<Vec<u8>, KvError> {
        let mut parts = self.case_prefix()?.into_parts();
        parts.push(KeyPart::Int(BigInt::from(
            self.context.fetch_add(1, Ordering::SeqCst),
        )));
        encode_key(&Key::new(parts)).map_err(|e| KvError::invalid_argument(e.to_string()))
    }

    /// The server itself, no prefix (its queue long poll kept short, for draining).
    pub async fn connect(&self) -> Result<Arc<dyn Backend>, KvError> {
        let mut options = self.options.clone();
        options.dequeue_wait = Duration::from_millis(100);
        let backend = RemoteBackend::connect(&self.url, options).await?;
        Ok(Arc::new(backend))
    }
}

/// How long [`drain_queue`] waits for one more due message, on a server that cannot list its
/// queue.
const DRAIN_WAIT: Duration = Duration::from_millis(300);

/// How far ahead of this machine's clock a message counts as due: the server's clock may run a
/// little ahead.
const DUE_MARGIN: Duration = Duration::from_secs(1);

/// How long a dequeue may take for a message the listing said is due.
const DUE_WAIT: Duration = Duration::from_secs(5);

/// The longest a listed drain keeps at it. A message still held by a consumer (one a case
/// dropped without closing, until its lease runs out) is listed as due but cannot be taken;
/// after this the drain stops, and what is left reaches a later case as it would have before.
const DRAIN_DEADLINE: Duration = Duration::from_secs(15);

/// Takes every message that is due out of the queue (a case's leftovers would otherwise reach
/// the next case's consumer). Messages delayed past the run stay.
///
/// Where the server lists its queue (`snapshot/1`), only the messages the listing shows as due
/// are taken, so an empty queue costs one request. Otherwise a dequeue that finds nothing
/// within [`DRAIN_WAIT`] ends the drain: about a minute over the whole suite, and the poll that
/// the timeout abandons can take a message, which closing the connection gives back as a failed
/// delivery, due again after its back-off.
async fn drain_queue(kv: &dyn Backend) -> Result<(), KvError> {
    let capabilities = kv.capabilities();
    if !capabilities.queues {
        return Ok(());
    }
    if !capabilities.queue_inspection {
        return drain_by_waiting(kv).await;
    }
    let deadline = tokio::time::Instant::now() + DRAIN_DEADLINE;
    while tokio::time::Instant::now() < deadline {
        let horizon = chrono::Utc::now() + DUE_MARGIN;
        let due = kv
            .queued_messages()
            .await?
            .iter()
            .filter(|message| message.ready_at <= horizon)
            .count();
        if due == 0 {
            return Ok(());
        }
        for _ in 0..due {
            match tokio::time::timeout(DUE_WAIT, kv.dequeue_next_message()).await {
                Ok(Ok(Some(message))) => message.finish(true).await?,
                Ok(Ok(None)) => return Ok(()),
                Ok(Err(e)) => return Err(e),
                // Listed as due but not handed out (still held by a consumer): list again.
                Err(_) => break,
            }
        }
    }
    Ok(())
}

/// [`drain_queue`] on a server that cannot list its queue: a dequeue that finds nothing within
/// [`DRAIN_WAIT`] means nothing is due.
async fn drain_by_waiting(kv: &dyn Backend) -> Result<(), KvError> {
    loop {
        match tokio::time::timeout(DRAIN_WAIT, kv.dequeue_next_message()).await {
            Ok(Ok(Some(message))) => message.finish(true).await?,
            Ok(Ok(None)) | Err(_) => return Ok(()),
            Ok(Err(e)) => return Err(e),
        }
    }
}

/// Deno's limits with room for the prefix on every key and total.
fn widened(limits: Limits) -> Limits {
    Limits {
        max_write_key_size_bytes: limits.max_write_key_size_bytes + PREFIX_ALLOWANCE,
        max_read_key_size_bytes: limits.max_read_key_size_bytes + PREFIX_ALLOWANCE,
        max_total_key_size_bytes: limits.max_total_key_size_bytes
            + limits.max_mutations * PREFIX_ALLOWANCE,
        max_total_mutation_size_bytes: limits.max_total_mutation_size_bytes
            + 3 * limits.max_mutations * PREFIX_ALLOWANCE,
        ..limits
    }
}

#[async_trait]
impl BackendFactory for ServerUnderTest {
    async fn open(&self, ctx: &TestContext) -> Result<Arc<dyn Backend>, KvError> {
        let prefix = match self.context_prefix() {
            Ok(prefix) => prefix,
            Err(e) => return Err(e),
        };
        let prefix = ctx.slot(|| ContextPrefix(prefix));
        let clock: Arc<dyn Clock> = Arc::new(ctx.clock().clone());
        let mut options = self.options.clone();
        options.clock = clock.clone();
        let inner = RemoteBackend::connect(&self.url, options).await?;
        Ok(Arc::new(Prefixed::new(
            Arc::new(inner),
            prefix.0.clone(),
            clock,
        )))
    }

    /// The server keeps what was written: opening again reaches the same data.
    fn can_reopen(&self, _capabilities: Capabilities) -> bool {
        true
    }

    async fn finish_case(&self) -> Result<(), KvError> {
        let prefix = encode_key(&self.case_prefix()?)
            .map_err(|e| KvError::invalid_argument(e.to_string()))?;
        self.case.fetch_add(1, Ordering::SeqCst);
        let inner = self.connect().await?;
        let cleaned = Prefixed::new(inner.clone(), prefix, Arc::new(SystemClock))
            .clean_up()
            .await;
        let drained = match self.owns_queue {
            true => drain_queue(&*inner).await,
            false => Ok(()),
        };
        let _ = inner.close().await;
        cleaned.and(drained)
    }
}
