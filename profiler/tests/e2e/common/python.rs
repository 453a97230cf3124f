//! CPython on this machine for the Python tests: every supported interpreter installed, the
//! workload scripts, runs of `profiler record` on them, and Python frames in folded stacks.
use std::{
    collections::BTreeMap,
    ops::RangeInclusive,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use super::{
    Folded, KillOnDrop, alone_on_the_machine, beside_others, run_bounded, scratch_dir, thread_stacks,
};

/// The CPython minor versions (3.N) the profiler shows Python frames of.
pub const SUPPORTED_MINORS: RangeInclusive<u32> = 6..=14;

/// Where Debian installs its interpreters (`python3.N`, libpython linked in statically).
const SYSTEM_BIN: &str = "/usr/bin";

/// Debian unstable's CPython 3.14 (libpython linked in statically, stripped), which
/// `cargo xtask setup` unpacks there, with its suite's C library, under the repository's root.
pub const DEBIAN_PYTHON: &str = ".tools/debian-sid-python3.14/usr/bin/python3.14";

/// One installed CPython.
#[derive(Debug)]
pub struct Interpreter {
    /// How failures name it, and its scratch directories: `pyenv-3.12.1`, `usr-bin-python3.11`,
    /// `debian-sid-python3.14`.
    pub label: String,
    pub path: PathBuf,
    /// N of 3.N.
    pub minor: u32,
}

impl Interpreter {
    /// 3.11 and later name a frame by its code's qualified name (`Burner.gamma`), earlier
    /// versions by its plain name (`gamma`), as they have no other.
    pub fn frame_name(&self, qualname: &str) -> String {
        if self.minor >= 11 {
            qualname.to_owned()
        } else {
            qualname.rsplit('.').next().unwrap_or(qualname).to_owned()
        }
    }

    /// The native function under a script's `<module>` in every stack of it: `Py_RunMain`
    /// from 3.8, which runs the script in every build; 3.6 and 3.7 run it from
    /// `PyRun_SimpleFileExFlags`.
    pub fn native_entry(&self) -> &'static str {
        if self.minor >= 8 { "Py_RunMain" } else { "PyRun_SimpleFileExFlags" }
    }

    /// The command name (`comm`) of a process started from it, at most 15 bytes.
    pub fn comm(&self) -> String {
        let name = self.path.file_name().unwrap().to_string_lossy();
        name.chars().take(15).collect()
    }
}

/// Every supported CPython installed: pyenv's (`$(pyenv root)/versions/3.N.P/bin/python3.N`),
/// the system's (`/usr/bin/python3.N`) and Debian unstable's 3.14 ([`DEBIAN_PYTHON`], which
/// must be there). Fails when a supported one is installed but does not run or is not the
/// version its place says: each must be covered.
pub fn interpreters() -> &'static [Interpreter] {
    static INSTALLED: OnceLock<Vec<Interpreter>> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let mut found: Vec<Interpreter> =
            pyenv_root().map(|root| pyenv_interpreters(&root)).unwrap_or_default();
        found.extend(system_interpreters());
        let debian = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DEBIAN_PYTHON);
        assert!(debian.exists(), "{} is missing: run `cargo xtask setup`", debian.display());
        found.push(Interpreter { label: "debian-sid-python3.14".into(), path: debian, minor: 14 });
        for interpreter in &found {
            check_runs(interpreter);
        }
        eprintln!("CPython interpreters: {:?}", found.iter().map(|i| &i.label).collect::<Vec<_>>());
        found
    })
}

/// pyenv's root: `pyenv root`, else `$PYENV_ROOT`, else `~/.pyenv` (root's `sudo` may leave
/// pyenv out of PATH).
fn pyenv_root() -> Option<PathBuf> {
    let said = Command::new("pyenv").arg("root").output().ok().filter(|out| out.status.success());
    let root = match said {
        Some(out) => PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
        None => std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pyenv")))?,
    };
    root.join("versions").is_dir().then_some(root)
}

