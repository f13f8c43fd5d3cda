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
use open_deno_kv_model::{Backend, Capabilities, Clock, KvError, ManualClock};

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

    /// Called once a case has finished (passed, failed or not), after its backend was closed:
    /// where the store outlives the case (a shared server), the factory deletes what the case
    /// left. Nothing by default: a local store goes away with its context.
    async fn finish_case(&self) -> Result<(), KvError> {
        Ok(())
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

/// What the backend under test offers, as the suite sees it: the [`Capabilities`] it reports
/// (the engine's own vocabulary, the one the suite reads) and whether its factory reopens the same
/// data ([`BackendFactory::can_reopen`], a property of the test setup rather than of the backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offered {
    /// What the backend reports.
    pub capabilities: Capabilities,
    /// Whether opening twice on one context gives the same data.
    pub can_reopen: bool,
    /// Whether the backend takes its time from the context's [`ManualClock`], so that
    /// [`Env::advance`] moves the store's time. When it does not (a server elsewhere), each
    /// context's clock starts at the real time and a case that moves the clock stops as
    /// [`crate::NotRunnable`].
    pub manual_clock: bool,
}

impl Offered {
    /// Whether `case` can run here: the backend's capabilities cover what the case needs, and a
    /// case that reopens the store has a factory that can. A case that cannot run is registered
    /// as **ignored** (not run, not passed), so a backend without a capability never passes its
    /// cases vacuously.
    pub fn runs(&self, case: &Case) -> bool {
        self.capabilities.covers(case.needs) && (!case.reopens || self.can_reopen)
    }
}

/// What a case works with: the open backend, its context, and the factory to reopen it.
pub struct Env {
    /// The backend under test.
    pub kv: Arc<dyn Backend>,
    /// The test's context (clock, directory).
    pub ctx: Arc<TestContext>,
    /// What the backend offers.
    pub offered: Offered,
    factory: Arc<dyn BackendFactory>,
}

impl Env {
    /// The test's manual clock.
    pub fn clock(&self) -> &ManualClock {
        self.ctx.clock()
    }

    /// Moves the clock forward. Where the backend's time is not the context's clock
    /// ([`Offered::manual_clock`] is false), the case stops here as not runnable.
    pub fn advance(&self, by: Duration) {
        if !self.offered.manual_clock {
            crate::NotRunnable::stop(
                "needs a manual clock: it moves time forward, and a server's clock cannot be moved",
            );
        }
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
        if !self.offered.manual_clock {
            ctx.clock().set(self.clock().now());
        }
        let kv = self.factory.open(&ctx).await?;
        Ok(Env {
            kv,
            ctx,
            offered: self.offered,
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
    /// The capabilities the backend must report for the case to run ([`Capabilities::none`]
    /// for reads and writes only).
    pub needs: Capabilities,
    /// Whether the case closes and reopens the store ([`Env::reopen`]).
    pub reopens: bool,
    /// How long the case may run; [`CASE_TIMEOUT`] unless set.
    pub timeout: Duration,
    run: CaseFn,
}

impl Case {
    /// A case that runs `body`; it fails by panicking (`assert!`), like any Rust test.
    pub fn new<F, Fut>(name: impl Into<String>, needs: Capabilities, body: F) -> Self
    where
        F: Fn(Env) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Case {
            name: name.into(),
            needs,
            reopens: false,
            timeout: CASE_TIMEOUT,
            run: Arc::new(move |env| body(env).boxed()),
        }
    }

    /// Marks the case as one that closes and reopens the store: it runs only where the factory
    /// reopens the same data.
    pub fn reopening(mut self) -> Self {
        self.reopens = true;
        self
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

/// What became of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran to its end.
    Passed,
    /// An assertion failed (the message: usually what was expected and what was seen), it
    /// timed out, or the backend could not be opened.
    Failed(String),
    /// It stopped as [`crate::NotRunnable`] here: the reason.
    NotRun(String),
}

/// Runs one case on a fresh context and runtime. `Err` carries the failure message (or the
/// reason it could not run).
pub fn run_case(
    case: &Case,
    factory: &Arc<dyn BackendFactory>,
    offered: Offered,
) -> Result<(), String> {
    match run_case_outcome(case, factory, offered) {
        Outcome::Passed => Ok(()),
        Outcome::Failed(message) => Err(message),
        Outcome::NotRun(reason) => Err(format!("could not run: {reason}")),
    }
}

/// Runs one case on a fresh context and runtime, and says what became of it; then lets the
/// factory clean up ([`BackendFactory::finish_case`]). A panic (a failed assertion) is caught
/// and becomes [`Outcome::Failed`] with its message; a [`crate::NotRunnable`] panic becomes
/// [`Outcome::NotRun`].
pub fn run_case_outcome(
    case: &Case,
    factory: &Arc<dyn BackendFactory>,
    offered: Offered,
) -> Outcome {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return Outcome::Failed(format!("cannot start a tokio runtime: {e}")),
    };
    let outcome = runtime.block_on(async {
        let ctx = match TestContext::new() {
            Ok(ctx) => Arc::new(ctx),
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        if !offered.manual_clock {
            ctx.clock().set(chrono::Utc::now());
        }
        let kv = match factory.open(&ctx).await {
            Ok(kv) => kv,
            Err(e) => return Outcome::Failed(format!("opening the backend failed: {e}")),
        };
        let env = Env {
            kv: kv.clone(),
            ctx,
            offered,
            factory: factory.clone(),
        };
        let body = AssertUnwindSafe((case.run)(env)).catch_unwind();
        let result = match tokio::time::timeout(case.timeout, body).await {
            Err(_) => Outcome::Failed(format!("timed out after {:?}", case.timeout)),
            Ok(Err(panic)) => match panic.downcast_ref::<crate::NotRunnable>() {
                Some(not_runnable) => Outcome::NotRun(not_runnable.0.clone()),
                None => Outcome::Failed(panic_message(&*panic)),
            },
            Ok(Ok(())) => Outcome::Passed,
        };
        let _ = kv.close().await;
        match factory.finish_case().await {
            Err(e) if result == Outcome::Passed => {
                Outcome::Failed(format!("cleaning up after the case failed: {e}"))
            }
            _ => result,
        }
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
pub fn probe_backend(factory: &Arc<dyn BackendFactory>) -> Result<Offered, String> {
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
        Ok(Offered {
            capabilities: caps,
            can_reopen: factory.can_reopen(caps),
            manual_clock: true,
        })
    })
}
