//! The commands: each turns its arguments into a session of a mode ([`record`], [`leaks`]), or
//! profiles continuously ([`agent`]), shows it live ([`top`]), renders recordings ([`report`]),
//! or checks the machine ([`check`]).
mod agent;
mod check;
mod leaks;
mod record;
mod report;
mod top;

use anyhow::Result;

use crate::cli::{Cli, Command};

/// Runs the command the command line names.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Record(args) => block_on(record::run(args)),
        Command::Leaks(args) => block_on(leaks::run(args)),
        Command::Report(args) => report::run(&args),
        Command::Diff(args) => report::diff(&args),
        Command::Agent(args) => block_on(agent::run(args)),
        Command::Top(args) => block_on(top::run(args)),
        Command::Check(args) => check::run(&args.pids),
        Command::Completions(args) => {
            clap_complete::generate(
                args.shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "profiler",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    }
}

/// Runs a command that waits on the kernel, on a single-threaded runtime.
fn block_on(command: impl Future<Output = Result<()>>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| anyhow::Error::new(err).context("cannot start the async runtime"))?;
    runtime.block_on(command)
}
