//! Programs that deadlock profilers working inside them, under `profiler record` at 999 Hz:
//! threads throwing C++ exceptions in a tight loop, and threads dlopen/dlclose-ing a library in
//! a loop (a signal landing in the unwinder or the loader stops them). The speed each keeps, and
//! the longest its work stood still, while profiled. The end-to-end tests check that they run to
//! their end and keep working; how fast is measured here.
use std::{fmt::Write as _, path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use super::{median, workloads::RunningWorkload, workloads::peak_rate};
use crate::check;

/// Seconds of each program alone before the profiler starts, profiled, and alone after.
const BEFORE: f64 = 4.0;
const PROFILED: f64 = 10.0;
const AFTER: f64 = 4.0;

/// A program measured: its name, what it does, and its command for a run of so many seconds.
struct Program {
    name: &'static str,
    what: &'static str,
    command: Box<dyn Fn(f64) -> Command>,
}

/// One run: the program's peak speed alone and profiled, and its longest stall while profiled.
struct Speeds {
    alone: f64,
    profiled: f64,
    longest_stall: f64,
}

pub fn table(profiler: &Path, src: &Path, dir: &Path, repetitions: usize) -> Result<String> {
    let exceptions = dir.join("exceptions");
    check(Command::new("g++").args(["-O2", "-g", "-o"]).arg(&exceptions).arg(src.join("exceptions.cpp")))?;
    let dlopen = dir.join("dlopen");
    check(
        Command::new("gcc")
            .args(["-O2", "-g", "-o"])
            .arg(&dlopen)
            .arg(src.join("dlopen.c"))
            .args(["-ldl", "-lpthread"]),
    )?;
    let plugin = dir.join("libplugin.so");
    check(
        Command::new("gcc").args(["-O2", "-shared", "-fPIC", "-o"]).arg(&plugin).arg(src.join("plugin.c")),
    )?;
    let programs = [
        Program {
            name: "exceptions",
            what: "two threads throwing and catching C++ exceptions in a tight loop",
            command: Box::new(move |seconds| {
                let mut command = Command::new(&exceptions);
                command.arg(seconds.to_string()).arg("2");
                command
            }),
        },
        Program {
            name: "dlopen",
            what: "two threads loading a library, calling it (100,000 iterations) and unloading it, in a loop",
            command: Box::new(move |seconds| {
                let mut command = Command::new(&dlopen);
                command.arg(&plugin).arg(seconds.to_string()).args(["2", "1", "100000"]);
                command
            }),
        },
    ];
    let mut text = format!(
        "## Programs that deadlock in-process profilers\n\n\
         Each program runs alone for {BEFORE} s, under `profiler record -q -p PID -F 999 -d {PROFILED}`, then alone for \
         {AFTER} s; it prints its operation count every 100 ms. *Speed kept*: its peak speed (best one-second window) \
         while profiled over its peak alone, median of {repetitions} run(s); *longest stall*: the longest its count \
         stood still while profiled, worst run.\n\n\
         | program | operations/s alone | profiled | speed kept | longest stall |\n|---|---|---|---|---|\n"
    );
    for program in &programs {
        let mut runs = Vec::new();
        for repetition in 1..=repetitions {
            eprintln!("xtask bench: {} under the profiler · run {repetition}", program.name);
            runs.push(measure(profiler, dir, program)?);
        }
        let mut kept: Vec<f64> = runs.iter().map(|r| 100.0 * r.profiled / r.alone).collect();
        let mut alone: Vec<f64> = runs.iter().map(|r| r.alone).collect();
        let mut profiled: Vec<f64> = runs.iter().map(|r| r.profiled).collect();
        let stall = runs.iter().map(|r| r.longest_stall).fold(0.0, f64::max);
        writeln!(
            text,
            "| `{}`: {} | {:.0} | {:.0} | {:.1}% | {:.0} ms |",
            program.name,
            program.what,
            median(&mut alone),
            median(&mut profiled),
            median(&mut kept),
            stall * 1000.0
        )?;
    }
    text.push('\n');
    Ok(text)
}

fn measure(profiler: &Path, dir: &Path, program: &Program) -> Result<Speeds> {
    let running = RunningWorkload::spawn((program.command)(BEFORE + PROFILED + AFTER))?;
    running.wait_until(BEFORE);
    let start_t = running.now();
    let output = Command::new(profiler)
        .args([
            "record",
            "-q",
            "-p",
            &running.pid().to_string(),
            "-F",
            "999",
            "-d",
            &PROFILED.to_string(),
            "-o",
        ])
        .arg(dir.join("undisturbed.folded"))
        .output()
        .context("cannot run the profiler")?;
    if !output.status.success() {
        bail!("the profiler failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let stop_t = running.now();
    let progress = running.finish()?;
    let end_t = progress.last().map_or(0.0, |p| p.0);
    let profiled = peak_rate(&progress, start_t + 0.5, stop_t - 0.3).context("no progress while profiled")?;
    let alone = peak_rate(&progress, 0.5, start_t)
        .into_iter()
        .chain(peak_rate(&progress, stop_t + 0.3, end_t))
        .reduce(f64::max)
        .context("no progress alone")?;
    Ok(Speeds { alone, profiled, longest_stall: longest_stall(&progress, start_t, stop_t) })
}

/// The longest span in `[from, to]` (the program's clock) over which its operation count did
/// not rise.
fn longest_stall(progress: &[(f64, u64)], from: f64, to: f64) -> f64 {
    let mut longest: f64 = 0.0;
    let mut rose_at: Option<(f64, u64)> = None;
    for &(t, ops) in progress.iter().filter(|p| p.0 >= from && p.0 <= to) {
        match rose_at {
            Some((at, count)) if ops == count => longest = longest.max(t - at),
            _ => rose_at = Some((t, ops)),
        }
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_are_spans_without_progress() {
        let progress = [(0.0, 0), (0.1, 10), (0.2, 10), (0.3, 10), (0.4, 20), (0.5, 20), (0.6, 30)];
        assert!((longest_stall(&progress, 0.0, 1.0) - 0.2).abs() < 1e-9);
        assert!((longest_stall(&progress, 0.35, 1.0) - 0.1).abs() < 1e-9);
        assert_eq!(longest_stall(&[(0.0, 1), (0.1, 2)], 0.0, 1.0), 0.0);
    }
}
