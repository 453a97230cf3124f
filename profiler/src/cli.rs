//! Command-line interface (perf-like names).
use std::{ffi::OsString, path::PathBuf};

use anyhow::Result;
use clap::{
    ArgGroup, Args, Parser, Subcommand,
    builder::{PossibleValuesParser, TypedValueParser},
};
use clap_complete::Shell;

use crate::{
    model::{Tgid, ThreadState, Tid, filter::Filter},
    named::Named,
    output::Outputs,
    render::{Format, Grouping, RenderOptions},
    symbolize::DebugInfo,
    walk::CallGraph,
};

#[derive(Debug, Parser)]
#[command(
    name = "profiler",
    version,
    about = "System-wide sampling profiler for Linux: eBPF sampling, DWARF unwinding, flame graphs",
    long_about = "System-wide sampling profiler for Linux.\n\nSamples stacks with a perf cpu-clock \
                  event and an eBPF program, from outside the target: no signals, no ptrace stops, \
                  no preloaded library. Recording needs root (or CAP_BPF and CAP_PERFMON) and a \
                  kernel with BTF; report, diff and completions do not. `leaks` tracks the allocations \
                  a process does not free with uprobes on its allocator, also from outside.",
    after_help = "Examples:\n  sudo profiler record -p 1234 -d 10\n  profiler report run.prof -o cpu.pb.gz\n  \
                  profiler diff before.prof after.prof -o diff.svg\n  sudo profiler leaks -- ./server"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sample the stacks of processes and write flame graphs, profiles or a raw recording.
    Record(RecordArgs),
    /// Render a raw recording (`record -o run.prof`) again, filtered.
    Report(ReportArgs),
    /// Differential flame graph of two raw recordings: red grew, blue shrank.
    Diff(DiffArgs),
    /// Allocations a process has not freed, grouped by the stack that made them.
    Leaks(LeaksArgs),
    /// Profile continuously and export a profile per service every interval (Pyroscope, OTLP,
    /// files).
    Agent(AgentArgs),
    /// A live view of the functions with the most samples, refreshed every interval.
    Top(TopArgs),
    /// Check this machine (and the binaries of processes) for what profiling needs.
    Check(CheckArgs),
    /// Print a shell completion script.
    Completions(CompletionsArgs),
}

const RECORD_EXAMPLES: &str = "\
Examples:
  sudo profiler record -p 1234 -d 10                 profile PID 1234 for 10 s -> flamegraph.svg
  sudo profiler record -p 1234 -p 5678               two processes, until Ctrl-C or both exit
  sudo profiler record -a -F 999 -o all.folded       whole system at 999 Hz, folded stacks
  sudo profiler record -- ./server --port 8080       run a command and profile it and its children
  sudo profiler record -p 1234 -o run.prof -o cpu.svg -o cpu.pb.gz
                                                     a raw recording, a flame graph and a pprof at once
  sudo profiler record --off-cpu -p 1234 -d 10       where its threads wait (blocked time, in µs)
  sudo profiler record --wall -- ./server            on and off the CPU: every thread's whole time

Output formats by extension: .svg, .folded/.txt, .pb.gz/.pprof (pprof), .json (speedscope),
.prof (raw recording).";

#[derive(Debug, Args)]
#[command(
    after_help = RECORD_EXAMPLES,
    group(ArgGroup::new("target").required(true).multiple(false).args(["pids", "system_wide", "command"]))
)]
pub struct RecordArgs {
    /// Profile this process (all of its threads, including new ones). Repeat for several.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// Profile the whole system.
    #[arg(short = 'a', long = "all-cpus")]
    pub system_wide: bool,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    /// Do not follow processes forked by the targets.
    #[arg(long)]
    pub no_inherit: bool,

    /// Profile the time threads spend blocked (sleeps, locks, I/O) instead of on the CPU: each
    /// block weighs its length, under the stack the thread blocked at (kernel frames included).
    #[arg(long, conflicts_with = "wall")]
    pub off_cpu: bool,

    /// Profile on-CPU and off-CPU time together: samples weigh one period, blocks their length,
    /// waits for a CPU show as `[runqueue]`; each thread's total is the recording's length.
    #[arg(long)]
    pub wall: bool,

