//! Ctrl-C while a large program is first named: `profiler record -a` beside a loop running a
//! debug build of the profiler (a hundred MiB of DWARF, which blazesym reads at its first
//! frame), Ctrl-C pressed at several moments after the readiness line. What is measured is the
//! time from the signal to the profiler's exit, its recording written, and whether the big
//! program's frames were all named.
use std::{
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{
    median,
    workloads::{KillOnDrop, ready_signal},
};
use crate::cargo;

/// The copy of the debug build the loop runs, named so that its samples are told apart from
/// the recording profiler's.
const PROGRAM: &str = "debug-profiler";
/// When Ctrl-C is pressed, after the readiness line.
const PRESSED_AFTER_MS: [u64; 4] = [100, 300, 1000, 3000];

pub fn table(profiler: &Path, root: &Path, dir: &Path, quick: bool) -> Result<String> {
    eprintln!("xtask bench: a debug build of the profiler, for its DWARF");
    cargo(root, &["build", "--package", "profiler"])?;
    let program = dir.join(PROGRAM);
    std::fs::copy(root.join("target/debug/profiler"), &program)?;
    let dwarf_mib = dwarf_bytes(&program)? as f64 / f64::from(1 << 20);
    let input = dir.join("naming-input.prof");
    let status = Command::new(profiler)
        .args(["record", "-q", "-F", "999", "-d", "1", "-o"])
        .arg(&input)
        .args(["--", "sh", "-c", "i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done"])
        .status()?;
    if !status.success() {
        bail!("cannot record the input of {PROGRAM}");
    }
    let script = format!(
        "while :; do '{}' report '{}' -o '{}' 2>/dev/null; done",
        program.display(),
        input.display(),
        dir.join("naming-report.svg").display()
    );
    let _loop = KillOnDrop(Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).spawn()?);
    let repetitions = if quick { 1 } else { 3 };
    let mut text = format!(
        "## Ctrl-C while naming\n\n\
         `profiler record -a -F 999` while a loop runs a debug build of the profiler ({dwarf_mib:.0} MiB of DWARF \
         sections, read by blazesym at the first frame named in it), Ctrl-C pressed some time after the readiness \
         line; the time from the signal to the profiler's exit, its recording written (median and worst of \
         {repetitions}). Naming runs on a thread of its own: the signal stops the sampling at once, and the exit \
         then waits for the names under way. \"Named\" is the share of the debug build's frames named by function.\n\n\
         | Ctrl-C after | exit after (median) | worst | samples in the debug build | named |\n\
         |---|---|---|---|---|\n"
    );
    for pressed_after in PRESSED_AFTER_MS {
        let mut runs = Vec::new();
        for _ in 0..repetitions {
            runs.push(press(profiler, dir, Duration::from_millis(pressed_after))?);
        }
        let mut exits: Vec<f64> = runs.iter().map(|run| run.exit_ms).collect();
        let worst = exits.iter().copied().fold(0.0, f64::max);
        let samples: u64 = runs.iter().map(|run| run.samples).sum::<u64>() / repetitions as u64;
        let named = runs.iter().map(|run| run.named).sum::<f64>() / repetitions as f64;
        writeln!(
            text,
            "| {pressed_after} ms | {:.0} ms | {worst:.0} ms | {samples} | {:.1}% |",
            median(&mut exits),
            named * 100.0
        )?;
    }
    text.push('\n');
    Ok(text)
}

/// One recording stopped by Ctrl-C.
struct Pressed {
    exit_ms: f64,
    samples: u64,
    /// The share of frames of the debug build named by function.
    named: f64,
}

fn press(profiler: &Path, dir: &Path, after: Duration) -> Result<Pressed> {
    let out = dir.join("naming.folded");
    let mut recording = Command::new(profiler)
        .args(["record", "-a", "-F", "999", "-o"])
        .arg(&out)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start the profiler")?;
    let (ready, said) = mpsc::channel();
    ready_signal(recording.stderr.take().expect("piped"), "profiler: recording", ready);
    said.recv_timeout(Duration::from_secs(30)).context("the profiler never said it records")?;
    sleep(after);
    let pressed = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(recording.id() as i32, libc::SIGINT) };
    let status = recording.wait()?;
    let exit_ms = pressed.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        bail!("the profiler failed: {status}");
    }
    let (mut frames, mut named, mut samples) = (0u64, 0u64, 0u64);
    for line in std::fs::read_to_string(&out)?.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else { continue };
        let Some(stack) = stack.strip_prefix(PROGRAM) else { continue };
        let count: u64 = count.parse()?;
        samples += count;
        for frame in stack.split(';').skip(1).filter(|frame| !frame.ends_with("_[k]")) {
            frames += count;
            if !frame.starts_with(&format!("{PROGRAM}+0x")) {
                named += count;
            }
        }
    }
    Ok(Pressed { exit_ms, samples, named: if frames > 0 { named as f64 / frames as f64 } else { 0.0 } })
}

/// Bytes of `.debug_*` sections in the ELF file at `path`.
fn dwarf_bytes(path: &Path) -> Result<u64> {
    let output = Command::new("readelf").args(["-S", "-W"]).arg(path).output()?;
    let sections = String::from_utf8_lossy(&output.stdout);
    Ok(sections
        .lines()
        .filter(|line| line.contains(".debug_"))
        .filter_map(|line| {
            // `[Nr] Name Type Address Off Size ...`: the size is the fifth field after `]`.
            let fields: Vec<&str> = line.split_once(']')?.1.split_whitespace().collect();
            u64::from_str_radix(fields.get(4)?, 16).ok()
        })
        .sum())
}
