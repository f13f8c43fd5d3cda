//! How cases are defined, registered and run.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::BoxFuture;
use open_deno_kv_model::{Backend, Capabilities, KvError, ManualClock};

/// Everything one test owns: a manual clock (starting at 2024-01-01T00:00:00Z) and a fresh
/// temporary directory for a durable backend's files. Opening a backend twice on the same context
/// must give the same data: that is how reopen cases reopen.
pub struct TestContext {
    clock: ManualClock,
    dir: tempfile::TempDir,
    slots: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl TestContext {
    /// A new context with its own clock and directory.
    pub fn new() -> Result<Self, KvError> {
        let dir = tempfile::Builder::new()
            .prefix("open-deno-kv-conformance-")
            .tempdir()
            .map_err(KvError::storage)?;
        Ok(TestContext {
            clock: ManualClock::at_test_epoch(),
            dir,
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// The test's clock; backends must take their time from it.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// A directory that lives as long as the test, for database files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A per-test value of type `T`, created by `init` on first use: an in-memory engine keeps its
    /// store here so a reopen finds the same data.
    pub fn slot<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = slots
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(init()));
        match slot.clone().downcast::<T>() {
            Ok(value) => value,
            Err(_) => unreachable!("slots are keyed by their own TypeId"),
        }
    }
}

/// Opens the backend under test. Implemented for any
/// `Fn(&TestContext) -> impl Future<Output = Result<Arc<dyn Backend>, KvError>>`.
#[async_trait]
pub trait BackendFactory: Send + Sync + 'static {
    /// Opens a backend on `ctx`'s data, with its time from `ctx.clock()`. The first call on a
    /// context sees an empty store; later calls must see everything committed before.
    async fn open(&self, ctx: &TestContext) -> Result<Arc<dyn Backend>, KvError>;

    /// Whether a second [`BackendFactory::open`] on one context reopens the same data. Defaults to
    /// the backend's `durable` capability; an in-memory engine that keeps its store in a
    /// [`TestContext::slot`] can say yes too.
    fn can_reopen(&self, capabilities: Capabilities) -> bool {
        capabilities.durable
    }
}

/// A factory made of a closure; see [`crate::conformance_main!`].
pub struct FnFactory<F> {
    open: F,
    reopen: Option<bool>,
}

impl<F> FnFactory<F> {
    /// Wraps `open`; reopen support follows the backend's `durable` capability.
    pub fn new(open: F) -> Self {
        FnFactory { open, reopen: None }
    }

    /// Declares that opening twice on one context reopens the same data (or not).
    pub fn reopens(mut self, yes: bool) -> Self {
        self.reopen = Some(yes);
        self
    }
}

#[async_trait]
impl<F, Fut> BackendFactory for FnFactory<F>
where
    F: Fn(&TestContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Backend>, KvError>> + Send,
{
    async fn open(&self, ctx: &TestContext) -> Result<Arc<dyn Backend>, KvError> {
        (self.open)(ctx).await
    }

    fn can_reopen(&self, capabilities: Capabilities) -> bool {
        self.reopen.unwrap_or(capabilities.durable)
    }
}

/// What a case needs from a backend; a case is registered as **ignored** (not run, not passed)
/// when a need is not met, so a backend without a capability never passes its cases vacuously.
///
/// Combine needs with [`Needs::and`]: `Needs::WATCH.and(Needs::QUEUES)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Queues ([`open_deno_kv_model::Capabilities::queues`]).
    pub queues: bool,
    /// Listing the queue ([`open_deno_kv_model::Capabilities::queue_inspection`]).
    pub queue_inspection: bool,
    /// Watch ([`open_deno_kv_model::Capabilities::watch`]).
    pub watch: bool,
    /// The integrity check ([`open_deno_kv_model::Capabilities::integrity_check`]).
    pub integrity_check: bool,
    /// Reopening the same data ([`BackendFactory::can_reopen`]).
    pub reopen: bool,
    /// Range deletes ([`open_deno_kv_model::Capabilities::range_delete`]).
    pub range_delete: bool,
    /// Counting a range ([`open_deno_kv_model::Capabilities::count`]).
    pub count: bool,
    /// Watching a range ([`open_deno_kv_model::Capabilities::watch_range`]).
    pub watch_range: bool,
    /// Exporting a snapshot ([`open_deno_kv_model::Capabilities::export`]).
    pub export: bool,
    /// Importing a snapshot ([`open_deno_kv_model::Capabilities::import`]).
    pub import: bool,
    /// A change log ([`open_deno_kv_model::Capabilities::change_log`]).
    pub change_log: bool,
}

impl Needs {
    /// Only reads and writes.
    pub const NOTHING: Needs = Needs {
        queues: false,
        queue_inspection: false,
        watch: false,
        integrity_check: false,
        reopen: false,
        range_delete: false,
        count: false,
        watch_range: false,
        export: false,
        import: false,
        change_log: false,
    };
    /// Queues.
    pub const QUEUES: Needs = Needs {
        queues: true,
        ..Needs::NOTHING
    };
    /// Queues, and listing them.
    pub const QUEUE_INSPECTION: Needs = Needs {
        queue_inspection: true,
        ..Needs::QUEUES
    };
    /// Watch.
    pub const WATCH: Needs = Needs {
        watch: true,
        ..Needs::NOTHING
    };
    /// The integrity check.
    pub const INTEGRITY_CHECK: Needs = Needs {
        integrity_check: true,
        ..Needs::NOTHING
    };
    /// Reopen.
    pub const REOPEN: Needs = Needs {
        reopen: true,
        ..Needs::NOTHING
    };
    /// Queues and reopen.
    pub const QUEUES_REOPEN: Needs = Needs::QUEUES.and(Needs::REOPEN);
    /// Range deletes.
    pub const RANGE_DELETE: Needs = Needs {
        range_delete: true,
        ..Needs::NOTHING
    };
    /// Counting a range.
    pub const COUNT: Needs = Needs {
        count: true,
        ..Needs::NOTHING
    };
    /// Watching a range.
    pub const WATCH_RANGE: Needs = Needs {
        watch_range: true,
        ..Needs::NOTHING
    };

