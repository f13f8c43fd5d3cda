//! The command line of a benchmark run.

use std::path::PathBuf;

use crate::spec::{Durability, Mode, Target, Workload, parse_scale};

/// The usage text.
pub const USAGE: &str = "\
open-deno-kv-bench: Deno KV backends (memory, sqlite, redb, postgres) side by side, with raw rusqlite and
raw redb floors and the denokv_sqlite anchor, on fresh databases.

usage: open-deno-kv-bench [options]
  --scale F             multiply every operation count and the data set by F (default 1;
                        0.1 for a quick run)
  --workloads W1,W3,..  which of W1..W7 to run (default all)
                          W1 sequential sets        W2 the same sets from 64 tasks
                          W3 random point gets      W4 scans of 100 entries
                          W5 check-and-set counter  W6 u64 sums on 16 hot keys
                          W7 enqueue then consume messages
  --backends memory,..  which of memory, sqlite, redb, denokv, postgres, postgres-replica to
                        run (default memory, sqlite, redb, denokv); the raw floor of sqlite and
                        redb runs with it for W1, W3 and W4. postgres-replica runs W3 and W4 as
                        eventual reads, served by a streaming replica. denokv is the anchor,
                        denokv_sqlite 0.14 (Deno's own SQLite engine) in the open-deno-kv-bench-anchor
                        binary; if that is not found the report says so and the rest runs
  --anchor PATH         the open-deno-kv-bench-anchor binary (default: next to this binary, else
                        open-deno-kv-bench/anchor/target/release; build it with
                        cargo build --release --manifest-path open-deno-kv-bench/anchor/Cargo.toml)
  --postgres-url URL    the PostgreSQL server of postgres (default: a throwaway cluster of
                        the PostgreSQL installed here, started for the run, with a replica
                        for postgres-replica). Each store is a schema store_<hash>, left behind
  --postgres-replica-url URL
                        the streaming replica of --postgres-url, for postgres-replica
  --no-floors           skip the raw rusqlite / raw redb floors
  --durability D        full (default: survives a machine crash) or process (survives a
                        process crash); mapped onto each engine and its floor alike
  --mode M              how the workloads drive the stores: multi (default: tasks on a
                        multi-thread runtime's workers), current (tasks on a current-thread
                        runtime) or joined (futures joined on a multi-thread runtime's
                        block_on thread, no spawn); the raw floors are the same in every mode
  --rounds N            run everything N times and report medians (default 1; the published
                        figures use 3)
  --scaling             also run W3 and W4 over 10^4, 10^5 and 10^6 keys (times --scale)
  --dir PATH            put the databases under PATH (default: the system temp dir)
  --json                print the results as JSON on stdout (progress stays on stderr)
  --json-file PATH      also write the JSON results to PATH (with the text report on stdout)
  -h, --help            this text

Each target's workloads run in child processes of this binary (`open-deno-kv-bench child ...`), whose
peak resident memory (VmHWM) is reported per backend.

open-deno-kv-bench diagnose-memory [--keys N] [--gets N]
                        time point lookups in open-deno-kv-memory's map layout and in alternatives
open-deno-kv-bench diagnose-commits [--sets N] [--rounds N]
                        time durable sets by open-deno-kv-sqlite against raw SQLite (Deno's layout and
                        the kv table alone), and count the pages each commit writes
open-deno-kv-bench diagnose-ranges [--entries N] [--rounds N]
                        time deleting and counting a prefix of N entries with the range
                        operations against listing it page by page (memory, sqlite, redb)
open-deno-kv-bench diagnose-scans [--keys N] [--scans N] [--rounds N]
                        time W4's scans of 100 on open-deno-kv-redb, on the raw redb floor, and
                        on raw redb answering a page of owned entries, alternating per round
open-deno-kv-bench diagnose-change-log [--sets N] [--rounds N] [--engines sqlite,redb,postgres]
    [--postgres-url URL]
                        time W1 (N sequential durable sets, default 5,000, 7 rounds) with the
                        change log off and on, per engine, and check the log's record count;
                        an engine without the log is reported as such. postgres runs on a
                        throwaway cluster unless --postgres-url is given
open-deno-kv-bench diagnose-shipping [--sets N] [--rounds N]
                        time W2 on SQLite (N durable sets over 64 tasks, default 20,000, 5
                        rounds) without and with a continuous-backup shipper running beside it
                        (into a local directory), and check the bucket caught up";

/// Options of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Operation count multiplier.
    pub scale: f64,
    /// Selected workloads, in W1..W7 order.
    pub workloads: Vec<Workload>,
    /// Selected backends, in memory, sqlite, redb order.
    pub backends: Vec<Target>,
    /// Run the raw floors.
    pub floors: bool,
    /// Write durability.
    pub durability: Durability,
    /// How the workloads drive the stores.
    pub mode: Mode,
    /// Rounds (medians reported).
    pub rounds: usize,
    /// Run the dataset scaling phase.
    pub scaling: bool,
    /// Where the databases go.
    pub dir: Option<PathBuf>,
    /// JSON output.
    pub json: bool,
    /// Also write the JSON results here.
    pub json_file: Option<PathBuf>,
    pub postgres_url: Option<String>,
    pub postgres_replica_url: Option<String>,
    /// The anchor's binary, if given (else looked for).
    pub anchor: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scale: 1.0,
            workloads: Workload::SELECTABLE.to_vec(),
            backends: Target::BACKENDS.to_vec(),
            floors: true,
            durability: Durability::Full,
            mode: Mode::Multi,
            rounds: 1,
            scaling: false,
            dir: None,
            json: false,
            json_file: None,
            postgres_url: None,
            postgres_replica_url: None,
            anchor: None,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// Run the benchmarks.
    Run(Options),
    /// Print the usage.
    Help,
}

