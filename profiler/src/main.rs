//! The `profiler` command.
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser as _};
use profiler::{
    cli::{Cli, Command},
    record, report,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(args) => match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(record::run(args)),
            Err(err) => Err(anyhow::Error::new(err).context("cannot start the async runtime")),
        },
        Command::Report(args) => report::run(&args),
        Command::Diff(args) => report::diff(&args),
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
