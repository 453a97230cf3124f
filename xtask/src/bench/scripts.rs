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

use anyhow::{Result, bail};

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

/// A section on scripts of one language held against native samples, with no other profiler to
/// compare with: the runs of `programs` (each running `script` through a wrapper that counts its
/// rounds, `PROGRESS=1` printing `SECONDS ROUNDS` about every 100 ms) and of split.c at each of
/// [`RATES`], the eBPF program's time per sample on each, and the goals.
pub struct AgainstNative<'a> {
    /// The section's name (`php`): its progress lines and files.
    pub key: &'static str,
    /// What its frames are called (`PHP`).
    pub language: &'static str,
    pub programs: Vec<Program>,
    pub script: Script<'a>,
    /// What is run, and why against native samples: the section's first paragraph.
    pub introduction: String,
}

/// What the tool says once it samples.
const READY: &str = "profiler: recording";

/// The section `section`, split.c built from `src` into `dir`.
pub fn against_native(
    profiler: &Path,
    src: &Path,
    dir: &Path,
    repetitions: usize,
    section: &AgainstNative,
) -> Result<String> {
    let native = Program::native(src, dir)?;
    for program in &section.programs {
        check_counts_rounds(program, section.script.file_name)?;
    }
    let cases: Vec<(u64, &Program)> = RATES
        .iter()
        .flat_map(|&hz| section.programs.iter().chain([&native]).map(move |program| (hz, program)))
        .collect();
    let mut runs: Vec<Vec<Run>> = cases.iter().map(|_| Vec::new()).collect();
    let folded = dir.join(format!("{}.folded", section.key));
    for repetition in 0..repetitions {
        // Alternate the order, so that drift of the machine does not favour one.
        let mut order: Vec<(usize, &(u64, &Program))> = cases.iter().enumerate().collect();
        if repetition % 2 == 1 {
            order.reverse();
        }
        for (c, &(hz, program)) in order {
            eprintln!(
                "xtask bench: {} · {} · {} · run {}",
                section.key,
                label(hz),
                program.label(),
                repetition + 1
            );
            let record = |pid: &str| {
                let mut record = Command::new(profiler);
                record.args(["record", "-p", pid, "-F", &hz.to_string(), "-o"]).arg(&folded);
                record
            };
            runs[c].push(measure(program, record, READY, &folded, &section.script)?);
        }
    }
    let (key, language) = (section.key, section.language);
    let mut text = format!(
        "## {language} (against native samples)\n\n{} Each runs alone for {BEFORE} s, is profiled for {PROFILED} s \
         (`profiler record -p PID -F HZ -o {key}.folded`, stopped with SIGINT), then runs alone again for {AFTER} s; \
         medians of {repetitions} run(s), the order alternating. *Target slowdown*: its peak rounds per second (best \
         one-second window) while profiled against its peak alone. *Tool CPU while recording*: from half a second \
         after the profiler says it samples until it is stopped (every thread, from schedstat), and that per sample \
         it took (naming costs once per file, the interpreter's and libc's, are in it). *In all*: start to output \
         written. *Peak RSS*: the profiler's. *With {language} frames*: samples holding a frame of `{}`. *Share \
         error*: largest distance, in points, between a function's share of those samples and what it burns.\n\n",
        section.introduction, section.script.file_name
    );
    text.push_str(&header(language));
    for (c, &(hz, program)) in cases.iter().enumerate() {
        text.push_str(&row(&label(hz), program, &runs[c]));
    }
    text.push('\n');
    let (costs, against_native) = kernel_cost(profiler, key, &section.programs, &native, dir, repetitions)?;
    text.push_str(&costs);
    text.push_str("#### Against native samples, and goals\n\n| goal | measured | |\n|---|---|---|\n");
    let find = |label: &str, hz: u64| {
        cases.iter().position(|&(at, program)| at == hz && program.label() == label).map(|c| &runs[c])
    };
    for hz in RATES {
        let Some(native) = find(NATIVE, hz) else { continue };
        for script in section.programs.iter().map(Program::label) {
            let Some(ours) = find(script, hz) else { continue };
            let (slowdown, native_slowdown) = (column(ours, |r| r.slowdown), column(native, |r| r.slowdown));
            writeln!(
                text,
                "| target slowdown ({script}) at {hz} Hz, against the native program's (no goal) | {slowdown:.1}% vs {native_slowdown:.1}% | – |",
            )?;
            let (ours_us, native_us) =
                (column(ours, |r| r.us_per_sample), column(native, |r| r.us_per_sample));
            text.push_str(&per_sample_goal(language, script, hz, ours_us, native_us));
            let (rss, native_rss) = (column(ours, |r| r.rss_mib), column(native, |r| r.rss_mib));
            writeln!(
                text,
                "| peak RSS ({script}) at {hz} Hz, against the native program's (no goal) | {rss:.1} vs {native_rss:.1} MiB ({:+.1} MiB) | – |",
                rss - native_rss
            )?;
        }
    }
    text.push_str(&against_native);
    text.push('\n');
    Ok(text)
}

fn label(hz: u64) -> String {
    format!("`profiler record -F {hz}`")
}

/// Fails unless `program` runs its script through the wrapper and counts its rounds.
fn check_counts_rounds(program: &Program, file_name: &str) -> Result<()> {
    let out = program.command(|path| Command::new(path), "0.5").env("PROGRESS", "1").output()?;
    let said = String::from_utf8_lossy(&out.stdout);
    let rounds = said.lines().last().and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok());
    if !out.status.success() || !said.starts_with("main ") || rounds.unwrap_or(0) == 0 {
        bail!(
            "{} does not run {file_name}: run `cargo xtask setup` ({}: {said}{})",
            program.label(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
