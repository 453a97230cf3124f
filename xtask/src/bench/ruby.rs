//! `profiler record` on a CPU-bound Ruby program (tests/workloads/ruby/shares.rb) on Debian's
//! Ruby 3.1 and unstable's 3.3, against rbspy at the same rate on the same process, and on a
//! native program (split.c, one thread) for what a sample costs without Ruby, at 99 and 999 Hz,
//! in one run: the program's slowdown, each tool's CPU per sample and peak RSS, how many samples
//! carry the script's Ruby frames and how close the methods' shares come to the 60/30/10 the
//! script burns. Then the eBPF program's time per sample on each Ruby and on the native program.
use std::{
    ffi::OsString,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{Result, bail};

use super::{
    folded::{read_folded, script_quality},
    kernel, median, verdict,
    workloads::{self, KillOnDrop, on_last_cpu},
};
use crate::check;

/// Seconds of the program alone before the tool starts, profiled, and alone after.
const BEFORE: f64 = 2.5;
const PROFILED: f64 = 5.0;
const AFTER: f64 = 3.0;
/// Samples per second: a fleet's rate, and a close look's.
const RATES: [u64; 2] = [99, 999];
const RBSPY_VERSION: &str = "0.55.0";
/// Where rbspy is installed (`cargo install --root`), under the workspace.
const RBSPY_ROOT: &str = ".tools/rbspy";
/// Debian stable's Ruby, as `cargo xtask setup` installs it.
const SYSTEM_RUBY: &str = "/usr/bin/ruby3.1";
/// Debian unstable's Ruby 3.3, as `cargo xtask setup` unpacks it, and its standard library
/// there (run as setup's `debian_ruby_version` runs it).
const DEBIAN_RUBY_DIR: &str = ".tools/debian-sid-ruby3.3";
const DEBIAN_RUBY_LIB: [&str; 2] = ["usr/lib/ruby/3.3.0", "usr/lib/x86_64-linux-gnu/ruby/3.3.0"];
/// shares.rb's methods and the share of the script's CPU each burns.
const SHARES: [(&str, f64); 3] = [("alpha", 60.0), ("beta", 30.0), ("gamma", 10.0)];
/// How many times a native sample's CPU a Ruby sample may cost.
const PER_SAMPLE_RATIO_GOAL: f64 = 3.0;
/// Loaded before shares.rb (`ruby -r`), which prints no progress of its own: with `PROGRESS=1`,
/// `SECONDS ROUNDS` about every 100 ms, counted where each round first calls `rand`, so that no
/// frame of this file is on the stack while a round burns.
const COUNT_ROUNDS: &str = r#"$rounds_start = $rounds_shown = Process.clock_gettime(Process::CLOCK_MONOTONIC)
$rounds = 0
$rounds_progress = ENV["PROGRESS"] == "1"

module CountRounds
  private

  def rand(*)
    now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    if $rounds_progress && now - $rounds_shown >= 0.1
      $stdout.write(format("%.3f %d\n", now - $rounds_start, $rounds))
      $stdout.flush
      $rounds_shown = now
    end
    $rounds += 1
    super
  end
end

module Outer
  class Worker
    prepend CountRounds
  end
end
"#;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Profiler,
    Rbspy,
}

impl Tool {
    /// What the tool prints once it samples: CPU before that is start-up.
    fn ready_line(self) -> &'static str {
        match self {
            Tool::Profiler => "profiler: recording",
            Tool::Rbspy => "rbspy is recording traces",
        }
    }

    fn label(self, hz: u64) -> String {
        match self {
            Tool::Profiler => format!("`profiler record -F {hz}`"),
            Tool::Rbspy => format!("`rbspy record -r {hz} --nonblocking` ({RBSPY_VERSION})"),
        }
    }
}

