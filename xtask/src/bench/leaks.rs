//! `profiler leaks` on a malloc-heavy program: its slowdown against the program alone, and
//! against valgrind's memcheck (`--leak-check=full`) when installed. The program times its own
//! loop, so the tools' start-up and tear-down do not count.
use std::{fmt::Write as _, path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use super::{median, workloads::compile_c};
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
    text.push_str(&keeping_up(profiler, src, dir, repetitions, quick)?);
    Ok(text)
}

/// `leaks_churn`: eight threads churning every allocation function beside 1000 leaked pages. How
/// many allocations a second are followed, and how many of their stacks the ring loses.
fn keeping_up(profiler: &Path, src: &Path, dir: &Path, repetitions: usize, quick: bool) -> Result<String> {
    let binary = dir.join("leaks_churn");
    compile_c(&src.join("leaks_churn.c"), &binary, &["-O2", "-g", "-fno-optimize-sibling-calls"])?;
    let seconds = if quick { "3" } else { "10" };
    let mut text = format!(
        "`profiler leaks -q -o leaks.txt -- leaks_churn {seconds}`: eight threads churn malloc, calloc, realloc, \
         posix_memalign, aligned_alloc and free while the main thread leaks 1000 pages; default options.\n\n\
         | run | allocations followed per second | stacks lost | leaked pages found under their stack |\n|---|---|---|---|\n",
    );
    for repetition in 1..=repetitions {
        eprintln!("xtask bench: leaks_churn · run {repetition}");
        let report = dir.join("churn.txt");
        let output = Command::new(profiler)
            .args(["leaks", "-q", "-o"])
            .arg(&report)
            .arg("--")
            .arg(&binary)
            .arg(seconds)
            .output()?;
        if !output.status.success() {
            bail!("profiler leaks on leaks_churn failed: {}", String::from_utf8_lossy(&output.stderr));
        }
        let churn = Churn::read(&std::fs::read_to_string(&report)?).context("an unexpected report")?;
        writeln!(
            text,
            "| {repetition} | {:.0} | {} | {} of 1000 |",
            churn.allocations as f64 / churn.seconds,
            churn.lost,
            churn.leaked_pages
        )?;
    }
    text.push('\n');
    Ok(text)
}

/// What a leaks report says of a `leaks_churn` run.
#[derive(Debug, PartialEq)]
struct Churn {
    seconds: f64,
    allocations: u64,
    lost: u64,
    leaked_pages: u64,
}

impl Churn {
    fn read(report: &str) -> Option<Self> {
        let number = |word: &str| word.replace(',', "").parse::<u64>().ok();
        let seconds = report.lines().next()?.rsplit(" over ").next()?.strip_suffix(" s")?.parse().ok()?;
        let allocations = number(report.lines().nth(1)?.split_whitespace().next()?)?;
        let lost = report
            .lines()
            .find_map(|line| line.strip_prefix("warning: the stacks of "))
            .map_or(Some(0), |rest| number(rest.split_whitespace().next()?))?;
        // The group whose innermost frame is leaky_function: `#N: BYTES bytes in BLOCKS blocks`.
        let lines: Vec<&str> = report.lines().collect();
        let leaked_pages = lines
            .windows(2)
            .filter(|pair| pair[0].starts_with('#') && pair[1].trim_start().starts_with("leaky_function"))
            .filter_map(|pair| number(pair[0].split_whitespace().nth(4)?))
            .sum();
        Some(Self { seconds, allocations, lost, leaked_pages })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_churn_report() {
        let report = "profiler leaks: ./leaks_churn 3 over 3.3 s\n\
                      413,724 allocations, 313,133 frees, 0 failed; peak outstanding 4,106,790 bytes\n\
                      outstanding: 4,097,088 bytes in 1,004 blocks from 3 stacks\n\
                      warning: the stacks of 8,573 allocations were lost (ring buffer full): see [stack lost]\n\n\
                      #1: 3,960,832 bytes in 967 blocks (96.7%) · leaks_churn\n    leaky_function  [leaks_churn]\n";
        let churn = Churn::read(report).unwrap();
        assert_eq!(churn, Churn { seconds: 3.3, allocations: 413_724, lost: 8_573, leaked_pages: 967 });
    }
}
