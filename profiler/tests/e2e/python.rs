//! End to end, as root: Python frames in `profiler record`, on every supported CPython installed
//! (pyenv's 3.6–3.13, the system's, and Debian unstable's 3.14 that `cargo xtask setup` unpacks),
//! each scenario run on all of them and failing with the
//! list of those it failed on. The scripts are in tests/workloads/python.
//!
//! A Python frame reads `qualname (path/file.py:LINE)` (3.6–3.10: the code's plain name); it
//! takes the place of the interpreter's `_PyEval_EvalFrameDefault`, between the native frames
//! that called the interpreter and those Python code calls.

use std::{io::Read as _, ops::RangeInclusive, path::Path, time::Duration};

use crate::common::{python::*, *};
use profiler::pprof as proto;
use prost::Message as _;

/// The interpreter's evaluation loop, which Python frames replace in stacks of Python code.
const EVAL_LOOP: &str = "_PyEval_EvalFrameDefault";

/// Share of stacks allowed to miss what each test requires of them: a sample may catch the
/// interpreter between pushing a frame and entering it.
const SLACK: f64 = 0.01;

/// Whether a stack has a frame of the script called `file_name`.
fn runs_script(frames: &[String], file_name: &str) -> bool {
    python_frames(frames).iter().any(|frame| frame.in_script(file_name))
}

/// Whether a stack has a frame named `name` in the script called `file_name`.
fn has_function(frames: &[String], name: &str, file_name: &str) -> bool {
    python_frames(frames).iter().any(|frame| frame.name == name && frame.in_script(file_name))
}

/// Index of the frame named `name` in `file_name` (the innermost if several).
fn function_at(frames: &[String], name: &str, file_name: &str) -> Option<usize> {
    frames.iter().rposition(|frame| {
        python_frame(frame).is_some_and(|frame| frame.name == name && frame.in_script(file_name))
    })
}

/// The innermost Python frame of a stack.
fn innermost_python(frames: &[String]) -> Option<PythonFrame<'_>> {
    frames.iter().rev().find_map(|frame| python_frame(frame))
}

/// How the native part of a stack is checked under `<module>`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Native {
    /// Complete: the interpreter's native entry (this one) is under `<module>`.
    Complete(&'static str),
    /// Maybe cut by the stack copy (hundreds of native eval-loop calls under 3.8–3.10): only the
    /// Python frames are checked.
    MaybeCut,
}

/// Fails unless most of `stacks` run the script called `file_name` (the rest are the
/// interpreter starting and finishing), and those that do start their Python frames at its
/// `<module>`, over the interpreter's native entry when `native` says so, and hold no evaluation
/// loop frame.
fn assert_rooted_at_module(stacks: &[(&[String], u64)], file_name: &str, native: Native) {
    assert_most(stacks, 0.75, &format!("samples are in {file_name}"), |frames| {
        runs_script(frames, file_name)
    });
    let of_script: Vec<(&[String], u64)> =
        stacks.iter().filter(|(frames, _)| runs_script(frames, file_name)).copied().collect();
    let not_rooted: Vec<&[String]> = of_script
        .iter()
        .map(|(frames, _)| *frames)
        .filter(|frames| {
            python_frames(frames)
                .first()
                .is_none_or(|outer| outer.name != "<module>" || !outer.in_script(file_name))
        })
        .collect();
    assert!(
        not_rooted.is_empty(),
        "{} stacks of {file_name} do not start at its <module>, the first: {:?}",
        not_rooted.len(),
        not_rooted.first()
    );
    if let Native::Complete(entry) = native {
        assert_most(&of_script, 1.0 - SLACK, &format!("have {entry} under <module>"), |frames| {
            let module = frames.iter().position(|frame| frame.starts_with("<module> (")).unwrap();
            frames[..module].iter().any(|frame| frame == entry)
        });
    }
    // A sample can catch a call entering or leaving the loop, before its Python frame is
    // published or after it is gone: its eval-loop frame stays, inside every Python frame.
    let innermost_python_at =
        |frames: &[String]| frames.iter().rposition(|frame| python_frame(frame).is_some());
    assert_most(
        &of_script,
        1.0 - SLACK,
        &format!("have no {EVAL_LOOP} frame outside a Python frame"),
        |frames| {
            let inner = innermost_python_at(frames).unwrap_or(0);
            !frames[..inner].iter().any(|frame| frame == EVAL_LOOP)
        },
    );
    assert_most(&of_script, 1.0 - 3.0 * SLACK, &format!("have no {EVAL_LOOP} frame"), |frames| {
        !frames.iter().any(|frame| frame == EVAL_LOOP)
    });
}

