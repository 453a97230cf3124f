//! The `profiler` command.
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser as _};
use profiler::{
    check,
    cli::{Cli, Command},
    leaks, record, report,
};

fn main() -> ExitCode {
    // A panic is a bug, reported in one line; the stages contain the ones they can survive.
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        eprintln!("profiler: internal error: {message}{location}");
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(args) => block_on(record::run(args)),
        Command::Leaks(args) => block_on(leaks::run(args)),
        Command::Report(args) => report::run(&args),
        Command::Diff(args) => report::diff(&args),
        Command::Check(args) => check::run(&args.pids),
        Command::Completions(args) => {
            clap_complete::generate(args.shell, &mut Cli::command(), "profiler", &mut std::io::stdout());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("profiler: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a command that waits on the kernel, on a single-threaded runtime.
fn block_on(command: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| anyhow::Error::new(err).context("cannot start the async runtime"))?;
    runtime.block_on(command)
}
