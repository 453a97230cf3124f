//! End to end, as root: Python services as people run them, found and read whatever they loaded
//! and whatever they are called, each already running when the profiler is attached to it (`-p`)
//! or starts to record the whole system (`-a`): a service that imported hundreds of extension
//! modules, a data service on numpy and pandas from PyPI (`cargo xtask setup` installs them),
//! CPython linked into a program of another name, and an interpreter renamed. In each recording
//! nearly every sample of the service has Python frames, and its functions have their shares.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use crate::common::{python::*, *};

/// The share of a service's samples that must have Python frames.
const WITH_FRAMES: f64 = 0.95;
/// How far a function's share of the samples may be from its share of the work, in points.
const POINTS: f64 = 5.0;

// Alone on the machine: each test keeps a CPU busy with its service, and the other CPU is the
// profiler's.

/// The virtual environment with numpy and pandas that `cargo xtask setup` makes.
const PYTHON_SERVICES: &str = ".tools/python-services/bin/python";

/// pyenv's newest CPython, built as a shared library (`libpython3.N.so`): what the extension
/// modules and the embedding program are built against.
fn newest_pyenv() -> &'static Interpreter {
    interpreters()
        .iter()
        .filter(|python| python.label.starts_with("pyenv-"))
        .max_by_key(|python| python.minor)
        .expect("pyenv's CPython is installed")
}

/// What `python` says of its build (`sysconfig`): `names`, in order.
fn config(python: &Path, names: &[&str]) -> Vec<String> {
    let code = format!(
        "import sysconfig; print('\\n'.join(str(sysconfig.get_config_var(n) or sysconfig.get_paths().get(n)) for n in {names:?}))"
    );
    let out = Command::new(python).args(["-c", &code]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

/// `program ARGS`, once it has said its main thread is running (`main TID`).
fn start_service(program: &Path, args: &[&str]) -> (KillOnDrop, BufReader<std::process::ChildStdout>) {
    let mut child =
        Command::new(program).args(args).stdout(Stdio::piped()).stdin(Stdio::null()).spawn().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    assert!(line.starts_with("main "), "{} did not start: {line:?}", program.display());
    (KillOnDrop(child), output)
}

/// The mappings of process `pid` that are code of CPython extension modules.
fn extension_mappings(pid: u32) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines().filter(|line| line.contains(" r-xp ") && line.contains(".cpython-")).count()
}

/// Process `pid` recorded for 3 s attached to it (`-p`), then for 3 s with the whole system
/// (`-a`): its stacks in each, by how it was recorded.
fn record_running(dir: &Path, pid: u32) -> Vec<(&'static str, Folded)> {
    let pid_arg = pid.to_string();
    [("-p", vec!["-p", pid_arg.as_str()]), ("-a", vec!["-a"])]
        .into_iter()
        .map(|(how, target)| {
            let out = dir.join(format!("{}.folded", how.trim_start_matches('-')));
            let mut args = vec!["record", "--per-pid", "-F", "499", "-d", "3", "-o", out.to_str().unwrap()];
            args.extend(target);
            assert!(run_bounded(&args).status.success(), "{how}");
            (how, Folded::read(&out))
        })
        .collect()
}

/// Fails unless at least [`WITH_FRAMES`] of the samples of `pid` in each recording have a
/// Python frame, and each function of `shares` (name, script, share in percent) has its share
/// of the samples that run one of them, ± [`POINTS`].
fn assert_read(recordings: &[(&str, Folded)], pid: u32, shares: &[(&str, &str, f64)]) {
    for (how, folded) in recordings {
        let stacks = thread_stacks(folded, pid);
        let all = weight(&stacks, |_| true);
        let read = weight(&stacks, |frames| !python_frames(frames).is_empty());
        eprintln!("{how}: {read} of {all} samples with Python frames");
        assert!(all >= 500, "{how}: {all} samples of {pid}");
        assert!(read as f64 >= WITH_FRAMES * all as f64, "{how}: {read} of {all} samples with Python frames");
        let runs = |name: &str, script: &str, frames: &[String]| {
            python_frames(frames).iter().any(|frame| frame.name == name && frame.in_script(script))
        };
        let working =
            weight(&stacks, |frames| shares.iter().any(|&(name, script, _)| runs(name, script, frames)));
        for &(name, script, expected) in shares {
            let share = 100.0 * weight(&stacks, |frames| runs(name, script, frames)) as f64 / working as f64;
            eprintln!("{how}: {name} {share:.1}%, expected {expected:.1}%");
            assert!(
                (share - expected).abs() <= POINTS,
                "{how}: {name} has {share:.1}%, expected {expected:.1}%"
            );
        }
    }
}

/// shares.py's functions and their shares, as `python` names them.
fn shares_of(python: &Interpreter) -> Vec<(String, &'static str, f64)> {
    [("alpha", 50.0), ("beta", 30.0), ("Burner.gamma", 20.0)]
        .into_iter()
        .map(|(name, share)| (python.frame_name(name), "shares.py", share))
        .collect()
}

fn assert_shares_read(recordings: &[(&str, Folded)], pid: u32, python: &Interpreter) {
    let shares = shares_of(python);
    let shares: Vec<(&str, &str, f64)> =
        shares.iter().map(|(name, script, share)| (name.as_str(), *script, *share)).collect();
    assert_read(recordings, pid, &shares);
}

/// A service that imported 320 extension modules (each a file of its own) before it got to work:
/// they are mapped below its interpreter (libpython), which its maps list after all of them.
#[test]
fn a_service_that_imported_hundreds_of_extension_modules() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let python = newest_pyenv();
    let dir = scratch_dir("services-extensions");
    let [include, suffix] =
        <[String; 2]>::try_from(config(&python.path, &["include", "EXT_SUFFIX"])).unwrap();
    let built = dir.join("ext.so");
    let source = script("extension.c");
    let status = Command::new("gcc")
        .args(["-O1", "-shared", "-fPIC"])
        .arg(format!("-I{include}"))
        .arg("-o")
        .arg(&built)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success(), "building {}", source.display());
    let modules = dir.join("modules");
    std::fs::create_dir(&modules).unwrap();
    for n in 0..320 {
        std::fs::copy(&built, modules.join(format!("ext_{n}{suffix}"))).unwrap();
    }
    let (service, _) = start_service(
        &python.path,
        &[script("extensions.py").to_str().unwrap(), modules.to_str().unwrap(), "30"],
    );
    let pid = service.pid();
    assert!(extension_mappings(pid) >= 300, "{} extension modules mapped", extension_mappings(pid));
    let recordings = record_running(&dir, pid);
    assert_shares_read(&recordings, pid, python);
}

