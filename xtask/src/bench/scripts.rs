//! What the sections on CPU-bound interpreted scripts ([`ruby`](super::ruby),
//! [`php`](super::php)) share: the programs (a script on an interpreter, or split.c for what a
//! sample costs without one), a measured recording of one attached to while it runs, its row,
//! and the eBPF program's time per sample on each.
use std::{
    ffi::OsString,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Result;

use super::{
    folded::{read_folded, script_quality},
    kernel, median, verdict,
    workloads::{self, on_last_cpu},
};

/// Seconds of the program alone before the tool starts, profiled, and alone after.
pub const BEFORE: f64 = 2.5;
pub const PROFILED: f64 = 5.0;
pub const AFTER: f64 = 3.0;
/// Samples per second: a fleet's rate, and a close look's.
pub const RATES: [u64; 2] = [99, 999];
/// How many times a native sample's CPU a script's sample may cost.
pub const PER_SAMPLE_RATIO_GOAL: f64 = 3.0;
pub const NATIVE: &str = "split.c, one thread (native)";

/// What is profiled: a script on an interpreter, or split.c.
#[derive(Clone)]
pub enum Program {
    Script {
        label: &'static str,
        interpreter: PathBuf,
        /// What it needs in its environment to run a script.
        env: Vec<(&'static str, OsString)>,
        /// Its arguments before the script's run time: the round counter and the script.
        args: Vec<OsString>,
    },
    Native {
        binary: PathBuf,
    },
}

impl Program {
    /// split.c without frame pointers, with its debug information, built into `dir`.
    pub fn native(src: &Path, dir: &Path) -> Result<Self> {
        let binary = dir.join("split-nofp");
        workloads::compile_c(&src.join("split.c"), &binary, &["-O2", "-g", "-fomit-frame-pointer"])?;
        Ok(Program::Native { binary })
    }

    pub fn label(&self) -> &'static str {
        match self {
            Program::Script { label, .. } => label,
            Program::Native { .. } => NATIVE,
        }
    }

    /// The program running for `seconds`, from `start`: a command running the executable it is
    /// given, to which the program's environment and arguments are added.
    pub fn command(&self, start: fn(&Path) -> Command, seconds: &str) -> Command {
        match self {
            Program::Script { interpreter, env, args, .. } => {
                let mut command = start(interpreter);
                command.envs(env.iter().map(|(name, value)| (name, value))).args(args).arg(seconds);
                command
            }
            Program::Native { binary } => {
                let mut command = start(binary);
                command.args([seconds, "1"]);
                command
            }
        }
    }
}

/// One measurement.
pub struct Run {
    /// Loss of the program's peak speed while profiled, in percent.
    pub slowdown: f64,
    /// The tool's CPU while it records, in percent of one core.
    pub recording_cpu: f64,
    /// The tool's CPU while it records, per sample it took, in microseconds.
    pub us_per_sample: f64,
    /// CPU seconds of the tool, start to output.
    pub cpu_seconds: f64,
    /// The tool's peak resident memory.
    pub rss_mib: f64,
    pub samples: u64,
    /// Of a script: the percent of the samples holding a frame of the script, and the largest
    /// distance, in points, between a function's share and the one the script burns.
    pub script: Option<(f64, f64)>,
}

/// The script a program runs, by its file name, and the share of its CPU each of its functions
/// burns.
pub struct Script<'a> {
    pub file_name: &'a str,
    pub shares: &'a [(&'a str, f64)],
}

/// `program` run for [`BEFORE`], [`PROFILED`] and [`AFTER`] seconds, recorded in between by the
/// tool `record` makes of its pid, which says `ready` once it samples and writes folded stacks to
/// `folded`.
pub fn measure(
    program: &Program,
    record: impl FnOnce(&str) -> Command,
    ready: &'static str,
    folded: &Path,
    script: &Script,
) -> Result<Run> {
    let seconds = (BEFORE + PROFILED + AFTER + 1.0).to_string();
    let command = program.command(|path| Command::new(path), &seconds);
    let (recorded, slowdown) = workloads::attach(command, record, ready, BEFORE, PROFILED)?;
    let text = std::fs::read_to_string(folded).unwrap_or_default();
    let (samples, with_script, share_error) =
        script_quality(&read_folded(&text), script.file_name, script.shares);
    Ok(Run {
        slowdown,
        recording_cpu: recorded.cpu_percent(),
        us_per_sample: recorded.us_per_sample(samples),
        cpu_seconds: recorded.usage.cpu_seconds,
        rss_mib: recorded.usage.max_rss_kib as f64 / 1024.0,
        samples,
        script: matches!(program, Program::Script { .. }).then_some((with_script, share_error)),
    })
}

