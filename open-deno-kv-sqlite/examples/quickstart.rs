//! open-deno-kv-sqlite in one run: open (or create) a Deno KV file, count this run with an optimistic
//! check-and-set, keep a log of runs under versionstamped keys, list it, and pass a message
//! through the queue. Run it twice: the counter goes on from where it was, because the file is
//! durable.
//!
//! ```text
//! cargo run -p open-deno-kv-sqlite --example quickstart [PATH]     # PATH defaults to ./kv.sqlite3
//! ```
//!
//! The file is the one Deno writes: `deno run --unstable-kv` with
//! `const kv = await Deno.openKv("kv.sqlite3"); console.log(await kv.get(["runs"]))`
//! prints the same counter (`Deno.KvU64`).

use std::time::Duration;

use open_deno_kv_engine_kit::chrono::Utc;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, Enqueue, KvValue, Mutation, MutationKind, ReadRange, SnapshotRead,
    decode_key, encode_key, key,
};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "kv.sqlite3".into());
    let kv = SqliteBackend::open(&path)?;
    println!("opened {path}");

    // Count this run: read the counter, then write it back only if nobody changed it since.
    let counter = encode_key(&key!["runs"])?;
    let runs = loop {
        let read = SnapshotRead {
            ranges: vec![ReadRange::single_encoded_key(counter.clone())],
            ..Default::default()
        };
        let current = kv.snapshot_read(read).await?.remove(0).entries.pop();
        let (seen, runs) = match current {
            Some(entry) => match entry.value {
                KvValue::U64(n) => (Some(entry.versionstamp), n + 1),
                other => return Err(format!("[\"runs\"] holds {other:?}, not a u64").into()),
            },
            None => (None, 1),
        };
        let write = AtomicWrite {
            checks: vec![Check {
                key: counter.clone(),
                versionstamp: seen,
            }],
            mutations: vec![
                Mutation::set(counter.clone(), KvValue::U64(runs)),
                // The run's time under a key that ends with this commit's versionstamp.
                Mutation {
                    key: encode_key(&key!["log"])?,
                    kind: MutationKind::SetSuffixVersionstampedKey(KvValue::U64(u64::try_from(
                        Utc::now().timestamp_millis(),
                    )?)),
                    expire_at: None,
                },
            ],
            enqueues: vec![Enqueue {
                payload: open_deno_kv_engine_kit::rules::v8_number(runs as f64),
                ready_at: Utc::now(),
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
        };
        if let Some(commit) = kv.atomic_write(write).await? {
            println!(
                "run #{runs}, committed at versionstamp {}",
                commit.versionstamp
            );
            break runs;
        }
        // Another process counted at the same moment: read again and retry.
    };

    // The log, newest first: versionstamped keys sort in commit order.
    let mut log = ReadRange::prefix(&key!["log"], 5)?;
    log.reverse = true;
    let read = SnapshotRead {
        ranges: vec![log],
        ..Default::default()
    };
    println!("latest runs:");
    for entry in &kv.snapshot_read(read).await?[0].entries {
        println!("  {}  {:?}", decode_key(&entry.key)?, entry.value);
    }

    // The message enqueued with this run (and any an earlier run left undelivered).
    // Nothing more within 200 ms means the queue is drained.
    while let Ok(next) =
        tokio::time::timeout(Duration::from_millis(200), kv.dequeue_next_message()).await
    {
        let Some(message) = next? else { break };
        println!("queue delivered {} payload bytes", message.payload().len());
        message.finish(true).await?;
    }

    kv.close().await?;
    println!("{runs} run(s) recorded in {path}");
    Ok(())
}
