//! End to end, as root: Ruby frames in `profiler record`, on Debian stable's Ruby 3.1 and Debian
//! unstable's 3.3 (which `cargo xtask setup` installs), each scenario run on both and failing with
//! the list of those it failed on. The scripts are in tests/workloads/ruby.
//!
//! A frame of Ruby code reads `NAME (PATH:LINE)`, NAME as Ruby's `rb_profile_frame_full_label`
//! gives it (`Outer::Worker#alpha`, `Outer::Worker.start`, `block in Outer::Worker#run`,
//! `<main>`) and PATH as Ruby was given it; a C method called from Ruby reads its name alone
//! (`Array#each`).

use std::ops::RangeInclusive;

use crate::common::{python::weight, ruby::*, *};

/// The C method of shares.rb, which calls the block that calls `Outer::Worker#beta`.
const EACH: &str = "Array#each";

/// What shares.rb's methods burn of its CPU time: the method, its frame's name, its share.
const SHARES: [(&str, &str, f64); 3] = [
    ("alpha", "Outer::Worker#alpha", 60.0),
    ("beta", "Outer::Worker#beta", 30.0),
    ("gamma", "Outer::Worker#gamma", 10.0),
];

/// Share of a thread's samples allowed to miss what each test requires of them: a sample may
/// catch the thread starting or ending, or Ruby between pushing a frame and entering it.
const SLACK: f64 = 0.05;

/// Whether a stack has a frame of Ruby code of the script called `file_name`.
fn runs_script(frames: &[String], file_name: &str) -> bool {
    ruby_frames(frames, &[]).iter().any(|frame| frame.in_script(file_name))
}

/// Whether a stack has a frame named `name` in the script called `file_name`.
fn has_method(frames: &[String], name: &str, file_name: &str) -> bool {
    ruby_frames(frames, &[]).iter().any(|frame| frame.name == name && frame.in_script(file_name))
}

/// The name of the innermost frame of Ruby code of a stack.
fn innermost_ruby(frames: &[String]) -> Option<&str> {
    frames.iter().rev().find_map(|frame| ruby_frame(frame)).map(|frame| frame.name)
}

/// Fails unless every frame named `name` in `file_name` is at a line of `lines`.
fn assert_lines(stacks: &[(&[String], u64)], name: &str, file_name: &str, lines: &RangeInclusive<u32>) {
    for (frames, _) in stacks {
        for frame in ruby_frames(frames, &[]) {
            if frame.name == name && frame.in_script(file_name) {
                let line = frame.line.unwrap();
                assert!(lines.contains(&line), "{name} at line {line}, outside {lines:?}");
            }
        }
    }
}

/// shares.rb attached to while it runs, then started by the profiler (its Ruby found from the
/// exec on): its methods' shares, lines and whole chains of callers.
#[test]
fn ruby_methods_get_their_shares_whole_from_main() {
    if !e2e_enabled() {
        return;
    }
    on_every_ruby("shares", |ruby, dir| {
        let (attached, started) = (dir.join("attached"), dir.join("started"));
        std::fs::create_dir_all(&attached).unwrap();
        std::fs::create_dir_all(&started).unwrap();
        let run = record_script(&attached, ruby, "shares.rb", "4", &[]);
        assert_shares_whole_from_main(&run.thread("main"), "attached to with -p");
        let run = record_started(&started, ruby, "shares.rb", "4", &[]);
        assert_shares_whole_from_main(&run.thread("main"), "started by the profiler");
    });
}