/// The supported versions under `<root>/versions`, by their directory names (`3.12.1`; others,
/// such as virtual environments and free-threaded `3.13.0t` builds, are not CPython releases the
/// profiler supports).
fn pyenv_interpreters(root: &Path) -> Vec<Interpreter> {
    let mut found: Vec<Interpreter> = std::fs::read_dir(root.join("versions"))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().to_string_lossy().into_owned();
            let minor = release_minor(&name)?;
            let path = root.join("versions").join(&name).join(format!("bin/python3.{minor}"));
            Some(Interpreter { label: format!("pyenv-{name}"), path, minor })
        })
        .collect();
    found.sort_by_key(|i| i.minor);
    found
}

/// N of a supported release `3.N.P`.
fn release_minor(version: &str) -> Option<u32> {
    let parts: Vec<&str> = version.split('.').collect();
    let [major, minor, patch] = parts[..] else { return None };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if major != "3" || !numeric(minor) || !numeric(patch) {
        return None;
    }
    let minor: u32 = minor.parse().ok()?;
    SUPPORTED_MINORS.contains(&minor).then_some(minor)
}

fn system_interpreters() -> Vec<Interpreter> {
    SUPPORTED_MINORS
        .map(|minor| (minor, Path::new(SYSTEM_BIN).join(format!("python3.{minor}"))))
        .filter(|(_, path)| path.exists())
        .map(|(minor, path)| Interpreter { label: format!("usr-bin-python3.{minor}"), path, minor })
        .collect()
}

/// Fails unless `interpreter` runs and is 3.N, a build with the GIL.
fn check_runs(interpreter: &Interpreter) {
    let out = Command::new(&interpreter.path)
        .args(["-c", "import sys, sysconfig; print(sys.version_info[0], sys.version_info[1], sysconfig.get_config_var('Py_GIL_DISABLED') or 0)"])
        .output()
        .unwrap_or_else(|e| panic!("{} is installed but does not run: {e}", interpreter.label));
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        format!("3 {} 0", interpreter.minor),
        "{} ({}) should be CPython 3.{} with the GIL",
        interpreter.label,
        interpreter.path.display(),
        interpreter.minor
    );
}

/// Runs `scenario` on every interpreter, each to its end whatever the others did, and fails
/// naming every interpreter it failed on (each failure's message is printed as it happens).
pub fn on_every_interpreter(scenario: &str, run: impl Fn(&Interpreter, &Path)) {
    on_every(scenario, run, false);
}

/// [`on_every_interpreter`], each run with no other recording of this binary beside it.
pub fn on_every_interpreter_alone(scenario: &str, run: impl Fn(&Interpreter, &Path)) {
    on_every(scenario, run, true);
}

fn on_every(scenario: &str, run: impl Fn(&Interpreter, &Path), alone: bool) {
    let mut failed = Vec::new();
    for interpreter in interpreters() {
        eprintln!("=== {scenario} on {} ({})", interpreter.label, interpreter.path.display());
        let dir = scratch_dir(&format!("python-{scenario}-{}", interpreter.label));
        let _shared = (!alone).then(beside_others);
        // How soon a new process's frames are read is the profiler's latency, which a second
        // recording beside it doubles.
        let _alone = alone.then(alone_on_the_machine);
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(interpreter, &dir))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("{}: {}", interpreter.label, first_line(&message)));
        }
    }
    assert!(
        failed.is_empty(),
        "{scenario} failed on {} interpreter(s):\n{}",
        failed.len(),
        failed.join("\n")
    );
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").chars().take(300).collect()
}

/// A workload script of `tests/workloads/python`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/python").join(name)
}

/// The lines of function `name` in `script`, from its `def` to its last indented line: where
/// its frames' line numbers must fall.
pub fn function_lines(script: &Path, name: &str) -> RangeInclusive<u32> {
    let source = std::fs::read_to_string(script).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.trim_start().starts_with(&format!("def {name}(")))
        .unwrap_or_else(|| panic!("no def {name} in {}", script.display()));
    let indent = |line: &str| line.len() - line.trim_start().len();
    let body = lines[start + 1..]
        .iter()
        .take_while(|line| line.trim().is_empty() || indent(line) > indent(lines[start]))
        .count();
    // Lines count from 1; trailing blank lines are not the function's.
    let last = (start + 1..=start + body).rev().find(|&i| !lines[i].trim().is_empty()).unwrap_or(start);
    (start as u32 + 1)..=(last as u32 + 1)
}

