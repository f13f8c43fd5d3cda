//! `open-deno-kv-bench-anchor`: open-deno-kv-bench's child for the `denokv` target.
//!
//! ```text
//! open-deno-kv-bench-anchor child --target denokv --workloads W1,.. --scale F --mode M --dir PATH ...
//! open-deno-kv-bench-anchor about
//! ```
//!
//! open-deno-kv-bench runs it exactly as it runs its own binary for its own engines (the same
//! [`ChildSpec`](open_deno_kv_bench_harness::child::ChildSpec) arguments, the same workload code from
//! open-deno-kv-bench-harness, the same JSON line on stdout). `about` prints, as one JSON line, what the
//! anchor is: the crate, the SQLite it links and the settings denokv_sqlite leaves a file at.

use std::path::Path;
use std::sync::Arc;

use open_deno_kv_bench_anchor::{Denokv, FILE_NAME};
use open_deno_kv_bench_harness::child::{self, ChildSpec, Stores};
use open_deno_kv_bench_harness::data::Result;
use open_deno_kv_bench_harness::spec::{Durability, Target};
use open_deno_kv_bench_harness::workloads::Kv;
use open_deno_kv_engine_kit::Backend;
use serde_json::json;

const USAGE: &str = "usage: open-deno-kv-bench-anchor child --target denokv --workloads W1,.. [--scale F] \
                     [--keys N] [--mode multi|current|joined] --dir PATH\n       open-deno-kv-bench-anchor about";

/// The anchor's stores: a denokv_sqlite file per store directory.
struct Anchor;

impl Stores for Anchor {
    /// Opens denokv at its one setting: `durability` does not apply (denokv_sqlite has no
    /// durability option; Deno and denokv run it at its defaults).
    async fn open(&self, spec: &ChildSpec, dir: &Path, _durability: Durability) -> Result<Kv> {
        if spec.target != Target::Denokv {
            return Err(format!(
                "open-deno-kv-bench-anchor runs denokv only, not {}",
                spec.target
            )
            .into());
        }
        Ok(Arc::new(Denokv::open(&dir.join(FILE_NAME))?))
    }
}

/// `about`: the anchor's identity and settings, read from a scratch database.
fn about() -> Result<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!(
        "open-deno-kv-bench-anchor-about-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let settings = (|| -> Result<_> {
        let kv = Denokv::open(&dir.join(FILE_NAME))?;
        let settings = kv.settings()?;
        tokio::runtime::Builder::new_current_thread()
            .build()?
            .block_on(kv.close())?;
        Ok(settings)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let settings = settings?;
    Ok(json!({
        "engine": "denokv_sqlite 0.14",
        "sqlite_version": settings.sqlite_version,
        "journal_mode": settings.journal_mode,
        "synchronous": settings.synchronous,
        "workers": 1,
        "batch_timeout": null,
    }))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.split_first().map(|(a, rest)| (a.as_str(), rest)) {
        Some(("child", rest)) => child::main(rest, |spec| {
            child::run(spec, |spec| child::run_backend(spec, &Anchor))
        }),
        Some(("about", [])) => match about() {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(err) => {
                eprintln!("open-deno-kv-bench-anchor about: {err}");
                1
            }
        },
        _ => {
            eprintln!("{USAGE}");
            2
        }
    };
    std::process::exit(code);
}
