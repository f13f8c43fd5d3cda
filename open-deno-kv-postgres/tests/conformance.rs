//! open-deno-kv-postgres runs the whole conformance suite against a real PostgreSQL server: one throwaway
//! cluster for the test binary, and a schema of its own for every test context (reopening a
//! context opens the same schema again).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use open_deno_kv_conformance::{FnFactory, TestContext};
use open_deno_kv_engine_kit::Backend;
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};
use open_deno_kv_postgres::{PostgresBackend, PostgresOptions};

/// The schema of one test context.
struct CaseSchema(String);

fn main() -> ExitCode {
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions::default()) else {
        return ExitCode::SUCCESS;
    };
    let url = cluster.url();
    let next = Arc::new(AtomicUsize::new(0));
    let factory = FnFactory::new(move |ctx: &TestContext| {
        let schema =
            ctx.slot(|| CaseSchema(format!("case_{}", next.fetch_add(1, Ordering::Relaxed))));
        let options = PostgresOptions {
            clock: Arc::new(ctx.clock().clone()),
            schema: schema.0.clone(),
            ..PostgresOptions::default()
        };
        let url = url.clone();
        async move {
            let backend = PostgresBackend::open_with(&url, options).await?;
            Ok(Arc::new(backend) as Arc<dyn Backend>)
        }
    });
    let code = open_deno_kv_conformance::run_main(Arc::new(factory));
    // Stops the servers and removes their files (a static would never be dropped).
    drop(cluster);
    code
}
