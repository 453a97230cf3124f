//! Command-line interface (perf-like names).
use std::{ffi::OsString, path::PathBuf};

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "profiler",
    version,
    about = "System-wide sampling profiler for Linux: eBPF sampling, flame graphs",
    long_about = "System-wide sampling profiler for Linux.\n\nSamples stacks with a perf cpu-clock \
                  event and an eBPF program, from outside the target: no signals, no ptrace stops, \
                  no preloaded library. Needs root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sample the stacks of processes and write a flame graph.
    Record(RecordArgs),
}

const RECORD_EXAMPLES: &str = "\
Examples:
  sudo profiler record -p 1234 -d 10                 profile PID 1234 for 10 s -> flamegraph.svg
  sudo profiler record -p 1234 -p 5678               two processes, until Ctrl-C or both exit
  sudo profiler record -a -F 999 -o all.folded       whole system at 999 Hz, folded stacks
  sudo profiler record -- ./server --port 8080       run a command and profile it and its children";

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

    /// Sampling frequency per CPU, in Hz.
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = 99,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: u64,

    /// Stop after this many seconds (otherwise at Ctrl-C, or when the targets exit).
    #[arg(short = 'd', long = "duration", value_name = "SECONDS", value_parser = parse_seconds)]
    pub duration: Option<f64>,

    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "PATH", default_value = "flamegraph.svg")]
    pub output: PathBuf,

    /// Output format [default: from the output's extension, else svg].
    #[arg(long, value_enum)]
    pub format: Option<Format>,

    /// How user stacks are walked: `auto` unwinds with DWARF CFI and completes with the frame-
    /// pointer chain where CFI or the stack copy runs out; `dwarf` uses CFI only; `fp` only
    /// frame pointers (no stack copy: cheapest, but wrong for code built without them).
    #[arg(long, value_enum, default_value_t = CallGraph::Auto)]
    pub call_graph: CallGraph,

    /// KiB of user stack copied per sample for DWARF unwinding (4 to 64, a multiple of 4).
    #[arg(long, value_name = "KIB", default_value_t = 32, value_parser = parse_stack_size)]
    pub stack_size: u32,

    /// Do not follow processes forked by the targets.
    #[arg(long)]
    pub no_inherit: bool,

    /// Command to run and profile, with its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CallGraph {
    Auto,
    Dwarf,
    Fp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Interactive flame graph (inferno).
    Svg,
    /// Folded stacks, one `root;frame;...;leaf COUNT` line per distinct stack.
    Folded,
}

impl Format {
    /// The format an output path implies by its extension.
    pub fn from_path(path: &std::path::Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "svg" => Some(Self::Svg),
            "folded" | "txt" => Some(Self::Folded),
            _ => None,
        }
    }
}

fn parse_stack_size(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(kib) if (4..=64).contains(&kib) && kib % 4 == 0 => Ok(kib),
        _ => Err(format!("`{text}` is not a stack size in KiB: a multiple of 4 from 4 to 64")),
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() => Ok(seconds),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exactly_one_target_form() {
        assert!(Cli::try_parse_from(["profiler", "record"]).is_err());
        assert!(Cli::try_parse_from(["profiler", "record", "-a", "-p", "1"]).is_err());
        assert!(Cli::try_parse_from(["profiler", "record", "-p", "1", "--", "true"]).is_err());
        let cli = Cli::try_parse_from(["profiler", "record", "-p", "1", "-p", "2"]).unwrap();
        let Command::Record(args) = cli.command;
        assert_eq!(args.pids, [1, 2]);
    }

    #[test]
    fn command_after_double_dash() {
        let cli = Cli::try_parse_from(["profiler", "record", "-F", "999", "--", "ls", "-l"]).unwrap();
        let Command::Record(args) = cli.command;
        assert_eq!(args.command, ["ls", "-l"]);
        assert_eq!(args.frequency, 999);
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(Format::from_path("a/b.svg".as_ref()), Some(Format::Svg));
        assert_eq!(Format::from_path("out.folded".as_ref()), Some(Format::Folded));
        assert_eq!(Format::from_path("out.txt".as_ref()), Some(Format::Folded));
        assert_eq!(Format::from_path("out".as_ref()), None);
    }

    #[test]
    fn stack_size_and_call_graph() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["profiler", "record", "-a"], args].concat());
        let Command::Record(args) = parse(&[]).unwrap().command;
        assert_eq!((args.call_graph, args.stack_size), (CallGraph::Auto, 32));
        let Command::Record(args) = parse(&["--call-graph", "fp", "--stack-size", "64"]).unwrap().command;
        assert_eq!((args.call_graph, args.stack_size), (CallGraph::Fp, 64));
        for bad in ["0", "6", "68", "x"] {
            assert!(parse(&["--stack-size", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_bad_duration() {
        assert!(Cli::try_parse_from(["profiler", "record", "-a", "-d", "0"]).is_err());
        assert!(Cli::try_parse_from(["profiler", "record", "-a", "-d", "x"]).is_err());
        assert!(Cli::try_parse_from(["profiler", "record", "-a", "-d", "0.5"]).is_ok());
    }
}