fn parse_list<T>(
    flag: &str,
    text: &str,
    parse: impl Fn(&str) -> Option<T>,
    all: &[T],
) -> Result<Vec<T>, String>
where
    T: Copy + PartialEq,
{
    let mut chosen = Vec::new();
    for item in text.split(',').filter(|s| !s.trim().is_empty()) {
        let value = parse(item).ok_or_else(|| format!("{flag}: unknown name {item}"))?;
        if !all.contains(&value) {
            return Err(format!("{flag}: {item} cannot be chosen here"));
        }
        if !chosen.contains(&value) {
            chosen.push(value);
        }
    }
    if chosen.is_empty() {
        return Err(format!("{flag}: name at least one"));
    }
    // Keep the canonical order whatever the order given.
    Ok(all.iter().copied().filter(|v| chosen.contains(v)).collect())
}

/// Parses the command line (without the program name).
pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut options = Options::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "--scale" => options.scale = parse_scale(&value()?)?,
            "--workloads" => {
                options.workloads =
                    parse_list(flag, &value()?, Workload::parse, &Workload::SELECTABLE)?
            }
            "--backends" => {
                options.backends = parse_list(flag, &value()?, Target::parse, &Target::SELECTABLE)?
            }
            "--durability" => {
                let v = value()?;
                options.durability = Durability::parse(&v)
                    .ok_or_else(|| format!("--durability: full or process, not {v}"))?;
            }
            "--mode" => {
                let v = value()?;
                options.mode = Mode::parse(&v)
                    .ok_or_else(|| format!("--mode: multi, current or joined, not {v}"))?;
            }
            "--rounds" => {
                let v = value()?;
                options.rounds = v
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| (1..=100).contains(&n))
                    .ok_or_else(|| format!("--rounds: a number from 1 to 100, not {v}"))?;
            }
            "--dir" => options.dir = Some(PathBuf::from(value()?)),
            "--scaling" => options.scaling = true,
            "--no-floors" => options.floors = false,
            "--json" => options.json = true,
            "--json-file" => options.json_file = Some(PathBuf::from(value()?)),
            "--postgres-url" => options.postgres_url = Some(value()?),
            "--postgres-replica-url" => options.postgres_replica_url = Some(value()?),
            "--anchor" => options.anchor = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Ok(Command::Help),
            other => return Err(format!("unknown argument {other} (try --help)")),
        }
    }
    Ok(Command::Run(options))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn defaults_run_everything() {
        assert_eq!(parse(&[]), Ok(Command::Run(Options::default())));
    }

    #[test]
    fn options_parse() {
        let Ok(Command::Run(o)) = parse(&args(
            "--scale=0.1 --workloads w3,W1,W3 --backends redb,memory --durability process \
             --rounds 3 --scaling --json --no-floors --dir /tmp/b --json-file=r.json \
             --anchor /x/open-deno-kv-bench-anchor",
        )) else {
            panic!("did not parse");
        };
        assert_eq!(o.scale, 0.1);
        assert_eq!(o.workloads, vec![Workload::W1, Workload::W3]);
        assert_eq!(o.backends, vec![Target::Memory, Target::Redb]);
        assert_eq!(o.durability, Durability::Process);
        assert_eq!(o.rounds, 3);
        assert!(o.scaling && o.json && !o.floors);
        assert_eq!(o.dir, Some(PathBuf::from("/tmp/b")));
        assert_eq!(o.json_file, Some(PathBuf::from("r.json")));
        assert_eq!(
            o.anchor,
            Some(PathBuf::from("/x/open-deno-kv-bench-anchor"))
        );

        let Ok(Command::Run(o)) = parse(&args(
            "--backends postgres-replica,postgres --postgres-url postgres://a@h/db \
             --postgres-replica-url=postgres://a@r/db",
        )) else {
            panic!("did not parse");
        };
        assert_eq!(o.backends, vec![Target::Postgres, Target::PostgresReplica]);
        assert_eq!(o.postgres_url.as_deref(), Some("postgres://a@h/db"));
        assert_eq!(o.postgres_replica_url.as_deref(), Some("postgres://a@r/db"));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for bad in [
            "--scale",
            "--scale 0",
            "--scale -1",
            "--scale nan",
            "--scale x",
            "--workloads W9",
            "--workloads ,",
            "--workloads W3-1core",
            "--backends raw-sqlite",
            "--durability fast",
            "--rounds 0",
            "--frobnicate",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad} was accepted");
        }
        assert_eq!(parse(&args("-h")), Ok(Command::Help));
    }
}
