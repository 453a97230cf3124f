//! `cargo xtask bench`: profiler measured against perf on workloads it builds, in one run, and
//! written to BENCHMARKS.md.
//!
//! - [`compare`]: each workload profiled by profiler (DWARF and frame pointers) and by perf
//!   (`-g` and `--call-graph dwarf`, rendered with `perf script | inferno-collapse-perf |
//!   inferno-flamegraph`) at 99 and 999 Hz, tools alternating, medians of the repetitions: the
//!   target's slowdown, the tool's CPU time, SIGINT-to-flame-graph time, raw recording size,
//!   complete stacks, hot-function share error, peak RSS;
//! - [`kernel`]: the eBPF program's time per sample at several stack-copy caps;
//! - [`memory`]: where the profiler's resident memory goes;
//! - [`undisturbed`]: the speed programs that deadlock in-process profilers keep under it;
//! - [`leaks`]: `profiler leaks` on a malloc-heavy program, against valgrind;
//! - [`off_cpu`]: `profiler record --off-cpu` on a program that only switches, against
//!   offcputime;
//! - [`python`]: `profiler record` on a CPU-bound Python program, against py-spy, and the
//!   kernel's cost per sample of Python frames;
//! - [`ruby`]: the same on CPU-bound Ruby programs, against rbspy;
//! - [`php`], [`perl`]: the same on a CPU-bound PHP program and a Perl one, against native
//!   samples;
//! - [`agent`]: `profiler agent -a` for ten minutes, its CPU and RSS;
//! - [`long_run`]: a long `record -a` under a churn workload, the profiler's memory over time;
//! - [`churn`]: `profiler agent` beside programs it has not seen, its memory and descriptors;
//! - [`naming`]: Ctrl-C while a program with a hundred MiB of DWARF is first named;
//! - [`stages`]: the criterion micro-benchmarks of the userspace stages.
//!
//! Each section of BENCHMARKS.md is marked, so that `--only SECTION` measures and rewrites one.
mod agent;
mod churn;
mod compare;
mod folded;
mod jit_runtimes;
mod kernel;
mod leaks;
mod long_run;
mod memory;
mod naming;
mod off_cpu;
mod perl;
mod php;
mod python;
mod ruby;
mod scripts;
mod stages;
mod undisturbed;
mod workloads;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use self::compare::{Results, Row, Run, Tool, Tools};
use crate::cargo;

pub struct Options {
    /// A reduced set (two workloads, 999 Hz, one repetition, shorter runs).
    pub quick: bool,
    /// Only these sections, rewritten in place in BENCHMARKS.md (all when empty).
    pub only: Vec<String>,
}

/// The sections of BENCHMARKS.md, in order.
pub const SECTIONS: [&str; 18] = [
    "compare",
    "kernel",
    "memory",
    "undisturbed",
    "leaks",
    "off-cpu",
    "python",
    "ruby",
    "php",
    "perl",
    "java",
    "node",
    "agent",
    "agent-off-cpu",
    "long-run",
    "churn",
    "naming",
    "stages",
];