/// Fails unless the main thread of shares.rb (recorded as `how` says) shows its methods with
/// their shares of its samples, at their lines, under the whole chain of Ruby frames and C
/// methods that calls them, from `<main>`.
fn assert_shares_whole_from_main(main: &[(&[String], u64)], how: &str) {
    let source = script("shares.rb");
    assert_most(main, 1.0 - SLACK, &format!("samples ({how}) are in shares.rb"), |frames| {
        runs_script(frames, "shares.rb")
    });
    let of_script: Vec<(&[String], u64)> =
        main.iter().filter(|(frames, _)| runs_script(frames, "shares.rb")).copied().collect();
    let in_script = weight(&of_script, |_| true);
    assert_most(&of_script, 1.0 - SLACK, &format!("stacks ({how}) start at shares.rb's <main>"), |frames| {
        ruby_frames(frames, &[])
            .first()
            .is_some_and(|outer| outer.name == "<main>" && outer.in_script("shares.rb"))
    });
    let outer = ["<main>", "Outer::Worker.start", "Outer::Worker#run"];
    for (method, name, share) in SHARES {
        let samples = weight(&of_script, |frames| has_method(frames, name, "shares.rb"));
        let measured = 100.0 * samples as f64 / in_script as f64;
        eprintln!("{name} ({how}): {samples} samples, {measured:.1}%");
        assert!(
            (measured - share).abs() <= 5.0,
            "{name} ({how}): {measured:.1}% of the script's samples, expected {share}% ± 5"
        );
        assert_lines(&of_script, name, "shares.rb", &method_lines(&source, method));
        // beta is called from a block of `run`, which Array#each calls.
        let chain: Vec<&str> = match method {
            "beta" => [&outer[..], &[EACH, "block in Outer::Worker#run", name]].concat(),
            _ => [&outer[..], &[name]].concat(),
        };
        let in_method: Vec<(&[String], u64)> =
            of_script.iter().filter(|(frames, _)| innermost_ruby(frames) == Some(name)).copied().collect();
        assert_most(
            &in_method,
            1.0 - SLACK,
            &format!("samples in {name} ({how}) hold {chain:?}"),
            |frames| ruby_frames(frames, &[EACH]).iter().map(|frame| frame.name).eq(chain.iter().copied()),
        );
    }
    assert_lines(&of_script, "Outer::Worker.start", "shares.rb", &method_lines(&source, "self.start"));
    let run_lines = method_lines(&source, "run");
    assert_lines(&of_script, "Outer::Worker#run", "shares.rb", &run_lines);
    assert_lines(&of_script, "block in Outer::Worker#run", "shares.rb", &run_lines);
}

/// Each Ruby thread's frames are its own: read from the sampled thread, whether or not it holds
/// the GVL at the time, not from the thread that holds it.
#[test]
fn ruby_threads_are_each_read() {
    if !e2e_enabled() {
        return;
    }
    on_every_ruby("threads", |ruby, dir| {
        let run = record_script(dir, ruby, "threads.rb", "3", &[]);
        for (thread, own, other) in
            [("left", "Spinner#left", "Spinner#right"), ("right", "Spinner#right", "Spinner#left")]
        {
            let stacks = run.thread(thread);
            let holds = |name: &'static str| move |frames: &[String]| has_method(frames, name, "threads.rb");
            assert_most(
                &stacks,
                1.0 - SLACK,
                &format!("samples of the {thread} thread are in {own}"),
                holds(own),
            );
            assert_eq!(weight(&stacks, holds(other)), 0, "{other} in the {thread} thread");
        }
    });
}

/// 300 Ruby calls deep, on one native call of the VM, every Ruby frame is there, from `<main>`.
#[test]
fn ruby_stacks_300_deep_are_whole() {
    if !e2e_enabled() {
        return;
    }
    // recurse(300) down to recurse(0), which calls spin.
    const RECURSE_FRAMES: usize = 301;
    on_every_ruby("deep", |ruby, dir| {
        let run = record_script(dir, ruby, "deep.rb", "2", &[]);
        let main = run.thread("main");
        let spins = |frames: &[String]| innermost_ruby(frames) == Some("Deep#spin");
        assert_most(&main, 1.0 - SLACK, "samples of the main thread are in Deep#spin", spins);
        let spinning: Vec<(&[String], u64)> =
            main.iter().filter(|(frames, _)| spins(frames)).copied().collect();
        let whole = |frames: &[String]| {
            let names: Vec<&str> = ruby_frames(frames, &[]).iter().map(|frame| frame.name).collect();
            names.len() == RECURSE_FRAMES + 2
                && names[0] == "<main>"
                && names[1..=RECURSE_FRAMES].iter().all(|name| *name == "Deep#recurse")
        };
        assert_most(
            &spinning,
            1.0 - SLACK,
            "samples in Deep#spin hold <main>, 301 Deep#recurse, Deep#spin",
            whole,
        );
        assert_lines(&spinning, "Deep#spin", "deep.rb", &method_lines(&script("deep.rb"), "spin"));
    });
}

