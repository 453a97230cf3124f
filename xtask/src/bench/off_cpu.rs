//! `record --off-cpu` and `--wall` on programs that do little but switch: `pingpong`'s round
//! trips per second, and `handoff`'s (two threads passing a token with a few microseconds of
//! work each time, like a server's I/O thread and worker) hand-offs per second, alone, under the
//! profiler (at the default threshold, with every block recorded, and on and off the CPU), and
//! under libbpf-tools' `offcputime` (frame pointers only) at the same thresholds; perf's
//! `--off-cpu` where the installed perf has it. The profiler's summary gives the kernel's time
//! per context switch and per system call exit, and the ring bytes per recorded block.
use std::{
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

use super::{kernel::parse_after, median, verdict, workloads::on_last_cpu};
use crate::check;

/// libbpf-tools' offcputime, from Debian's `libbpf-tools`.
const OFFCPUTIME: &str = "/usr/sbin/offcputime";
/// The profiler's default `--min-block`, in microseconds.
const DEFAULT_MIN_BLOCK_US: u64 = 50;
/// `handoff`'s work per hand-off, in nanoseconds.
const HANDOFF_WORK_NS: u64 = 4000;
/// The most `record --off-cpu` or `--wall` may slow `handoff` down, in percent.
const GOAL_SLOWDOWN: f64 = 10.0;

/// A program that switches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Program {
    /// Two processes bouncing a byte: nothing but switches.
    Pingpong,
    /// Two threads handing a token over with [`HANDOFF_WORK_NS`] of work each time: on CPU 0 with
    /// the tools on the last CPU when `pinned`, else wherever the scheduler puts each.
    Handoff { pinned: bool },
}