/// Fails unless every frame named `name` in `file_name` is at a line of `lines`.
fn assert_lines(stacks: &[(&[String], u64)], name: &str, file_name: &str, lines: &RangeInclusive<u32>) {
    for (frames, _) in stacks {
        for frame in python_frames(frames) {
            if frame.name == name && frame.in_script(file_name) {
                assert!(lines.contains(&frame.line), "{name} at line {}, outside {lines:?}", frame.line);
            }
        }
    }
}

#[test]
fn python_functions_get_their_shares_under_module() {
    if !e2e_enabled() {
        return;
    }
    let source = script("shares.py");
    on_every_interpreter("shares", |python, dir| {
        let pprof = dir.join("out.pb.gz");
        let run = record_script(dir, python, "shares.py", "4", &["-o", pprof.to_str().unwrap()]);
        let main = run.thread("main");
        assert_rooted_at_module(&main, "shares.py", Native::Complete(python.native_entry()));
        let in_script = weight(&main, |frames| runs_script(frames, "shares.py"));
        let mut expected = Vec::new();
        for (qualname, share) in [("alpha", 50.0), ("beta", 30.0), ("Burner.gamma", 20.0)] {
            let name = python.frame_name(qualname);
            let lines = function_lines(&source, qualname.rsplit('.').next().unwrap());
            let samples = weight(&main, |frames| has_function(frames, &name, "shares.py"));
            let measured = 100.0 * samples as f64 / in_script as f64;
            eprintln!("{name}: {samples} samples, {measured:.1}%");
            assert!(
                (measured - share).abs() <= 5.0,
                "{name}: {measured:.1}% of the script's samples, expected {share}% ± 5"
            );
            assert_lines(&main, &name, "shares.py", &lines);
            expected.push((name, lines));
        }
        assert_pprof_names(&pprof, "shares.py", &expected);
    });
}

/// Fails unless the pprof profile at `path` has, for each `(name, lines)`, a function of that
/// name in the file called `file_name`, at one of those lines.
fn assert_pprof_names(path: &Path, file_name: &str, expected: &[(String, RangeInclusive<u32>)]) {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut raw).unwrap();
    let profile = proto::Profile::decode(&*raw).unwrap();
    let string = |index: i64| profile.string_table[index as usize].as_str();
    for (name, lines) in expected {
        let found = profile.location.iter().flat_map(|location| &location.line).any(|line| {
            let function = &profile.function[line.function_id as usize - 1];
            string(function.name) == name
                && string(function.filename).rsplit('/').next() == Some(file_name)
                && u32::try_from(line.line).is_ok_and(|n| lines.contains(&n))
        });
        assert!(found, "pprof: no location of {name} in {file_name} at lines {lines:?}");
    }
}