/// The median of `f` over `runs`.
pub fn column(runs: &[Run], f: fn(&Run) -> f64) -> f64 {
    median(&mut runs.iter().map(f).collect::<Vec<_>>())
}

/// The head of the table of runs, its frames column named for `language`.
pub fn header(language: &str) -> String {
    format!(
        "| tool | program | target slowdown | tool CPU while recording | per sample | tool CPU in all | peak RSS | samples | with {language} frames | share error |\n\
         |---|---|---|---|---|---|---|---|---|---|\n"
    )
}

/// The row of `tool` on `program`: the medians of `runs`.
pub fn row(tool: &str, program: &Program, runs: &[Run]) -> String {
    let script = |f: fn((f64, f64)) -> f64, unit: &str| match program {
        Program::Script { .. } => {
            format!(
                "{:.1}{unit}",
                median(&mut runs.iter().filter_map(|r| r.script).map(f).collect::<Vec<_>>())
            )
        }
        Program::Native { .. } => "—".into(),
    };
    format!(
        "| {tool} | {} | {:.1}% | {:.2}% of a core | {:.0} µs | {:.2} s | {:.1} MiB | {:.0} | {} | {} |\n",
        program.label(),
        column(runs, |r| r.slowdown),
        column(runs, |r| r.recording_cpu),
        column(runs, |r| r.us_per_sample),
        column(runs, |r| r.cpu_seconds),
        column(runs, |r| r.rss_mib),
        column(runs, |r| r.samples as f64),
        script(|(with, _)| with, "%"),
        script(|(_, error)| error, " pt"),
    )
}

/// The goal row of a `language` sample's CPU (`per_sample`, on `program` at `hz`) against a
/// native one's.
pub fn per_sample_goal(language: &str, program: &str, hz: u64, per_sample: f64, native_us: f64) -> String {
    let ratio = per_sample / native_us;
    format!(
        "| CPU per {language} sample ({program}) at {hz} Hz ≤ {PER_SAMPLE_RATIO_GOAL}× a native one's | {ratio:.1}× ({per_sample:.0} vs {native_us:.0} µs) | {} |\n",
        verdict(ratio <= PER_SAMPLE_RATIO_GOAL)
    )
}

/// The eBPF program's time per sample and ring bytes per record, at 999 Hz, on each of `scripts`
/// and on `native`, as a table for `section`; and rows comparing each script's with the native
/// program's.
pub fn kernel_cost(
    profiler: &Path,
    section: &str,
    scripts: &[Program],
    native: &Program,
    dir: &Path,
    repetitions: usize,
) -> Result<(String, String)> {
    let mut programs: Vec<(&str, Command)> =
        scripts.iter().map(|script| (script.label(), script.command(on_last_cpu, "60"))).collect();
    if let Program::Native { binary } = native {
        let mut native = on_last_cpu(binary);
        // Until killed.
        native.arg("0");
        programs.push(("C without frame pointers (`split.c`)", native));
    }
    let (table, times) = kernel::pinned_costs(profiler, dir, section, programs, repetitions)?;
    let mut rows = String::new();
    if let Some((native_us, times)) = times.split_last().filter(|_| times.len() > scripts.len()) {
        for (script, us) in scripts.iter().zip(times) {
            writeln!(
                rows,
                "| eBPF time per sample ({}), against a native one's (no goal) | {us:.2} vs {native_us:.2} µs ({:.1}×) | – |",
                script.label(),
                us / native_us,
            )?;
        }
    }
    Ok((table, rows))
}
