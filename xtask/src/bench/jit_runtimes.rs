//! `profiler record` on a CPU-bound program of a JIT runtime started with no options (Java's
//! tests/workloads/java/Shares.java on OpenJDK 17, Node's tests/workloads/node/shares.js on the
//! system's Node), its frames named from the runtime's own memory and, for the cost of that, with
//! `--native-only`; against `perf record -g` with the runtime's perf map (perf needs the runtime
//! started with options that keep frame pointers and write the map), in one run: the program's
//! slowdown, each tool's CPU and peak RSS, and how many samples name the program's functions.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use super::{
    compare::wait_with_usage,
    folded::read_folded,
    median,
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

/// How a section's subject is made, from the workloads' directory and the bench's.
pub type MakeSubject = fn(&Path, &Path) -> Result<Subject>;
/// The sections, by name.
pub const SECTIONS: [(&str, MakeSubject); 2] = [("java", java), ("node", node)];

/// A runtime's program, as the section measures it.
pub struct Subject {
    /// The section's name in BENCHMARKS.md, and a paragraph saying what runs.
    title: &'static str,
    about: String,
    /// The runtime's command, and the options perf needs of it.
    runtime: PathBuf,
    perf_options: Vec<String>,
    /// The program's arguments before its run time in seconds.
    program: Vec<String>,
    /// What a frame of the program holds, and its three working functions with their shares.
    in_program: &'static str,
    shares: [(&'static str, f64); 3],
    /// Whether the runtime writes a perf map for perf (`/tmp/perf-PID.map`): removed after
    /// each run.
    perf_map: bool,
}

impl Subject {
    /// The program run for `seconds` with no options: its runtime, then its arguments.
    pub fn command(&self, seconds: &str) -> Vec<PathBuf> {
        std::iter::once(self.runtime.clone())
            .chain(self.program.iter().map(PathBuf::from))
            .chain(std::iter::once(PathBuf::from(seconds)))
            .collect()
    }
}

/// `Shares.java` on OpenJDK 17, compiled into `dir`.
pub fn java(src: &Path, dir: &Path) -> Result<Subject> {
    let bin = Path::new(JDK).join("bin");
    let classes = dir.join("java-classes");
    check(
        Command::new(bin.join("javac"))
            .args(["--release", "17", "-d"])
            .arg(&classes)
            .arg(src.join("java/Shares.java")),
    )?;
    Ok(Subject {
        title: "Java (against perf with a perf map)",
        about: format!(
            "`Shares.java` on {JDK}: one thread whose methods `alpha`, `beta` and `gamma` do 60/30/10% of its work \
             (the JIT inlines them into `main`'s loop)."
        ),
        runtime: bin.join("java"),
        perf_options: [
            "-XX:+PreserveFramePointer",
            "-XX:+UnlockDiagnosticVMOptions",
            "-XX:+DumpPerfMapAtExit",
        ]
        .map(String::from)
        .to_vec(),
        program: vec!["-cp".into(), classes.to_string_lossy().into_owned(), "Shares".into()],
        in_program: "Shares.",
        shares: [("Shares.alpha", 60.0), ("Shares.beta", 30.0), ("Shares.gamma", 10.0)],
        perf_map: false,
    })
}

/// `shares.js` on the system's Node, its perf map and V8's log written into `dir`.
pub fn node(src: &Path, dir: &Path) -> Result<Subject> {
    let log = format!("--logfile={}", dir.join("v8.log").display());
    Ok(Subject {
        title: "Node (against perf with V8's perf map)",
        about:
            "`shares.js` on the system's `node`: one thread whose functions `alpha`, `beta` and `gamma` do \
                60/30/10% of its work (each keeps a frame of its own once optimized)."
                .into(),
        runtime: PathBuf::from("node"),
        perf_options: vec![
            "--perf-basic-prof".into(),
            "--interpreted-frames-native-stack".into(),
            log,
            "--no-logfile-per-isolate".into(),
        ],
        program: vec![src.join("node/shares.js").to_string_lossy().into_owned()],
        in_program: "shares.js",
        shares: [("alpha", 60.0), ("beta", 30.0), ("gamma", 10.0)],
        perf_map: true,
    })
}

#[derive(Clone, Copy)]
enum Tool {
    Profiler,
    NativeOnly,
    Perf,
}

impl Tool {
    const ALL: [Tool; 3] = [Tool::Profiler, Tool::NativeOnly, Tool::Perf];

    fn label(self, subject: &Subject) -> String {
        match self {
            Tool::Profiler => format!("`profiler record -F {HZ}`, no options"),
            Tool::NativeOnly => format!("`profiler record -F {HZ} --native-only`, no options"),
            Tool::Perf => {
                format!("`perf record -g -F {HZ}` + `perf script`, with `{}`", subject.perf_options.join(" "))
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
    /// The tool's peak RSS (perf: the larger of `perf record`'s and `perf script`'s), in MiB.
    peak_rss_mib: f64,
    samples: u64,
    /// Percent of the samples naming a function of the program, and one of the three working ones.
    with_program: f64,
    with_work: f64,
    /// Largest distance, in points, between a working function's share and its work's.
    share_error: f64,
}

pub fn table(
    subject: &Subject,
    profiler: &Path,
    collapse: &Path,
    dir: &Path,
    repetitions: usize,
) -> Result<String> {
    let mut runs: Vec<Vec<Run>> = Tool::ALL.iter().map(|_| Vec::new()).collect();
    for repetition in 0..repetitions {
        for (t, tool) in Tool::ALL.into_iter().enumerate() {
            eprintln!("xtask bench: {} · {} · run {}", subject.title, tool.label(subject), repetition + 1);
            runs[t].push(measure(subject, tool, profiler, collapse, dir)?);
        }
    }
    let mut text = format!(
        "## {}\n\n\
         {} It runs alone for {BEFORE} s (its code compiled by then), is profiled for {PROFILED} s (the tool \
         stopped with SIGINT), then runs alone again; medians of {repetitions} run(s). *Target slowdown*: its peak \
         rounds per second while profiled against its peak alone (perf's row against the same runtime with perf's \
         options). *Tool CPU while recording*: from half a second after the tool starts until it is stopped, and \
         that per sample. *In all*: start to folded stacks (perf: `perf record` and `perf script`). *Peak RSS*: \
         the tool's (perf: the larger of `perf record`'s and `perf script`'s). *Naming the program*: samples with a \
         frame of one of its functions; *naming the work*: of `alpha`, `beta` or `gamma`. *Share error*: largest \
         distance, in points, between one of those three's share of the samples naming them and its share of the \
         work.\n\n\
         | tool | target slowdown | tool CPU while recording | per sample | tool CPU in all | peak RSS | samples | naming the program | naming the work | share error |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        subject.title, subject.about
    );
    for (tool, runs) in Tool::ALL.iter().zip(&runs) {
        let column = |f: fn(&Run) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
        let share_error = match column(|r| r.share_error) {
            error if error.is_nan() => "–".to_owned(),
            error => format!("{error:.1} pt"),
        };
        writeln!(
            text,
            "| {} | {:.1}% | {:.2}% of a core | {:.0} µs | {:.2} s | {:.0} MiB | {:.0} | {:.1}% | {:.1}% | {share_error} |",
            tool.label(subject),
            column(|r| r.slowdown),
            column(|r| r.recording_cpu),
            column(|r| r.us_per_sample),
            column(|r| r.cpu_seconds),
            column(|r| r.peak_rss_mib),
            column(|r| r.samples as f64),
            column(|r| r.with_program),
            column(|r| r.with_work),
        )?;
    }
    text.push('\n');
    Ok(text)
}

fn measure(subject: &Subject, tool: Tool, profiler: &Path, collapse: &Path, dir: &Path) -> Result<Run> {
    let mut program = Command::new(&subject.runtime);
    if let Tool::Perf = tool {
        program.args(&subject.perf_options);
    }
    program.args(&subject.program).arg((BEFORE + PROFILED + AFTER + 1.0).to_string());
    program.env("PROGRESS", "1");
    let running = RunningWorkload::spawn(program)?;
    running.wait_until(BEFORE);
    let start_t = running.now();
    let pid = running.pid().to_string();
    let folded = dir.join("jit-runtime.folded");
    let perf_data = dir.join("jit-runtime-perf.data");
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
            let (script, samples) = perf_folded(&perf_data, collapse, &folded)?;
            recorded.usage.cpu_seconds += script.cpu_seconds;
            recorded.usage.max_rss_kib = recorded.usage.max_rss_kib.max(script.max_rss_kib);
            if subject.perf_map {
                // A map in /tmp per run would pile up.
                let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
            }
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
    let with_program = naming(&|frame| frame.contains(subject.in_program));
    let names_work = |frame: &str, name: &str| frame.contains(subject.in_program) && frame.contains(name);
    let with_work = naming(&|frame| subject.shares.iter().any(|(name, _)| names_work(frame, name)));
    let share_error = subject
        .shares
        .iter()
        .map(|&(name, share)| {
            (100.0 * naming(&|frame| names_work(frame, name)) as f64 / with_work as f64 - share).abs()
        })
        .fold(0.0, f64::max);
    let percent = |n: u64| 100.0 * n as f64 / weight.max(1) as f64;
    Ok(Run {
        slowdown,
        recording_cpu: recorded.cpu_percent(),
        us_per_sample: recorded.us_per_sample(samples),
        cpu_seconds: recorded.usage.cpu_seconds,
        peak_rss_mib: recorded.usage.max_rss_kib as f64 / 1024.0,
        samples,
        with_program: percent(with_program),
        with_work: percent(with_work),
        share_error: if with_work == 0 { f64::NAN } else { share_error },
    })
}

/// `perf script` of `data` collapsed into `folded`; what that cost, and the samples.
fn perf_folded(data: &Path, collapse: &Path, folded: &Path) -> Result<(super::compare::Usage, u64)> {
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
    Ok((usage, samples as u64))
}