#[test]
fn python_calls_native_code_that_calls_python() {
    if !e2e_enabled() {
        return;
    }
    on_every_interpreter("mixed", |python, dir| {
        let run = record_script(dir, python, "mixed.py", "3", &[]);
        let main = run.thread("main");
        assert_rooted_at_module(&main, "mixed.py", Native::Complete(python.native_entry()));
        // zlib's compression, in libz, under the Python function that called it.
        let compressing: Vec<(&[String], u64)> = main
            .iter()
            .filter(|(frames, _)| innermost_python(frames).is_some_and(|frame| frame.name == "delta"))
            .copied()
            .collect();
        assert_most(&compressing, 0.8, "samples in delta are in libz under it", |frames| {
            let delta = function_at(frames, "delta", "mixed.py").unwrap();
            frames[delta + 1..].iter().any(|frame| is_libz(frame))
        });
        // libc's qsort, called by `sorter` through ctypes, calling the comparator back.
        let comparing: Vec<(&[String], u64)> =
            main.iter().filter(|(frames, _)| has_function(frames, "compare", "mixed.py")).copied().collect();
        let compared = weight(&comparing, |_| true);
        assert!(compared >= 10, "compare hardly sampled: {compared} samples");
        // Besides the slack, one sample may catch 3.11 entering compare's eval loop, where the
        // frame is current before it is marked as the first of its call: compare then joins
        // sorter's run.
        let fraction = 1.0 - SLACK - 1.0 / compared as f64;
        assert_most(&comparing, fraction, "samples in compare are under qsort, under sorter", |frames| {
            let compare = function_at(frames, "compare", "mixed.py").unwrap();
            let Some(sorter) = function_at(frames, "sorter", "mixed.py") else { return false };
            sorter < compare && frames[sorter + 1..compare].iter().any(|frame| frame.contains("qsort"))
        });
    });
}

/// Whether a frame is zlib's: `deflate` and what it calls, named or, in a stripped libz, not.
fn is_libz(frame: &str) -> bool {
    ["deflate", "libz.so", "longest_match", "fill_window", "compress_block", "_tr_", "adler32", "crc32"]
        .iter()
        .any(|prefix| frame.starts_with(prefix))
}

#[test]
fn each_python_thread_shows_its_own_code() {
    if !e2e_enabled() {
        return;
    }
    on_every_interpreter("threads", |python, dir| {
        let run = record_script(dir, python, "threads.py", "3", &[]);
        let (spinning, hashing) = (run.thread("spin"), run.thread("hash_loop"));
        let holds = |name: &'static str| move |frames: &[String]| has_function(frames, name, "threads.py");
        assert_most(&spinning, 0.9, "samples of the spinning thread are in spin", holds("spin"));
        assert_most(&hashing, 0.9, "samples of the hashing thread are in hash_loop", holds("hash_loop"));
        assert_eq!(weight(&spinning, holds("hash_loop")), 0, "hash_loop in the spinning thread");
        assert_eq!(weight(&hashing, holds("spin")), 0, "spin in the hashing thread");
        // The hashing thread runs OpenSSL's sha256 without the GIL, under its Python caller.
        let in_hash_loop: Vec<(&[String], u64)> =
            hashing.iter().filter(|(frames, _)| holds("hash_loop")(frames)).copied().collect();
        assert_most(&in_hash_loop, 0.8, "samples in hash_loop are in sha256 under it", |frames| {
            let caller = function_at(frames, "hash_loop", "threads.py").unwrap();
            innermost_python(frames).is_some_and(|frame| frame.name == "hash_loop")
                && frames[caller + 1..].iter().any(|frame| frame.to_ascii_lowercase().contains("sha256"))
        });
    });
}

#[test]
fn deep_python_stacks_are_whole() {
    if !e2e_enabled() {
        return;
    }
    // recurse(300) down to recurse(0), which calls spin.
    const RECURSE_FRAMES: usize = 301;
    on_every_interpreter("depth", |python, dir| {
        let run = record_script(dir, python, "depth.py", "2", &[]);
        let main = run.thread("main");
        assert_rooted_at_module(&main, "depth.py", Native::MaybeCut);
        let spinning: Vec<(&[String], u64)> = main
            .iter()
            .filter(|(frames, _)| innermost_python(frames).is_some_and(|frame| frame.name == "spin"))
            .copied()
            .collect();
        assert_most(&main, 0.9, "samples of the main thread are in spin", |frames| {
            innermost_python(frames).is_some_and(|frame| frame.name == "spin")
        });
        assert_most(&spinning, 0.95, "samples in spin hold <module>, 301 recurse frames, spin", |frames| {
            let names: Vec<&str> = python_frames(frames).iter().map(|frame| frame.name).collect();
            names.len() == RECURSE_FRAMES + 2
                && names[0] == "<module>"
                && names[1..=RECURSE_FRAMES].iter().all(|name| *name == "recurse")
        });
    });
}

