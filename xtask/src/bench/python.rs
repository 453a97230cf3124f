//! `profiler record` on a CPU-bound Python program (tests/workloads/python/shares.py) on pyenv's
//! CPython 3.12 and Debian's 3.14, against py-spy at the same rate on 3.12, and on a native
//! program (split.c, one thread) for what a sample costs without Python, at 99 and 999 Hz, in
//! one run: the program's slowdown, each tool's CPU per sample, how many samples carry the
//! script's Python frames and how close the functions' shares come to the 50/30/20 the script
//! burns. Then the eBPF program's time per sample on that program and on a native one.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use super::{
    folded::{read_folded, script_quality},
    kernel, median, verdict,
    workloads::{self, on_last_cpu},
};
use crate::check;

/// Seconds of the program alone before the tool starts, profiled, and alone after.
const BEFORE: f64 = 2.5;
const PROFILED: f64 = 5.0;
const AFTER: f64 = 3.0;
/// Samples per second: a fleet's rate, and a close look's.
const RATES: [u64; 2] = [99, 999];
const PY_SPY_VERSION: &str = "0.4.3";
/// Where py-spy is installed (a virtual environment), under the workspace.
const PY_SPY_VENV: &str = ".tools/py-spy";
/// Debian's CPython 3.14, as `cargo xtask setup` installs it.
const DEBIAN_PYTHON: &str = ".tools/debian-sid-python3.14/usr/bin/python3.14";
/// shares.py's functions and the share of the script's CPU each burns.
const SHARES: [(&str, f64); 3] = [("alpha", 50.0), ("beta", 30.0), ("gamma", 20.0)];
/// How many times a native sample's CPU a Python sample may cost.
const PER_SAMPLE_RATIO_GOAL: f64 = 3.0;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Profiler,
    PySpy,
}

impl Tool {
    /// What the tool prints once it samples: CPU before that is start-up.
    fn ready_line(self) -> &'static str {
        match self {
            Tool::Profiler => "profiler: recording",
            Tool::PySpy => "py-spy> Sampling process",
        }
    }

    fn label(self, hz: u64) -> String {
        match self {
            Tool::Profiler => format!("`profiler record -F {hz}`"),
            Tool::PySpy => format!("`py-spy record -r {hz} --nonblocking` ({PY_SPY_VERSION})"),
        }
    }
}

/// What is profiled: shares.py on an interpreter, or split.c.
#[derive(Clone)]
enum Program {
    Python { label: &'static str, interpreter: PathBuf },
    Native { binary: PathBuf },
}

impl Program {
    fn label(&self) -> &'static str {
        match self {
            Program::Python { label, .. } => label,
            Program::Native { .. } => "split.c, one thread (native)",
        }
    }
}

/// One tool on one program at one rate.
#[derive(Clone)]
struct Case {
    tool: Tool,
    program: Program,
    hz: u64,
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
    /// Of a Python program: the percent of the samples holding a frame of the script, and the
    /// largest distance, in points, between a function's share and the one the script burns.
    python: Option<(f64, f64)>,
}

