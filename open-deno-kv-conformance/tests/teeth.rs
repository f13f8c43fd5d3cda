//! The suite's teeth, measured: every seeded fault must make some case fail.
//!
//! Runs the whole suite on open-deno-kv-memory (the baseline must pass), then once per fault in
//! `open_deno_kv_conformance::faults`, and prints which cases caught each fault.

use std::sync::{Arc, Mutex};

use open_deno_kv_conformance::faults::{Fault, FaultyFactory};
use open_deno_kv_conformance::{
    BackendFactory, Case, FnFactory, TestContext, all_cases, probe_backend, run_case,
};
use open_deno_kv_memory::{MemoryBackend, MemoryStore};
use open_deno_kv_model::Backend;

fn memory_factory() -> Arc<dyn BackendFactory> {
    Arc::new(
        FnFactory::new(|ctx: &TestContext| {
            let backend =
                MemoryBackend::open(&ctx.slot(MemoryStore::new), Arc::new(ctx.clock().clone()));
            async move { Ok(Arc::new(backend) as Arc<dyn Backend>) }
        })
        .reopens(true),
    )
}

/// Runs every supported case (in parallel threads) and returns the names of those that failed.
fn failing_cases(factory: &Arc<dyn BackendFactory>, cases: &[Case]) -> Vec<String> {
    let offered = probe_backend(factory).expect("probe the backend");
    let next = Mutex::new(cases.iter().filter(|c| offered.runs(c)));
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                loop {
                    let Some(case) = next.lock().expect("case list").next() else {
                        return;
                    };
                    if run_case(case, factory, offered).is_err() {
                        failed.lock().expect("results").push(case.name.clone());
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().expect("results");
    failed.sort();
    failed
}

#[test]
fn every_seeded_fault_is_caught() {
    let cases = all_cases();
    let baseline = failing_cases(&memory_factory(), &cases);
    assert!(
        baseline.is_empty(),
        "the suite must pass on the plain backend first; failing: {baseline:?}"
    );

    let mut missed = Vec::new();
    println!(
        "{} cases; which of them catch each seeded fault:",
        cases.len()
    );
    for fault in Fault::ALL {
        let factory: Arc<dyn BackendFactory> =
            Arc::new(FaultyFactory::new(memory_factory(), fault));
        let caught_by = failing_cases(&factory, &cases);
        println!(
            "{fault:?}: {} cases: {}",
            caught_by.len(),
            caught_by.join(", ")
        );
        if caught_by.is_empty() {
            missed.push(fault);
        }
    }
    assert!(missed.is_empty(), "faults no case caught: {missed:?}");
}