#[test]
fn hostile_python_names_keep_folded_stacks_whole() {
    if !e2e_enabled() {
        return;
    }
    // The longest a frame's name may be once cut (the script's is a megabyte long).
    const LONGEST_NAME: usize = 1100;
    let source = script("hostile.py");
    on_every_interpreter("hostile", |python, dir| {
        let run = record_script(dir, python, "hostile.py", "3", &[]);
        let bytes = std::fs::read(dir.join("out.folded")).unwrap();
        assert!(!bytes.contains(&0x1b), "a raw escape character in the folded stacks");
        let text = String::from_utf8(bytes).expect("the folded stacks are UTF-8");
        let root = format!("{}-", python.comm());
        for line in text.lines() {
            let start: String = line.chars().take(200).collect();
            assert!(line.starts_with(&root), "a line that is not a whole stack: {start:?}");
        }
        let main = run.thread("main");
        assert_rooted_at_module(&main, "hostile.py", Native::Complete(python.native_entry()));
        // Each renamed function's frames, found by the lines of its code.
        let names_in = |function: &str| {
            let lines = function_lines(&source, function);
            let mut names = std::collections::BTreeMap::<String, u64>::new();
            for (frames, n) in &main {
                for frame in python_frames(frames) {
                    if frame.in_script("hostile.py") && lines.contains(&frame.line) {
                        *names.entry(frame.name.to_owned()).or_default() += n;
                    }
                }
            }
            names
        };
        let total = weight(&main, |_| true);
        let sampled_as = |function: &str, check: &dyn Fn(&str) -> bool| {
            let names = names_in(function);
            let short: Vec<String> = names.keys().map(|name| name.chars().take(80).collect()).collect();
            assert_eq!(names.len(), 1, "{function}: frames named {short:?}");
            let (name, samples) = names.into_iter().next().unwrap();
            assert!(check(&name), "{function}: named {:?}", short[0]);
            assert!(samples * 10 >= total, "{function}: {samples} of {total} samples");
        };
        sampled_as("escape", &|name| name == "a:b\\u{a}\\u{1b}[2J");
        sampled_as("wide", &|name| name == "\u{65e5}\u{672c}\u{8a9e}");
        sampled_as("long", &|name| name.starts_with(&"x".repeat(200)) && name.len() <= LONGEST_NAME);
    });
}

#[test]
fn python_started_after_a_system_wide_recording_began_is_named() {
    if !e2e_enabled() {
        return;
    }
    on_every_interpreter("late-start", |python, dir| {
        let out = dir.join("out.folded");
        // Stopped once the script has ended, so that its whole run is recorded.
        let recording =
            start_profiler(&["record", "-a", "--per-pid", "-F", "199", "-o", out.to_str().unwrap()]);
        std::thread::sleep(Duration::from_millis(300));
        let mut workload = spawn(&python.path, &[script("shares.py").to_str().unwrap(), "2"]);
        let pid = workload.pid();
        assert!(workload.0.wait().unwrap().success());
        recording.signal(libc::SIGINT);
        let (status, _) = recording.wait();
        assert!(status.success());
        let folded = Folded::read(&out);
        let stacks = thread_stacks(&folded, pid);
        assert_rooted_at_module(&stacks, "shares.py", Native::Complete(python.native_entry()));
        for name in ["alpha", "beta", &python.frame_name("Burner.gamma")] {
            assert!(weight(&stacks, |frames| has_function(frames, name, "shares.py")) > 0, "no {name}");
        }
    });
}