pub fn table(profiler: &Path, root: &Path, src: &Path, dir: &Path, repetitions: usize) -> Result<String> {
    let python = crate::python::pyenv(12)
        .context("the Python benchmark profiles pyenv's CPython 3.12: install it (`pyenv install 3.12`)")?;
    let debian = root.join(DEBIAN_PYTHON);
    if !debian.exists() {
        bail!("the Python benchmark profiles Debian's CPython 3.14: run `cargo xtask setup`");
    }
    let py_spy = ensure_py_spy(root, &python)?;
    // split.c without frame pointers, with its debug information.
    let native = dir.join("split-nofp");
    workloads::compile_c(&src.join("split.c"), &native, &["-O2", "-g", "-fomit-frame-pointer"])?;
    let script = src.join("python/shares.py");
    let cases = cases(&python, &debian, &native);
    let mut runs: Vec<Vec<Run>> = cases.iter().map(|_| Vec::new()).collect();
    for repetition in 0..repetitions {
        // Alternate the order, so that drift of the machine does not favour one.
        let mut order: Vec<(usize, &Case)> = cases.iter().enumerate().collect();
        if repetition % 2 == 1 {
            order.reverse();
        }
        for (c, case) in order {
            eprintln!(
                "xtask bench: python · {} · {} · run {}",
                case.tool.label(case.hz),
                case.program.label(),
                repetition + 1
            );
            let command = match case.tool {
                Tool::Profiler => profiler,
                Tool::PySpy => &py_spy,
            };
            runs[c].push(measure(case, command, &script, dir)?);
        }
    }
    let mut text = format!(
        "## Python (against py-spy)\n\n\
         `shares.py`: one thread whose functions `alpha`, `beta` and `Burner.gamma` burn 50/30/20% of its CPU, in \
         rounds of about 2 ms, on pyenv's CPython 3.12 ({}) and Debian's 3.14 (`{DEBIAN_PYTHON}`); beside it, for \
         what a sample costs without Python, `split.c` with one thread. Each runs alone for {BEFORE} s, is profiled \
         for {PROFILED} s (the tool stopped with SIGINT), then runs alone again; medians of {repetitions} run(s), \
         the order alternating. *Target slowdown*: its peak rounds per second (best one-second window) while \
         profiled against its peak alone. *Tool CPU while recording*: from half a second after the tool says it \
         samples until it is stopped (every thread, from schedstat), and that per sample it took (what naming \
         costs once per file, the DWARF of libpython and libc's debug file, is in it: at 99 Hz it outweighs the \
         samples). *In all*: start to output written. *With Python frames*: samples holding a frame of the script. \
         *Share error*: largest distance, in points, between a function's share of those samples and what it \
         burns.\n\n\
         | tool | program | target slowdown | tool CPU while recording | per sample | tool CPU in all | samples | with Python frames | share error |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        python.display()
    );
    let column = |c: usize, f: fn(&Run) -> f64| median(&mut runs[c].iter().map(f).collect::<Vec<_>>());
    for (c, case) in cases.iter().enumerate() {
        let python = |f: fn((f64, f64)) -> f64, unit: &str| match case.program {
            Program::Python { .. } => format!("{:.1}{unit}", column_python(&runs[c], f)),
            Program::Native { .. } => "—".into(),
        };
        writeln!(
            text,
            "| {} | {} | {:.1}% | {:.2}% of a core | {:.0} µs | {:.2} s | {:.0} | {} | {} |",
            case.tool.label(case.hz),
            case.program.label(),
            column(c, |r| r.slowdown),
            column(c, |r| r.recording_cpu),
            column(c, |r| r.us_per_sample),
            column(c, |r| r.cpu_seconds),
            column(c, |r| r.samples as f64),
            python(|(with, _)| with, "%"),
            python(|(_, error)| error, " pt"),
        )?;
    }
    text.push('\n');
    let (costs, deep_us) = kernel_cost(profiler, &python, &script, &native, dir, repetitions)?;
    text.push_str(&costs);
    text.push_str("#### Goals\n\n| goal | measured | |\n|---|---|---|\n");
    let find = |tool: Tool, label: &str, hz: u64| {
        cases.iter().position(|case| case.tool == tool && case.program.label() == label && case.hz == hz)
    };
    for hz in RATES {
        let (Some(ours), Some(theirs), Some(native)) = (
            find(Tool::Profiler, PYENV_312, hz),
            find(Tool::PySpy, PYENV_312, hz),
            find(Tool::Profiler, Program::Native { binary: PathBuf::new() }.label(), hz),
        ) else {
            continue;
        };
        let (slowdown, spy_slowdown) = (column(ours, |r| r.slowdown), column(theirs, |r| r.slowdown));
        writeln!(
            text,
            "| target slowdown at {hz} Hz below py-spy's | {slowdown:.1}% vs {spy_slowdown:.1}% | {} |",
            verdict(slowdown < spy_slowdown)
        )?;
        let (per_sample, spy_per_sample) =
            (column(ours, |r| r.us_per_sample), column(theirs, |r| r.us_per_sample));
        writeln!(
            text,
            "| tool CPU per sample at {hz} Hz below py-spy's | {per_sample:.0} vs {spy_per_sample:.0} µs | {} |",
            verdict(per_sample < spy_per_sample)
        )?;
        let native_us = column(native, |r| r.us_per_sample);
        for label in [PYENV_312, DEBIAN_314] {
            let Some(case) = find(Tool::Profiler, label, hz) else { continue };
            let ratio = column(case, |r| r.us_per_sample) / native_us;
            writeln!(
                text,
                "| CPU per Python sample ({label}) at {hz} Hz ≤ {PER_SAMPLE_RATIO_GOAL}× a native one's | {ratio:.1}× ({:.0} vs {native_us:.0} µs) | {} |",
                column(case, |r| r.us_per_sample),
                verdict(ratio <= PER_SAMPLE_RATIO_GOAL)
            )?;
        }
    }
    writeln!(
        text,
        "| eBPF time per sample ≤ 20 µs at 100 Python frames | {deep_us:.2} µs | {} |",
        verdict(deep_us <= 20.0)
    )?;
    text.push('\n');
    Ok(text)
}