/// A Python frame as folded stacks name it: `qualname (path/file.py:LINE)`.
#[derive(Debug, PartialEq, Eq)]
pub struct PythonFrame<'a> {
    pub name: &'a str,
    pub file: &'a str,
    pub line: u32,
}

impl PythonFrame<'_> {
    /// Whether the frame runs code of the script called `file_name`.
    pub fn in_script(&self, file_name: &str) -> bool {
        self.file.rsplit('/').next() == Some(file_name)
    }
}

/// `frame` read as a Python frame; `None` for a native one. The file is a `.py` path or, for
/// modules frozen into the interpreter, `<frozen NAME>`.
pub fn python_frame(frame: &str) -> Option<PythonFrame<'_>> {
    let (name, place) = frame.strip_suffix(')')?.rsplit_once(" (")?;
    let (file, line) = place.rsplit_once(':')?;
    let is_source = file.ends_with(".py") || (file.starts_with("<frozen ") && file.ends_with('>'));
    (is_source && !name.is_empty()).then_some(PythonFrame { name, file, line: line.parse().ok()? })
}

/// The Python frames of a stack, outermost first.
pub fn python_frames(frames: &[String]) -> Vec<PythonFrame<'_>> {
    frames.iter().filter_map(|frame| python_frame(frame)).collect()
}

/// A run of `profiler record --per-thread` on a script.
pub struct Recorded {
    /// Stacks rooted at `comm-TID`.
    pub folded: Folded,
    /// The threads the script announced (`NAME TID` lines on its standard output).
    pub threads: BTreeMap<String, u32>,
    pub stderr: String,
}

impl Recorded {
    /// The stacks of the thread the script announced as `name`, without their root.
    pub fn thread(&self, name: &str) -> Vec<(&[String], u64)> {
        let tid = self.threads.get(name).unwrap_or_else(|| panic!("the script announced no {name} thread"));
        thread_stacks(&self.folded, *tid)
    }
}

/// `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded -p PID` of
/// `PYTHON SCRIPT` started first and running longer than the recording: the profiler reads code
/// objects from the live process as samples arrive, and a busy test machine can hold it up past
/// the end of a script that stops with the recording. At 499 Hz a 6 s share test has ~3000
/// samples: a 50% share's sampling error is then under 1 point, so ±5 is over five of them (at
/// 199 Hz it was three, and one interpreter in a dozen runs would fail for no fault).
pub fn record_script(
    dir: &Path,
    interpreter: &Interpreter,
    script_name: &str,
    seconds: &str,
    extra: &[&str],
) -> Recorded {
    let out = dir.join("out.folded");
    let script = script(script_name);
    let outlive = format!("{}", seconds.parse::<f64>().unwrap() + 60.0);
    let mut child = KillOnDrop(
        std::process::Command::new(&interpreter.path)
            .arg(&script)
            .arg(&outlive)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the script"),
    );
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    // Its first line says it runs its own code.
    let mut announced = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut announced).unwrap();
    let pid = child.pid().to_string();
    let mut args = vec!["record", "--per-thread", "-F", "499", "-d", seconds, "-o", out.to_str().unwrap()];
    args.extend(extra);
    args.extend(["-p", &pid]);
    let run = run_bounded(&args);
    drop(child);
    std::io::Read::read_to_string(&mut stdout, &mut announced).unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "the profiler failed: {stderr}");
    Recorded { folded: Folded::read(&out), threads: announced_threads(&announced), stderr }
}

/// The `NAME TID` lines of a script's output.
pub fn announced_threads(stdout: &str) -> BTreeMap<String, u32> {
    stdout
        .lines()
        .filter_map(|line| {
            let (name, tid) = line.split_once(' ')?;
            Some((name.to_owned(), tid.trim().parse().ok()?))
        })
        .collect()
}

/// The weight of `stacks` that pass `keep`.
pub fn weight(stacks: &[(&[String], u64)], keep: impl Fn(&[String]) -> bool) -> u64 {
    stacks.iter().filter(|(frames, _)| keep(frames)).map(|(_, n)| n).sum()
}
