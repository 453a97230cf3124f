//! Kernel cost per sample at several stack-copy caps: the eBPF program's run time, from the
//! kernel's BPF run-time statistics.
use std::{
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use super::{
    median,
    workloads::{KillOnDrop, Workload},
};

pub fn table(
    profiler: &Path,
    dir: &Path,
    workloads: &[Workload],
    repetitions: usize,
    quick: bool,
) -> Result<String> {
    let _stats = BpfStats::enable()?;
    let seconds = if quick { "2" } else { "4" };
    let configs: [(&str, &[&str]); 5] = [
        ("fp (no copy)", &["--call-graph", "fp"]),
        ("4 KiB", &["--stack-size", "4"]),
        ("16 KiB", &["--stack-size", "16"]),
        ("32 KiB (default)", &["--stack-size", "32"]),
        ("64 KiB", &["--stack-size", "64"]),
    ];
    let mut table = String::from(
        "## Kernel cost per sample\n\nMean time the eBPF program spends per run (BPF run-time statistics), and mean bytes \
         per sample through the ring, at 999 Hz, two copies of the workload keeping both CPUs busy, median of the \
         repetitions. The copy stops at the top of the stack (where the thread's first frame is, once an unwind \
         reached it), so a bigger cap costs only where the stack is deeper.\n\n| stack copy |",
    );
    for w in workloads {
        write!(table, " {} |", w.name)?;
    }
    table.push_str("\n|---|");
    table.push_str(&"---|".repeat(workloads.len()));
    table.push('\n');
    for (label, args) in configs {
        write!(table, "| {label} |")?;
        for workload in workloads {
            let (mut runs, mut bytes) = (Vec::new(), Vec::new());
            for _ in 0..repetitions {
                let pair = [start(workload)?, start(workload)?];
                let pids: Vec<String> = pair.iter().map(|c| c.0.id().to_string()).collect();
                let mut command = Command::new(profiler);
                command.args(["record", "-F", "999", "-d", seconds, "-p", &pids[0], "-p", &pids[1], "-o"]);
                command.arg(dir.join("cost.folded")).args(args);
                let stderr = stderr_of(&mut command)?;
                runs.push(
                    parse_after(&stderr, "kernel cost", " µs per sample program run")
                        .context("no kernel cost in the profiler's summary")?,
                );
                bytes.push(
                    parse_after(&stderr, "ring", " KiB per record")
                        .context("no ring line in the profiler's summary")?,
                );
            }
            write!(table, " {:.2} µs · {:.1} KiB |", median(&mut runs), median(&mut bytes))?;
        }
        table.push('\n');
    }
    table.push('\n');
    Ok(table)
}

/// The eBPF program's mean time per run and the ring's mean bytes per record on each of
/// `programs` (labelled commands, each made with
/// [`on_last_cpu`](super::workloads::on_last_cpu)), as a table for `section`,
/// and those times in µs, in the order of `programs`: `profiler record -F 999 -d 4 -p PID`,
/// the program started afresh for each of the `repetitions`, medians.
pub fn pinned_costs(
    profiler: &Path,
    dir: &Path,
    section: &str,
    programs: Vec<(&str, Command)>,
    repetitions: usize,
) -> Result<(String, Vec<f64>)> {
    let _stats = BpfStats::enable()?;
    let mut text = String::from(
        "Kernel cost: mean time the eBPF program spends per run (BPF run-time statistics) and mean bytes per record \
         through the ring, `profiler record -F 999 -d 4 -p PID`, median of the repetitions. Each program runs on the \
         last CPU: on this VM the same program takes about 1.6 times as long on the first one (cause not found), \
         which made medians of unpinned runs swing between the two.\n\n\
         | program | µs per sample program run | KiB per record |\n|---|---|---|\n",
    );
    let mut times = Vec::new();
    for (label, mut command) in programs {
        let (mut runs, mut bytes) = (Vec::new(), Vec::new());
        for repetition in 0..repetitions {
            eprintln!("xtask bench: {section} · kernel cost · {label} · run {}", repetition + 1);
            let program = KillOnDrop(command.stdin(Stdio::null()).stdout(Stdio::null()).spawn()?);
            let stderr = stderr_of(
                Command::new(profiler)
                    .args(["record", "-F", "999", "-d", "4", "-p", &program.0.id().to_string(), "-o"])
                    .arg(dir.join(format!("{section}-cost.folded"))),
            )?;
            runs.push(
                parse_after(&stderr, "kernel cost", " µs per sample program run")
                    .with_context(|| format!("no kernel cost in the profiler's summary: {stderr}"))?,
            );
            bytes.push(
                parse_after(&stderr, "ring", " KiB per record").context("no ring line in the summary")?,
            );
        }
        let us = median(&mut runs);
        writeln!(text, "| {label} | {us:.2} | {:.1} |", median(&mut bytes))?;
        times.push(us);
    }
    text.push('\n');
    Ok((text, times))
}

/// A copy of the workload running until killed.
fn start(workload: &Workload) -> Result<KillOnDrop> {
    let child = Command::new(&workload.binary)
        .arg("0")
        .args(&workload.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()?;
    Ok(KillOnDrop(child))
}

/// Turns on the kernel's BPF run-time statistics for as long as it lives, restoring the old
/// setting afterwards.
pub(super) struct BpfStats {
    previous: String,
}

const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    pub(super) fn enable() -> Result<Self> {
        let previous = std::fs::read_to_string(BPF_STATS_SYSCTL)?;
        std::fs::write(BPF_STATS_SYSCTL, "1")
            .context("cannot enable kernel.bpf_stats_enabled (run as root)")?;
        Ok(Self { previous })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS_SYSCTL, self.previous.trim());
    }
}

fn stderr_of(command: &mut Command) -> Result<String> {
    let out = command.output().with_context(|| format!("cannot run {command:?}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{command:?} failed: {stderr}");
    }
    Ok(stderr)
}

/// The number between `before` and `after` on the first line that has both.
pub(super) fn parse_after(text: &str, before: &str, after: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = &line[line.find(before)? + before.len()..];
        rest[..rest.find(after)?].trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_cost() {
        let stderr = "profiler: 9990 samples (0 lost) from 2 processes in 4.0 s at 999 Hz\n  kernel cost     2.450 µs per sample program run\n  ring            1.30 KiB per record\n";
        assert_eq!(parse_after(stderr, "kernel cost", " µs per sample program run"), Some(2.45));
        assert_eq!(parse_after(stderr, "ring", " KiB per record"), Some(1.3));
        assert_eq!(parse_after(stderr, "nothing", "x"), None);
    }
}