pub fn run(root: &Path, options: &Options) -> Result<()> {
    cargo(root, &["build", "--release", "--package", "profiler"])?;
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let tools = Tools {
        profiler: root.join("target/release/profiler"),
        collapse: root.join(".tools/bin/inferno-collapse-perf"),
        flamegraph: root.join(".tools/bin/inferno-flamegraph"),
        samply: root.join(".tools/bin/samply"),
    };
    let wanted = |section: &str| options.only.is_empty() || options.only.iter().any(|s| s == section);
    let mut sections: Vec<(&str, String)> = Vec::new();
    if wanted("compare") || wanted("kernel") || wanted("memory") {
        sections.extend(compare_and_kernel(&tools, root, &dir, options, &wanted)?);
    }
    let src = root.join("profiler/tests/workloads");
    let repetitions = if options.quick { 1 } else { 3 };
    if wanted("undisturbed") {
        sections.push(("undisturbed", undisturbed::table(&tools.profiler, &src, &dir, repetitions)?));
    }
    if wanted("leaks") {
        sections.push(("leaks", leaks::table(&tools.profiler, &src, &dir, repetitions, options.quick)?));
    }
    if wanted("off-cpu") {
        sections.push(("off-cpu", off_cpu::table(&tools.profiler, &src, &dir, repetitions, options.quick)?));
    }
    if wanted("python") {
        sections.push(("python", python::table(&tools.profiler, root, &src, &dir, repetitions)?));
    }
    if wanted("ruby") {
        sections.push(("ruby", ruby::table(&tools.profiler, root, &src, &dir, repetitions)?));
    }
    if wanted("php") {
        sections.push(("php", php::table(&tools.profiler, root, &src, &dir, repetitions)?));
    }
    if wanted("perl") {
        sections.push(("perl", perl::table(&tools.profiler, root, &src, &dir, repetitions)?));
    }
    for (section, subject) in jit_runtimes::SECTIONS {
        if wanted(section) {
            let subject = subject(&src, &dir)?;
            sections.push((
                section,
                jit_runtimes::table(&subject, &tools.profiler, &tools.collapse, &dir, repetitions)?,
            ));
        }
    }
    if wanted("agent") {
        sections
            .push(("agent", agent::table(&tools.profiler, &src, &dir, agent::Load::Busy, options.quick)?));
    }
    if wanted("agent-off-cpu") {
        let load = agent::Load::Switching;
        sections.push(("agent-off-cpu", agent::table(&tools.profiler, &src, &dir, load, options.quick)?));
    }
    if wanted("long-run") {
        sections.push(("long-run", long_run::table(&tools.profiler, &src, &dir, options.quick)?));
    }
    if wanted("churn") {
        sections.push(("churn", churn::table(&tools.profiler, &src, &dir, options.quick)?));
    }
    if wanted("naming") {
        sections.push(("naming", naming::table(&tools.profiler, root, &dir, options.quick)?));
    }
    if wanted("stages") {
        eprintln!("xtask bench: userspace stages (criterion)");
        sections.push(("stages", stages::table(root, options.quick)?));
    }
    let path = root.join("BENCHMARKS.md");
    let report = if options.only.is_empty() {
        let mut report = String::from("# Benchmarks\n\n");
        let quick = if options.quick { " --quick" } else { "" };
        writeln!(report, "Written by `sudo cargo xtask bench{quick}` on {}. {}\n", today()?, machine()?)?;
        for (name, text) in &sections {
            report.push_str(&marked(name, text));
        }
        report
    } else {
        let mut report = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n\n".into());
        for (name, text) in &sections {
            report = splice(&report, name, &format!("{}_(this section: {})_\n\n", text, today()?));
        }
        report
    };
    std::fs::write(&path, report)?;
    eprintln!("xtask bench: wrote BENCHMARKS.md");
    Ok(())
}

/// A section between its markers.
fn marked(name: &str, text: &str) -> String {
    format!("<!-- bench:{name} -->\n{text}<!-- /bench:{name} -->\n")
}

/// `report` with section `name` replaced by `text` (added at the end when it had none).
fn splice(report: &str, name: &str, text: &str) -> String {
    let (open, close) = (format!("<!-- bench:{name} -->"), format!("<!-- /bench:{name} -->\n"));
    match (report.find(&open), report.find(&close)) {
        (Some(start), Some(end)) if start < end => {
            format!("{}{}{}", &report[..start], marked(name, text), &report[end + close.len()..])
        }
        _ => format!("{report}{}", marked(name, text)),
    }
}