    /// Exporting a snapshot.
    pub const EXPORT: Needs = Needs {
        export: true,
        ..Needs::NOTHING
    };
    /// Exporting and importing snapshots (a backup and its restore).
    pub const BACKUP: Needs = Needs {
        export: true,
        import: true,
        ..Needs::NOTHING
    };

    /// A change log.
    pub const CHANGE_LOG: Needs = Needs {
        change_log: true,
        ..Needs::NOTHING
    };

    /// Everything `self` needs and everything `other` needs.
    pub const fn and(self, other: Needs) -> Needs {
        Needs {
            queues: self.queues || other.queues,
            queue_inspection: self.queue_inspection || other.queue_inspection,
            watch: self.watch || other.watch,
            integrity_check: self.integrity_check || other.integrity_check,
            reopen: self.reopen || other.reopen,
            range_delete: self.range_delete || other.range_delete,
            count: self.count || other.count,
            watch_range: self.watch_range || other.watch_range,
            export: self.export || other.export,
            import: self.import || other.import,
            change_log: self.change_log || other.change_log,
        }
    }

    /// Whether a backend with these features can run the case.
    pub fn met_by(&self, features: Features) -> bool {
        (!self.queues || features.queues)
            && (!self.queue_inspection || features.queue_inspection)
            && (!self.watch || features.watch)
            && (!self.integrity_check || features.integrity_check)
            && (!self.reopen || features.reopen)
            && (!self.range_delete || features.range_delete)
            && (!self.count || features.count)
            && (!self.watch_range || features.watch_range)
            && (!self.export || features.export)
            && (!self.import || features.import)
            && (!self.change_log || features.change_log)
    }
}

/// What the backend under test offers, as the suite sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// Queues work.
    pub queues: bool,
    /// `queued_messages` works.
    pub queue_inspection: bool,
    /// Watch works.
    pub watch: bool,
    /// `check_integrity` works.
    pub integrity_check: bool,
    /// Opening twice on one context gives the same data.
    pub reopen: bool,
    /// Range deletes are accepted.
    pub range_delete: bool,
    /// `count_range` works.
    pub count: bool,
    /// `watch_range` works.
    pub watch_range: bool,
    /// `export_snapshot` works.
    pub export: bool,
    /// `import_snapshot` works.
    pub import: bool,
    /// The change log works.
    pub change_log: bool,
}

