//! The benchmark workloads: built from `profiler/tests/workloads`, run with `PROGRESS=1` so that
//! their own speed can be read while they are profiled.
use std::{
    io::{BufRead as _, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, mpsc::Sender},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use super::compare::{Usage, wait_with_usage};
use crate::check;

/// What a workload's flame graph must show: each hot leaf, its share of the samples in all the
/// leaves, and the chain (root first) its samples must carry.
pub struct Expected {
    pub leaf: String,
    pub share: f64,
    pub chain: Vec<String>,
}

pub struct Workload {
    pub name: &'static str,
    pub binary: PathBuf,
    /// Arguments after the run time in seconds.
    pub args: Vec<String>,
    pub expected: Vec<Expected>,
    /// Turns a frame name as a tool prints it into the names of `expected` (C++ parameter lists,
    /// Rust hashes).
    pub normalize: fn(&str) -> String,
}

/// `gcc FLAGS -o OUT SOURCE -lpthread`: a C workload built.
pub fn compile_c(source: &Path, out: &Path, flags: &[&str]) -> Result<()> {
    check(Command::new("gcc").args(flags).arg("-o").arg(out).arg(source).arg("-lpthread"))
}

pub fn build(root: &Path, dir: &Path, quick: bool) -> Result<Vec<Workload>> {
    let src = root.join("profiler/tests/workloads");
    let c = |source: &str, name: &str, flags: &[&str]| -> Result<PathBuf> {
        let out = dir.join(name);
        compile_c(&src.join(source), &out, flags)?;
        Ok(out)
    };
    let split = |prefix: &str, root: &str| split_expected(prefix, root);
    let mut workloads = vec![
        Workload {
            name: "C, no frame pointers (split.c -O2 -fomit-frame-pointer)",
            binary: c("split.c", "split-nofp", &["-O2", "-g", "-fomit-frame-pointer"])?,
            args: vec![],
            expected: split("", "main"),
            normalize: plain,
        },
        Workload {
            name: "8 threads (split.c, no frame pointers)",
            binary: dir.join("split-nofp"),
            args: vec!["8".into()],
            expected: split("", "worker"),
            normalize: plain,
        },
        Workload {
            name: "deep stack (recurse.c, 200 frames of ~100 bytes)",
            binary: c("recurse.c", "recurse", &["-O2", "-g", "-fomit-frame-pointer"])?,
            args: vec!["200".into()],
            expected: recursion_expected(),
            normalize: plain,
        },
    ];
    if quick {
        return Ok(workloads);
    }
    let cpp = dir.join("split-cpp");
    check(
        Command::new("g++")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&cpp)
            .arg(src.join("split.cpp")),
    )?;
    let rust = dir.join("split-rs");
    check(
        Command::new("rustc")
            .args(["-C", "opt-level=3", "-C", "strip=debuginfo", "-o"])
            .arg(&rust)
            .arg(src.join("split.rs")),
    )?;
    workloads.extend([
        Workload {
            name: "C, frame pointers (split.c -O2 -fno-omit-frame-pointer)",
            binary: c("split.c", "split-fp", &["-O2", "-g", "-fno-omit-frame-pointer"])?,
            args: vec![],
            expected: split("", "main"),
            normalize: plain,
        },
        Workload {
            name: "C++, no frame pointers (templates, std::function)",
            binary: cpp,
            args: vec![],
            expected: cpp_expected(),
            normalize: cpp_name,
        },
        Workload {
            name: "Rust release build (no frame pointers)",
            binary: rust,
            args: vec![],
            expected: split("split::", "split::main"),
            normalize: rust_name,
        },
        Workload {
            name: "Go, stripped (shares, -ldflags=-s -w: no symbols, no DWARF, no CFI)",
            binary: build_go(&src.join("go/shares"), &dir.join("shares-go"))?,
            args: vec![],
            expected: go_expected(),
            normalize: plain,
        },
    ]);
    Ok(workloads)
}