/// A data service on numpy and pandas (real packages from PyPI, 80-odd extension modules), its
/// functions' shares as it measures them itself.
#[test]
fn a_pandas_service() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(PYTHON_SERVICES);
    assert!(python.exists(), "{} is missing: run `cargo xtask setup`", python.display());
    let dir = scratch_dir("services-pandas");
    let (mut service, mut output) =
        start_service(&python, &[script("pandas_service.py").to_str().unwrap(), "12"]);
    let pid = service.pid();
    assert!(extension_mappings(pid) >= 50, "{} extension modules mapped", extension_mappings(pid));
    let recordings = record_running(&dir, pid);
    // What the service measured of itself: `summarise SECONDS rank_orders SECONDS`.
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    assert!(service.0.wait().unwrap().success());
    let words: Vec<&str> = line.split_whitespace().collect();
    let spent = |name: &str| -> f64 {
        let at = words.iter().position(|word| *word == name).unwrap_or_else(|| panic!("{line:?}"));
        words[at + 1].parse().unwrap()
    };
    let (summarise, rank) = (spent("summarise"), spent("rank_orders"));
    let measured = |seconds: f64| 100.0 * seconds / (summarise + rank);
    assert_read(
        &recordings,
        pid,
        &[
            ("summarise", "pandas_service.py", measured(summarise)),
            ("rank_orders", "pandas_service.py", measured(rank)),
        ],
    );
}

/// CPython in a small C program (`host`, nothing like python: as uWSGI-like servers and programs
/// calling `Py_Initialize` are), through pyenv's shared libpython, running shares.py.
#[test]
fn python_linked_into_a_program_of_another_name() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let python = newest_pyenv();
    let dir = scratch_dir("services-embedded");
    let [include, lib, version] =
        <[String; 3]>::try_from(config(&python.path, &["include", "LIBDIR", "LDVERSION"])).unwrap();
    let host = dir.join("host");
    let source = script("embed.c");
    let status = Command::new("gcc")
        .args(["-O1", "-g"])
        .arg(format!("-I{include}"))
        .arg("-o")
        .arg(&host)
        .arg(&source)
        .arg(format!("-L{lib}"))
        .arg(format!("-lpython{version}"))
        .arg(format!("-Wl,-rpath,{lib}"))
        .status()
        .unwrap();
    assert!(status.success(), "building {}", source.display());
    let (service, _) = start_service(&host, &[script("shares.py").to_str().unwrap(), "30"]);
    let recordings = record_running(&dir, service.pid());
    assert_shares_read(&recordings, service.pid(), python);
}

/// Debian's CPython (the interpreter linked into its executable), copied under a name of a
/// service's own.
#[test]
fn an_interpreter_under_a_name_of_its_own() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let python = interpreters()
        .iter()
        .find(|python| python.label.starts_with("usr-bin-"))
        .expect("Debian's CPython is installed");
    let dir = scratch_dir("services-renamed");
    let renamed: PathBuf = dir.join("billing-worker");
    std::fs::copy(&python.path, &renamed).unwrap();
    let (service, _) = start_service(&renamed, &[script("shares.py").to_str().unwrap(), "30"]);
    let recordings = record_running(&dir, service.pid());
    assert_shares_read(&recordings, service.pid(), python);
}