    /// Ring buffer between the kernel and the profiler, in MiB (a power of two; default: 1 MiB
    /// per CPU, at least 2; at least 4 off the CPU). Samples that do not fit are counted as lost.
    #[arg(long, value_name = "MIB", value_parser = parse_ring_buffer)]
    pub ring_buffer: Option<u32>,

    /// Stop after this many samples.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_samples: Option<u64>,

    #[command(flatten)]
    pub grouping: GroupingArgs,

    /// Command to run and profile, with its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The default `--min-block`: spans off the CPU shorter than this cost two map operations, not
/// a record (BENCHMARKS.md measures it).
pub(crate) const DEFAULT_MIN_BLOCK_US: u64 = 50;

/// `record`'s default sampling frequency.
pub(crate) const RECORD_DEFAULT_HZ: u64 = 99;

/// How long a session runs, how much stack each record copies, how much it says: the options
/// of every command that records.
#[derive(Debug, Args)]
pub struct SessionArgs {
    /// Stop after this many seconds (otherwise at Ctrl-C or SIGTERM, or when the targets exit).
    #[arg(short = 'd', long = "duration", value_name = "SECONDS", value_parser = parse_seconds)]
    pub duration: Option<f64>,

    /// KiB of user stack copied per record for DWARF unwinding (4 to 64, a multiple of 4;
    /// default 32, and 8 per allocation for `leaks`).
    #[arg(long, value_name = "KIB", value_parser = parse_stack_size)]
    pub stack_size: Option<u32>,

    /// No live status line, summary or report on the terminal (errors and warnings still print).
    #[arg(short, long)]
    pub quiet: bool,

    /// Whose DWARF names native frames (their inlined functions and source lines): `own` reads
    /// what programs and libraries carry themselves, and names libraries whose DWARF is in a
    /// separate debug file (the system's: libc, libstdc++) and the interpreters of Python and
    /// Node by their ELF symbols, which saves 10-15 MiB each; `all` reads every module's.
    #[arg(long, default_value = "own", value_parser = named::<DebugInfo>())]
    pub debug_info: DebugInfo,
}

/// The options of the commands that sample on a clock (`record`, `agent`).
#[derive(Debug, Args)]
pub struct SamplingArgs {
    /// Sampling frequency per CPU, in Hz (default 99, and 19 for `agent`).
    #[arg(short = 'F', long = "freq", value_name = "HZ", value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: Option<u64>,

    /// How user stacks are walked: `auto` unwinds with DWARF CFI and completes with the frame-
    /// pointer chain where CFI or the stack copy runs out; `dwarf` uses CFI only; `fp` only
    /// frame pointers (no stack copy: cheapest, but wrong for code built without them).
    #[arg(long, default_value = "auto", value_parser = named::<CallGraph>())]
    pub call_graph: CallGraph,

    /// Native frames only: Python's, Java's and JavaScript's own frames are not read from their processes
    /// (their interpreters and compiled code show as native frames and `[unknown]`).
    #[arg(long)]
    pub native_only: bool,

    /// Keep the addresses of kernel frames in the outputs (pprof, OTLP and Pyroscope locations,
    /// raw recordings). Without it kernel frames are named but located nowhere, so that a
    /// profile read off this host does not tell where its kernel is loaded (KASLR).
    #[arg(long)]
    pub kernel_addresses: bool,

    /// With --off-cpu or --wall: blocks shorter than this many microseconds are not recorded.
    #[arg(long, value_name = "USEC", default_value_t = DEFAULT_MIN_BLOCK_US)]
    pub min_block: u64,