/// A Go program built stripped, as Go programs ship, by the system's Go, without cgo (a static
/// binary; with it, shares.go's beta would call through C).
fn build_go(source: &Path, out: &Path) -> Result<PathBuf> {
    let cache = out.with_extension("cache");
    check(
        Command::new("go")
            .args(["build", "-ldflags=-s -w", "-o"])
            .arg(out)
            .current_dir(source)
            .env("GOCACHE", cache.join("build"))
            .env("GOPATH", cache.join("path"))
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-buildvcs=false")
            .env("CGO_ENABLED", "0"),
    )?;
    Ok(out.to_owned())
}

/// shares.go's 60/30/10 split: alpha, beta and gamma called by `main.work` (on two goroutines,
/// whose roots differ), with `spin` inlined into each (inlined frames are not counted).
fn go_expected() -> Vec<Expected> {
    [("main.alpha", 60.0), ("main.beta", 30.0), ("main.gamma", 10.0)]
        .into_iter()
        .map(|(leaf, share)| Expected {
            leaf: leaf.into(),
            share,
            chain: vec!["main.work".into(), leaf.into()],
        })
        .collect()
}

fn split_expected(prefix: &str, root: &str) -> Vec<Expected> {
    [("a", 60.0), ("b", 30.0), ("c", 10.0)]
        .into_iter()
        .map(|(x, share)| {
            let names = [
                "burn".to_owned(),
                "run_round".into(),
                format!("{x}_outer"),
                format!("{x}_middle"),
                format!("{x}_inner"),
                format!("hot_{x}"),
            ];
            let mut chain = vec![root.to_owned()];
            chain.extend(names.iter().map(|n| format!("{prefix}{n}")));
            Expected { leaf: format!("{prefix}hot_{x}"), share, chain }
        })
        .collect()
}

fn recursion_expected() -> Vec<Expected> {
    let mut chain = vec!["main".to_owned()];
    chain.extend(std::iter::repeat_n("descend".to_owned(), 200));
    chain.push("spin".into());
    vec![Expected { leaf: "spin".into(), share: 100.0, chain }]
}

fn cpp_expected() -> Vec<Expected> {
    [(0, 60.0), (1, 30.0), (2, 10.0)]
        .into_iter()
        .map(|(n, share)| {
            let leaf = format!("Leaf<{n}>::hot");
            let chain = vec![
                "main".into(),
                "burn".into(),
                "run_round".into(),
                format!("outer<Leaf<{n}> >"),
                format!("middle<Leaf<{n}> >"),
                format!("inner<Leaf<{n}> >"),
                leaf.clone(),
            ];
            Expected { leaf, share, chain }
        })
        .collect()
}

fn plain(name: &str) -> String {
    name.to_owned()
}

/// `void outer<Leaf<0> >(unsigned long)` -> `outer<Leaf<0> >`.
fn cpp_name(name: &str) -> String {
    let name = name.split('(').next().unwrap_or(name);
    name.strip_prefix("void ").unwrap_or(name).to_owned()
}

