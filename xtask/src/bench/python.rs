//! `profiler record` on a CPU-bound Python program (pyenv's CPython 3.12, tests/workloads/
//! python/shares.py), against py-spy at the same rate, in one run: the program's slowdown, each
//! tool's CPU per sample, how many samples carry the script's Python frames and how close the
//! functions' shares come to the 50/30/20 the script burns. Then the eBPF program's time per
//! sample on that program and on a native one (split.c).
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result};

use super::{
    kernel::{BpfStats, parse_after},
    median,
    workloads::{KillOnDrop, RunningWorkload, on_last_cpu, record_while, slowdown},
};
use crate::check;

/// Seconds of the program alone before the tool starts, profiled, and alone after.
const BEFORE: f64 = 2.5;
const PROFILED: f64 = 5.0;
const AFTER: f64 = 3.0;
/// Samples per second, for both tools.
const HZ: &str = "99";
const PY_SPY_VERSION: &str = "0.4.3";
/// Where py-spy is installed (a virtual environment), under the workspace.
const PY_SPY_VENV: &str = ".tools/py-spy";
/// shares.py's functions and the share of the script's CPU each burns.
const SHARES: [(&str, f64); 3] = [("alpha", 50.0), ("beta", 30.0), ("gamma", 20.0)];

#[derive(Clone, Copy)]
enum Tool {
    Profiler,
    PySpy,
}

impl Tool {
    const ALL: [Tool; 2] = [Tool::Profiler, Tool::PySpy];

    /// What the tool prints once it samples: CPU before that is start-up (the
    /// profiler's is mostly the kernel verifying its eBPF programs).
    fn ready_line(self) -> &'static str {
        match self {
            Tool::Profiler => "profiler: recording",
            Tool::PySpy => "py-spy> Sampling process",
        }
    }

    fn label(self) -> String {
        match self {
            Tool::Profiler => format!("`profiler record -F {HZ}`"),
            Tool::PySpy => format!("`py-spy record -r {HZ} --nonblocking` ({PY_SPY_VERSION})"),
        }
    }
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
    samples: u64,
    /// Percent of the samples holding a frame of the script.
    with_python: f64,
    /// Largest distance, in points, between a function's share and the one the script burns.
    share_error: f64,
}

pub fn table(profiler: &Path, root: &Path, src: &Path, dir: &Path, repetitions: usize) -> Result<String> {
    let python = crate::python::pyenv(12)
        .context("the Python benchmark profiles pyenv's CPython 3.12: install it (`pyenv install 3.12`)")?;
    let py_spy = ensure_py_spy(root, &python)?;
    let script = src.join("python/shares.py");
    let mut runs: Vec<Vec<Run>> = Tool::ALL.iter().map(|_| Vec::new()).collect();
    for repetition in 0..repetitions {
        // Alternate which tool goes first, so that drift of the machine does not favour one.
        let mut order: Vec<(usize, Tool)> = Tool::ALL.into_iter().enumerate().collect();
        if repetition % 2 == 1 {
            order.reverse();
        }
        for (t, tool) in order {
            eprintln!("xtask bench: python · {} · run {}", tool.label(), repetition + 1);
            let command = match tool {
                Tool::Profiler => profiler,
                Tool::PySpy => &py_spy,
            };
            runs[t].push(measure(tool, command, &python, &script, dir)?);
        }
    }
    let mut text = format!(
        "## Python (against py-spy)\n\n\
         `shares.py` on pyenv's CPython 3.12 ({}): one thread whose functions `alpha`, `beta` and `Burner.gamma` burn \
         50/30/20% of its CPU, in rounds of about 2 ms. It runs alone for {BEFORE} s, is profiled for {PROFILED} s \
         (the tool stopped with SIGINT), then runs alone again; medians of {repetitions} run(s), tools alternating. \
         *Target slowdown*: its peak rounds per second (best one-second window) while profiled against its peak \
         alone. *Tool CPU while recording*: from half a second after the tool says it samples until it is stopped \
         (every thread, from schedstat), and that per sample it took. *In all*: start to output written \
         (the profiler's start-up is mostly the kernel verifying its eBPF programs, about 1 s). *With Python frames*: \
         samples holding a frame of the script. *Share error*: largest distance, in points, between a function's \
         share of those samples and what it burns.\n\n\
         | tool | target slowdown | tool CPU while recording | per sample | tool CPU in all | samples | with Python frames | share error |\n\
         |---|---|---|---|---|---|---|---|\n",
        python.display()
    );
    let column = |runs: &[Run], f: fn(&Run) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
    for (tool, runs) in Tool::ALL.iter().zip(&runs) {
        let column = |f: fn(&Run) -> f64| column(runs, f);
        writeln!(
            text,
            "| {} | {:.1}% | {:.2}% of a core | {:.0} µs | {:.2} s | {:.0} | {:.1}% | {:.1} pt |",
            tool.label(),
            column(|r| r.slowdown),
            column(|r| r.recording_cpu),
            column(|r| r.us_per_sample),
            column(|r| r.cpu_seconds),
            column(|r| r.samples as f64),
            column(|r| r.with_python),
            column(|r| r.share_error),
        )?;
    }
    text.push('\n');
    let (costs, deep_us) = kernel_cost(profiler, &python, &script, src, dir, repetitions)?;
    text.push_str(&costs);
    let [ours, py_spy] = [&runs[0], &runs[1]];
    let slowdown = |runs| column(runs, |r| r.slowdown);
    let per_sample = |runs| column(runs, |r| r.us_per_sample);
    let met = |yes: bool| if yes { "met" } else { "**not met**" };
    text.push_str("#### Goals\n\n| goal | measured | |\n|---|---|---|\n");
    writeln!(
        text,
        "| target slowdown below py-spy's | {:.1}% vs {:.1}% | {} |",
        slowdown(ours),
        slowdown(py_spy),
        met(slowdown(ours) < slowdown(py_spy))
    )?;
    writeln!(
        text,
        "| tool CPU per sample below py-spy's | {:.0} vs {:.0} µs | {} |",
        per_sample(ours),
        per_sample(py_spy),
        met(per_sample(ours) < per_sample(py_spy))
    )?;
    writeln!(
        text,
        "| eBPF time per sample ≤ 20 µs at 100 Python frames | {deep_us:.2} µs | {} |",
        met(deep_us <= 20.0)
    )?;
    text.push('\n');
    Ok(text)
}