    #[command(flatten)]
    pub session: SessionArgs,
}

impl SamplingArgs {
    /// KiB of user stack copied per sample: none when only frame pointers are walked.
    pub fn stack_copy_kib(&self) -> u32 {
        match self.call_graph {
            CallGraph::Fp => 0,
            _ => self.session.stack_size.unwrap_or(32),
        }
    }
}

const AGENT_EXAMPLES: &str = "\
Examples:
  sudo profiler agent --pyroscope http://pyroscope:4040
                                                     the whole machine, a profile per service every 15 s
  sudo profiler agent --otlp http://localhost:4317 --label env=prod
                                                     to an OpenTelemetry Collector (OTLP gRPC)
  sudo profiler agent -p 1234 --output-dir /var/lib/profiler --keep 200
                                                     gzipped pprof files, the 200 newest kept

A service is named by --service-name, else its systemd unit, else its container, else its
command name.";

const TOP_EXAMPLES: &str = "\
Examples:
  sudo profiler top                                  the whole system, refreshed every second
  sudo profiler top -p 1234 -i 2                     one process, every 2 s
  sudo profiler top -- ./server --port 8080          run a command and watch it
  sudo profiler top -p 1234 --once > hot.txt         one plain table after one interval
  sudo profiler top -p 1234 -o cpu.svg -o cpu.pb.gz  and the whole session's profile at the end

Keys: s/t sort by self/total, c last interval/since the start, h threads, ↑/↓ select, Enter the
selected function's call paths, / filter, space pause, q quit.
Not on a terminal, a plain table is printed every interval.";

#[derive(Debug, Args)]
#[command(
    after_help = TOP_EXAMPLES,
    group(ArgGroup::new("target").multiple(false).args(["pids", "command"]))
)]
pub struct TopArgs {
    /// Watch this process (and its children). Repeat for several. Default: the whole system.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    /// Seconds between refreshes: each shows the interval just over.
    #[arg(short = 'i', long, value_name = "SECONDS", default_value_t = 1.0, value_parser = parse_seconds)]
    pub interval: f64,

    /// Print one table after one interval and exit.
    #[arg(long)]
    pub once: bool,

    /// At the end, write the whole session's profile here, as `record -o` would have (repeat for
    /// several formats). The format follows the extension: .svg, .folded/.txt, .pb.gz/.pprof,
    /// .json (speedscope), .prof (raw).
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub outputs: Vec<PathBuf>,

    /// Format of the (single) output, whatever its extension.
    #[arg(long, requires = "outputs", value_parser = named::<Format>())]
    pub format: Option<Format>,

    #[command(flatten)]
    pub grouping: GroupingArgs,

    /// Time threads spend blocked instead of on the CPU (as `record --off-cpu`).
    #[arg(long, conflicts_with = "wall")]
    pub off_cpu: bool,

    /// On-CPU and off-CPU time together (as `record --wall`).
    #[arg(long)]
    pub wall: bool,

    /// Command to run and watch, with its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The agent's default sampling frequency: as its peers (OpenTelemetry's eBPF profiler samples
/// at 20 Hz, Parca at 19 Hz), enough for a fleet's aggregate at a cost too small to notice.
pub(crate) const AGENT_DEFAULT_HZ: u64 = 19;

#[derive(Debug, Args)]
#[command(
    after_help = AGENT_EXAMPLES,
    group(ArgGroup::new("destination").required(true).multiple(true)
        .args(["pyroscope", "otlp", "otlp_http", "output_dir"])),
    group(ArgGroup::new("target").multiple(false).args(["pids", "cgroup"]))
)]
pub struct AgentArgs {
    /// Profile this process (and its children) only. Repeat for several. Default: the whole system.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// Profile the processes of this cgroup (v2 path, e.g. /sys/fs/cgroup/system.slice/app.service)
    /// at the start, and their children.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    /// Seconds per exported profile.
    #[arg(long, value_name = "SECONDS", default_value_t = 15.0, value_parser = parse_seconds)]
    pub interval: f64,

    /// Push to Pyroscope's ingest API at this base URL (http://HOST:PORT).
    #[arg(long, value_name = "URL")]
    pub pyroscope: Option<String>,

    /// Push OTLP profiles over gRPC to this endpoint (http://HOST:4317).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,

    /// Push OTLP profiles over HTTP to this base URL (http://HOST:4318).
    #[arg(long, value_name = "URL")]
    pub otlp_http: Option<String>,

    /// Write a gzipped pprof per service and interval into this directory.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// With --output-dir: keep the newest this many files.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub keep: usize,

    /// With --output-dir: keep at most this many MiB of files.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub keep_size: u64,