/// Debian's rdoc, which nobody here wrote, documenting its Ruby's own standard library, attached
/// to once it runs: its samples have Ruby frames, whole from the launcher's `<main>`, through
/// RubyGems' `load` of rdoc's executable, down to rdoc's methods, named by their classes.
#[test]
fn a_ruby_application_attached_to_while_it_runs_is_named_whole() {
    if !e2e_enabled() {
        return;
    }
    on_every_ruby("rdoc", |ruby, dir| {
        let (launcher, library) = ruby.rdoc();
        let mut rdoc = KillOnDrop(
            ruby.command()
                .arg(&launcher)
                .args(["--quiet", "--output"])
                .arg(dir.join("doc"))
                .arg(&library)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start rdoc"),
        );
        // Past its start-up: RubyGems and rdoc loaded, the library being parsed.
        std::thread::sleep(std::time::Duration::from_secs(2));
        let out = dir.join("out.folded");
        let pid = rdoc.pid().to_string();
        let run = run_bounded(&["record", "-F", "499", "-d", "3", "-o", out.to_str().unwrap(), "-p", &pid]);
        assert!(run.status.success(), "the profiler failed: {}", String::from_utf8_lossy(&run.stderr));
        assert!(rdoc.0.try_wait().unwrap().is_none(), "rdoc ended before the recording did");
        let folded = Folded::read(&out);
        let stacks: Vec<(&[String], u64)> =
            folded.stacks.iter().map(|(frames, n)| (&frames[1..], *n)).collect();
        let launcher = launcher.display().to_string();
        let in_launcher =
            |frame: &str| frame.starts_with("<main> (") && frame.contains(&format!("({launcher}:"));
        assert_most(
            &stacks,
            1.0 - SLACK,
            "samples of rdoc have Ruby frames whole from its <main>",
            |frames| {
                frames
                    .iter()
                    .find(|frame| frame.ends_with(')') && frame.contains(" ("))
                    .is_some_and(|f| in_launcher(f))
            },
        );
        assert_most(&stacks, 0.8, "samples of rdoc are in rdoc's own methods", |frames| {
            ruby_frames(frames, &[]).iter().any(|frame| {
                frame.name.starts_with("RDoc::") && frame.file.is_some_and(|file| file.contains("/rdoc/"))
            })
        });
        let methods: std::collections::BTreeSet<&str> = stacks
            .iter()
            .flat_map(|(frames, _)| ruby_frames(frames, &[]))
            .filter(|frame| frame.name.starts_with("RDoc::") && frame.line.is_some_and(|line| line > 0))
            .map(|frame| frame.name)
            .collect();
        assert!(methods.len() >= 20, "only {} of rdoc's methods named at a line: {methods:?}", methods.len());
    });
}

