//! profiler against perf and samply on the same workloads, in one run: each measurement profiles
//! a running workload for a few seconds, stops the tool with SIGINT and waits for its flame graph
//! (samply: for its profile, which it names when it is opened).
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{
    folded::{Quality, quality},
    median,
    workloads::{RunningWorkload, Workload, slowdown},
};

/// Seconds of the workload alone before the tool starts, of profiling, and alone after.
const BEFORE: f64 = 2.5;
const PROFILED: f64 = 5.0;
const AFTER: f64 = 3.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// `profiler record`, with DWARF unwinding (`auto`) or frame pointers only.
    Profiler { dwarf: bool },
    /// `perf record -g` or `--call-graph dwarf`, then `perf script | inferno-collapse-perf |
    /// inferno-flamegraph`.
    Perf { dwarf: bool },
    /// `samply record --save-only`: perf events with stack copies, unwound with DWARF (framehop)
    /// as they come, written as an unnamed Firefox Profiler profile.
    Samply,
}

impl Tool {
    pub const ALL: [Tool; 5] = [
        Tool::Profiler { dwarf: true },
        Tool::Perf { dwarf: true },
        Tool::Profiler { dwarf: false },
        Tool::Perf { dwarf: false },
        Tool::Samply,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Tool::Profiler { dwarf: true } => "profiler (auto: DWARF)",
            Tool::Profiler { dwarf: false } => "profiler --call-graph fp",
            Tool::Perf { dwarf: true } => "perf --call-graph dwarf",
            Tool::Perf { dwarf: false } => "perf -g (frame pointers)",
            Tool::Samply => "samply (DWARF)",
        }
    }
}

/// The medians of one workload, tool and frequency.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub tool: Tool,
    pub hz: u64,
    pub run: Run,
}

/// Every row of one workload.
pub struct Results<'a> {
    pub workload: &'a str,
    pub rows: Vec<Row>,
}

impl Results<'_> {
    pub fn find(&self, tool: Tool, hz: u64) -> Option<&Run> {
        self.rows.iter().find(|r| r.tool == tool && r.hz == hz).map(|r| &r.run)
    }
}

/// One measurement.
#[derive(Clone, Copy, Debug, Default)]
pub struct Run {
    /// Loss of the workload's peak speed while profiled, in percent.
    pub slowdown: f64,
    /// CPU of the tool while it records, in percent of one core.
    pub recording_cpu: f64,
    /// CPU seconds of the tool's processes, start, recording and rendering.
    pub cpu_seconds: f64,
    /// From SIGINT to the flame graph written, in milliseconds.
    pub stop_to_svg_ms: f64,
    /// Size of the raw recording (`.prof` / `perf.data`), in bytes.
    pub raw_bytes: f64,
    pub rss_mib: f64,
    pub quality: Quality,
}

pub struct Tools {
    pub profiler: PathBuf,
    pub collapse: PathBuf,
    pub flamegraph: PathBuf,
    pub samply: PathBuf,
}