/// libpython is named from its ELF symbols while Python frames are read through it (its DWARF,
/// ~14 MiB of a pyenv build, gave only inlined helpers of the evaluation loop), and from its
/// DWARF with `--debug-info all`.
#[test]
fn the_interpreter_is_named_from_its_symbols_unless_all_debug_info_is_asked_for() {
    if !e2e_enabled() {
        return;
    }
    let python = interpreters()
        .iter()
        .find(|python| python.label.starts_with("pyenv-3.12"))
        .expect("pyenv's CPython 3.12, built with DWARF, is installed");
    let inlined = |extra: &[&str]| {
        let _shared = beside_others();
        let dir = scratch_dir(&format!("debug-info-{}", extra.len()));
        let run = record_script(&dir, python, "shares.py", "2", extra);
        let in_script = weight(&run.thread("main"), |frames| runs_script(frames, "shares.py"));
        assert!(in_script > 500, "{extra:?}: {in_script} samples in the script");
        // The `_random` extension module (the script's `randint`) has DWARF of its own, which
        // names its inlined functions either way: only the interpreter's are counted.
        let interpreters_inlined = |frames: &[String]| {
            let extension =
                frames.iter().position(|frame| frame.starts_with("_random_")).unwrap_or(frames.len());
            frames[..extension].iter().any(|frame| frame.ends_with("_[i]"))
        };
        weight(&run.thread("main"), interpreters_inlined)
    };
    assert_eq!(inlined(&[]), 0, "inlined frames with the interpreter's symbols only");
    assert!(inlined(&["--debug-info", "all"]) > 0, "no inlined frame from the interpreter's DWARF");
}

/// A script recorded from its exec has Python frames from its first functions on (start-up's
/// frozen imports included): at most 0.5% of its samples end in the eval loop with no Python
/// frame above it, those the kernel took before it was told of the interpreter. (Debian's 3.14
/// is stripped: its eval loop has no name to count, and passes for want of it.) Run with no
/// other recording beside it, as that delay is what is measured (it reached 14 ms of a 2 s run
/// with one, against at most 7 alone), and with the page cache dropped first: a machine that
/// has just started reads the interpreter's files from disk, as the profiler does (that is how
/// a fresh machine's first run failed, where a warm one passed).
#[test]
fn python_frames_are_read_from_the_start() {
    if !e2e_enabled() {
        return;
    }
    on_every_interpreter_alone("from-the-start", |python, dir| {
        let script = script("shares.py");
        drop_page_cache();
        let folded = record_command(dir, &[], &python.path, &[script.to_str().unwrap(), "2"]);
        let stacks: Vec<(&[String], u64)> =
            folded.stacks.iter().map(|(frames, n)| (frames.as_slice(), *n)).collect();
        assert_most(&stacks, 0.995, &format!("have a Python frame where {EVAL_LOOP} ran"), |frames| {
            !frames.iter().any(|frame| frame == EVAL_LOOP) || !python_frames(frames).is_empty()
        });
    });
}

/// Empties the page cache (clean pages only: written ones are synced first).
fn drop_page_cache() {
    assert!(std::process::Command::new("sync").status().unwrap().success());
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop the page cache (as root)");
}

#[test]
fn off_cpu_python_stacks_name_the_waiting_function() {
    if !e2e_enabled() {
        return;
    }
    let lines = function_lines(&script("offcpu.py"), "waiter");
    on_every_interpreter("off-cpu", |python, dir| {
        let run = record_script(dir, python, "offcpu.py", "2", &["--off-cpu"]);
        let main = run.thread("main");
        assert_rooted_at_module(&main, "offcpu.py", Native::Complete(python.native_entry()));
        let waiting = |frames: &[String]| has_function(frames, "waiter", "offcpu.py");
        let slept = weight(&main, waiting);
        assert!(slept >= 1_500_000, "{slept} µs asleep in waiter, which sleeps for 2 s");
        assert_most(&main, 0.8, "of the blocked time is in waiter", waiting);
        let in_waiter: Vec<(&[String], u64)> =
            main.iter().filter(|(frames, _)| waiting(frames)).copied().collect();
        assert_most(&in_waiter, 1.0 - SLACK, "of waiter's blocks end in the kernel, under it", |frames| {
            innermost_python(frames).is_some_and(|frame| frame.name == "waiter")
                && frames.last().is_some_and(|leaf| leaf.ends_with("_[k]"))
        });
        assert_lines(&main, "waiter", "offcpu.py", &lines);
    });
}