    /// The service name of every profile (default: per process, from its systemd unit, its
    /// container or its command name).
    #[arg(long, value_name = "NAME")]
    pub service_name: Option<String>,

    /// A label on every profile. Repeat for several.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,

    /// MiB of profiles kept for a backend that is down or slow (fractions allowed); the oldest go
    /// first.
    #[arg(long, value_name = "MIB", default_value_t = 32.0, value_parser = parse_mib)]
    pub spool_size: f64,

    /// Also export off-CPU profiles: the time threads spend blocked, by the stack they blocked
    /// at (as `record --off-cpu`; about 0.15 µs of kernel time per context switch of a followed
    /// thread, see BENCHMARKS.md).
    #[arg(long)]
    pub off_cpu: bool,
}

fn parse_mib(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(mib) if mib >= 0.0 && mib.is_finite() => Ok(mib),
        _ => Err(format!("`{text}` is not a number of MiB")),
    }
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value))
            if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') =>
        {
            Ok((key.to_owned(), crate::export::service::sanitized(value)))
        }
        _ => Err(format!("`{text}` is not KEY=VALUE (a key of letters, digits, `_` and `.`)")),
    }
}

const LEAKS_EXAMPLES: &str = "\
Examples:
  sudo profiler leaks -p 1234 -d 60                  blocks PID 1234 allocates in 60 s and keeps
  sudo profiler leaks -- ./server --port 8080        run a command; what it never freed by its exit
  sudo profiler leaks -p 1234 --min-age 30 -o old.svg -o old.txt
                                                     only blocks older than 30 s at the end

Output formats by extension: .txt (the report), .svg, .folded, .pb.gz/.pprof, .json, .prof.
The report's top stacks also go to standard output.";

#[derive(Debug, Args)]
#[command(
    after_help = LEAKS_EXAMPLES,
    group(ArgGroup::new("target").required(true).multiple(false).args(["pid", "command"]))
)]
pub struct LeaksArgs {
    /// Track this process's allocations (all its threads; not its children).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<u32>,

    #[command(flatten)]
    pub session: SessionArgs,

    /// Report only blocks allocated at least this many seconds before the end.
    #[arg(long, value_name = "SECONDS", value_parser = parse_offset)]
    pub min_age: Option<f64>,

    /// Output file; repeat for several formats. The format follows the extension: .txt (the
    /// report), .svg, .folded, .pb.gz/.pprof, .json (speedscope), .prof (raw).
    #[arg(short = 'o', long = "output", value_name = "PATH", default_value = "leaks.svg")]
    pub outputs: Vec<PathBuf>,

    /// Stacks shown in the report, most bytes first.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// Follow one allocation in N, chosen at random, and scale the bytes by N: less overhead
    /// on allocation-heavy code, estimates instead of exact figures.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub sample_every: u32,

    /// Ring buffer for allocation stacks, in MiB (a power of two). Allocations whose stack
    /// does not fit are still counted, under `[stack lost]`.
    #[arg(long, value_name = "MIB", default_value_t = 64, value_parser = parse_ring_buffer)]
    pub ring_buffer: u32,

    /// Most blocks followed at once; allocations beyond are counted, not followed.
    #[arg(long, value_name = "N", default_value_t = 1 << 22, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_outstanding: u32,

    /// Command to run and track, with its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

const REPORT_EXAMPLES: &str = "\
Examples:
  profiler report run.prof                           flame graph -> flamegraph.svg
  profiler report run.prof -o cpu.pb.gz              pprof, for go tool pprof / Pyroscope / Parca
  profiler report run.prof --comm nginx --no-kernel -o nginx.folded
  profiler report run.prof --since 10 --until 20 -o window.json --per-thread";

#[derive(Debug, Args)]
#[command(after_help = REPORT_EXAMPLES)]
pub struct ReportArgs {
    /// Raw recording written by `profiler record -o FILE.prof`.
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub filter: FilterArgs,

    #[command(flatten)]
    pub grouping: GroupingArgs,
}

const DIFF_EXAMPLES: &str = "\
Examples:
  profiler diff before.prof after.prof               -> diff.svg
  profiler diff before.prof after.prof --normalize -o diff.svg";

#[derive(Debug, Args)]
#[command(after_help = DIFF_EXAMPLES)]
pub struct DiffArgs {
    /// Raw recording of the baseline.
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,