/// What is profiled: shares.rb on a Ruby, or split.c.
#[derive(Clone)]
enum Program {
    Ruby {
        label: &'static str,
        interpreter: PathBuf,
        /// What it needs in its environment to run a script.
        env: Vec<(&'static str, OsString)>,
        /// Its arguments before the script's run time: the round counter and the script.
        args: Vec<OsString>,
    },
    Native {
        binary: PathBuf,
    },
}

impl Program {
    fn label(&self) -> &'static str {
        match self {
            Program::Ruby { label, .. } => label,
            Program::Native { .. } => NATIVE,
        }
    }

    /// The program running for `seconds`, from `start`: a command running the executable it is
    /// given, to which the program's environment and arguments are added.
    fn command(&self, start: fn(&Path) -> Command, seconds: &str) -> Command {
        match self {
            Program::Ruby { interpreter, env, args, .. } => {
                let mut command = start(interpreter);
                command.envs(env.iter().map(|(name, value)| (name, value))).args(args).arg(seconds);
                command
            }
            Program::Native { binary } => {
                let mut command = start(binary);
                command.args([seconds, "1"]);
                command
            }
        }
    }
}

/// One tool on one program at one rate.
struct Case {
    tool: Tool,
    program: Program,
    hz: u64,
    /// Why the tool cannot profile the program, in its own words: the case is not run.
    unreadable: Option<String>,
}

/// One measurement.
struct Run {
    /// Loss of the program's peak speed while profiled, in percent.
    slowdown: f64,
    /// The tool's CPU while it records, in percent of one core.
    recording_cpu: f64,
    /// The tool's CPU while it records, per sample it took, in microseconds.
    us_per_sample: f64,
    /// CPU seconds of the tool, start to output.
    cpu_seconds: f64,
    /// The tool's peak resident memory.
    rss_mib: f64,
    samples: u64,
    /// Of a Ruby program: the percent of the samples holding a frame of the script, and the
    /// largest distance, in points, between a method's share and the one the script burns.
    ruby: Option<(f64, f64)>,
}

