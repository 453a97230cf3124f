//! What the profiler costs to start and holds while it records: the CPU and peak RSS of a
//! recording of a tenth of a second, and the peak RSS of recordings of a native target and of
//! Python, Java and Node programs, with where the memory goes (`/proc/PID/smaps` while it
//! records: its binary, the ring buffer, the heap, other libraries).
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use anyhow::{Context as _, Result};

use super::{
    compare::wait_with_usage,
    median, verdict,
    workloads::{KillOnDrop, Workload},
};

/// The start-up goal: CPU of `record -p PID -d 0.1`, in seconds.
const START_UP_GOAL_S: f64 = 0.25;
/// The peak RSS goal on a Python or Java target, in MiB.
const RUNTIME_GOAL_MIB: f64 = 32.0;
/// Seconds each target is recorded, and when its memory is read by part.
const RECORDED_S: &str = "8";
const READ_AFTER: Duration = Duration::from_secs(6);
/// Seconds a runtime's program runs before it is recorded (its start-up and JIT warm-up).
const WARM_UP: Duration = Duration::from_secs(3);

/// A runtime's program to record at 99 Hz.
pub struct Runtime {
    pub label: &'static str,
    /// The program and its arguments, running long enough.
    pub command: Vec<PathBuf>,
    /// Whether the goal on runtimes' targets applies (Python's and Java's).
    pub goal: bool,
}

/// A target recorded, and how.
struct Target {
    label: String,
    /// The processes to start (each recorded with `-p`).
    commands: Vec<Vec<PathBuf>>,
    hz: &'static str,
    goal: bool,
}

/// One recording's peak RSS and resident memory by part.
struct Footprint {
    peak_mib: f64,
    parts: BTreeMap<&'static str, f64>,
}

pub fn table(profiler: &Path, dir: &Path, workload: &Workload, runtimes: &[Runtime]) -> Result<String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let native_command: Vec<PathBuf> = std::iter::once(workload.binary.clone())
        .chain(std::iter::once(PathBuf::from("0")))
        .chain(workload.args.iter().map(PathBuf::from))
        .collect();
    let native = Target {
        label: format!("{cpus} copies of `{}` at 999 Hz", workload.name),
        commands: vec![native_command.clone(); cpus],
        hz: "999",
        goal: false,
    };
    let targets = std::iter::once(native).chain(runtimes.iter().map(|runtime| Target {
        label: format!("{} at 99 Hz", runtime.label),
        commands: vec![runtime.command.clone()],
        hz: "99",
        goal: runtime.goal,
    }));
    let (start_cpu, start_rss) = start_up(profiler, dir, &native_command)?;
    let mut text = format!(
        "## Memory and start-up\n\n*Start-up*: `profiler record -q -p PID -d 0.1` beside one busy `{}`, CPU (user and \
         system) and peak RSS of the whole run, median of 3. *Peak RSS*: `profiler record -q -F HZ -d 8 -p PID...` \
         (default options, and `--debug-info all` for what reading every module's DWARF adds; a runtime's program \
         runs {} s first), median of 3, each beside a fresh start of the target; *by part*: resident memory by \
         mapping after 6 s of the default run of median peak (`/proc/PID/smaps`). \
         The goal on native targets, beside perf -g's, is in the comparison above.\n\n\
         | goal | measured | |\n|---|---|---|\n\
         | start-up CPU ≤ {START_UP_GOAL_S} s | {start_cpu:.2} s (peak RSS {start_rss:.1} MiB) | {} |\n",
        workload.name,
        WARM_UP.as_secs(),
        verdict(start_cpu <= START_UP_GOAL_S),
    );
    let mut footprints = Vec::new();
    for target in targets {
        eprintln!("xtask bench: memory · {}", target.label);
        let default = median_record(profiler, dir, &target, &[])?;
        let all = median_record(profiler, dir, &target, &["--debug-info", "all"])?;
        footprints.push((target, default, all.peak_mib));
    }
    for (target, default, _) in footprints.iter().filter(|(target, ..)| target.goal) {
        writeln!(
            text,
            "| peak RSS ≤ {RUNTIME_GOAL_MIB} MiB: {} | {:.1} MiB | {} |",
            target.label,
            default.peak_mib,
            verdict(default.peak_mib <= RUNTIME_GOAL_MIB)
        )?;
    }
    text.push_str("\n| target | peak RSS | with `--debug-info all` |\n|---|---|---|\n");
    for (target, default, all) in &footprints {
        writeln!(text, "| {} | {:.1} MiB | {all:.1} MiB |", target.label, default.peak_mib)?;
    }
    text.push_str("\n| part (MiB, after 6 s) |");
    for (target, ..) in &footprints {
        write!(text, " {} |", target.label)?;
    }
    text.push_str("\n|---|");
    text.push_str(&"---|".repeat(footprints.len()));
    text.push('\n');
    let parts: std::collections::BTreeSet<&str> =
        footprints.iter().flat_map(|(_, default, _)| default.parts.keys().copied()).collect();
    for part in parts {
        write!(text, "| {part} |")?;
        for (_, default, _) in &footprints {
            write!(text, " {:.1} |", default.parts.get(part).copied().unwrap_or(0.0))?;
        }
        text.push('\n');
    }
    text.push('\n');
    Ok(text)
}