/// profiler against perf on each workload, its memory, and the kernel's cost per sample.
fn compare_and_kernel(
    tools: &Tools,
    root: &Path,
    dir: &Path,
    options: &Options,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Vec<(&'static str, String)>> {
    let mut sections = Vec::new();
    let workloads = workloads::build(root, dir, options.quick)?;
    let (frequencies, repetitions): (&[u64], usize) =
        if options.quick { (&[999], 1) } else { (&[99, 999], 3) };
    if wanted("compare") {
        sections.push(("compare", compare_table(tools, dir, &workloads, frequencies, repetitions)?));
    }
    if wanted("memory") {
        eprintln!("xtask bench: memory");
        let python = crate::python::pyenv(12).context(
            "the memory benchmark profiles pyenv's CPython 3.12: install it (`pyenv install 3.12`)",
        )?;
        let src = root.join("profiler/tests/workloads");
        let python = vec![python, src.join("python/shares.py"), PathBuf::from("60")];
        let runtimes = [
            memory::Runtime { label: "`shares.py` on pyenv's CPython 3.12", command: python, goal: true },
            memory::Runtime {
                label: "`Shares.java` on OpenJDK 17",
                command: jit_runtimes::java(&src, dir)?.command("60"),
                goal: true,
            },
            memory::Runtime {
                label: "`shares.js` on the system's Node",
                command: jit_runtimes::node(&src, dir)?.command("60"),
                goal: false,
            },
        ];
        sections.push(("memory", memory::table(&tools.profiler, dir, &workloads[0], &runtimes)?));
    }
    if wanted("kernel") {
        eprintln!("xtask bench: kernel cost per sample");
        // A shallow and a deep stack: the cost follows the bytes copied.
        let kernel_workloads: Vec<_> = workloads
            .into_iter()
            .filter(|w| w.name.starts_with("C, no") || w.name.starts_with("deep"))
            .collect();
        sections.push((
            "kernel",
            kernel::table(&tools.profiler, dir, &kernel_workloads, repetitions, options.quick)?,
        ));
    }
    Ok(sections)
}

fn compare_table(
    tools: &Tools,
    dir: &Path,
    workloads: &[workloads::Workload],
    frequencies: &[u64],
    repetitions: usize,
) -> Result<String> {
    let mut runs: BTreeMap<(usize, usize, u64), Vec<Run>> = BTreeMap::new();
    for repetition in 0..repetitions {
        for (w, workload) in workloads.iter().enumerate() {
            for &hz in frequencies {
                // Alternate which tool goes first, so that drift of the machine does not favour one.
                let mut order: Vec<(usize, Tool)> = Tool::ALL.into_iter().enumerate().collect();
                if repetition % 2 == 1 {
                    order.reverse();
                }
                for (t, tool) in order {
                    eprintln!(
                        "xtask bench: {} · {} · {hz} Hz · run {}",
                        workload.name,
                        tool.label(),
                        repetition + 1
                    );
                    let run = compare::measure(tools, workload, tool, hz, dir)?;
                    runs.entry((w, t, hz)).or_default().push(run);
                }
            }
        }
    }
    let results: Vec<Results> = workloads
        .iter()
        .enumerate()
        .map(|(w, workload)| {
            let rows = Tool::ALL
                .into_iter()
                .enumerate()
                .flat_map(|(t, tool)| frequencies.iter().map(move |&hz| (t, tool, hz)))
                .map(|(t, tool, hz)| Row { tool, hz, run: compare::summarize(&runs[&(w, t, hz)]) })
                .collect();
            Results { workload: workload.name, rows }
        })
        .collect();
    let mut report = commands(frequencies, repetitions);
    report.push_str("### profiler / perf\n\n");
    report.push_str(&compare::ratios(&results));
    report.push_str(&goals(&results));
    report.push_str("### Per workload\n\n");
    for workload in &results {
        report.push_str(&compare::table(workload));
    }
    Ok(report)
}

fn commands(frequencies: &[u64], repetitions: usize) -> String {
    let hz: Vec<String> = frequencies.iter().map(u64::to_string).collect();
    format!(
        "## Against perf and samply\n\nEach workload runs alone for 2.5 s, is profiled for 5 s, then runs alone again; the tool is stopped with SIGINT. \
         Frequencies: {} Hz; medians of {repetitions} repetition(s), tools alternating. Commands:\n\n\
         ```text\n\
         profiler record -q -p PID -F HZ --call-graph auto|fp -o run.svg -o run.folded -o run.prof\n\
         perf record -q -p PID -F HZ --call-graph dwarf|-g -o perf.data\n\
         perf script -i perf.data | inferno-collapse-perf --all > perf.folded && inferno-flamegraph perf.folded > perf.svg\n\
         samply record --save-only -p PID -r HZ -o samply.json\n\
         ```\n\n\
         samply (0.13) writes a profile whose frames the Firefox Profiler names when it opens it (samply serves the names \
         then): its *SIGINT to SVG* is to that profile, and how complete its stacks are is not measured (–). It runs with \
         `kernel.perf_event_paranoid` at 1 (it refuses more, even as root), put back after.\n\n\
         *Target slowdown* compares the workload's peak speed (best one-second window of its own progress counter) while \
         profiled with its peak alone: this machine's CPU speed swings with other tenants far more than the effect \
         measured. *Tool CPU while recording*: from one second after the tool starts until it is stopped; *in all*: every process of the tool from start to flame graph. *Complete stacks*: samples in the hot \
         leaves whose stack holds the whole chain from `main` (or the thread's start function). *Share error*: largest \
         distance, in points, between a hot function's share and the one the workload is built to have.\n\n",
        hz.join(" and ")
    )
}

/// The goals the numbers are held against, checked on the DWARF rows at 999 Hz.
fn goals(results: &[Results]) -> String {
    let rows = |tool: Tool| results.iter().filter_map(move |r| r.find(tool, 999).copied());
    let ours: Vec<Run> = rows(Tool::Profiler { dwarf: true }).collect();
    let perf: Vec<Run> = rows(Tool::Perf { dwarf: true }).collect();
    let perf_fp: Vec<Run> = rows(Tool::Perf { dwarf: false }).collect();
    // Ours with DWARF against perf's cheapest (frame pointers), workload by workload.
    let worst_against_perf_fp =
        |f: fn(&Run, &Run) -> f64| ours.iter().zip(&perf_fp).map(move |(o, p)| f(o, p));
    let above_perf_fp = worst_against_perf_fp(|o, p| o.slowdown - p.slowdown).fold(f64::MIN, f64::max);
    let rss_above_perf_fp = worst_against_perf_fp(|o, p| o.rss_mib - p.rss_mib).fold(f64::MIN, f64::max);
    let cpu_over_perf_fp =
        worst_against_perf_fp(|o, p| o.cpu_seconds / p.cpu_seconds).fold(f64::MIN, f64::max);
    let samples_of_perf_fp =
        worst_against_perf_fp(|o, p| o.quality.samples as f64 / p.quality.samples as f64)
            .fold(f64::MAX, f64::min);
    if ours.is_empty() {
        return String::new();
    }
    let max = |runs: &[Run], f: fn(&Run) -> f64| runs.iter().map(f).fold(f64::MIN, f64::max);
    let min = |runs: &[Run], f: fn(&Run) -> f64| runs.iter().map(f).fold(f64::MAX, f64::min);
    let speedup =
        ours.iter().zip(&perf).map(|(o, p)| p.stop_to_svg_ms / o.stop_to_svg_ms).fold(f64::MAX, f64::min);
    let lines = [
        (
            "target slowdown ≤ 1% at 999 Hz with DWARF",
            format!("worst {:.1}%", max(&ours, |r| r.slowdown)),
            max(&ours, |r| r.slowdown) <= 1.0,
        ),
        (
            "target slowdown at 999 Hz with DWARF ≤ perf -g's, in the same run",
            format!("worst {above_perf_fp:+.1} points from perf -g"),
            above_perf_fp <= 0.0,
        ),
        (
            "profiler peak RSS ≤ 48 MiB at 999 Hz",
            format!("worst {:.0} MiB", max(&ours, |r| r.rss_mib)),
            max(&ours, |r| r.rss_mib) <= 48.0,
        ),
        (
            "profiler peak RSS ≤ perf -g's + 8 MiB, in the same run",
            format!("worst {rss_above_perf_fp:+.1} MiB from perf -g"),
            rss_above_perf_fp <= 8.0,
        ),
        (
            "profiler CPU in all ≤ perf -g's (record and script), in the same run",
            format!("worst {cpu_over_perf_fp:.2}× perf -g's"),
            cpu_over_perf_fp <= 1.0,
        ),
        (
            "samples ≥ 98% of perf -g's, in the same run",
            format!("least {:.1}%", 100.0 * samples_of_perf_fp),
            samples_of_perf_fp >= 0.98,
        ),
        (
            "complete stacks ≥ 99%",
            format!("worst {:.1}%", min(&ours, |r| r.quality.complete)),
            min(&ours, |r| r.quality.complete) >= 99.0,
        ),
        (
            "SIGINT to flame graph ≥ 10× faster than perf dwarf + inferno",
            format!("least {speedup:.1}×"),
            speedup >= 10.0,
        ),
        (
            "hot-function share error ≤ 1 point",
            format!("worst {:.1} pt", max(&ours, |r| r.quality.share_error)),
            max(&ours, |r| r.quality.share_error) <= 1.0,
        ),
        (
            "profiler CPU ≤ 3% of one core at 999 Hz",
            format!("worst {:.1}%", max(&ours, |r| r.recording_cpu)),
            max(&ours, |r| r.recording_cpu) <= 3.0,
        ),
    ];
    let mut text =
        String::from("#### Goals (DWARF, 999 Hz, every workload)\n\n| goal | measured | |\n|---|---|---|\n");
    for (goal, measured, ok) in lines {
        let _ = writeln!(text, "| {goal} | {measured} | {} |", verdict(ok));
    }
    text.push('\n');
    text
}

/// How a goals table says whether a goal was met.
pub fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**not met**" }
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn today() -> Result<String> {
    Ok(String::from_utf8(Command::new("date").arg("+%Y-%m-%d").output()?.stdout)?.trim().to_owned())
}

fn machine() -> Result<String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")?
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = String::from_utf8(Command::new("uname").arg("-r").output()?.stdout)?;
    let perf = String::from_utf8(Command::new("perf").arg("--version").output()?.stdout)?;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(format!("Machine: {cpus} CPUs ({cpu}), Linux {}, {}.", kernel.trim(), perf.trim()))
}