pub fn measure(tools: &Tools, workload: &Workload, tool: Tool, hz: u64, dir: &Path) -> Result<Run> {
    let running = RunningWorkload::start(workload, BEFORE + PROFILED + AFTER + 1.0)?;
    running.wait_until(BEFORE);
    let start_t = running.now();
    let pid = running.pid().to_string();
    let hz = hz.to_string();
    let (svg, folded, raw) = match tool {
        Tool::Profiler { .. } => (dir.join("run.svg"), dir.join("run.folded"), dir.join("run.prof")),
        Tool::Perf { .. } => (dir.join("perf.svg"), dir.join("perf.folded"), dir.join("perf.data")),
        Tool::Samply => (PathBuf::new(), PathBuf::new(), dir.join("samply.json")),
    };
    let mut record = match tool {
        Tool::Profiler { dwarf } => {
            let mut command = Command::new(&tools.profiler);
            command.args([
                "record",
                "-q",
                "-p",
                &pid,
                "-F",
                &hz,
                "--call-graph",
                if dwarf { "auto" } else { "fp" },
            ]);
            for output in [&svg, &folded, &raw] {
                command.arg("-o").arg(output);
            }
            command
        }
        Tool::Perf { dwarf } => {
            let mut command = Command::new("perf");
            command.args(["record", "-q", "-p", &pid, "-F", &hz]).args(if dwarf {
                &["--call-graph", "dwarf"][..]
            } else {
                &["-g"]
            });
            command.arg("-o").arg(&raw);
            command
        }
        Tool::Samply => {
            let mut command = Command::new(&tools.samply);
            command.args(["record", "--save-only", "-p", &pid, "-r", &hz, "-o"]).arg(&raw);
            command
        }
    };
    // samply refuses to run above paranoia 1, even as root.
    let _paranoia = (tool == Tool::Samply).then(|| Paranoia::lowered_to(1)).transpose()?;
    let mut recorder = record
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start the tool")?;
    // The tool's CPU while it records, past its start-up.
    sleep(Duration::from_secs(1));
    let (cpu_from, from) = (cpu_ticks(recorder.id()), Instant::now());
    sleep(Duration::from_secs_f64(PROFILED - 1.0));
    let recording_cpu =
        ticks_to_seconds(cpu_ticks(recorder.id()) - cpu_from) / from.elapsed().as_secs_f64() * 100.0;
    let stop_t = running.now();
    let stopped = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(recorder.id() as i32, libc::SIGINT) };
    let mut usage = wait_with_usage(&mut recorder)?;
    if let Tool::Perf { .. } = tool {
        let script = format!(
            // Without the period field, inferno counts samples rather than nanoseconds.
            "perf script -F comm,pid,tid,time,ip,sym,dso -i '{}' 2>/dev/null | '{}' --all > '{}' && '{}' '{}' > '{}'",
            raw.display(),
            tools.collapse.display(),
            folded.display(),
            tools.flamegraph.display(),
            folded.display(),
            svg.display()
        );
        let mut render = Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).spawn()?;
        usage = usage.plus(&wait_with_usage(&mut render)?);
    }
    let stop_to_svg_ms = stopped.elapsed().as_secs_f64() * 1000.0;
    let progress = running.finish()?;
    let slowdown = slowdown(&progress, start_t, stop_t)?;
    let quality = match tool {
        Tool::Samply => samply_quality(&raw)?,
        _ => quality(&std::fs::read_to_string(&folded).unwrap_or_default(), workload),
    };
    Ok(Run {
        slowdown,
        recording_cpu,
        cpu_seconds: usage.cpu_seconds,
        stop_to_svg_ms,
        raw_bytes: std::fs::metadata(&raw).map_or(0.0, |m| m.len() as f64),
        rss_mib: usage.max_rss_kib as f64 / 1024.0,
        quality,
    })
}

/// `kernel.perf_event_paranoid` lowered for a while, put back as it was when dropped.
struct Paranoia(String);

const PARANOIA: &str = "/proc/sys/kernel/perf_event_paranoid";

impl Paranoia {
    fn lowered_to(level: i32) -> Result<Self> {
        let was = std::fs::read_to_string(PARANOIA).context(PARANOIA)?;
        std::fs::write(PARANOIA, level.to_string()).context(PARANOIA)?;
        Ok(Self(was))
    }
}

impl Drop for Paranoia {
    fn drop(&mut self) {
        let _ = std::fs::write(PARANOIA, self.0.trim());
    }
}

/// What can be told of a samply profile without naming its frames: its samples (those of
/// every thread). Its stacks are addresses until the Firefox Profiler asks samply for names, so
/// how complete they are is not measured (NaN, shown as –).
fn samply_quality(profile: &Path) -> Result<Quality> {
    let text = std::fs::read(profile).with_context(|| format!("samply wrote no {}", profile.display()))?;
    let profile: serde_json::Value = serde_json::from_slice(&text).context("samply's profile")?;
    let threads = profile["threads"].as_array().context("samply's profile has no threads")?;
    let samples = threads.iter().filter_map(|thread| thread["samples"]["length"].as_u64()).sum();
    Ok(Quality { samples, complete: f64::NAN, share_error: f64::NAN })
}

/// User and system CPU of a process so far, in clock ticks (`/proc/PID/stat`, all threads).
pub(super) fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