    /// Raw recording to compare with it; the graph has its shape.
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,

    /// Output flame graph (SVG).
    #[arg(short = 'o', long = "output", value_name = "PATH", default_value = "diff.svg")]
    pub output: PathBuf,

    /// Scale BEFORE to AFTER's sample count, to compare recordings of different lengths.
    #[arg(long)]
    pub normalize: bool,

    #[command(flatten)]
    pub filter: FilterArgs,

    #[command(flatten)]
    pub grouping: GroupingArgs,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  sudo profiler check              kernel, BTF, privileges, perf events, eBPF\n  \
                        sudo profiler check -p 1234      and whether PID 1234's binaries have CFI or frame pointers"
)]
pub struct CheckArgs {
    /// Also check the binaries this process runs (repeatable).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  profiler completions bash > /etc/bash_completion.d/profiler\n  \
                        profiler completions zsh > ~/.zfunc/_profiler\n  \
                        profiler completions fish > ~/.config/fish/completions/profiler.fish")]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Output file; repeat for several formats from the same samples. The format follows the
    /// extension: .svg, .folded/.txt, .pb.gz/.pprof, .json (speedscope), .prof (raw).
    #[arg(short = 'o', long = "output", value_name = "PATH", default_value = "flamegraph.svg")]
    pub outputs: Vec<PathBuf>,

    /// Format of the (single) output, whatever its extension.
    #[arg(long, value_parser = named::<Format>())]
    pub format: Option<Format>,
}

impl OutputArgs {
    /// Each output with its format (`.txt`: folded stacks).
    pub fn resolve(&self) -> Result<Outputs> {
        Outputs::resolve(&self.outputs, self.format, Format::Folded)
    }
}

/// A parser of the names of `T`'s values, which it offers for completion and `--help`.
fn named<T: Named + Send + Sync>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(T::NAMES.iter().map(|(name, _)| *name))
        .map(|chosen| T::from_name(&chosen).expect("a possible value"))
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("grouping").multiple(false).args(["per_pid", "per_thread", "no_group"])))]
pub struct GroupingArgs {
    /// Root frame per process (`comm-pid`) instead of per command name.
    #[arg(long)]
    pub per_pid: bool,
    /// Root frame per thread (`comm-tid`).
    #[arg(long)]
    pub per_thread: bool,
    /// No root frame: stacks of all processes merged.
    #[arg(long)]
    pub no_group: bool,
    /// A frame under the root for the value of this label (a goroutine's pprof label), `KEY=[none]`
    /// for samples without it.
    #[arg(long, value_name = "KEY")]
    pub by_label: Option<String>,
    /// Python frames without their line: one frame per function (raw recordings keep lines).
    #[arg(long)]
    pub no_lines: bool,
}

impl GroupingArgs {
    /// How folded stacks and flame graphs are rendered.
    pub fn render_options(&self) -> RenderOptions {
        RenderOptions {
            grouping: self.grouping(),
            by_label: self.by_label.clone(),
            lines: !self.no_lines,
            ..RenderOptions::default()
        }
    }

    pub fn grouping(&self) -> Grouping {
        match (self.per_pid, self.per_thread, self.no_group) {
            (true, _, _) => Grouping::Process,
            (_, true, _) => Grouping::Thread,
            (_, _, true) => Grouping::None,
            _ => Grouping::Command,
        }
    }
}

#[derive(Debug, Args)]
pub struct FilterArgs {
    /// Keep only this process (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Keep only this thread (repeatable).
    #[arg(long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,
    /// Keep only this command name (repeatable).
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,
    /// Keep samples taken this many seconds after the start or later.
    #[arg(long, value_name = "SECONDS", value_parser = parse_offset)]
    pub since: Option<f64>,
    /// Keep samples taken up to this many seconds after the start.
    #[arg(long, value_name = "SECONDS", value_parser = parse_offset)]
    pub until: Option<f64>,
    /// Drop kernel frames.
    #[arg(long)]
    pub no_kernel: bool,
    /// Of an off-CPU or wall recording, keep only this thread state (repeatable): S (sleeping),
    /// D (uninterruptible), R (waiting for a CPU), cpu (on the CPU).
    #[arg(long = "state", value_name = "STATE", value_parser = parse_state)]
    pub states: Vec<ThreadState>,
}