/// `split::hot_a::h0123456789abcdef` -> `split::hot_a`.
fn rust_name(name: &str) -> String {
    match name.rsplit_once("::h") {
        Some((path, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            path.to_owned()
        }
        _ => name.to_owned(),
    }
}

/// A running workload and its progress lines ("SECONDS OPERATIONS").
pub struct RunningWorkload {
    child: Child,
    progress: Arc<Mutex<Vec<(f64, u64)>>>,
}

impl RunningWorkload {
    pub fn start(workload: &Workload, seconds: f64) -> Result<Self> {
        let mut command = Command::new(&workload.binary);
        command.arg(seconds.to_string()).args(&workload.args).env("PROGRESS", "1");
        Self::spawn(command)
    }

    /// Runs `command`, a program that prints progress lines.
    pub fn spawn(mut command: Command) -> Result<Self> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {command:?}"))?;
        let progress = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped");
        let sink = Arc::clone(&progress);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut fields = line.split_whitespace().filter_map(|f| f.parse::<f64>().ok());
                if let (Some(t), Some(ops)) = (fields.next(), fields.next()) {
                    sink.lock().expect("progress lock").push((t, ops as u64));
                }
            }
        });
        Ok(Self { child, progress })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The workload's own clock: the time of its latest progress line.
    pub fn now(&self) -> f64 {
        self.progress.lock().expect("progress lock").last().map_or(0.0, |p| p.0)
    }

    pub fn wait_until(&self, t: f64) {
        while self.now() < t {
            thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn finish(mut self) -> Result<Vec<(f64, u64)>> {
        self.child.wait()?;
        // The reader thread ends with the pipe; give it a moment for the last lines.
        thread::sleep(Duration::from_millis(50));
        Ok(self.progress.lock().expect("progress lock").clone())
    }
}

/// `program` run on the last CPU.
pub fn on_last_cpu(program: &Path) -> Command {
    let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let mut command = Command::new("taskset");
    command.args(["-c", &last.to_string()]).arg(program);
    command
}

/// A workload's loss of peak speed while profiled from `start_t` to `stop_t` (seconds of its
/// run), in percent: against its peak alone before and after, each window's edges left out.
pub fn slowdown(progress: &[(f64, u64)], start_t: f64, stop_t: f64) -> Result<f64> {
    let end_t = progress.last().map_or(0.0, |p| p.0);
    let during = peak_rate(progress, start_t + 0.5, stop_t - 0.2).context("no progress while profiled")?;
    let alone = peak_rate(progress, 0.5, start_t)
        .into_iter()
        .chain(peak_rate(progress, stop_t + 0.5, end_t))
        .fold(0.0, f64::max);
    Ok((100.0 * (1.0 - during / alone)).max(0.0))
}

/// Peak speed in `[from, to]`: the most operations per second over one-second windows taken
/// every quarter second. This machine's CPU speed swings with what other tenants do; the peak,
/// reached whenever the host leaves the CPU alone, is what the profiler's own cost changes.
pub fn peak_rate(progress: &[(f64, u64)], from: f64, to: f64) -> Option<f64> {
    let at = |t: f64| progress.iter().find(|p| p.0 >= t);
    (0..)
        .map(|i| from + f64::from(i) * 0.25)
        .take_while(|start| start + 1.0 <= to)
        .filter_map(|start| {
            let (a, b) = (at(start)?, at(start + 1.0)?);
            Some((b.1 - a.1) as f64 / (b.0 - a.0))
        })
        .reduce(f64::max)
}

/// A child process killed when dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tool's recording of a running workload, as [`record_while`] measured it.
pub struct Recorded {
    /// The workload's clock when the tool was stopped.
    pub stop_t: f64,
    /// The tool's CPU over the measured window (from half a second after it started sampling
    /// until it was stopped), in nanoseconds, and that window in seconds.
    pub cpu_ns: u64,
    pub window: f64,
    /// Seconds from the tool saying it samples to its stop.
    pub recorded_for: f64,
    pub usage: Usage,
}

impl Recorded {
    /// The tool's CPU while recording, in percent of one core.
    pub fn cpu_percent(&self) -> f64 {
        self.cpu_ns as f64 / 1e9 / self.window * 100.0
    }

    /// Its CPU per sample, in microseconds, of `samples` taken over the whole recording (those
    /// of the window counted at the rate of the whole).
    pub fn us_per_sample(&self, samples: u64) -> f64 {
        let in_window = samples as f64 * self.window / self.recorded_for;
        if in_window > 0.0 { self.cpu_ns as f64 / 1e3 / in_window } else { 0.0 }
    }
}

/// Runs `record` (a tool recording `running`) for `seconds`, stopping it with SIGINT: it samples
/// once it prints a line starting with `ready` (on its standard output or error), or, with
/// none, a moment after it starts.
pub fn record_while(
    running: &RunningWorkload,
    mut record: Command,
    ready: Option<&'static str>,
    seconds: f64,
) -> Result<Recorded> {
    let started = Instant::now();
    let mut recorder = record
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {record:?}"))?;
    let (tx, said) = std::sync::mpsc::channel();
    let line = ready.unwrap_or("");
    ready_signal(recorder.stdout.take().unwrap(), line, tx.clone());
    ready_signal(recorder.stderr.take().unwrap(), line, tx);
    match ready {
        Some(_) => said
            .recv_timeout(Duration::from_secs(30))
            .with_context(|| format!("{record:?} never said it samples"))?,
        None => thread::sleep(Duration::from_millis(300)),
    }
    let sampling = Instant::now();
    // The tool's CPU while it records, past its first half second of sampling.
    thread::sleep(Duration::from_millis(500));
    let (cpu_from, from) = (cpu_ns(recorder.id()), Instant::now());
    thread::sleep(
        Duration::from_secs_f64(seconds).saturating_sub(started.elapsed()).max(Duration::from_secs(2)),
    );
    let (cpu_ns, window) = (cpu_ns(recorder.id()) - cpu_from, from.elapsed().as_secs_f64());
    let recorded_for = sampling.elapsed().as_secs_f64();
    let stop_t = running.now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(recorder.id() as i32, libc::SIGINT) };
    let usage = wait_with_usage(&mut recorder)?;
    Ok(Recorded { stop_t, cpu_ns, window, recorded_for, usage })
}