pub(super) fn ticks_to_seconds(ticks: u64) -> f64 {
    // SAFETY: sysconf has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

pub struct Usage {
    pub cpu_seconds: f64,
    pub max_rss_kib: i64,
}

impl Usage {
    fn plus(&self, other: &Usage) -> Usage {
        Usage {
            cpu_seconds: self.cpu_seconds + other.cpu_seconds,
            max_rss_kib: self.max_rss_kib.max(other.max_rss_kib),
        }
    }
}

/// Waits for a child, with its resource usage (its descendants' included).
pub fn wait_with_usage(child: &mut Child) -> Result<Usage> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into locals we own.
    if unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) } < 0 {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    // perf record ends by re-raising the SIGINT that stopped it, once perf.data is complete.
    let interrupted = libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGINT;
    let succeeded = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !(interrupted || succeeded) {
        bail!("the tool failed (wait status {status})");
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Usage { cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime), max_rss_kib: usage.ru_maxrss })
}

/// The medians of several runs.
pub fn summarize(runs: &[Run]) -> Run {
    let field = |f: fn(&Run) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
    Run {
        slowdown: field(|r| r.slowdown),
        recording_cpu: field(|r| r.recording_cpu),
        cpu_seconds: field(|r| r.cpu_seconds),
        stop_to_svg_ms: field(|r| r.stop_to_svg_ms),
        raw_bytes: field(|r| r.raw_bytes),
        rss_mib: field(|r| r.rss_mib),
        quality: Quality {
            samples: field(|r| r.quality.samples as f64) as u64,
            complete: field(|r| r.quality.complete),
            share_error: field(|r| r.quality.share_error),
        },
    }
}

/// One workload's table: a row per tool and frequency.
pub fn table(results: &Results) -> String {
    let workload = results.workload;
    let mut text = format!(
        "#### {workload}\n\n| tool | Hz | target slowdown | tool CPU while recording | tool CPU in all | SIGINT to SVG | raw recording | complete stacks | share error | peak RSS | samples |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for Row { tool, hz, run } in &results.rows {
        let _ = writeln!(
            text,
            "| {} | {hz} | {:.1}% | {:.1}% of a core | {:.2} s | {:.0} ms | {} | {} | {} | {:.0} MiB | {} |",
            tool.label(),
            run.slowdown,
            run.recording_cpu,
            run.cpu_seconds,
            run.stop_to_svg_ms,
            bytes(run.raw_bytes),
            measured(run.quality.complete, "%"),
            measured(run.quality.share_error, " pt"),
            run.rss_mib,
            run.quality.samples
        );
    }
    text.push('\n');
    text
}

/// `value` with one decimal and its unit, or – where it was not measured (NaN).
fn measured(value: f64, unit: &str) -> String {
    if value.is_nan() { "–".into() } else { format!("{value:.1}{unit}") }
}

fn bytes(n: f64) -> String {
    if n >= 1e6 { format!("{:.1} MB", n / 1e6) } else { format!("{:.0} KB", n / 1e3) }
}

/// The headline: profiler over perf, for the matching call graph, per workload and frequency.
pub fn ratios(all: &[Results]) -> String {
    let mut text = String::from(
        "| workload | Hz | call graph | target slowdown, profiler vs perf | peak RSS, profiler vs perf | SIGINT to SVG, perf / profiler | CPU while recording, profiler / perf | raw size, profiler / perf | complete stacks, profiler vs perf |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for results in all {
        let workload = results.workload;
        for &Row { tool, hz, run: ours } in &results.rows {
            let Tool::Profiler { dwarf } = tool else { continue };
            let Some(perf) = results.find(Tool::Perf { dwarf }, hz) else { continue };
            let _ = writeln!(
                text,
                "| {workload} | {hz} | {} | {:.1}% vs {:.1}% | {:.0} vs {:.0} MiB | {:.1}× | {:.2} | {:.3} | {:.1}% vs {:.1}% |",
                if dwarf { "DWARF" } else { "frame pointers" },
                ours.slowdown,
                perf.slowdown,
                ours.rss_mib,
                perf.rss_mib,
                perf.stop_to_svg_ms / ours.stop_to_svg_ms,
                ours.recording_cpu / perf.recording_cpu,
                ours.raw_bytes / perf.raw_bytes,
                ours.quality.complete,
                perf.quality.complete
            );
        }
    }
    text.push('\n');
    text
}