pub fn table(profiler: &Path, root: &Path, src: &Path, dir: &Path, repetitions: usize) -> Result<String> {
    let rbspy = ensure_rbspy(root)?;
    // split.c without frame pointers, with its debug information.
    let native = dir.join("split-nofp");
    workloads::compile_c(&src.join("split.c"), &native, &["-O2", "-g", "-fomit-frame-pointer"])?;
    let count_rounds = dir.join("count_rounds.rb");
    std::fs::write(&count_rounds, COUNT_ROUNDS)?;
    let script = src.join("ruby/shares.rb");
    let args: Vec<OsString> = vec!["-r".into(), count_rounds.into(), script.into()];
    let debian = root.join(DEBIAN_RUBY_DIR);
    let lib = std::env::join_paths(DEBIAN_RUBY_LIB.map(|sub| debian.join(sub)))?;
    let rubies = [
        Program::Ruby {
            label: RUBY_31,
            interpreter: SYSTEM_RUBY.into(),
            env: Vec::new(),
            args: args.clone(),
        },
        Program::Ruby {
            label: RUBY_33,
            interpreter: debian.join("usr/bin/ruby3.3"),
            // Its built-in load path is this machine's 3.1's; RubyGems would load 3.1's Debian
            // defaults.
            env: vec![("RUBYLIB", lib), ("RUBYOPT", "--disable-gems".into())],
            args,
        },
    ];
    let unreadable = rubies.iter().map(|ruby| rbspy_cannot_read(&rbspy, ruby)).collect::<Result<Vec<_>>>()?;
    let cases = cases(&rubies, &unreadable, &Program::Native { binary: native.clone() });
    let mut runs: Vec<Vec<Run>> = cases.iter().map(|_| Vec::new()).collect();
    for repetition in 0..repetitions {
        // Alternate the order, so that drift of the machine does not favour one.
        let mut order: Vec<(usize, &Case)> =
            cases.iter().enumerate().filter(|(_, case)| case.unreadable.is_none()).collect();
        if repetition % 2 == 1 {
            order.reverse();
        }
        for (c, case) in order {
            eprintln!(
                "xtask bench: ruby · {} · {} · run {}",
                case.tool.label(case.hz),
                case.program.label(),
                repetition + 1
            );
            let command = match case.tool {
                Tool::Profiler => profiler,
                Tool::Rbspy => &rbspy,
            };
            runs[c].push(measure(case, command, dir)?);
        }
    }
    let mut text = format!(
        "## Ruby (against rbspy)\n\n\
         `shares.rb`: one thread whose methods `Outer::Worker#alpha`, `#beta` (called from a block `Array#each` \
         yields to) and `#gamma` burn 60/30/10% of its CPU, in rounds of about 2.5 ms, on Debian's Ruby 3.1 \
         (`{SYSTEM_RUBY}`, libruby's symbols exported) and unstable's 3.3 (`{DEBIAN_RUBY_DIR}/usr/bin/ruby3.3`, \
         libruby stripped); beside it, for what a sample costs without Ruby, `split.c` with one thread. The \
         script's rounds are counted by a file loaded before it (`ruby -r`), which wraps the `rand` each round \
         starts with. Each runs alone for {BEFORE} s, is profiled for {PROFILED} s (the tool stopped with SIGINT; \
         rbspy with `--silent --format collapsed`, its raw file written too, as it always is), then runs alone \
         again; medians of {repetitions} run(s), the order alternating. *Target slowdown*: its peak rounds per \
         second (best one-second window) while profiled against its peak alone. *Tool CPU while recording*: from \
         half a second after the tool says it samples until it is stopped (every thread, from schedstat), and that \
         per sample it took (naming costs once per file, libruby's and libc's, are in it). *In all*: start to \
         output written. *Peak RSS*: the tool's. *With Ruby frames*: samples holding a frame of the script. \
         *Share error*: largest distance, in points, between a method's share of those samples and what it \
         burns.\n\n\
         | tool | program | target slowdown | tool CPU while recording | per sample | tool CPU in all | peak RSS | samples | with Ruby frames | share error |\n\
         |---|---|---|---|---|---|---|---|---|---|\n"
    );
    let column = |c: usize, f: fn(&Run) -> f64| median(&mut runs[c].iter().map(f).collect::<Vec<_>>());
    for (c, case) in cases.iter().enumerate() {
        let (tool, program) = (case.tool.label(case.hz), case.program.label());
        if let Some(reason) = &case.unreadable {
            writeln!(text, "| {tool} | {program} | cannot read it: {reason} | – | – | – | – | – | – | – |")?;
            continue;
        }
        let ruby = |f: fn((f64, f64)) -> f64, unit: &str| match case.program {
            Program::Ruby { .. } => {
                format!(
                    "{:.1}{unit}",
                    median(&mut runs[c].iter().filter_map(|r| r.ruby).map(f).collect::<Vec<_>>())
                )
            }
            Program::Native { .. } => "—".into(),
        };
        writeln!(
            text,
            "| {tool} | {program} | {:.1}% | {:.2}% of a core | {:.0} µs | {:.2} s | {:.1} MiB | {:.0} | {} | {} |",
            column(c, |r| r.slowdown),
            column(c, |r| r.recording_cpu),
            column(c, |r| r.us_per_sample),
            column(c, |r| r.cpu_seconds),
            column(c, |r| r.rss_mib),
            column(c, |r| r.samples as f64),
            ruby(|(with, _)| with, "%"),
            ruby(|(_, error)| error, " pt"),
        )?;
    }
    text.push('\n');
    let (costs, times) = kernel_cost(profiler, &rubies, &native, dir, repetitions)?;
    text.push_str(&costs);
    text.push_str(
        "#### Against rbspy and native samples, and goals\n\n| goal | measured | |\n|---|---|---|\n",
    );
    let find = |tool: Tool, label: &str, hz: u64| {
        cases.iter().position(|case| {
            case.tool == tool && case.program.label() == label && case.hz == hz && case.unreadable.is_none()
        })
    };
    for hz in RATES {
        let native_us = find(Tool::Profiler, NATIVE, hz).map(|native| column(native, |r| r.us_per_sample));
        for ruby in rubies.iter().map(Program::label) {
            let Some(ours) = find(Tool::Profiler, ruby, hz) else { continue };
            let per_sample = column(ours, |r| r.us_per_sample);
            if let Some(theirs) = find(Tool::Rbspy, ruby, hz) {
                let (slowdown, rbspy_slowdown) =
                    (column(ours, |r| r.slowdown), column(theirs, |r| r.slowdown));
                writeln!(
                    text,
                    "| target slowdown ({ruby}) at {hz} Hz below rbspy's | {slowdown:.1}% vs {rbspy_slowdown:.1}% | {} |",
                    verdict(slowdown < rbspy_slowdown)
                )?;
                let rbspy_per_sample = column(theirs, |r| r.us_per_sample);
                writeln!(
                    text,
                    "| tool CPU per sample ({ruby}) at {hz} Hz below rbspy's | {per_sample:.0} vs {rbspy_per_sample:.0} µs ({:.2}×) | {} |",
                    per_sample / rbspy_per_sample,
                    verdict(per_sample < rbspy_per_sample)
                )?;
                let (rss, rbspy_rss) = (column(ours, |r| r.rss_mib), column(theirs, |r| r.rss_mib));
                writeln!(
                    text,
                    "| peak RSS ({ruby}) at {hz} Hz, against rbspy's (no goal) | {rss:.1} vs {rbspy_rss:.1} MiB ({:.1}×) | – |",
                    rss / rbspy_rss
                )?;
            }
            if let Some(native_us) = native_us {
                let ratio = per_sample / native_us;
                writeln!(
                    text,
                    "| CPU per Ruby sample ({ruby}) at {hz} Hz ≤ {PER_SAMPLE_RATIO_GOAL}× a native one's | {ratio:.1}× ({per_sample:.0} vs {native_us:.0} µs) | {} |",
                    verdict(ratio <= PER_SAMPLE_RATIO_GOAL)
                )?;
            }
        }
    }
    // The native program's is the last.
    let native_us = times[times.len() - 1];
    for (ruby, us) in rubies.iter().zip(&times) {
        writeln!(
            text,
            "| eBPF time per sample ({}), against a native one's (no goal) | {us:.2} vs {native_us:.2} µs ({:.1}×) | – |",
            ruby.label(),
            us / native_us,
        )?;
    }
    text.push('\n');
    Ok(text)
}

