//! `kv`: inspect and move Deno KV data in any backend, from the command line.
//!
//! ```text
//! kv set '["users", 1n]' '{"name": "Alice"}'      # ./kv.sqlite3, created on first write
//! kv list '["users"]'
//! kv --db redb:./data.redb migrate sqlite:./copy.sqlite3
//! kv dump ./kv.sqlite3 -o dump.jsonl                # reading commands take the database too
//! kv backup backup.jsonl                            # one snapshot of a live database
//! kv completions bash > ~/.local/share/bash-completion/completions/kv
//! kv --db redb:./restored.redb restore backup.jsonl # versionstamps kept
//! ```
//!
//! Run `kv --help` for every subcommand.

mod backup;
mod bucket;
mod change_log;
mod cli;
mod commands;
mod conformance;
mod dump;
mod duration;
mod error;
mod key_syntax;
mod logging;
mod manual;
mod near_key;
mod output_file;
mod plain_json;
mod progress;
mod ranges;
mod serve;
mod shipping;
mod store;

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::cli::{BackupsAction, Cli, Command, LogAction};
use crate::commands::ListArgs;
use crate::error::CliError;
use crate::store::chosen_database;

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let db_on_command_line = matches.value_source("db") == Some(ValueSource::CommandLine);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    if let Some(ca) = cli.ca.clone() {
        store::trust_ca_file(ca);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("kv: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&cli.db, db_on_command_line, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("kv: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `command` on `db` (`--db`, `KV_DB` or the default; `db_on_command_line`: typed as
/// `--db`).
async fn run(db: &str, db_on_command_line: bool, command: Command) -> Result<(), CliError> {
    match command {
        Command::Get { key, output } => commands::get(db, &key, output.format).await,
        Command::Set {
            key,
            value,
            value_type,
            expire_in,
        } => commands::set(db, &key, &value, value_type, expire_in).await,
        Command::Delete {
            key,
            prefix,
            start,
            end,
            yes,
        } => match key {
            Some(key) => commands::delete(db, &key).await,
            None => {
                let range = ranges::RangeArgs { prefix, start, end };
                ranges::delete_range(db, &range, yes).await
            }
        },
        Command::List {
            prefix,
            start,
            end,
            limit,
            reverse,
            cursor,
            output,
        } => {
            let args = ListArgs {
                prefix,
                start,
                end,
                limit,
                reverse,
                cursor,
            };
            commands::list(db, args, output.format).await
        }
        Command::Watch {
            keys,
            prefix,
            count,
            output,
        } => match prefix {
            Some(prefix) => ranges::watch_prefix(db, &prefix, count, output.format).await,
            None => commands::watch(db, &keys, count, output.format).await,
        },
        Command::Enqueue {
            value,
            value_type,
            delay,
            if_undelivered,
        } => commands::enqueue(db, &value, value_type, delay, &if_undelivered).await,
        Command::Dump { database, output } => {
            let db = chosen_database(db, db_on_command_line, database.database)?;
            commands::dump(&db, output.as_deref()).await
        }
        Command::Load { input } => commands::load(db, &input).await,
        Command::Backup { file } => backup::backup(db, &file).await,
        Command::Restore {
            file,
            from,
            at,
            log,
        } => match (file, from, at, log) {
            (_, Some(from), at, _) => bucket::restore_from(&from, at, db).await,
            (Some(file), None, Some(at), Some(log)) => {
                backup::restore_at(&file, db, at, &log).await
            }
            (Some(_), None, Some(_), None) => Err(CliError::BadRestorePoint),
            (Some(file), None, None, _) => backup::restore(&file, db).await,
            // clap requires a file or --from.
            (None, None, _, _) => Err(CliError::BadRestorePoint),
        },
        Command::Replicate(args) => bucket::replicate(db, args).await,
        Command::Backups { action } => match action {
            BackupsAction::List { url, format } => bucket::list(&url, format).await,
            BackupsAction::Status { url, format } => bucket::status(db, &url, format).await,
        },
        Command::Log { action } => match action {
            LogAction::Status => change_log::status(db).await,
            LogAction::Enable { keep } => change_log::enable(db, keep).await,
            LogAction::Disable => change_log::disable(db).await,
        },
        Command::Stats { database, prefix } => {
            let db = chosen_database(db, db_on_command_line, database.database)?;
            match prefix {
                Some(prefix) => ranges::stats_prefix(&db, &prefix).await,
                None => commands::stats(&db).await,
            }
        }
        Command::Check { database } => {
            let db = chosen_database(db, db_on_command_line, database.database)?;
            commands::check(&db).await
        }
        Command::Migrate { target } => commands::migrate(db, &target).await,
        Command::Key { action } => commands::key(action),
        Command::Completions { shell } => manual::completions(shell),
        Command::Man { subcommand } => manual::man_page(subcommand.as_deref()),
        Command::Serve(args) => serve::serve(db, args).await,
        Command::Conformance(args) => conformance::conformance(args).await,
    }
}
