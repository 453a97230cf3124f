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
    scripts::{self, BEFORE, NATIVE, PROFILED, Program, RATES, Run, Script, column, header, per_sample_goal},
    verdict,
    workloads::KillOnDrop,
};
use crate::check;

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

/// One tool on one program at one rate.
struct Case {
    tool: Tool,
    program: Program,
    hz: u64,
    /// Why the tool cannot profile the program, in its own words: the case is not run.
    unreadable: Option<String>,
}

pub fn table(profiler: &Path, root: &Path, src: &Path, dir: &Path, repetitions: usize) -> Result<String> {
    let rbspy = ensure_rbspy(root)?;
    let native = Program::native(src, dir)?;
    let count_rounds = dir.join("count_rounds.rb");
    std::fs::write(&count_rounds, COUNT_ROUNDS)?;
    let script = src.join("ruby/shares.rb");
    let args: Vec<OsString> = vec!["-r".into(), count_rounds.into(), script.into()];
    let debian = root.join(DEBIAN_RUBY_DIR);
    let lib = std::env::join_paths(DEBIAN_RUBY_LIB.map(|sub| debian.join(sub)))?;
    let rubies = [
        Program::Script {
            label: RUBY_31,
            interpreter: SYSTEM_RUBY.into(),
            env: Vec::new(),
            args: args.clone(),
        },
        Program::Script {
            label: RUBY_33,
            interpreter: debian.join("usr/bin/ruby3.3"),
            // Its built-in load path is this machine's 3.1's; RubyGems would load 3.1's Debian
            // defaults.
            env: vec![("RUBYLIB", lib), ("RUBYOPT", "--disable-gems".into())],
            args,
        },
    ];
    let unreadable = rubies.iter().map(|ruby| rbspy_cannot_read(&rbspy, ruby)).collect::<Result<Vec<_>>>()?;
    let cases = cases(&rubies, &unreadable, &native);
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
         burns.\n\n"
    );
    text.push_str(&header("Ruby"));
    for (c, case) in cases.iter().enumerate() {
        let tool = case.tool.label(case.hz);
        if let Some(reason) = &case.unreadable {
            writeln!(
                text,
                "| {tool} | {} | cannot read it: {reason} | – | – | – | – | – | – | – |",
                case.program.label()
            )?;
            continue;
        }
        text.push_str(&scripts::row(&tool, &case.program, &runs[c]));
    }
    text.push('\n');
    let (costs, against_native) = scripts::kernel_cost(profiler, "ruby", &rubies, &native, dir, repetitions)?;
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
        let native_us =
            find(Tool::Profiler, NATIVE, hz).map(|native| column(&runs[native], |r| r.us_per_sample));
        for ruby in rubies.iter().map(Program::label) {
            let Some(ours) = find(Tool::Profiler, ruby, hz) else { continue };
            let per_sample = column(&runs[ours], |r| r.us_per_sample);
            if let Some(theirs) = find(Tool::Rbspy, ruby, hz) {
                let (slowdown, rbspy_slowdown) =
                    (column(&runs[ours], |r| r.slowdown), column(&runs[theirs], |r| r.slowdown));
                writeln!(
                    text,
                    "| target slowdown ({ruby}) at {hz} Hz below rbspy's | {slowdown:.1}% vs {rbspy_slowdown:.1}% | {} |",
                    verdict(slowdown < rbspy_slowdown)
                )?;
                let rbspy_per_sample = column(&runs[theirs], |r| r.us_per_sample);
                writeln!(
                    text,
                    "| tool CPU per sample ({ruby}) at {hz} Hz below rbspy's | {per_sample:.0} vs {rbspy_per_sample:.0} µs ({:.2}×) | {} |",
                    per_sample / rbspy_per_sample,
                    verdict(per_sample < rbspy_per_sample)
                )?;
                let (rss, rbspy_rss) =
                    (column(&runs[ours], |r| r.rss_mib), column(&runs[theirs], |r| r.rss_mib));
                writeln!(
                    text,
                    "| peak RSS ({ruby}) at {hz} Hz, against rbspy's (no goal) | {rss:.1} vs {rbspy_rss:.1} MiB ({:.1}×) | – |",
                    rss / rbspy_rss
                )?;
            }
            if let Some(native_us) = native_us {
                text.push_str(&per_sample_goal("Ruby", ruby, hz, per_sample, native_us));
            }
        }
    }
    text.push_str(&against_native);
    text.push('\n');
    Ok(text)
}

const RUBY_31: &str = "shares.rb, Debian's 3.1";
const RUBY_33: &str = "shares.rb, unstable's 3.3";

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
    let script = Script { file_name: "shares.rb", shares: &SHARES };
    scripts::measure(&case.program, record, case.tool.ready_line(), &folded, &script)
}