const RUBY_31: &str = "shares.rb, Debian's 3.1";
const RUBY_33: &str = "shares.rb, unstable's 3.3";
const NATIVE: &str = "split.c, one thread (native)";

/// Every case, at each rate: the profiler and rbspy on each of `rubies` (rbspy's not run on one
/// it cannot read, as `unreadable` says in their order), and the profiler on `native`.
fn cases(rubies: &[Program], unreadable: &[Option<String>], native: &Program) -> Vec<Case> {
    let case = |tool, program: &Program, hz, unreadable: &Option<String>| Case {
        tool,
        program: program.clone(),
        hz,
        unreadable: unreadable.clone(),
    };
    RATES
        .iter()
        .flat_map(|&hz| {
            let mut cases: Vec<Case> = rubies
                .iter()
                .zip(unreadable)
                .flat_map(|(ruby, unreadable)| {
                    [case(Tool::Profiler, ruby, hz, &None), case(Tool::Rbspy, ruby, hz, unreadable)]
                })
                .collect();
            cases.push(case(Tool::Profiler, native, hz, &None));
            cases
        })
        .collect()
}

/// rbspy, installed from crates.io under the workspace when missing.
fn ensure_rbspy(root: &Path) -> Result<PathBuf> {
    let rbspy = root.join(RBSPY_ROOT).join("bin/rbspy");
    let installed = Command::new(&rbspy).arg("--version").output();
    if installed
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == format!("rbspy {RBSPY_VERSION}"))
    {
        return Ok(rbspy);
    }
    eprintln!("xtask: installing rbspy {RBSPY_VERSION} into {RBSPY_ROOT}");
    check(
        Command::new("cargo")
            .args(["install", "--locked", "--quiet", "rbspy", "--version", RBSPY_VERSION, "--root"])
            .arg(root.join(RBSPY_ROOT)),
    )?;
    Ok(rbspy)
}