/// `--off-cpu`: each thread's blocked time is under the Ruby method it blocked in, through the
/// C method that blocked (`Kernel#sleep`, `Thread::Queue#pop`, Ruby code in 3.3) down to the
/// kernel.
#[test]
fn off_cpu_ruby_stacks_name_the_waiting_method() {
    if !e2e_enabled() {
        return;
    }
    on_every_ruby("off-cpu", |ruby, dir| {
        let run = record_script(dir, ruby, "blocked.rb", "2", &["--off-cpu"]);
        for (thread, method, blocker) in
            [("main", "Napper#nap", "Kernel#sleep"), ("waiter", "Waiter#wait", "Thread::Queue#pop")]
        {
            let stacks = run.thread(thread);
            let waiting = |frames: &[String]| has_method(frames, method, "blocked.rb");
            let blocked = weight(&stacks, waiting);
            assert!(blocked >= 1_500_000, "{blocked} µs of the {thread} thread blocked in {method}, for 2 s");
            assert_most(
                &stacks,
                0.8,
                &format!("of the {thread} thread's blocked time is in {method}"),
                waiting,
            );
            let in_method: Vec<(&[String], u64)> =
                stacks.iter().filter(|(frames, _)| waiting(frames)).copied().collect();
            assert_most(
                &in_method,
                1.0 - SLACK,
                &format!("of {method}'s blocks are whole from a <main>, through {blocker} to the kernel"),
                |frames| {
                    let outermost = ruby_frames(frames, &[]).first().map(|frame| frame.name);
                    frames
                        .iter()
                        .skip_while(|frame| ruby_frame(frame).is_none_or(|f| f.name != method))
                        .any(|frame| frame.split(" (").next() == Some(blocker))
                        && frames.last().is_some_and(|leaf| leaf.ends_with("_[k]"))
                        && outermost.is_some_and(|name| name.ends_with("<main>"))
                },
            );
        }
    });
}

