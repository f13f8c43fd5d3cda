//! `kv completions SHELL` and `kv man`: shell completions and the manual page, generated from
//! the one clap definition ([`crate::cli::Cli`]) that `--help` prints, so they cannot drift
//! from the commands.

use std::io::Write;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;
use crate::commands::stdout_error;
use crate::error::CliError;

/// Prints the completion script for `shell` on standard output.
pub fn completions(shell: Shell) -> Result<(), CliError> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "kv", &mut out);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out).map_err(stdout_error)?;
    stdout.flush().map_err(stdout_error)
}

/// Prints the manual page `kv(1)` in roff on standard output: the synopsis, every option and a
/// SUBCOMMANDS section naming each subcommand's page `kv-NAME(1)` with its summary; with
/// `subcommand`, that page.
pub fn man_page(subcommand: Option<&str>) -> Result<(), CliError> {
    let mut command = Cli::command();
    // Sets every subcommand's usage line to `kv NAME ...`.
    command.build();
    let page = match subcommand.and_then(|name| command.find_subcommand(name)) {
        Some(sub) => {
            let name = format!("kv-{}", sub.get_name());
            sub.clone().name(name).version(env!("CARGO_PKG_VERSION"))
        }
        None => command,
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(stdout_error)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out).map_err(stdout_error)?;
    stdout.flush().map_err(stdout_error)
}