/// Why rbspy cannot read `ruby` running the script, in its words (`rbspy snapshot` of it once it
/// runs the script's code); `None` when it reads the script's frames.
fn rbspy_cannot_read(rbspy: &Path, ruby: &Program) -> Result<Option<String>> {
    let mut program =
        KillOnDrop(ruby.command(|path| Command::new(path), "60").stdout(Stdio::piped()).spawn()?);
    // Its first line (`main TID`) says it runs the script.
    let mut announced = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(program.0.stdout.take().expect("piped")),
        &mut announced,
    )?;
    if !announced.starts_with("main ") {
        bail!("{} does not run shares.rb: run `cargo xtask setup`", ruby.label());
    }
    // Past its start, into the rounds.
    thread::sleep(Duration::from_millis(500));
    let out = Command::new(rbspy).args(["snapshot", "--pid", &program.0.id().to_string()]).output()?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() && said.contains("shares.rb") {
        return Ok(None);
    }
    eprintln!("xtask bench: rbspy cannot read {}:\n{said}", ruby.label());
    // Its last line is the cause ("- Couldn't find Ruby VM address").
    let cause = said.lines().rfind(|line| !line.trim().is_empty()).unwrap_or("no output");
    Ok(Some(format!("\"{}\"", cause.trim_start_matches(['-', ' ']))))
}

fn measure(case: &Case, command: &Path, dir: &Path) -> Result<Run> {
    let seconds = (BEFORE + PROFILED + AFTER + 1.0).to_string();
    let program = case.program.command(|path| Command::new(path), &seconds);
    let hz = case.hz.to_string();
    let folded = dir.join("ruby.folded");
    let record = |pid: &str| {
        let mut record = Command::new(command);
        match case.tool {
            Tool::Profiler => record.args(["record", "-p", pid, "-F", &hz, "-o"]).arg(&folded),
            Tool::Rbspy => record
                .args(["record", "--nonblocking", "--silent", "-r", &hz, "-p", pid, "--format", "collapsed"])
                .arg("--raw-file")
                .arg(dir.join("rbspy.raw.gz"))
                .arg("--file")
                .arg(&folded),
        };
        record
    };
    let (recorded, slowdown) = workloads::attach(program, record, case.tool.ready_line(), BEFORE, PROFILED)?;
    let text = std::fs::read_to_string(&folded).unwrap_or_default();
    let (samples, with_ruby, share_error) = script_quality(&read_folded(&text), "shares.rb", &SHARES);
    Ok(Run {
        slowdown,
        recording_cpu: recorded.cpu_percent(),
        us_per_sample: recorded.us_per_sample(samples),
        cpu_seconds: recorded.usage.cpu_seconds,
        rss_mib: recorded.usage.max_rss_kib as f64 / 1024.0,
        samples,
        ruby: matches!(case.program, Program::Ruby { .. }).then_some((with_ruby, share_error)),
    })
}

/// The eBPF program's time per sample and ring bytes per record, at 999 Hz, on shares.rb on each
/// of `rubies` and on `native`; and those times, in that order.
fn kernel_cost(
    profiler: &Path,
    rubies: &[Program],
    native: &Path,
    dir: &Path,
    repetitions: usize,
) -> Result<(String, Vec<f64>)> {
    let mut programs: Vec<(&str, Command)> =
        rubies.iter().map(|ruby| (ruby.label(), ruby.command(on_last_cpu, "60"))).collect();
    let mut native = on_last_cpu(native);
    // Until killed.
    native.arg("0");
    programs.push(("C without frame pointers (`split.c`)", native));
    kernel::pinned_costs(profiler, dir, "ruby", programs, repetitions)
}
