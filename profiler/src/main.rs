//! `profiler`: a system-wide sampling profiler for Linux built on eBPF.
//!
//! Data flows one way (see ARCHITECTURE.md): sampler (kernel) → ring → decode → collect
//! (address → module + offset) → profile → symbolize → render → output.
mod cli;
mod collect;
mod decode;
mod frame;
mod maps;
mod module;
mod output;
mod preflight;
mod process;
mod profile;
mod record;
mod render;
mod ring;
mod sampler;
mod symbolize;
mod target;
mod unwind;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            return fail(&anyhow::Error::new(err).context("cannot start the async runtime"));
        }
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
