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

/// Threads running the faults' cases at once. Most of a fault's time is spent waiting: a case
/// that hangs on a fault (a dropped wake-up, a lost message) runs until its timeout. So the cases
/// of every fault share one pool, and the waits overlap instead of adding up (the whole run is
/// mostly idle CPU: ~11 s of it over the 160 s it took one fault after the other). A case that
/// fails only because the machine is busy can at worst hide a miss here, never fail the test.
const FAULT_THREADS: usize = 32;

/// Threads for the baseline, which must pass: few, so that no case there fails for lack of CPU.
const BASELINE_THREADS: usize = 8;

/// Runs every supported case against each factory (all in one pool of threads) and returns, per
/// factory, the names of the cases that failed.
fn failing_cases(
    factories: &[Arc<dyn BackendFactory>],
    cases: &[Case],
    threads: usize,
) -> Vec<Vec<String>> {
    let mut jobs: Vec<(usize, &Case, _)> = factories
        .iter()
        .enumerate()
        .flat_map(|(index, factory)| {
            let offered = probe_backend(factory).expect("probe the backend");
            cases
                .iter()
                .filter(move |c| offered.runs(c))
                .map(move |case| (index, case, offered))
        })
        .collect();
    // The cases allowed to run long first (the model's random sequences shrink a failure for up
    // to a minute), so that the pool does not end waiting for one of them started last.
    jobs.sort_by_key(|(_, case, _)| std::cmp::Reverse(case.timeout));
    let next = Mutex::new(jobs.into_iter());
    let failed = Mutex::new(vec![Vec::new(); factories.len()]);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let Some((index, case, offered)) = next.lock().expect("case list").next()
                    else {
                        return;
                    };
                    if run_case(case, &factories[index], offered).is_err() {
                        failed.lock().expect("results")[index].push(case.name.clone());
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().expect("results");
    failed.iter_mut().for_each(|names| names.sort());
    failed
}

#[test]
fn every_seeded_fault_is_caught() {
    let cases = all_cases();
    let baseline = failing_cases(&[memory_factory()], &cases, BASELINE_THREADS);
    assert!(
        baseline.iter().all(Vec::is_empty),
        "the suite must pass on the plain backend first; failing: {baseline:?}"
    );

    let factories: Vec<Arc<dyn BackendFactory>> = Fault::ALL
        .iter()
        .map(|fault| {
            Arc::new(FaultyFactory::new(memory_factory(), *fault)) as Arc<dyn BackendFactory>
        })
        .collect();
    let caught = failing_cases(&factories, &cases, FAULT_THREADS);
    println!(
        "{} cases; which of them catch each seeded fault:",
        cases.len()
    );
    let mut missed = Vec::new();
    for (fault, caught_by) in Fault::ALL.iter().zip(&caught) {
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