impl Features {
    /// The features of a backend reporting `capabilities`, reopening as `can_reopen` says.
    pub fn from_capabilities(capabilities: Capabilities, can_reopen: bool) -> Self {
        Features {
            queues: capabilities.queues,
            queue_inspection: capabilities.queue_inspection,
            watch: capabilities.watch,
            integrity_check: capabilities.integrity_check,
            reopen: can_reopen,
            range_delete: capabilities.range_delete,
            count: capabilities.count,
            watch_range: capabilities.watch_range,
            export: capabilities.export,
            import: capabilities.import,
            change_log: capabilities.change_log,
        }
    }
}

/// What a case works with: the open backend, its context, and the factory to reopen it.
pub struct Env {
    /// The backend under test.
    pub kv: Arc<dyn Backend>,
    /// The test's context (clock, directory).
    pub ctx: Arc<TestContext>,
    /// What the backend offers.
    pub features: Features,
    factory: Arc<dyn BackendFactory>,
}

impl Env {
    /// The test's manual clock.
    pub fn clock(&self) -> &ManualClock {
        self.ctx.clock()
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.ctx.clock().advance(by);
    }

    /// Closes the backend and opens it again on the same data.
    pub async fn reopen(&mut self) -> Result<(), KvError> {
        self.kv.close().await?;
        self.kv = self.factory.open(&self.ctx).await?;
        Ok(())
    }

    /// A new, empty backend on a new context (for tests that need many fresh stores).
    pub async fn fresh(&self) -> Result<Env, KvError> {
        let ctx = Arc::new(TestContext::new()?);
        let kv = self.factory.open(&ctx).await?;
        Ok(Env {
            kv,
            ctx,
            features: self.features,
            factory: self.factory.clone(),
        })
    }

    /// Opens a second handle on the same data without closing the first.
    pub async fn open_another(&self) -> Result<Arc<dyn Backend>, KvError> {
        self.factory.open(&self.ctx).await
    }
}

type CaseFn = Arc<dyn Fn(Env) -> BoxFuture<'static, ()> + Send + Sync>;

/// One named scenario.
#[derive(Clone)]
pub struct Case {
    /// `group::name`, as shown by `cargo test`.
    pub name: String,
    /// What the backend must support.
    pub needs: Needs,
    /// How long the case may run; [`CASE_TIMEOUT`] unless set.
    pub timeout: Duration,
    run: CaseFn,
}

impl Case {
    /// A case that runs `body`; it fails by panicking (`assert!`), like any Rust test.
    pub fn new<F, Fut>(name: impl Into<String>, needs: Needs, body: F) -> Self
    where
        F: Fn(Env) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Case {
            name: name.into(),
            needs,
            timeout: CASE_TIMEOUT,
            run: Arc::new(move |env| body(env).boxed()),
        }
    }

    /// Allows the case to run longer than [`CASE_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// How long one case may take before it counts as hung (a queue that never delivers, a watch
/// that never emits).
pub const CASE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs one case on a fresh context and runtime. `Err` carries the failure message.
pub fn run_case(
    case: &Case,
    factory: &Arc<dyn BackendFactory>,
    features: Features,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let outcome = runtime.block_on(async {
        let ctx = Arc::new(TestContext::new().map_err(|e| e.to_string())?);
        let kv = factory
            .open(&ctx)
            .await
            .map_err(|e| format!("opening the backend failed: {e}"))?;
        let env = Env {
            kv: kv.clone(),
            ctx,
            features,
            factory: factory.clone(),
        };
        let body = AssertUnwindSafe((case.run)(env)).catch_unwind();
        let result = match tokio::time::timeout(case.timeout, body).await {
            Err(_) => Err(format!("timed out after {:?}", case.timeout)),
            Ok(Err(panic)) => Err(panic_message(&*panic)),
            Ok(Ok(())) => Ok(()),
        };
        let _ = kv.close().await;
        result
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    outcome
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "the case panicked".to_owned()
    }
}

/// Works out what the backend offers by opening it once.
pub fn probe_features(factory: &Arc<dyn BackendFactory>) -> Result<Features, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    runtime.block_on(async {
        let ctx = TestContext::new().map_err(|e| e.to_string())?;
        let kv = factory
            .open(&ctx)
            .await
            .map_err(|e| format!("opening the backend failed: {e}"))?;
        let caps = kv.capabilities();
        let _ = kv.close().await;
        Ok(Features::from_capabilities(caps, factory.can_reopen(caps)))
    })
}
