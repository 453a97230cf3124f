//! `cargo xtask bench`: measures the profiler on workloads it builds, and writes BENCHMARKS.md.
//!
//! - kernel cost per sample at several stack-copy caps, on a shallow and a deep stack
//!   (BPF run-time statistics, `kernel.bpf_stats_enabled`);
//! - stop-to-flame-graph time and profiler CPU time of a 10 s recording at 999 Hz;
//! - the criterion micro-benchmarks of the userspace stages (`cargo bench -p profiler`).
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{cargo, check};

pub struct Options {
    /// Fewer repetitions, shorter runs.
    pub quick: bool,
}

/// A workload built from `profiler/tests/workloads`, and the arguments that make it run until
/// killed.
struct Workload {
    name: &'static str,
    binary: PathBuf,
    args: &'static [&'static str],
}

pub fn run(root: &Path, options: &Options) -> Result<()> {
    cargo(root, &["build", "--release", "--package", "profiler"])?;
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let profiler = root.join("target/release/profiler");
    let workloads = [
        Workload {
            name: "shallow (split.c, -fomit-frame-pointer)",
            binary: build_c(root, &dir, "split.c")?,
            args: &["0"],
        },
        Workload {
            name: "deep (recurse.c, 200 frames, ~20 KiB)",
            binary: build_c(root, &dir, "recurse.c")?,
            args: &["0", "200"],
        },
    ];
    let repetitions = if options.quick { 1 } else { 3 };
    let mut report = String::new();
    writeln!(report, "# Benchmarks\n")?;
    writeln!(
        report,
        "Written by `cargo xtask bench{}` on {}.\n",
        if options.quick { " --quick" } else { "" },
        today()?
    )?;
    writeln!(report, "{}\n", machine()?)?;

    eprintln!("xtask bench: kernel cost per sample");
    report.push_str(&kernel_cost(&profiler, &dir, &workloads, repetitions, options.quick)?);
    eprintln!("xtask bench: stop to flame graph");
    report.push_str(&stop_to_flame_graph(&profiler, &dir, &workloads[0], repetitions, options.quick)?);
    eprintln!("xtask bench: userspace stages (criterion)");
    report.push_str(&stages(root, options.quick)?);

    std::fs::write(root.join("BENCHMARKS.md"), &report)?;
    eprintln!("xtask bench: wrote BENCHMARKS.md");
    Ok(())
}

fn build_c(root: &Path, dir: &Path, source: &str) -> Result<PathBuf> {
    let out = dir.join(source.trim_end_matches(".c"));
    let src = root.join("profiler/tests/workloads").join(source);
    check(
        Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-lpthread"),
    )?;
    Ok(out)
}

/// Two copies of the workload keep both CPUs busy, so nearly every run of the program records
/// a sample (runs on an idle CPU are filtered out and much cheaper).
fn start_pair(workload: &Workload) -> Result<[KillOnDrop; 2]> {
    let start = || -> Result<KillOnDrop> {
        let child = Command::new(&workload.binary).args(workload.args).stdin(Stdio::null()).spawn()?;
        Ok(KillOnDrop(child))
    };
    Ok([start()?, start()?])
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kernel_cost(
    profiler: &Path,
    dir: &Path,
    workloads: &[Workload],
    repetitions: usize,
    quick: bool,
) -> Result<String> {
    let stats = BpfStats::enable()?;
    let seconds = if quick { "2" } else { "4" };
    let configs: [(&str, Vec<&str>); 5] = [
        ("fp (no copy)", vec!["--call-graph", "fp"]),
        ("4 KiB", vec!["--stack-size", "4"]),
        ("16 KiB", vec!["--stack-size", "16"]),
        ("32 KiB (default)", vec!["--stack-size", "32"]),
        ("64 KiB", vec!["--stack-size", "64"]),
    ];
    let mut table = String::from(
        "## Kernel cost per sample\n\nMean time the eBPF program spends per run (BPF run-time statistics), at 999 Hz on both \
         CPUs, median of the repetitions. The stack copy stops at the top of the stack, so a bigger cap costs only \
         where the stack is deeper.\n\n| stack copy |",
    );
    for w in workloads {
        write!(table, " {} |", w.name)?;
    }
    table.push_str("\n|---|");
    table.push_str(&"---|".repeat(workloads.len()));
    table.push('\n');
    for (label, args) in &configs {
        write!(table, "| {label} |")?;
        for workload in workloads {
            let mut runs = Vec::new();
            for _ in 0..repetitions {
                let pair = start_pair(workload)?;
                let pids: Vec<String> = pair.iter().map(|c| c.0.id().to_string()).collect();
                let out = dir.join("cost.folded");
                let mut command = Command::new(profiler);
                command
                    .args(["record", "-F", "999", "-d", seconds, "-p", &pids[0], "-p", &pids[1], "-o"])
                    .arg(&out)
                    .args(args);
                let stderr = output(&mut command)?;
                runs.push(
                    parse_after(&stderr, "kernel cost", " µs")
                        .context("no kernel cost in the profiler's summary")?,
                );
            }
            write!(table, " {:.2} µs |", median(&mut runs))?;
        }
        table.push('\n');
    }
    drop(stats);
    table.push('\n');
    Ok(table)
}

fn stop_to_flame_graph(
    profiler: &Path,
    dir: &Path,
    workload: &Workload,
    repetitions: usize,
    quick: bool,
) -> Result<String> {
    let record_for = Duration::from_secs(if quick { 5 } else { 10 });
    let mut table = format!(
        "## Recording to flame graph\n\n`profiler record -F 999 -p A -p B -o out.svg` on two copies of the {} workload, stopped \
         with SIGINT after {} s; median of {repetitions}.\n\n| figure | value |\n|---|---|\n",
        workload.name,
        record_for.as_secs()
    );
    let (mut stop_ms, mut cpu_s, mut samples, mut rss_mb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repetitions {
        let pair = start_pair(workload)?;
        let out = dir.join("out.svg");
        let mut child = Command::new(profiler)
            .args([
                "record",
                "-F",
                "999",
                "-p",
                &pair[0].0.id().to_string(),
                "-p",
                &pair[1].0.id().to_string(),
                "-o",
            ])
            .arg(&out)
            .stderr(Stdio::piped())
            .spawn()?;
        sleep(record_for);
        let stopped = Instant::now();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let usage = wait_with_usage(&mut child)?;
        stop_ms.push(stopped.elapsed().as_secs_f64() * 1000.0);
        cpu_s.push(usage.cpu_seconds);
        rss_mb.push(usage.max_rss_kib as f64 / 1024.0);
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)?;
        samples
            .push(parse_after(&stderr, "profiler: ", " samples").context("no sample count in the summary")?);
    }
    let cpu = median(&mut cpu_s);
    writeln!(table, "| samples recorded | {:.0} |", median(&mut samples))?;
    writeln!(table, "| SIGINT to flame graph written | {:.0} ms |", median(&mut stop_ms))?;
    writeln!(
        table,
        "| profiler CPU time (user + sys) | {cpu:.2} s, {:.1}% of one core |",
        100.0 * cpu / record_for.as_secs_f64()
    )?;
    writeln!(table, "| profiler peak RSS | {:.0} MiB |\n", median(&mut rss_mb))?;
    Ok(table)
}

struct Usage {
    cpu_seconds: f64,
    max_rss_kib: i64,
}

fn wait_with_usage(child: &mut Child) -> Result<Usage> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into locals we own.
    if unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) } < 0 {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("the profiler failed (wait status {status})");
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Usage { cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime), max_rss_kib: usage.ru_maxrss })
}

