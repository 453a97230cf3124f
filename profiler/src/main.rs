//! The `profiler` command.
use std::process::ExitCode;

use clap::Parser as _;
use profiler::{
    cli::{Cli, Command},
    record,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => return fail(&anyhow::Error::new(err).context("cannot start the async runtime")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Record(args) => record::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

fn fail(err: &anyhow::Error) -> ExitCode {
    eprintln!("profiler: error: {err:#}");
    ExitCode::FAILURE
}