/// py-spy, installed from PyPI into a virtual environment under the workspace when missing.
fn ensure_py_spy(root: &Path, python: &Path) -> Result<PathBuf> {
    let venv = root.join(PY_SPY_VENV);
    let py_spy = venv.join("bin/py-spy");
    let installed = Command::new(&py_spy).arg("--version").output();
    if installed.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(PY_SPY_VERSION)) {
        return Ok(py_spy);
    }
    eprintln!("xtask: installing py-spy {PY_SPY_VERSION} into {PY_SPY_VENV}");
    check(Command::new(python).args(["-m", "venv", "--clear"]).arg(&venv))?;
    check(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("py-spy=={PY_SPY_VERSION}")),
    )?;
    Ok(py_spy)
}

fn measure(tool: Tool, command: &Path, python: &Path, script: &Path, dir: &Path) -> Result<Run> {
    let mut program = Command::new(python);
    program.arg(script).arg((BEFORE + PROFILED + AFTER + 1.0).to_string()).env("PROGRESS", "1");
    let running = RunningWorkload::spawn(program)?;
    running.wait_until(BEFORE);
    let start_t = running.now();
    let pid = running.pid().to_string();
    let folded = dir.join("python.folded");
    let mut record = Command::new(command);
    match tool {
        Tool::Profiler => record.args(["record", "-p", &pid, "-F", HZ, "-o"]).arg(&folded),
        Tool::PySpy => record
            .args(["record", "--nonblocking", "-r", HZ, "-p", &pid, "--format", "raw", "-o"])
            .arg(&folded),
    };
    let recorded = record_while(&running, record, Some(tool.ready_line()), PROFILED)?;
    let progress = running.finish()?;
    let slowdown = slowdown(&progress, start_t, recorded.stop_t)?;
    let text = std::fs::read_to_string(&folded).unwrap_or_default();
    let stacks = read_folded(&text);
    let (samples, with_python, share_error) = python_quality(&stacks);
    Ok(Run {
        slowdown,
        recording_cpu: recorded.cpu_percent(),
        us_per_sample: recorded.us_per_sample(samples),
        cpu_seconds: recorded.usage.cpu_seconds,
        samples,
        with_python,
        share_error,
    })
}

/// Folded stacks: frames root first, and counts.
pub fn read_folded(text: &str) -> Vec<(Vec<&str>, u64)> {
    text.lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            Some((stack.split(';').collect(), count.parse().ok()?))
        })
        .collect()
}

/// The name of a Python frame of shares.py (`alpha (/path/shares.py:17)` as the profiler and
/// py-spy both write them), `None` for any other frame.
fn script_function(frame: &str) -> Option<&str> {
    let (name, place) = frame.strip_suffix(')')?.rsplit_once(" (")?;
    let file = place.rsplit_once(':')?.0;
    (file == "shares.py" || file.ends_with("/shares.py")).then_some(name)
}

