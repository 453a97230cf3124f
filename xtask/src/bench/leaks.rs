//! `profiler leaks` on a malloc-heavy program: its slowdown against the program alone, and
//! against valgrind's memcheck (`--leak-check=full`) when installed. The program times its own
//! loop, so the tools' start-up and tear-down do not count.
use std::{fmt::Write as _, path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use super::median;
use crate::check;

/// `alloc_heavy` modes: what one of the N iterations does.
const MODES: [(&str, &str); 2] = [
    ("work", "a string built, hashed into a table, copied and freed: ~1 µs of work per allocation"),
    ("tight", "a malloc/free pair and nothing else: the worst case"),
];
/// Iterations per run (a fifth with `--quick`).
const ITERATIONS: u64 = 100_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Runner {
    Alone,
    Leaks,
    Valgrind,
}

pub fn table(profiler: &Path, src: &Path, dir: &Path, repetitions: usize, quick: bool) -> Result<String> {
    let iterations = if quick { ITERATIONS / 5 } else { ITERATIONS };
    let binary = dir.join("alloc_heavy");
    check(Command::new("gcc").args(["-O2", "-g", "-o"]).arg(&binary).arg(src.join("alloc_heavy.c")))?;
    let valgrind = Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success());
    let runners: Vec<Runner> = [Runner::Alone, Runner::Leaks, Runner::Valgrind]
        .into_iter()
        .filter(|&r| r != Runner::Valgrind || valgrind)
        .collect();
    let mut text = String::from(
        "## Leak tracking (`profiler leaks`)\n\n\
         `alloc_heavy MODE N` times its own loop; slowdown = that time under the tool / alone, medians. \
         `profiler leaks -q -o leaks.txt -- alloc_heavy MODE N` against \
         `valgrind -q --leak-check=full alloc_heavy MODE N`.\n\n\
         | workload: one iteration | N | alone | profiler leaks | valgrind | leaks / valgrind |\n|---|---|---|---|---|---|\n",
    );
    for (mode, what) in MODES {
        let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); runners.len()];
        for repetition in 0..repetitions {
            for (r, &runner) in runners.iter().enumerate() {
                eprintln!("xtask bench: alloc_heavy {mode} · {} · run {}", label(runner), repetition + 1);
                seconds[r].push(run(runner, profiler, &binary, mode, iterations, dir)?);
            }
        }
        let medians: Vec<f64> = seconds.iter_mut().map(|s| median(s)).collect();
        let alone = medians[0];
        let slowdown = |r: usize| medians.get(r).map(|t| t / alone);
        let cell = |r: usize| {
            slowdown(r).map_or("not installed".into(), |s| format!("{s:.0}× ({:.2} s)", medians[r]))
        };
        let ratio = match (slowdown(1), slowdown(2)) {
            (Some(ours), Some(theirs)) => format!("{:.2}", ours / theirs),
            _ => "–".into(),
        };
        writeln!(
            text,
            "| {mode}: {what} | {iterations} | {:.3} s | {} | {} | {ratio} |",
            alone,
            cell(1),
            cell(2)
        )?;
    }
    text.push('\n');
    Ok(text)
}

fn label(runner: Runner) -> &'static str {
    match runner {
        Runner::Alone => "alone",
        Runner::Leaks => "profiler leaks",
        Runner::Valgrind => "valgrind",
    }
}

/// Seconds the program's loop took, as it prints them.
fn run(runner: Runner, profiler: &Path, binary: &Path, mode: &str, n: u64, dir: &Path) -> Result<f64> {
    let n = n.to_string();
    let mut command = match runner {
        Runner::Alone => Command::new(binary),
        Runner::Leaks => {
            let mut command = Command::new(profiler);
            command.args(["leaks", "-q", "-o"]).arg(dir.join("leaks.txt")).arg("--").arg(binary);
            command
        }
        Runner::Valgrind => {
            let mut command = Command::new("valgrind");
            command.args(["-q", "--leak-check=full"]).arg(binary);
            command
        }
    };
    let output = command.args([mode, &n]).output().with_context(|| format!("cannot run {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.trim().parse::<f64>().ok())
        .with_context(|| format!("{command:?} printed no time: {stdout}"))
}
