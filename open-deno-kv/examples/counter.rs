//! A page-view counter, two ways: an optimistic check-and-set loop (read, compute, write only if
//! unchanged), and a `sum`, which needs no loop. Eight tasks count at once; no update is lost.
//!
//! ```text
//! cargo run -p open-deno-kv --example counter [PATH]      # PATH defaults to a fresh file in a temp dir
//! ```

use open_deno_kv::{CommitOutcome, Kv, key};

/// Adds one with a check-and-set, retrying when another writer got there first.
async fn increment(kv: &Kv) -> open_deno_kv::Result<(u64, usize)> {
    let mut retries = 0;
    loop {
        let current = kv.get(key!["views", "checked"]).await?;
        let n: u64 = current.value_as()?.unwrap_or(0);
        let outcome = kv
            .atomic()
            .check(&current)
            .set(key!["views", "checked"], n + 1)
            .commit()
            .await?;
        match outcome {
            CommitOutcome::Committed { .. } => return Ok((n + 1, retries)),
            CommitOutcome::CheckFailed => retries += 1,
        }
    }
}

#[tokio::main]
async fn main() -> open_deno_kv::Result<()> {
    let dir = tempfile::tempdir().map_err(open_deno_kv::Error::storage)?;
    let path = match std::env::args().nth(1) {
        Some(path) => path,
        None => dir.path().join("counter.sqlite3").display().to_string(),
    };
    let kv = Kv::open(&path).await?;

    let mut tasks = Vec::new();
    for _ in 0..8 {
        let kv = kv.clone();
        tasks.push(tokio::spawn(async move {
            let mut retries = 0;
            for _ in 0..25 {
                retries += increment(&kv).await?.1;
                let summed = kv
                    .atomic()
                    .sum(key!["views", "summed"], 1u64)
                    .commit()
                    .await?;
                debug_assert!(summed.is_committed(), "a write without checks commits");
            }
            Ok::<usize, open_deno_kv::Error>(retries)
        }));
    }
    let mut retries = 0;
    for task in tasks {
        retries += task.await.map_err(open_deno_kv::Error::storage)??;
    }

    let [checked, summed] = <[_; 2]>::try_from(
        kv.get_many([key!["views", "checked"], key!["views", "summed"]])
            .await?,
    )
    .map_err(|_| open_deno_kv::Error::invalid_argument("expected two entries"))?;
    println!(
        "check-and-set counter: {} ({retries} retries after a lost race)",
        checked.value_as::<u64>()?.unwrap_or(0)
    );
    println!(
        "sum counter:           {}",
        summed.value_as::<u64>()?.unwrap_or(0)
    );
    kv.close().await?;
    Ok(())
}