impl Program {
    fn name(self) -> &'static str {
        match self {
            Program::Pingpong => "pingpong",
            Program::Handoff { .. } => "handoff",
        }
    }

    fn heading(self) -> &'static str {
        match self {
            Program::Handoff { pinned: false } => "handoff, nothing pinned",
            _ => self.name(),
        }
    }

    /// A tool's command: on the last CPU unless nothing is pinned.
    fn tool(self, program: &Path) -> Command {
        match self {
            Program::Handoff { pinned: false } => Command::new(program),
            _ => on_last_cpu(program),
        }
    }

    /// What it counts per second.
    fn unit(self) -> &'static str {
        match self {
            Program::Pingpong => "round trips/s",
            Program::Handoff { .. } => "hand-offs/s",
        }
    }

    /// Its arguments for a run of `seconds` that lingers `linger` seconds after.
    fn args(self, seconds: u64, linger: u64) -> Vec<String> {
        let mut args = vec![seconds.to_string()];
        if let Program::Handoff { .. } = self {
            args.push(HANDOFF_WORK_NS.to_string());
        }
        args.push(linger.to_string());
        if self == (Program::Handoff { pinned: false }) {
            args.push("-1".into());
        }
        args
    }

    fn describe(self, seconds: u64) -> String {
        match self {
            Program::Pingpong => format!(
                "`pingpong {seconds}`: two processes bounce a byte over a pair of pipes, so every round trip is two \
                 blocking reads of a few microseconds."
            ),
            Program::Handoff { pinned: true } => format!(
                "`handoff {seconds} {HANDOFF_WORK_NS}`: two threads of one process hand a token over a pair of pipes and \
                 work {} µs each time they hold it, like a server's I/O thread and worker.",
                HANDOFF_WORK_NS / 1000
            ),
            Program::Handoff { pinned: false } => format!(
                "`handoff {seconds} {HANDOFF_WORK_NS} 0 -1`: the same with its threads and the tools wherever the \
                 scheduler puts them, as a server runs."
            ),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Runner {
    Alone,
    /// `record --off-cpu`, or `--wall` (on and off the CPU) when `wall`.
    Profiler {
        min_block_us: u64,
        wall: bool,
    },
    /// `record --off-cpu -p` of another process (one that sleeps): what the program's switches
    /// cost when its threads are not followed.
    ProfilerElsewhere,
    OffCpuTime {
        min_block_us: u64,
    },
}

impl Runner {
    fn label(self) -> String {
        match self {
            Runner::Alone => "alone".into(),
            Runner::Profiler { min_block_us, wall: false } => {
                format!("`profiler record --off-cpu --min-block {min_block_us}`")
            }
            Runner::Profiler { min_block_us, wall: true } => {
                format!("`profiler record --wall --min-block {min_block_us}`")
            }
            Runner::ProfilerElsewhere => "`profiler record --off-cpu -p OTHER` (threads not followed)".into(),
            Runner::OffCpuTime { min_block_us } => format!("`offcputime -m {min_block_us}` (libbpf-tools)"),
        }
    }
}

/// What one run measured; `None` where the runner cannot tell.
#[derive(Default)]
struct Run {
    rate: f64,
    switch_us: Option<f64>,
    syscall_exit_us: Option<f64>,
    blocks_per_second: Option<f64>,
    ring_kib_per_block: Option<f64>,
    /// Of the blocked time in `pipe_read`, the share whose stack reaches `main` or a thread's
    /// start.
    complete: Option<f64>,
}

pub fn table(profiler: &Path, src: &Path, dir: &Path, repetitions: usize, quick: bool) -> Result<String> {
    let seconds = if quick { 3 } else { 5 };
    let mut text = format!(
        "## Off-CPU time (`profiler record --off-cpu`, `--wall`)\n\n\
         Programs that do little but switch, both on CPU 0 (every hand-off is a switch there, no idle CPU to wake), \
         the tools on the last CPU, and `handoff` once more with nothing pinned; each counts its own rate, built without frame pointers. Medians of {repetitions} \
         run(s). *µs per switch* and *per syscall exit*: mean run time of the `sched_switch` and `sys_exit` programs \
         (BPF run-time statistics, in a second run of each: they cost two clock reads per program run, so the rates \
         are measured without them; `sys_exit` runs at every system call of the machine, `sched_switch` at every \
         switch of the machine, followed threads or not). *Complete*: of the time blocked in `pipe_read`, the share \
         whose stack reaches `main` or the thread's start. {}\n\n",
        perf_off_cpu_support()
    );
    let mut goals = String::from("#### Goals\n\n| goal | measured | |\n|---|---|---|\n");
    for program in [Program::Handoff { pinned: true }, Program::Handoff { pinned: false }, Program::Pingpong]
    {
        let (table, slowdowns) = program_table(program, profiler, src, dir, repetitions, seconds)?;
        text.push_str(&table);
        if let Program::Handoff { .. } = program {
            for (runner, slowdown) in slowdowns {
                writeln!(
                    goals,
                    "| {} under {}, slowdown ≤ {GOAL_SLOWDOWN:.0}% | {slowdown:+.1}% | {} |",
                    program.heading(),
                    runner.label(),
                    verdict(slowdown <= GOAL_SLOWDOWN)
                )?;
            }
        }
    }
    text.push_str(&goals);
    text.push('\n');
    Ok(text)
}

/// The table of one program, and its slowdown (%) under each runner the goal is for: `record
/// --off-cpu` and `--wall` at the default threshold.
fn program_table(
    program: Program,
    profiler: &Path,
    src: &Path,
    dir: &Path,
    repetitions: usize,
    seconds: u64,
) -> Result<(String, Vec<(Runner, f64)>)> {
    let binary = dir.join(program.name());
    check(
        Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o"])
            .arg(&binary)
            .arg(src.join(format!("{}.c", program.name()))),
    )?;
    let mut runners = vec![
        Runner::Alone,
        Runner::Profiler { min_block_us: DEFAULT_MIN_BLOCK_US, wall: false },
        Runner::Profiler { min_block_us: DEFAULT_MIN_BLOCK_US, wall: true },
        Runner::Profiler { min_block_us: 1, wall: false },
        Runner::ProfilerElsewhere,
    ];
    if program == (Program::Handoff { pinned: false }) {
        // The goal's runs and the cost of threads not followed; the rest as pinned.
        runners.retain(|runner| !matches!(runner, Runner::Profiler { min_block_us: 1, .. }));
    } else if Path::new(OFFCPUTIME).exists() {
        runners.extend([
            Runner::OffCpuTime { min_block_us: DEFAULT_MIN_BLOCK_US },
            Runner::OffCpuTime { min_block_us: 1 },
        ]);
    }
    let mut runs: Vec<Vec<Run>> = runners.iter().map(|_| Vec::new()).collect();
    for repetition in 0..repetitions {
        for (r, &runner) in runners.iter().enumerate() {
            eprintln!("xtask bench: {} · {} · run {}", program.name(), runner.label(), repetition + 1);
            runs[r].push(run(program, runner, profiler, &binary, seconds, dir)?);
        }
    }
    let alone = median(&mut runs[0].iter().map(|r| r.rate).collect::<Vec<_>>());
    let mut text = format!(
        "### {}\n\n{}\n\n\
         | run | {} | slowdown | blocks recorded/s | µs per switch | µs per syscall exit | ring KiB per block | complete |\n\
         |---|---|---|---|---|---|---|---|\n",
        program.heading(),
        program.describe(seconds),
        program.unit(),
    );
    let mut goal = Vec::new();
    for (runner, runs) in runners.iter().zip(&mut runs) {
        let column = |f: fn(&Run) -> Option<f64>| {
            let mut values: Vec<f64> = runs.iter().filter_map(f).collect();
            (!values.is_empty()).then(|| median(&mut values))
        };
        let rate = column(|r| Some(r.rate)).unwrap_or(0.0);
        if let Runner::Profiler { min_block_us: DEFAULT_MIN_BLOCK_US, .. } = runner {
            goal.push((*runner, 100.0 * (alone / rate - 1.0)));
        }
        let cell = |value: Option<f64>, digits: usize, unit: &str| {
            value.map_or("–".into(), |v| format!("{v:.digits$}{unit}"))
        };
        writeln!(
            text,
            "| {} | {rate:.0} | {:+.1}% | {} | {} | {} | {} | {} |",
            runner.label(),
            100.0 * (alone / rate - 1.0),
            cell(column(|r| r.blocks_per_second), 0, ""),
            cell(column(|r| r.switch_us), 2, ""),
            cell(column(|r| r.syscall_exit_us), 3, ""),
            cell(column(|r| r.ring_kib_per_block), 2, ""),
            cell(column(|r| r.complete), 1, "%"),
        )?;
    }
    text.push('\n');
    Ok((text, goal))
}

fn run(
    program: Program,
    runner: Runner,
    profiler: &Path,
    binary: &Path,
    seconds: u64,
    dir: &Path,
) -> Result<Run> {
    let rate = |stdout: &str| {
        parse_after(&format!("> {stdout}"), ">", &format!(" {}", program.unit()))
            .with_context(|| format!("{} printed no rate", program.name()))
    };
    match runner {
        Runner::Alone => Ok(Run {
            rate: rate(&output(Command::new(binary).args(program.args(seconds, 0)))?.0)?,
            ..Run::default()
        }),
        Runner::Profiler { min_block_us, wall } => {
            let folded = dir.join(format!("{}.folded", program.name()));
            let record = || {
                output(
                    program
                        .tool(profiler)
                        .args(["record", if wall { "--wall" } else { "--off-cpu" }])
                        .args(["--min-block", &min_block_us.to_string(), "-o"])
                        .arg(&folded)
                        .arg("--")
                        .arg(binary)
                        .args(program.args(seconds, 0)),
                )
            };
            let (stdout, stderr) = record()?;
            let complete = complete_share(folded_stacks(&std::fs::read_to_string(&folded)?));
            let (switch_us, syscall_exit_us) = kernel_costs(record)?;
            let blocks = parse_after(&stderr, "off CPU", " blocks recorded");
            Ok(Run {
                rate: rate(&stdout)?,
                switch_us,
                syscall_exit_us,
                blocks_per_second: blocks.map(|b| b / seconds as f64),
                ring_kib_per_block: parse_after(&stderr, "ring", " KiB per record"),
                complete,
            })
        }
        Runner::ProfilerElsewhere => {
            let other =
                Command::new("sleep").arg((seconds + 10).to_string()).spawn().context("cannot run sleep")?;
            let other = super::workloads::KillOnDrop(other);
            // Records the other process for a little longer than the program runs.
            let record = || -> Result<(String, String)> {
                let profiler = program
                    .tool(profiler)
                    .args(["record", "--off-cpu", "-p", &other.0.id().to_string()])
                    .args(["-d", &(seconds + 3).to_string(), "-o"])
                    .arg(dir.join("elsewhere.folded"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("cannot run the profiler")?;
                thread::sleep(Duration::from_millis(1500));
                let (stdout, _) = output(Command::new(binary).args(program.args(seconds, 0)))?;
                let out = profiler.wait_with_output()?;
                Ok((stdout, String::from_utf8_lossy(&out.stderr).into_owned()))
            };
            let (stdout, _) = record()?;
            let (switch_us, syscall_exit_us) = kernel_costs(record)?;
            Ok(Run { rate: rate(&stdout)?, switch_us, syscall_exit_us, ..Run::default() })
        }
        Runner::OffCpuTime { min_block_us } => {
            // Traces the whole machine (-p takes one process) for a little longer than the
            // program runs; the program lingers so that offcputime can still read its maps to
            // name frames.
            let tracer = program
                .tool(Path::new(OFFCPUTIME))
                .args(["-m", &min_block_us.to_string(), &(seconds + 3).to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("cannot run offcputime")?;
            thread::sleep(Duration::from_millis(1500));
            let (stdout, _) = output(Command::new(binary).args(program.args(seconds, 4)))?;
            let report = tracer.wait_with_output()?;
            let stacks = offcputime_stacks(&String::from_utf8_lossy(&report.stdout), program.name());
            Ok(Run { rate: rate(&stdout)?, complete: complete_share(stacks), ..Run::default() })
        }
    }
}

/// The µs per context switch and per system call exit the profiler's summary gives for a
/// second run of `record` (its stdout and stderr), with the kernel's statistics on: they cost
/// two clock reads per program run, so rates are measured in a run without them.
fn kernel_costs(record: impl Fn() -> Result<(String, String)>) -> Result<(Option<f64>, Option<f64>)> {
    let (_, stderr) = {
        let _stats = super::kernel::BpfStats::enable()?;
        record()?
    };
    let per =
        |what: &str| stderr.lines().find(|l| l.contains("kernel cost")).and_then(|l| number_before(l, what));
    Ok((per(" µs per context switch"), per(" µs per system call exit")))
}

fn output(command: &mut Command) -> Result<(String, String)> {
    let out = command.stdin(Stdio::null()).output().with_context(|| format!("cannot run {command:?}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{command:?} failed: {stderr}");
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), stderr))
}

/// The number that ends right before `suffix` in `line`.
fn number_before(line: &str, suffix: &str) -> Option<f64> {
    let head = &line[..line.find(suffix)?];
    head.rsplit([' ', ',']).next()?.parse().ok()
}

/// The stacks of a folded profile, each as its frames and its weight.
fn folded_stacks(folded: &str) -> Vec<(Vec<String>, f64)> {
    folded
        .lines()
        .filter_map(|line| {
            let (stack, weight) = line.rsplit_once(' ')?;
            Some((stack.split(';').map(str::to_owned).collect(), weight.parse().ok()?))
        })
        .collect()
}

/// The stacks of `comm` in offcputime's report: blocks of frames (one per line), a
/// `-  COMM (PID)` line, and the blocked microseconds.
fn offcputime_stacks(report: &str, comm: &str) -> Vec<(Vec<String>, f64)> {
    report
        .split("\n\n")
        .filter_map(|block| {
            let lines: Vec<&str> = block.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            let (weight, rest) = lines.split_last()?;
            let (owner, frames) = rest.split_last()?;
            let owner = owner.strip_prefix('-')?.trim();
            (owner.split(' ').next() == Some(comm))
                .then(|| Some((frames.iter().map(|f| (*f).to_owned()).collect(), weight.parse().ok()?)))
                .flatten()
        })
        .collect()
}

/// Of the weight of the stacks that block in `pipe_read` (`anon_pipe_read` since Linux 6.16),
/// the share (%) whose stack reaches `main` or a thread's start; `None` when nothing blocked
/// there.
fn complete_share(stacks: Vec<(Vec<String>, f64)>) -> Option<f64> {
    let name = |frame: &str| frame.trim_end_matches("_[k]").to_owned();
    let (mut reading, mut complete) = (0.0, 0.0);
    for (frames, weight) in stacks {
        if frames.iter().any(|f| name(f).ends_with("pipe_read")) {
            reading += weight;
            if frames.iter().any(|f| f == "main" || f == "start_thread") {
                complete += weight;
            }
        }
    }
    (reading > 0.0).then(|| 100.0 * complete / reading)
}

/// Whether the installed perf records off-CPU time (Debian's perf is built without the BPF
/// skeletons `--off-cpu` needs, and ignores the option with a warning).
fn perf_off_cpu_support() -> String {
    let data = std::env::temp_dir().join("xtask-perf-off-cpu.data");
    let out = Command::new("perf")
        .args(["record", "--off-cpu", "-q", "-o"])
        .arg(&data)
        .args(["--", "true"])
        .output();
    let _ = std::fs::remove_file(&data);
    match out {
        Ok(out) if String::from_utf8_lossy(&out.stderr).contains("ignored") => {
            "perf's `--off-cpu` is not in this run: the installed perf ignores it (built without BPF skeletons).".into()
        }
        Ok(out) if out.status.success() => {
            "perf's `--off-cpu` works on this machine but is not measured here yet.".into()
        }
        _ => "perf's `--off-cpu` is not in this run: perf is not installed.".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_offcputime_stacks_of_one_command() {
        let report = "Tracing off-CPU time (us) of all threads by user + kernel stack... Hit Ctrl-C to end.\n\n    \
                      schedule\n    pipe_read\n    vfs_read\n    read\n    wait_for_peer\n    main\n    -                \
                      pingpong (42)\n        300\n\n    schedule\n    pipe_read\n    [unknown]\n    -                \
                      pingpong (43)\n        100\n\n    schedule\n    pipe_read\n    main\n    -                \
                      other (7)\n        999\n";
        let stacks = offcputime_stacks(report, "pingpong");
        assert_eq!(stacks.len(), 2);
        assert_eq!(stacks[0].1, 300.0);
        assert_eq!(complete_share(stacks), Some(75.0));
    }

    #[test]
    fn reads_folded_stacks_and_the_kernel_cost() {
        let folded =
            "pingpong;main;serve;wait_for_peer;read;pipe_read_[k] 30\npingpong;read;pipe_read_[k] 10\n";
        assert_eq!(complete_share(folded_stacks(folded)), Some(75.0));
        let line = "  kernel cost     0.41 µs per context switch, 0.052 µs per system call exit";
        assert_eq!(number_before(line, " µs per context switch"), Some(0.41));
        assert_eq!(number_before(line, " µs per system call exit"), Some(0.052));
        assert_eq!(number_before(line, " µs per sample program run"), None);
    }
}