impl FilterArgs {
    pub fn filter(&self) -> Filter {
        let ns = |seconds: f64| (seconds * 1e9) as u64;
        Filter {
            pids: self.pids.iter().map(|&pid| Tgid(pid)).collect(),
            tids: self.tids.iter().map(|&tid| Tid(tid)).collect(),
            comms: self.comms.clone(),
            states: self.states.clone(),
            since_ns: self.since.map(ns),
            until_ns: self.until.map(ns),
            no_kernel: self.no_kernel,
        }
    }
}

fn parse_state(text: &str) -> Result<ThreadState, String> {
    match text {
        "cpu" => Ok(ThreadState::OnCpu),
        _ => text
            .chars()
            .next()
            .filter(|_| text.len() == 1)
            .and_then(ThreadState::from_letter)
            .filter(|&state| state != ThreadState::OnCpu)
            .ok_or_else(|| format!("`{text}` is not a thread state: S, D, R or cpu")),
    }
}

fn parse_stack_size(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(kib) if (4..=64).contains(&kib) && kib % 4 == 0 => Ok(kib),
        _ => Err(format!("`{text}` is not a stack size in KiB: a multiple of 4 from 4 to 64")),
    }
}

fn parse_ring_buffer(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(mib) if mib.is_power_of_two() && mib <= 1024 => Ok(mib),
        _ => Err(format!("`{text}` is not a ring buffer size in MiB: a power of two up to 1024")),
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() => Ok(seconds),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

fn parse_offset(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds >= 0.0 && seconds.is_finite() => Ok(seconds),
        _ => Err(format!("`{text}` is not a number of seconds")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn record(args: &[&str]) -> Result<RecordArgs, clap::Error> {
        let cli = Cli::try_parse_from([&["profiler", "record"], args].concat())?;
        match cli.command {
            Command::Record(args) => Ok(args),
            other => panic!("{other:?}"),
        }
    }

    fn leaks(args: &[&str]) -> Result<LeaksArgs, clap::Error> {
        let cli = Cli::try_parse_from([&["profiler", "leaks"], args].concat())?;
        match cli.command {
            Command::Leaks(args) => Ok(args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn leaks_takes_a_pid_or_a_command() {
        assert!(leaks(&[]).is_err());
        assert!(leaks(&["-p", "1", "--", "true"]).is_err());
        assert!(leaks(&["-p", "1", "--sample-every", "0"]).is_err());
        let args = leaks(&["-p", "7", "--min-age", "2.5", "--top", "3"]).unwrap();
        assert_eq!((args.pid, args.min_age, args.top, args.sample_every), (Some(7), Some(2.5), 3, 1));
        assert_eq!(args.outputs, [PathBuf::from("leaks.svg")]);
        assert_eq!(leaks(&["--", "ls", "-l"]).unwrap().command, ["ls", "-l"]);
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exactly_one_target_form() {
        assert!(record(&[]).is_err());
        assert!(record(&["-a", "-p", "1"]).is_err());
        assert!(record(&["-p", "1", "--", "true"]).is_err());
        assert_eq!(record(&["-p", "1", "-p", "2"]).unwrap().pids, [1, 2]);
    }

    #[test]
    fn command_after_double_dash() {
        let args = record(&["-F", "999", "--", "ls", "-l"]).unwrap();
        assert_eq!(args.command, ["ls", "-l"]);
        assert_eq!(args.sampling.frequency, Some(999));
    }

    #[test]
    fn stack_size_and_call_graph() {
        let sampling = |args: &[&str]| {
            let sampling = record(args).unwrap().sampling;
            (sampling.call_graph, sampling.stack_copy_kib())
        };
        assert_eq!(sampling(&["-a"]), (CallGraph::Auto, 32));
        assert_eq!(sampling(&["-a", "--call-graph", "dwarf", "--stack-size", "64"]), (CallGraph::Dwarf, 64));
        // Frame pointers alone copy no stack.
        assert_eq!(sampling(&["-a", "--call-graph", "fp", "--stack-size", "64"]), (CallGraph::Fp, 0));
        for bad in ["0", "6", "68", "x"] {
            assert!(record(&["-a", "--stack-size", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn resource_limits() {
        let args = record(&["-a"]).unwrap();
        assert_eq!((args.ring_buffer, args.max_samples), (None, None));
        let args = record(&["-a", "--ring-buffer", "64", "--max-samples", "1000"]).unwrap();
        assert_eq!((args.ring_buffer, args.max_samples), (Some(64), Some(1000)));
        for bad in ["0", "3", "2048"] {
            assert!(record(&["-a", "--ring-buffer", bad]).is_err(), "{bad}");
        }
        assert!(record(&["-a", "--max-samples", "0"]).is_err());
    }

    #[test]
    fn rejects_bad_duration() {
        assert!(record(&["-a", "-d", "0"]).is_err());
        assert!(record(&["-a", "-d", "x"]).is_err());
        assert!(record(&["-a", "-d", "0.5"]).is_ok());
    }

    #[test]
    fn outputs_and_formats() {
        let outputs = |args: &[&str]| record(&[&["-a"], args].concat()).unwrap().output.resolve();
        let resolved = outputs(&[]).unwrap();
        assert_eq!(resolved.paths(), [(PathBuf::from("flamegraph.svg"), Format::Svg)]);
        let resolved =
            outputs(&["-o", "a.prof", "-o", "b.pb.gz", "-o", "c.json", "-o", "d.svg", "-o", "e.txt"])
                .unwrap();
        let formats: Vec<Format> = resolved.paths().iter().map(|(_, f)| *f).collect();
        assert_eq!(formats, [Format::Raw, Format::Pprof, Format::Speedscope, Format::Svg, Format::Folded]);
        // A typo in an extension, or none, is an error that lists the formats.
        let err = outputs(&["-o", "run.pprf"]).unwrap_err();
        assert!(format!("{err:#}").contains("run.pprf: unknown output format; name it .svg"), "{err:#}");
        assert!(outputs(&["-o", "d"]).is_err());
        assert_eq!(outputs(&["-o", "x", "--format", "folded"]).unwrap().paths()[0].1, Format::Folded);
        assert!(outputs(&["-o", "x", "-o", "y", "--format", "folded"]).is_err());
        assert!(record(&["-a", "--format", "bogus"]).is_err());
    }

    #[test]
    fn grouping_flags() {
        assert_eq!(record(&["-a"]).unwrap().grouping.grouping(), Grouping::Command);
        assert_eq!(record(&["-a", "--per-pid"]).unwrap().grouping.grouping(), Grouping::Process);
        assert_eq!(record(&["-a", "--per-thread"]).unwrap().grouping.grouping(), Grouping::Thread);
        assert_eq!(record(&["-a", "--no-group"]).unwrap().grouping.grouping(), Grouping::None);
        assert!(record(&["-a", "--per-pid", "--no-group"]).is_err());
    }

    #[test]
    fn report_filters() {
        let cli = Cli::try_parse_from([
            "profiler",
            "report",
            "r.prof",
            "--pid",
            "1",
            "--comm",
            "x",
            "--since",
            "1.5",
            "--until",
            "2",
            "--no-kernel",
        ])
        .unwrap();
        let Command::Report(args) = cli.command else { panic!() };
        let filter = args.filter.filter();
        assert_eq!(filter.pids, [Tgid(1)]);
        assert_eq!(filter.comms, ["x"]);
        assert_eq!((filter.since_ns, filter.until_ns), (Some(1_500_000_000), Some(2_000_000_000)));
        assert!(filter.no_kernel);
    }

    #[test]
    fn every_subcommand_has_examples() {
        let mut command = Cli::command();
        for sub in command.get_subcommands_mut() {
            let help = sub.render_long_help().to_string();
            assert!(help.contains("Examples:"), "{} --help has no examples", sub.get_name());
        }
    }
}