const PYENV_312: &str = "shares.py, pyenv's 3.12";
const DEBIAN_314: &str = "shares.py, Debian's 3.14";

/// Every case, at each rate: the profiler on both interpreters and on the native program,
/// py-spy on 3.12.
fn cases(python: &Path, debian: &Path, native: &Path) -> Vec<Case> {
    let pyenv = Program::Python { label: PYENV_312, interpreter: python.to_owned() };
    let debian = Program::Python { label: DEBIAN_314, interpreter: debian.to_owned() };
    let native = Program::Native { binary: native.to_owned() };
    RATES
        .iter()
        .flat_map(|&hz| {
            [
                Case { tool: Tool::Profiler, program: pyenv.clone(), hz },
                Case { tool: Tool::PySpy, program: pyenv.clone(), hz },
                Case { tool: Tool::Profiler, program: debian.clone(), hz },
                Case { tool: Tool::Profiler, program: native.clone(), hz },
            ]
        })
        .collect()
}

/// The median of what `f` takes of each run's Python figures.
fn column_python(runs: &[Run], f: fn((f64, f64)) -> f64) -> f64 {
    median(&mut runs.iter().filter_map(|r| r.python).map(f).collect::<Vec<_>>())
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

fn measure(case: &Case, command: &Path, script: &Path, dir: &Path) -> Result<Run> {
    let seconds = (BEFORE + PROFILED + AFTER + 1.0).to_string();
    let program = match &case.program {
        Program::Python { interpreter, .. } => {
            let mut program = Command::new(interpreter);
            program.arg(script).arg(&seconds);
            program
        }
        Program::Native { binary } => {
            let mut program = Command::new(binary);
            program.args([seconds.as_str(), "1"]);
            program
        }
    };
    let hz = case.hz.to_string();
    let folded = dir.join("python.folded");
    let record = |pid: &str| {
        let mut record = Command::new(command);
        match case.tool {
            Tool::Profiler => record.args(["record", "-p", pid, "-F", &hz, "-o"]).arg(&folded),
            Tool::PySpy => record
                .args(["record", "--nonblocking", "-r", &hz, "-p", pid, "--format", "raw", "-o"])
                .arg(&folded),
        };
        record
    };
    let (recorded, slowdown) = workloads::attach(program, record, case.tool.ready_line(), BEFORE, PROFILED)?;
    let text = std::fs::read_to_string(&folded).unwrap_or_default();
    let (samples, with_python, share_error) = script_quality(&read_folded(&text), "shares.py", &SHARES);
    Ok(Run {
        slowdown,
        recording_cpu: recorded.cpu_percent(),
        us_per_sample: recorded.us_per_sample(samples),
        cpu_seconds: recorded.usage.cpu_seconds,
        samples,
        python: matches!(case.program, Program::Python { .. }).then_some((with_python, share_error)),
    })
}

/// The eBPF program's time per sample and ring bytes per record, at 999 Hz, on the Python
/// program, on one 100 Python frames deep and on a native one; and that time on the deep one.
fn kernel_cost(
    profiler: &Path,
    python: &Path,
    script: &Path,
    native: &Path,
    dir: &Path,
    repetitions: usize,
) -> Result<(String, f64)> {
    let programs = vec![
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
            let mut command = on_last_cpu(native);
            command.arg("0");
            command
        }),
    ];
    let (text, times) = kernel::pinned_costs(profiler, dir, "python", programs, repetitions)?;
    // The second program's: 100 Python frames.
    Ok((text, times[1]))
}
