//! The `profiler` command.
use std::process::ExitCode;

use clap::Parser as _;
use profiler::{Cli, printable};

fn main() -> ExitCode {
    // Started by the profiler to read targets' memory for one of its threads.
    if std::env::args_os().nth(1).is_some_and(|arg| arg == profiler::READER_ARG) {
        return match profiler::serve_memory_reads() {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    one_malloc_arena();
    // A panic is a bug, reported in one line; the stages contain the ones they can survive.
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        eprintln!("profiler: internal error: {}{location}", printable(&message));
    }));
    match profiler::run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Errors may quote what a target named (a path, a process's name).
            eprintln!("profiler: error: {}", printable(&format!("{err:#}")));
            ExitCode::FAILURE
        }
    }
}

/// glibc gives each thread that allocates an arena of its own: the naming thread's held a few
/// MiB of free chunks the main thread could have reused. The two seldom allocate at once, and
/// tcache serves their small allocations without the arena's lock.
fn one_malloc_arena() {
    // SAFETY: mallopt only sets an allocator parameter; called before any other thread starts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