/// `program`, which prints progress lines with `PROGRESS=1`, alone for `before` seconds (of its
/// clock), recorded for `profiled` seconds by the tool `record` makes of its pid (which samples
/// once it prints a line starting with `ready`; see [`record_while`]), then alone to its end: the
/// recording, and the program's slowdown while recorded.
pub fn attach(
    mut program: Command,
    record: impl FnOnce(&str) -> Command,
    ready: &'static str,
    before: f64,
    profiled: f64,
) -> Result<(Recorded, f64)> {
    program.env("PROGRESS", "1");
    let running = RunningWorkload::spawn(program)?;
    running.wait_until(before);
    let start_t = running.now();
    let recorded = record_while(&running, record(&running.pid().to_string()), Some(ready), profiled)?;
    let progress = running.finish()?;
    let slowdown = slowdown(&progress, start_t, recorded.stop_t)?;
    Ok((recorded, slowdown))
}

/// A channel told once `output` (the tool's stdout or stderr) prints a line starting with `line`;
/// the pipe is read to its end so that the tool never blocks on it.
pub fn ready_signal(output: impl Read + Send + 'static, line: &'static str, tx: Sender<()>) {
    thread::spawn(move || {
        for text in BufReader::new(output).lines().map_while(Result::ok) {
            if text.starts_with(line) {
                let _ = tx.send(());
            }
        }
    });
}

/// CPU time of every thread of process `pid` so far, in nanoseconds (schedstat: finer than the
/// clock ticks of `/proc/PID/stat`, which a few percent of a core over seconds barely moves).
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|schedstat| schedstat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalize() {
        assert_eq!(
            cpp_name("void middle<Leaf<1> >(std::function<void (unsigned long)> const&, unsigned long)"),
            "middle<Leaf<1> >"
        );
        assert_eq!(cpp_name("Leaf<0>::hot(unsigned long)"), "Leaf<0>::hot");
        assert_eq!(rust_name("split::hot_a::h0123456789abcdef"), "split::hot_a");
        assert_eq!(rust_name("split::hot_a"), "split::hot_a");
    }

    #[test]
    fn peak_over_windows() {
        let progress: Vec<(f64, u64)> = (0u32..=40)
            .map(|i| (f64::from(i) * 0.1, u64::from(if i < 20 { i * 10 } else { 200 + (i - 20) * 20 })))
            .collect();
        // 100 ops/s in the first two seconds, 200 ops/s after.
        assert_eq!(peak_rate(&progress, 0.0, 2.0).map(|r| r.round()), Some(100.0));
        assert_eq!(peak_rate(&progress, 0.0, 4.0).map(|r| r.round()), Some(200.0));
        assert_eq!(peak_rate(&progress, 3.5, 4.0), None);
    }
}