/// Started after a system-wide recording began: found by its exec, shares and whole stacks as
/// when attached to.
#[test]
fn ruby_started_after_a_system_wide_recording_began_is_named() {
    if !e2e_enabled() {
        return;
    }
    on_every_ruby("late-start", |ruby, dir| {
        let out = dir.join("out.folded");
        // Stopped once the script has ended, so that its whole run is recorded.
        let recording =
            start_profiler(&["record", "-a", "--per-pid", "-F", "499", "-o", out.to_str().unwrap()]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut script = KillOnDrop(
            ruby.command()
                .arg(script("shares.rb"))
                .arg("3")
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("start shares.rb"),
        );
        let pid = script.pid();
        assert!(script.0.wait().unwrap().success());
        recording.signal(libc::SIGINT);
        let (status, _) = recording.wait();
        assert!(status.success());
        let folded = Folded::read(&out);
        assert_shares_whole_from_main(&thread_stacks(&folded, pid), "started after -a began");
    });
}

/// The garbage collector's time is a frame, `[Ruby GC]`, under the Ruby code that allocated, on
/// the thread that collects only.
#[test]
fn ruby_garbage_collection_is_a_frame_under_the_allocating_method() {
    if !e2e_enabled() {
        return;
    }
    const GC: &str = "[Ruby GC]";
    on_every_ruby("gc", |ruby, dir| {
        let run = record_script(dir, ruby, "allocates.rb", "3", &[]);
        let main = run.thread("main");
        let collecting = |frames: &[String]| frames.iter().any(|frame| frame == GC);
        let (all, in_gc) = (weight(&main, |_| true), weight(&main, collecting));
        eprintln!("{in_gc} of {all} samples of the allocating thread in {GC}");
        assert!(in_gc * 20 >= all, "only {in_gc} of {all} samples of the allocating thread in {GC}");
        let in_gc: Vec<(&[String], u64)> =
            main.iter().filter(|(frames, _)| collecting(frames)).copied().collect();
        assert_most(
            &in_gc,
            1.0 - SLACK,
            &format!("{GC} samples are under Churn#allocate, from <main>"),
            |frames| {
                let names: Vec<&str> = ruby_frames(frames, &[]).iter().map(|frame| frame.name).collect();
                names.first() == Some(&"<main>") && names.contains(&"Churn#allocate")
            },
        );
        let spinner = run.thread("spinner");
        assert_eq!(weight(&spinner, collecting), 0, "{GC} in the thread that allocates nothing");
        assert!(weight(&spinner, |frames| has_method(frames, "Sum#spin", "allocates.rb")) > 0, "no Sum#spin");
    });
}

/// Two threads running Ruby code take turns with the GVL: off the CPU, each waits for it, under
/// its own method, and says so with a frame `[waiting for the GVL]` on 3.1. 3.3 hands the GVL to
/// the next thread before it wakes it, so that a wait, seen where it ends, is not one for the GVL:
/// its waits are only under their method. The main thread, joining them, never waits for it.
#[test]
fn ruby_threads_waiting_for_the_gvl_say_so() {
    if !e2e_enabled() {
        return;
    }
    const WAITING: &str = "[waiting for the GVL]";
    on_every_ruby("gvl", |ruby, dir| {
        let run = record_script(dir, ruby, "threads.rb", "2", &["--off-cpu"]);
        let waiting = |frames: &[String]| frames.iter().any(|frame| frame == WAITING);
        for (thread, own) in [("left", "Spinner#left"), ("right", "Spinner#right")] {
            let stacks = run.thread(thread);
            assert_most(&stacks, 0.8, &format!("of the {thread} thread's waits are in {own}"), |frames| {
                has_method(frames, own, "threads.rb")
            });
            if ruby.minor == 1 {
                assert_most(
                    &stacks,
                    0.8,
                    &format!("of the {thread} thread's waits are for the GVL"),
                    |frames| waiting(frames) && innermost_ruby(frames) == Some(own),
                );
            }
        }
        let main = run.thread("main");
        assert!(weight(&main, |_| true) > 0, "no waits of the main thread");
        assert_eq!(weight(&main, waiting), 0, "the main thread, joining, waits for the GVL");
    });
}

/// YJIT's code (3.1 with `--yjit`; Debian's 3.3 is built without it) has no CFI and no perf map:
/// where the native unwind stops in it, it is said to be unread, and the Ruby frames are whole
/// all the same, from the VM's own records.
#[test]
fn yjit_code_is_said_to_be_unread_under_whole_ruby_frames() {
    if !e2e_enabled() {
        return;
    }
    const YJIT: &str = "[YJIT code: not read]";
    let ruby = rubies().iter().find(|ruby| ruby.minor == 1).expect("Debian's Ruby 3.1, built with YJIT");
    let dir = scratch_dir("ruby-yjit");
    let _shared = beside_others();
    let mut script = KillOnDrop(
        ruby.command()
            .args(["--yjit", "--yjit-call-threshold=1"])
            .arg(script("shares.rb"))
            .arg("60")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start shares.rb under YJIT"),
    );
    std::thread::sleep(std::time::Duration::from_secs(1));
    let out = dir.join("out.folded");
    let pid = script.pid().to_string();
    let run = run_bounded(&["record", "-F", "499", "-d", "3", "-o", out.to_str().unwrap(), "-p", &pid]);
    assert!(run.status.success(), "the profiler failed: {}", String::from_utf8_lossy(&run.stderr));
    assert!(script.0.try_wait().unwrap().is_none(), "shares.rb ended before the recording did");
    let folded = Folded::read(&out);
    let stacks: Vec<(&[String], u64)> = folded.stacks.iter().map(|(frames, n)| (&frames[1..], *n)).collect();
    assert_most(&stacks, 1.0 - SLACK, "samples under YJIT hold Ruby frames whole from <main>", |frames| {
        ruby_frames(frames, &[]).first().is_some_and(|outer| outer.name == "<main>")
    });
    let in_jit = |frames: &[String]| frames.iter().any(|frame| frame.starts_with(YJIT));
    assert_most(&stacks, 0.5, &format!("samples under YJIT are in {YJIT}"), in_jit);
    assert_eq!(
        weight(&stacks, |frames| {
            !ruby_frames(frames, &[]).is_empty() && frames.iter().any(|frame| frame == "[unknown]")
        }),
        0,
        "code in anonymous memory left unnamed under Ruby frames"
    );
}