/// Starts `command` (a program and its arguments), its output dropped, killed when dropped.
fn spawn(command: &[PathBuf]) -> Result<KillOnDrop> {
    let child = Command::new(&command[0]).args(&command[1..]).stdout(Stdio::null()).spawn();
    Ok(KillOnDrop(child.with_context(|| format!("cannot start {}", command[0].display()))?))
}

/// The median CPU seconds and peak RSS (MiB) of three recordings of a tenth of a second.
fn start_up(profiler: &Path, dir: &Path, command: &[PathBuf]) -> Result<(f64, f64)> {
    let busy = spawn(command)?;
    let pid = busy.0.id().to_string();
    let (mut cpu, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let mut recorder = Command::new(profiler)
            .args(["record", "-q", "-d", "0.1", "-p", &pid, "-o"])
            .arg(dir.join("start-up.folded"))
            .stdin(Stdio::null())
            .spawn()
            .context("cannot start the profiler")?;
        let usage = wait_with_usage(&mut recorder)?;
        cpu.push(usage.cpu_seconds);
        rss.push(usage.max_rss_kib as f64 / 1024.0);
    }
    Ok((median(&mut cpu), median(&mut rss)))
}

/// The recording of three of `target` with `extra` options whose peak RSS is the median: one
/// recording's peak swings by megabytes with when the allocator gets memory back.
fn median_record(profiler: &Path, dir: &Path, target: &Target, extra: &[&str]) -> Result<Footprint> {
    let mut footprints = (0..3).map(|_| record(profiler, dir, target, extra)).collect::<Result<Vec<_>>>()?;
    footprints.sort_by(|a, b| a.peak_mib.total_cmp(&b.peak_mib));
    Ok(footprints.swap_remove(1))
}

/// Records `target` with `extra` options: its peak RSS, and its memory by part after 6 s.
fn record(profiler: &Path, dir: &Path, target: &Target, extra: &[&str]) -> Result<Footprint> {
    let running: Vec<KillOnDrop> =
        target.commands.iter().map(|command| spawn(command)).collect::<Result<_>>()?;
    // Past the targets' own start-up (an interpreter's, a JIT's warm-up).
    sleep(WARM_UP);
    let mut recorder = Command::new(profiler);
    recorder.args(["record", "-q", "-F", target.hz, "-d", RECORDED_S]).args(extra);
    for child in &running {
        recorder.args(["-p", &child.0.id().to_string()]);
    }
    let mut recorder = recorder
        .arg("-o")
        .arg(dir.join("memory.svg"))
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start the profiler")?;
    sleep(READ_AFTER);
    let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", recorder.id()))?;
    let usage = wait_with_usage(&mut recorder)?;
    Ok(Footprint { peak_mib: usage.max_rss_kib as f64 / 1024.0, parts: breakdown(&smaps, profiler) })
}

/// Resident MiB by part: the profiler's own binary, the ring buffer (a BPF map mapped into the
/// process), the heap (anonymous memory), files mapped to read them (binaries being symbolized
/// or unwound), the C library and others.
fn breakdown(smaps: &str, profiler: &Path) -> BTreeMap<&'static str, f64> {
    let mut parts = BTreeMap::new();
    let mut part = "";
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && f.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
        {
            let name = fields.get(5).copied().unwrap_or("");
            part = match name {
                _ if Path::new(name) == profiler => "profiler binary",
                "anon_inode:bpf-map" => "ring buffer and BPF maps",
                "" | "[heap]" => "heap",
                "[stack]" => "stacks",
                _ if name.starts_with('[') => "kernel-provided",
                _ if name.contains("/lib") => "shared libraries",
                _ => "files read (binaries symbolized or unwound)",
            };
        } else if fields.first() == Some(&"Rss:") {
            let kib: f64 = fields.get(1).and_then(|k| k.parse().ok()).unwrap_or(0.0);
            *parts.entry(part).or_insert(0.0) += kib / 1024.0;
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_by_part() {
        let smaps = "55d0-55e0 r-xp 00000000 08:01 12 /usr/bin/profiler\nRss:  2048 kB\n\
                     7f00-7f10 rw-s 00000000 00:0f 3 anon_inode:bpf-map\nRss:  4096 kB\n\
                     7f20-7f30 rw-p 00000000 00:00 0 \nRss:  1024 kB\n\
                     7f40-7f50 r--p 00000000 08:01 9 /usr/lib/x86_64-linux-gnu/libc.so.6\nRss:  512 kB\n";
        let parts = breakdown(smaps, Path::new("/usr/bin/profiler"));
        assert_eq!(parts["profiler binary"], 2.0);
        assert_eq!(parts["ring buffer and BPF maps"], 4.0);
        assert_eq!(parts["heap"], 1.0);
        assert_eq!(parts["shared libraries"], 0.5);
    }
}