/// The criterion benchmarks, read back from criterion's JSON estimates.
fn stages(root: &Path, quick: bool) -> Result<String> {
    let time = if quick { "1" } else { "3" };
    check(Command::new("cargo").current_dir(root).args([
        "bench",
        "--package",
        "profiler",
        "--bench",
        "stages",
        "--",
        "--warm-up-time",
        "1",
        "--measurement-time",
        time,
    ]))?;
    let mut table = String::from(
        "## Userspace stages\n\nCriterion micro-benchmarks (`cargo bench -p profiler`), one core.\n\n| benchmark | time per \
         iteration | throughput |\n|---|---|---|\n",
    );
    let criterion = root.join("target/criterion");
    for group in ["decode", "unwind", "aggregate", "symbolize"] {
        let mut benches: Vec<PathBuf> = std::fs::read_dir(criterion.join(group))
            .with_context(|| format!("no criterion results for {group}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("new/estimates.json").exists())
            .collect();
        benches.sort();
        for bench in benches {
            let estimates: serde_json::Value =
                serde_json::from_slice(&std::fs::read(bench.join("new/estimates.json"))?)?;
            let benchmark: serde_json::Value =
                serde_json::from_slice(&std::fs::read(bench.join("new/benchmark.json"))?)?;
            let ns = estimates["mean"]["point_estimate"].as_f64().context("criterion estimate")?;
            let elements = benchmark["throughput"]["Elements"].as_f64().unwrap_or(1.0);
            let name = benchmark["full_id"].as_str().unwrap_or_default();
            writeln!(table, "| {name} | {} | {}/s |", human_time(ns), human_count(elements * 1e9 / ns))?;
        }
    }
    table.push('\n');
    Ok(table)
}

/// Turns on the kernel's BPF run-time statistics for as long as it lives, restoring the old
/// setting afterwards.
struct BpfStats {
    previous: String,
}

const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> Result<Self> {
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

fn output(command: &mut Command) -> Result<String> {
    let out = command.output().with_context(|| format!("cannot run {command:?}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{command:?} failed: {stderr}");
    }
    Ok(stderr)
}

/// The number between `before` and `after` on the first line that has both.
fn parse_after(text: &str, before: &str, after: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = &line[line.find(before)? + before.len()..];
        rest[..rest.find(after)?].trim().parse().ok()
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn human_time(ns: f64) -> String {
    match ns {
        ns if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        ns if ns >= 1e3 => format!("{:.2} µs", ns / 1e3),
        ns => format!("{ns:.0} ns"),
    }
}

fn human_count(per_second: f64) -> String {
    match per_second {
        n if n >= 1e6 => format!("{:.2} M", n / 1e6),
        n if n >= 1e3 => format!("{:.0} k", n / 1e3),
        n => format!("{n:.0}"),
    }
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
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(format!("Machine: {cpus} CPUs ({cpu}), Linux {}.", kernel.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_summary_figures() {
        let stderr = "profiler: 9990 samples (0 lost) from 2 processes in 4.0 s at 999 Hz\n  kernel cost     2.45 µs per sample program run\n";
        assert_eq!(parse_after(stderr, "kernel cost", " µs"), Some(2.45));
        assert_eq!(parse_after(stderr, "profiler: ", " samples"), Some(9990.0));
        assert_eq!(parse_after(stderr, "nothing", "x"), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
    }
}
