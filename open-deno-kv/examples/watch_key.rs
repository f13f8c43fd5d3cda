//! Watching a key: the stream yields the key's entry at once, then again after each change —
//! here three updates and a delete made by another task.
//!
//! ```text
//! cargo run -p open-deno-kv --example watch_key
//! ```

use std::time::Duration;

use futures::StreamExt;
use open_deno_kv::{Kv, key};

#[tokio::main]
async fn main() -> open_deno_kv::Result<()> {
    let kv = Kv::open("memory:").await?;
    kv.set(key!["config", "mode"], "starting").await?;
    let mut watch = kv.watch([key!["config", "mode"]])?;

    let writer = {
        let kv = kv.clone();
        tokio::spawn(async move {
            for mode in ["ready", "busy", "ready"] {
                tokio::time::sleep(Duration::from_millis(50)).await;
                kv.set(key!["config", "mode"], mode).await?;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            kv.delete(key!["config", "mode"]).await?;
            Ok::<(), open_deno_kv::Error>(())
        })
    };

    let mut seen = 0;
    while let Some(state) = watch.next().await {
        let entry = &state?[0];
        let mode: Option<String> = entry.value_as()?;
        let shown = mode.as_deref().unwrap_or("(absent)");
        let stamp = entry
            .versionstamp
            .map(|v| v.to_string())
            .unwrap_or_default();
        println!("{} = {shown} {stamp}", entry.key);
        seen += 1;
        if mode.is_none() {
            break; // deleted
        }
    }
    writer.await.map_err(open_deno_kv::Error::storage)??;
    println!("{seen} states seen");
    kv.close().await?;
    Ok(())
}