#[test]
fn python_in_its_own_mount_and_pid_namespaces() {
    if !e2e_enabled() {
        return;
    }
    on_every_interpreter("namespaces", |python, dir| {
        // In a mount namespace of its own, the interpreter's directory (pyenv's installation,
        // or /usr/bin) is bound under a tmpfs that only the target sees, and pyenv's versions
        // are hidden: its files are only where the target sees them. Its pids are its own too.
        // Debian unstable's finds its library next to its `bin/` like pyenv's, and its loader
        // where `cargo xtask setup` unpacked it: left in sight.
        let is_pyenv = python.label.starts_with("pyenv-");
        let is_unpacked = python.path.ends_with(DEBIAN_PYTHON);
        let source = if is_pyenv || is_unpacked {
            python.path.parent().unwrap().parent().unwrap()
        } else {
            python.path.parent().unwrap()
        };
        let hidden = if is_pyenv { source.parent().unwrap().to_str().unwrap() } else { "" };
        let binary = python.path.strip_prefix(source).unwrap();
        let inside = dir.join("container");
        std::fs::create_dir_all(&inside).unwrap();
        let command = concat!(
            r#"mount -t tmpfs none "$2" && mkdir "$2/py" && mount --bind "$1" "$2/py" && "#,
            r#"{ [ -z "$3" ] || mount -t tmpfs none "$3"; } && "#,
            r#"LD_LIBRARY_PATH="$2/py/lib" exec "$2/py/$4" "$5" 3"#
        );
        let out = dir.join("out.folded");
        let mut args = vec!["record", "-F", "199", "-o", out.to_str().unwrap(), "--"];
        args.extend([
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--propagation",
            "private",
            "sh",
            "-c",
            command,
        ]);
        args.extend(["sh", source.to_str().unwrap(), inside.to_str().unwrap(), hidden]);
        let shares = script("shares.py");
        args.extend([binary.to_str().unwrap(), shares.to_str().unwrap()]);
        let run = run_bounded(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{stderr}");
        assert!(!inside.join("py").exists(), "the interpreter's directory shows on the host");
        let folded = Folded::read(&out);
        let of_python: Vec<(&[String], u64)> = folded
            .stacks
            .iter()
            .filter(|(frames, _)| frames.iter().any(|frame| frame == python.native_entry()))
            .map(|(frames, n)| (&frames[..], *n))
            .collect();
        assert_rooted_at_module(&of_python, "shares.py", Native::Complete(python.native_entry()));
        for name in ["alpha", "beta", &python.frame_name("Burner.gamma")] {
            let named = weight(&of_python, |frames| has_function(frames, name, "shares.py"));
            assert!(named > 0, "no {name}: {stderr}");
        }
    });
}

/// Python 3.12+ with `-X perf` runs each Python function through a trampoline of JIT code that
/// keeps no frame pointer (`sub $8, %rsp; call *%rcx`): stacks continue through the trampolines
/// to the interpreter's `main`, with the Python frames merged as without `-X perf`.
#[test]
fn python_perf_trampolines_are_unwound_through() {
    if !e2e_enabled() {
        return;
    }
    let with_trampolines: Vec<&Interpreter> =
        interpreters().iter().filter(|python| python.minor >= 12).collect();
    assert!(!with_trampolines.is_empty(), "no CPython 3.12 or later installed: -X perf needs one");
    let script = script("shares.py");
    for python in with_trampolines {
        let _shared = beside_others();
        let dir = scratch_dir(&format!("python-perf-trampolines-{}", python.label));
        let folded = record_command(&dir, &[], &python.path, &["-X", "perf", script.to_str().unwrap(), "3"]);
        let stacks: Vec<(&[String], u64)> =
            folded.stacks.iter().map(|(frames, n)| (frames.as_slice(), *n)).collect();
        let in_script = |frames: &[String]| runs_script(frames, "shares.py");
        let trampolines = weight(&stacks, |frames| frames.iter().any(|frame| frame.starts_with("py::")));
        assert!(trampolines as f64 >= 0.5 * folded.total() as f64, "{}: trampolines in use", python.label);
        let scripted: Vec<(&[String], u64)> =
            stacks.iter().copied().filter(|(frames, _)| in_script(frames)).collect();
        assert_most(&scripted, 0.95, "reach the interpreter's main through the trampolines", |frames| {
            frames.iter().any(|frame| frame == "Py_BytesMain")
        });
    }
}