/// Of folded stacks of shares.py: the samples, the percent of them with a frame of the script,
/// and the largest distance in points between a function's share of those and what it burns.
fn python_quality(stacks: &[(Vec<&str>, u64)]) -> (u64, f64, f64) {
    let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
    let in_script = |keep: &dyn Fn(&str) -> bool| -> u64 {
        stacks
            .iter()
            .filter(|(frames, _)| frames.iter().filter_map(|f| script_function(f)).any(keep))
            .map(|(_, n)| n)
            .sum()
    };
    let with_python = in_script(&|_| true);
    if with_python == 0 {
        return (samples, 0.0, 100.0);
    }
    // `Burner.gamma` (a qualified name) or `gamma`, as a tool names it.
    let share_error = SHARES
        .iter()
        .map(|&(function, share)| {
            let named = in_script(&|name| name == function || name.ends_with(&format!(".{function}")));
            (100.0 * named as f64 / with_python as f64 - share).abs()
        })
        .fold(0.0, f64::max);
    (samples, 100.0 * with_python as f64 / samples as f64, share_error)
}

/// The eBPF program's time per sample and ring bytes per record, at 999 Hz, on the Python
/// program, on one 100 Python frames deep and on a native one; and that time on the deep one.
fn kernel_cost(
    profiler: &Path,
    python: &Path,
    script: &Path,
    src: &Path,
    dir: &Path,
    repetitions: usize,
) -> Result<(String, f64)> {
    let native = dir.join("split-nofp");
    check(
        Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&native)
            .arg(src.join("split.c"))
            .arg("-lpthread"),
    )?;
    let programs: [(&str, Command); 3] = [
        ("Python 3.12 (`shares.py`, 3 Python frames)", {
            let mut command = on_last_cpu(python);
            command.arg(script).arg("60");
            command
        }),
        ("Python 3.12 (`depth.py`, 100 Python frames)", {
            let mut command = on_last_cpu(python);
            // <module>, 98 calls of `recurse` and `spin`.
            command.arg(script.with_file_name("depth.py")).args(["60", "97"]);
            command
        }),
        ("C without frame pointers (`split.c`)", {
            let mut command = on_last_cpu(&native);
            command.arg("0");
            command
        }),
    ];
    let _stats = BpfStats::enable()?;
    let mut deep_us = f64::NAN;
    let mut text = String::from(
        "Kernel cost: mean time the eBPF program spends per run (BPF run-time statistics) and mean bytes per record \
         through the ring, `profiler record -F 999 -d 4 -p PID`, median of the repetitions. Each program runs on the \
         last CPU: on this VM the same program takes about 1.6 times as long on the first one (cause not found), \
         which made medians of unpinned runs swing between the two.\n\n\
         | program | µs per sample program run | KiB per record |\n|---|---|---|\n",
    );
    for (label, mut command) in programs {
        let (mut runs, mut bytes) = (Vec::new(), Vec::new());
        for repetition in 0..repetitions {
            eprintln!("xtask bench: python · kernel cost · {label} · run {}", repetition + 1);
            let program = KillOnDrop(command.stdin(Stdio::null()).stdout(Stdio::null()).spawn()?);
            let out = Command::new(profiler)
                .args(["record", "-F", "999", "-d", "4", "-p", &program.0.id().to_string(), "-o"])
                .arg(dir.join("python-cost.folded"))
                .output()
                .context("cannot run the profiler")?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            runs.push(
                parse_after(&stderr, "kernel cost", " µs per sample program run")
                    .with_context(|| format!("no kernel cost in the profiler's summary: {stderr}"))?,
            );
            bytes.push(
                parse_after(&stderr, "ring", " KiB per record").context("no ring line in the summary")?,
            );
        }
        let us = median(&mut runs);
        if label.contains("100 Python frames") {
            deep_us = us;
        }
        writeln!(text, "| {label} | {us:.2} | {:.1} |", median(&mut bytes))?;
    }
    text.push('\n');
    Ok((text, deep_us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_the_script_functions() {
        // The profiler's frames (full paths, qualified names) and py-spy's (file names) alike.
        let folded = "python3.12;_start;<module> (/w/shares.py:50);alpha (/w/shares.py:17) 50\n\
                      python3.12;<module> (/w/shares.py:50);beta (/w/shares.py:24) 30\n\
                      <module> (shares.py:50);gamma (shares.py:31) 10\n\
                      python3.12;<module> (/w/shares.py:50);Burner.gamma (/w/shares.py:31) 10\n\
                      python3.12;_start;Py_RunMain 100\n";
        let (samples, with_python, share_error) = python_quality(&read_folded(folded));
        assert_eq!(samples, 200);
        assert!((with_python - 50.0).abs() < 1e-9);
        assert!(share_error.abs() < 1e-9);
        assert_eq!(script_function("alpha (/w/other.py:3)"), None);
        assert_eq!(script_function("deflate"), None);
    }
}
