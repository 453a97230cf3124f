//! `profiler record` on a CPU-bound Java program (tests/workloads/java/Shares.java on OpenJDK 17)
//! started with no options, its Java frames named from the JVM's own tables and, for the cost of
//! that, with `--native-only`; against `perf record -g` with the JVM's perf map (perf needs the
//! JVM started with frame pointers kept and its map written at exit), in one run: the program's
//! slowdown, each tool's CPU, and how many samples name the program's methods.
use std::{
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use super::{
    compare::wait_with_usage,
    median,
    python::read_folded,
    workloads::{RunningWorkload, record_while, slowdown},
};
use crate::check;

/// Seconds of the program alone (its JIT warm by the end) before the tool starts, profiled, and
/// alone after.
const BEFORE: f64 = 3.0;
const PROFILED: f64 = 5.0;
const AFTER: f64 = 2.5;
const HZ: &str = "99";
const JDK: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
/// What perf needs of the JVM to name its frames: frame pointers kept, the perf map written.
const PERF_JVM_OPTIONS: [&str; 3] =
    ["-XX:+PreserveFramePointer", "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit"];
/// The program's three working methods and their shares of its work.
const SHARES: [(&str, f64); 3] = [("Shares.alpha", 60.0), ("Shares.beta", 30.0), ("Shares.gamma", 10.0)];

#[derive(Clone, Copy)]
enum Tool {
    Profiler,
    NativeOnly,
    Perf,
}

impl Tool {
    const ALL: [Tool; 3] = [Tool::Profiler, Tool::NativeOnly, Tool::Perf];

    fn label(self) -> String {
        match self {
            Tool::Profiler => format!("`profiler record -F {HZ}`, JVM with no options"),
            Tool::NativeOnly => format!("`profiler record -F {HZ} --native-only`, JVM with no options"),
            Tool::Perf => {
                format!("`perf record -g -F {HZ}` + `perf script`, JVM with `{}`", PERF_JVM_OPTIONS.join(" "))
            }
        }
    }
}

struct Run {
    slowdown: f64,
    /// The tool's CPU while it records, in percent of one core, and per sample in µs.
    recording_cpu: f64,
    us_per_sample: f64,
    /// CPU seconds of the tool, start to folded stacks (perf: `perf record` and `perf script`).
    cpu_seconds: f64,
    samples: u64,
    /// Percent of the samples naming a method of Shares, and one of the three working ones.
    with_java: f64,
    with_work: f64,
    /// Largest distance, in points, between a working method's share and its work's.
    share_error: f64,
}

pub fn table(profiler: &Path, collapse: &Path, src: &Path, dir: &Path, repetitions: usize) -> Result<String> {
    let bin = Path::new(JDK).join("bin");
    let classes = dir.join("java-classes");
    check(
        Command::new(bin.join("javac"))
            .args(["--release", "17", "-d"])
            .arg(&classes)
            .arg(src.join("java/Shares.java")),
    )?;
    let mut runs: Vec<Vec<Run>> = Tool::ALL.iter().map(|_| Vec::new()).collect();
    for repetition in 0..repetitions {
        for (t, tool) in Tool::ALL.into_iter().enumerate() {
            eprintln!("xtask bench: java · {} · run {}", tool.label(), repetition + 1);
            runs[t].push(measure(tool, profiler, collapse, &bin.join("java"), &classes, dir)?);
        }
    }
    let mut text = format!(
        "## Java (against perf with a perf map)\n\n\
         `Shares.java` on {JDK}: one thread whose methods `alpha`, `beta` and `gamma` do 60/30/10% of its work \
         (the JIT inlines them into `main`'s loop). It runs alone for {BEFORE} s (its code compiled by then), is \
         profiled for {PROFILED} s (the tool stopped with SIGINT), then runs alone again; medians of {repetitions} \
         run(s). *Target slowdown*: its peak rounds per second while profiled against its peak alone (perf's row \
         against the same JVM with perf's options). *Tool CPU while recording*: from half a second after the tool \
         starts until it is stopped, and that per sample. *In all*: start to folded stacks (perf: `perf record` \
         and `perf script`). *Naming Shares*: samples with a frame of a method of the program; *naming the work*: \
         of `alpha`, `beta` or `gamma`. *Share error*: largest distance, in points, between one of those three's \
         share of the samples naming them and its share of the work.\n\n\
         | tool | target slowdown | tool CPU while recording | per sample | tool CPU in all | samples | naming Shares | naming the work | share error |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    for (tool, runs) in Tool::ALL.iter().zip(&runs) {
        let column = |f: fn(&Run) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
        let share_error = match column(|r| r.share_error) {
            error if error.is_nan() => "–".to_owned(),
            error => format!("{error:.1} pt"),
        };
        writeln!(
            text,
            "| {} | {:.1}% | {:.2}% of a core | {:.0} µs | {:.2} s | {:.0} | {:.1}% | {:.1}% | {share_error} |",
            tool.label(),
            column(|r| r.slowdown),
            column(|r| r.recording_cpu),
            column(|r| r.us_per_sample),
            column(|r| r.cpu_seconds),
            column(|r| r.samples as f64),
            column(|r| r.with_java),
            column(|r| r.with_work),
        )?;
    }
    text.push('\n');
    Ok(text)
}

fn measure(
    tool: Tool,
    profiler: &Path,
    collapse: &Path,
    java: &Path,
    classes: &Path,
    dir: &Path,
) -> Result<Run> {
    let mut program = Command::new(java);
    if let Tool::Perf = tool {
        program.args(PERF_JVM_OPTIONS);
    }
    program.arg("-cp").arg(classes).arg("Shares").arg((BEFORE + PROFILED + AFTER + 1.0).to_string());
    program.env("PROGRESS", "1");
    let running = RunningWorkload::spawn(program)?;
    running.wait_until(BEFORE);
    let start_t = running.now();
    let pid = running.pid().to_string();
    let folded = dir.join("java.folded");
    let perf_data = dir.join("java-perf.data");
    let record = match tool {
        Tool::Perf => {
            let mut perf = Command::new("perf");
            perf.args(["record", "-q", "-g", "-F", HZ, "-p", &pid, "-o"]).arg(&perf_data);
            perf
        }
        Tool::Profiler | Tool::NativeOnly => {
            let mut record = Command::new(profiler);
            record.args(["record", "-p", &pid, "-F", HZ, "-o"]).arg(&folded);
            if let Tool::NativeOnly = tool {
                record.arg("--native-only");
            }
            record
        }
    };
    // perf says nothing once it samples: its start-up is short.
    let ready = match tool {
        Tool::Perf => None,
        Tool::Profiler | Tool::NativeOnly => Some("profiler: recording"),
    };
    let mut recorded = record_while(&running, record, ready, PROFILED)?;
    // The JVM's perf map is written as it exits: after its time alone.
    let progress = running.finish()?;
    let slowdown = slowdown(&progress, start_t, recorded.stop_t)?;
    // inferno weighs perf's samples by their period (ns of CPU): the samples are counted apart.
    let counted = match tool {
        Tool::Perf => {
            let (cpu_seconds, samples) = perf_folded(&perf_data, collapse, &folded)?;
            recorded.usage.cpu_seconds += cpu_seconds;
            Some(samples)
        }
        Tool::Profiler | Tool::NativeOnly => None,
    };
    let text = std::fs::read_to_string(&folded).unwrap_or_default();
    let stacks = read_folded(&text);
    let weight: u64 = stacks.iter().map(|(_, n)| n).sum();
    let samples = counted.unwrap_or(weight);
    let naming = |test: &dyn Fn(&str) -> bool| -> u64 {
        stacks.iter().filter(|(frames, _)| frames.iter().any(|f| test(f))).map(|(_, n)| n).sum()
    };
    let with_java = naming(&|frame| frame.contains("Shares."));
    let with_work = naming(&|frame| SHARES.iter().any(|(name, _)| frame.contains(name)));
    let share_error = SHARES
        .iter()
        .map(|&(name, share)| {
            (100.0 * naming(&|frame| frame.contains(name)) as f64 / with_work as f64 - share).abs()
        })
        .fold(0.0, f64::max);
    let percent = |n: u64| 100.0 * n as f64 / weight.max(1) as f64;
    Ok(Run {
        slowdown,
        recording_cpu: recorded.cpu_percent(),
        us_per_sample: recorded.us_per_sample(samples),
        cpu_seconds: recorded.usage.cpu_seconds,
        samples,
        with_java: percent(with_java),
        with_work: percent(with_work),
        share_error: if with_work == 0 { f64::NAN } else { share_error },
    })
}

/// `perf script` of `data` collapsed into `folded`; the CPU seconds that took, and the samples.
fn perf_folded(data: &Path, collapse: &Path, folded: &Path) -> Result<(f64, u64)> {
    let script_out = data.with_extension("script");
    let mut script = Command::new("perf")
        .args(["script", "-i"])
        .arg(data)
        .stdout(std::fs::File::create(&script_out)?)
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run perf script")?;
    let usage = wait_with_usage(&mut script)?;
    let out = Command::new(collapse).arg(&script_out).output().context("cannot run inferno-collapse-perf")?;
    if !out.status.success() {
        bail!("inferno-collapse-perf failed");
    }
    std::fs::write(folded, out.stdout)?;
    // A sample is a header line, its frames, and a blank line.
    let script = std::fs::read_to_string(&script_out)?;
    let samples = script.split("\n\n").filter(|sample| !sample.trim().is_empty()).count();
    Ok((usage.cpu_seconds, samples as u64))
}
