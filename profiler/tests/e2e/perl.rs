//! End to end, as root: Perl frames in `profiler record`, on Debian stable's Perl 5.36 and Debian
//! unstable's 5.42 (which `cargo xtask setup` installs), each scenario run on both and failing
//! with the list of those it failed on. The scripts are in tests/workloads/perl.
//!
//! A frame of Perl code reads `NAME (PATH:LINE)`, NAME as Perl's `caller` gives it: a sub's fully
//! qualified name (`Outer::Worker::alpha`, `main::nap`, `Outer::Worker::__ANON__` for an
//! anonymous sub), `(eval)`, `require Foo/Bar.pm`, or `<main>` for the main program's top-level
//! code; PATH as Perl was given it (`(eval N)` for a string `eval`'s code) and LINE the
//! statement's. The blocks of `sort` and `map` are no frames. Native frames read their names
//! alone (`Perl_sortsv_flags`, the C library's `select`).

use std::ops::RangeInclusive;

use crate::common::{perl::*, python::weight, *};

/// The main program's frame.
const MAIN: &str = "<main>";

/// shares.pl's subs that call the three below: run calls step from a `map` block.
const RUN: &str = "Outer::Worker::run";
const STEP: &str = "Outer::Worker::step";

/// The C function that runs a `sort` block's loop of Perl code (exported by 5.36 and 5.42, unlike
/// 5.42's `pp_sort` that calls it), between the frame of the sub that sorts and those the block
/// calls.
const SORTSV: &str = "Perl_sortsv_flags";

/// What shares.pl's subs burn of its CPU time: the sub, its frame's name, its share, and the text
/// of the statement of step that calls it (beta from a `sort` block's comparator).
const SHARES: [(&str, &str, f64, &str); 3] = [
    ("alpha", "Outer::Worker::alpha", 60.0, "alpha(6 * $unit)"),
    ("beta", "Outer::Worker::beta", 30.0, "sort { beta("),
    ("gamma", "Outer::Worker::gamma", 10.0, "gamma($unit)"),
];

/// Share of a thread's samples allowed to miss what each test requires of them: a sample may
/// catch the process starting or ending, or Perl between pushing a frame and entering it.
const SLACK: f64 = 0.05;

/// Whether a stack has a frame of Perl code of the script called `file_name`.
fn runs_script(frames: &[String], file_name: &str) -> bool {
    perl_frames(frames).iter().any(|frame| frame.in_script(file_name))
}

/// Whether a stack has a frame named `name` in the script called `file_name`.
fn has_sub(frames: &[String], name: &str, file_name: &str) -> bool {
    perl_frames(frames).iter().any(|frame| frame.name == name && frame.in_script(file_name))
}

/// The name of the innermost frame of Perl code of a stack.
fn innermost_perl(frames: &[String]) -> Option<&str> {
    frames.iter().rev().find_map(|frame| perl_frame(frame)).map(|frame| frame.name)
}

/// Whether the native frame `native` is between the Perl frames named `outer` and `inner`.
fn native_between(frames: &[String], outer: &str, native: &str, inner: &str) -> bool {
    let at = |name: &str| frames.iter().position(|frame| perl_frame(frame).is_some_and(|f| f.name == name));
    match (at(outer), at(inner)) {
        (Some(outer), Some(inner)) => frames[outer..inner].iter().any(|frame| frame == native),
        _ => false,
    }
}

/// Whether every frame named `name` in `file_name` of a stack is at a line of `lines` or, if
/// `entering`, is the innermost Perl frame at its caller's line: a sub caught as it is entered,
/// before its first statement, when Perl's current statement is still its caller's (the sub's
/// first `nextstate` moves it).
fn at_lines(
    frames: &[String],
    name: &str,
    file_name: &str,
    lines: &RangeInclusive<u32>,
    entering: bool,
) -> bool {
    let perl = perl_frames(frames);
    perl.iter().enumerate().all(|(at, frame)| {
        let entered = entering && at > 0 && at + 1 == perl.len() && perl[at - 1].line == frame.line;
        frame.name != name || !frame.in_script(file_name) || lines.contains(&frame.line) || entered
    })
}

/// Fails unless the frames named `name` in `file_name` are at lines of `lines`: all of them but,
/// in a few samples, that of a sub caught as it is entered (see [`at_lines`]).
fn assert_lines(stacks: &[(&[String], u64)], name: &str, file_name: &str, lines: &RangeInclusive<u32>) {
    for (frames, _) in stacks {
        assert!(at_lines(frames, name, file_name, lines, true), "{name} outside {lines:?} in {frames:?}");
    }
    assert_most(stacks, 1.0 - SLACK, &format!("samples have {name} at lines {lines:?}"), |frames| {
        at_lines(frames, name, file_name, lines, false)
    });
}

/// Frames as the profiler writes them are read as Perl frames and native frames (no root
/// needed).
#[test]
fn perl_frames_are_read_from_folded_stacks() {
    let frames: Vec<String> = [
        "_start",
        "main",
        "perl_run",
        "<main> (/work/tests/workloads/perl/shares.pl:68)",
        "Outer::Worker::run (/work/tests/workloads/perl/shares.pl:24)",
        "Outer::Worker::step (/work/tests/workloads/perl/shares.pl:33)",
        "Perl_pp_sort",
        "Perl_sortsv_flags",
        "perl+0x1ca6e9",
        "Outer::Worker::beta (/work/tests/workloads/perl/shares.pl:50)",
        "Perl_pp_padsv",
    ]
    .map(str::to_owned)
    .into();
    let names: Vec<&str> = perl_frames(&frames).iter().map(|frame| frame.name).collect();
    assert_eq!(names, [MAIN, RUN, STEP, "Outer::Worker::beta"]);
    let beta = perl_frame(&frames[9]).unwrap();
    assert_eq!((beta.file, beta.line), ("/work/tests/workloads/perl/shares.pl", 50));
    assert!(beta.in_script("shares.pl") && !beta.in_script("deep.pl"));
    assert_eq!(innermost_perl(&frames), Some("Outer::Worker::beta"));
    assert!(native_between(&frames, STEP, SORTSV, "Outer::Worker::beta"));
    assert!(!native_between(&frames, MAIN, SORTSV, STEP));
    // beta caught as it is entered reads its caller's line, which passes only as that; a frame
    // at any other line outside its sub never does.
    let source = script("shares.pl");
    let (beta_lines, step_lines) = (sub_lines(&source, "beta"), sub_lines(&source, "step"));
    let mut entering = frames.clone();
    entering[9] = "Outer::Worker::beta (/work/tests/workloads/perl/shares.pl:33)".into();
    assert!(at_lines(&frames, "Outer::Worker::beta", "shares.pl", &beta_lines, false));
    assert!(at_lines(&entering, "Outer::Worker::beta", "shares.pl", &beta_lines, true));
    assert!(!at_lines(&entering, "Outer::Worker::beta", "shares.pl", &beta_lines, false));
    let mut outside = frames.clone();
    outside[5] = "Outer::Worker::step (/work/tests/workloads/perl/shares.pl:60)".into();
    assert!(!at_lines(&outside, STEP, "shares.pl", &step_lines, true));
    let eval = perl_frame("(eval) ((eval 3):1)").unwrap();
    assert_eq!((eval.name, eval.file, eval.line), ("(eval)", "(eval 3)", 1));
    let require = perl_frame("require Foo/Bar.pm (/work/lib/Foo/Bar.pm:3)").unwrap();
    assert_eq!((require.name, require.file), ("require Foo/Bar.pm", "/work/lib/Foo/Bar.pm"));
    let anonymous = perl_frame("Outer::Worker::__ANON__ (lib/Outer/Worker.pm:12)").unwrap();
    assert_eq!((anonymous.name, anonymous.line), ("Outer::Worker::__ANON__", 12));
    assert_eq!(perl_frame("Perl_sortsv_flags"), None);
    assert_eq!(perl_frame("main (/src/perlmain.c:12)"), None);
    // A script without a suffix, by the names only Perl's frames have.
    let script_main = perl_frame("<main> (/usr/bin/json_pp:104)").unwrap();
    assert_eq!((script_main.name, script_main.file, script_main.line), (MAIN, "/usr/bin/json_pp", 104));
    assert!(perl_frame("main::__ANON__ (/usr/bin/json_pp:59)").is_some());
    for (sub, _, _, called_at) in SHARES {
        let lines = sub_lines(&source, sub);
        assert!(lines.end() - lines.start() >= 6, "{sub} at {lines:?}");
        assert!(step_lines.contains(&line_of(&source, called_at)), "{called_at}");
    }
    assert!(sub_lines(&source, "run").contains(&line_of(&source, "map { step(")));
    let deep = script("deep.pl");
    assert!(sub_lines(&deep, "spin").contains(&line_of(&deep, "$i * $i % 7")));
    let sleeps = script("sleeps.pl");
    assert!(sub_lines(&sleeps, "nap").contains(&line_of(&sleeps, "select(")));
}

/// shares.pl attached to while it runs, then started by the profiler (its Perl found from the
/// exec on): its subs' shares, lines and whole chains of callers.
#[test]
fn perl_subs_get_their_shares_whole_from_main() {
    if !e2e_enabled() {
        return;
    }
    on_every_perl("shares", |perl, dir| {
        let (attached, started) = (dir.join("attached"), dir.join("started"));
        std::fs::create_dir_all(&attached).unwrap();
        std::fs::create_dir_all(&started).unwrap();
        let run = record_script(&attached, perl, "shares.pl", "4", &[]);
        assert_shares_whole_from_main(&run.thread("main"), "attached to with -p");
        let run = record_started(&started, perl, "shares.pl", "4", &[]);
        assert_shares_whole_from_main(&run.thread("main"), "started by the profiler");
    });
}

/// Fails unless the main thread of shares.pl (recorded as `how` says) shows its subs with their
/// shares of its samples, at their lines, under the whole chain of Perl frames that calls them,
/// from `<main>`: each caller at the statement that calls (run at its `map` block, step at its
/// `sort` block for beta), and beta over the C function that sorts.
fn assert_shares_whole_from_main(main: &[(&[String], u64)], how: &str) {
    let source = script("shares.pl");
    assert_most(main, 1.0 - SLACK, &format!("samples ({how}) are in shares.pl"), |frames| {
        runs_script(frames, "shares.pl")
    });
    let of_script: Vec<(&[String], u64)> =
        main.iter().filter(|(frames, _)| runs_script(frames, "shares.pl")).copied().collect();
    let in_script = weight(&of_script, |_| true);
    assert_most(&of_script, 1.0 - SLACK, &format!("stacks ({how}) start at shares.pl's {MAIN}"), |frames| {
        perl_frames(frames).first().is_some_and(|outer| outer.name == MAIN && outer.in_script("shares.pl"))
    });
    for (sub, name, share, called_at) in SHARES {
        let samples = weight(&of_script, |frames| has_sub(frames, name, "shares.pl"));
        let measured = 100.0 * samples as f64 / in_script as f64;
        eprintln!("{name} ({how}): {samples} samples, {measured:.1}%");
        assert!(
            (measured - share).abs() <= 5.0,
            "{name} ({how}): {measured:.1}% of the script's samples, expected {share}% ± 5"
        );
        assert_lines(&of_script, name, "shares.pl", &sub_lines(&source, sub));
        let callers = [
            (MAIN, line_of(&source, "Outer::Worker::run($ARGV")),
            (RUN, line_of(&source, "map { step(")),
            (STEP, line_of(&source, called_at)),
        ];
        let in_sub: Vec<(&[String], u64)> =
            of_script.iter().filter(|(frames, _)| innermost_perl(frames) == Some(name)).copied().collect();
        assert_most(
            &in_sub,
            1.0 - SLACK,
            &format!("samples in {name} ({how}) hold {callers:?}, then {name}"),
            |frames| {
                let perl = perl_frames(frames);
                perl.len() == callers.len() + 1
                    && perl.iter().map(|frame| (frame.name, frame.line)).take(callers.len()).eq(callers)
            },
        );
        if sub == "beta" {
            assert_most(
                &in_sub,
                1.0 - SLACK,
                &format!("samples in {name} ({how}) have {SORTSV} between {STEP} and {name}"),
                |frames| native_between(frames, STEP, SORTSV, name),
            );
        }
    }
    assert_lines(&of_script, RUN, "shares.pl", &sub_lines(&source, "run"));
    assert_lines(&of_script, STEP, "shares.pl", &sub_lines(&source, "step"));
}

/// ithreads where C code runs Perl (a `sort` block, `List::Util::first`'s block) and where an
/// `eval {}` in a sort block runs the rest of it in a loop of ops nothing marks: each thread's
/// samples in `burn` are whole from the `(eval)` of its `threads->create`, with nothing of the
/// op loop left inner to them.
#[test]
fn perl_threads_are_whole_through_c_code_that_runs_perl() {
    if !e2e_enabled() {
        return;
    }
    const BURN: &str = "Outer::Worker::burn";
    on_every_perl("threads", |perl, dir| {
        let run = record_script(dir, perl, "threads.pl", "3", &[]);
        let source = script("threads.pl");
        let created = line_of(&source, "threads->create(");
        let chains: [(&str, &[&str]); 3] = [
            ("sorter", &["Outer::Worker::sorter", "Outer::Worker::cmp_burn", BURN]),
            (
                "finder",
                &["Outer::Worker::finder", "Outer::Worker::__ANON__", "Outer::Worker::find_burn", BURN],
            ),
            ("catcher", &["Outer::Worker::catcher", "Outer::Worker::catch_burn", BURN]),
        ];
        for (thread, chain) in chains {
            let stacks = run.thread(thread);
            let burning: Vec<(&[String], u64)> =
                stacks.iter().filter(|(frames, _)| innermost_perl(frames) == Some(BURN)).copied().collect();
            assert_most(&stacks, 0.5, &format!("{thread}'s samples are in {BURN}"), |frames| {
                innermost_perl(frames) == Some(BURN)
            });
            assert_most(
                &burning,
                1.0 - SLACK,
                &format!("{thread}'s samples in {BURN} are whole: {chain:?}"),
                |frames| {
                    let perl = perl_frames(frames);
                    let entry = perl.first().is_some_and(|frame| {
                        (frame.name, frame.line) == ("(eval)", created) && frame.in_script("threads.pl")
                    });
                    entry && perl[1..].iter().map(|frame| frame.name).eq(chain.iter().copied())
                },
            );
            assert_most(
                &burning,
                1.0 - SLACK,
                &format!("{thread}'s samples have no op loop inner to {BURN}"),
                |frames| {
                    let innermost = frames.iter().rposition(|frame| perl_frame(frame).is_some()).unwrap_or(0);
                    !frames[innermost..].iter().any(|frame| frame == "Perl_runops_standard")
                },
            );
        }
    });
}

/// Debian's `json_pp`, which nobody here wrote, reformatting 8 MB of JSON with its Perl's own
/// JSON::PP, attached to once it runs: its samples have Perl frames whole from the script's
/// `<main>`, down to JSON::PP's subs, named by their package at lines of JSON/PP.pm.
#[test]
fn a_perl_program_attached_to_while_it_runs_is_named_whole() {
    if !e2e_enabled() {
        return;
    }
    on_every_perl("json_pp", |perl, dir| {
        let input = dir.join("input.json");
        std::fs::write(&input, json_document(60_000)).unwrap();
        let mut json_pp = KillOnDrop(
            perl.command()
                .arg(perl.json_pp())
                .stdin(std::fs::File::open(&input).unwrap())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start json_pp"),
        );
        // Past its start-up: JSON::PP loaded, the document being decoded.
        std::thread::sleep(std::time::Duration::from_secs(1));
        let out = dir.join("out.folded");
        let pid = json_pp.pid().to_string();
        let run = run_bounded(&["record", "-F", "499", "-d", "3", "-o", out.to_str().unwrap(), "-p", &pid]);
        assert!(run.status.success(), "the profiler failed: {}", String::from_utf8_lossy(&run.stderr));
        assert!(json_pp.0.try_wait().unwrap().is_none(), "json_pp ended before the recording did");
        let folded = Folded::read(&out);
        let stacks: Vec<(&[String], u64)> =
            folded.stacks.iter().map(|(frames, n)| (&frames[1..], *n)).collect();
        let script = perl.json_pp().display().to_string();
        assert_most(
            &stacks,
            1.0 - SLACK,
            "samples of json_pp have Perl frames whole from its <main>",
            |frames| {
                perl_frames(frames).first().is_some_and(|outer| outer.name == MAIN && outer.file == script)
            },
        );
        let in_json_pp =
            |frame: &PerlFrame| frame.name.starts_with("JSON::PP::") && frame.file.ends_with("/JSON/PP.pm");
        assert_most(&stacks, 0.8, "samples of json_pp are in JSON::PP's subs", |frames| {
            perl_frames(frames).iter().any(in_json_pp)
        });
        let subs: std::collections::BTreeSet<&str> = stacks
            .iter()
            .flat_map(|(frames, _)| perl_frames(frames))
            .filter(|frame| in_json_pp(frame) && frame.line > 0)
            .map(|frame| frame.name)
            .collect();
        for sub in
            ["JSON::PP::decode", "JSON::PP::value", "JSON::PP::array", "JSON::PP::object", "JSON::PP::string"]
        {
            assert!(subs.contains(sub), "{sub} is not named at a line of JSON/PP.pm: {subs:?}");
        }
    });
}

/// A JSON array of `items` objects, each with a string, numbers, an array and an object.
fn json_document(items: usize) -> String {
    let objects: Vec<String> = (0..items)
        .map(|i| {
            format!(
                r#"{{"id":{i},"name":"item{i}","tags":["a","b","c"],"price":{}.{},"nested":{{"x":{i},"y":[1,2,3]}}}}"#,
                i % 97,
                i % 13
            )
        })
        .collect();
    format!("[{}]", objects.join(","))
}

/// 300 Perl calls deep (which Perl's op loop makes without a native call each), every Perl frame
/// is there, from `<main>`.
#[test]
fn perl_stacks_300_deep_are_whole() {
    if !e2e_enabled() {
        return;
    }
    // recurse(300) down to recurse(0), which calls spin.
    const RECURSE_FRAMES: usize = 301;
    on_every_perl("deep", |perl, dir| {
        let run = record_script(dir, perl, "deep.pl", "2", &[]);
        let main = run.thread("main");
        let spins = |frames: &[String]| innermost_perl(frames) == Some("Deep::spin");
        assert_most(&main, 1.0 - SLACK, "samples of the main thread are in Deep::spin", spins);
        let spinning: Vec<(&[String], u64)> =
            main.iter().filter(|(frames, _)| spins(frames)).copied().collect();
        let whole = |frames: &[String]| {
            let names: Vec<&str> = perl_frames(frames).iter().map(|frame| frame.name).collect();
            names.len() == RECURSE_FRAMES + 2
                && names[0] == MAIN
                && names[1..=RECURSE_FRAMES].iter().all(|name| *name == "Deep::recurse")
        };
        assert_most(
            &spinning,
            1.0 - SLACK,
            "samples in Deep::spin hold <main>, 301 Deep::recurse, Deep::spin",
            whole,
        );
        let source = script("deep.pl");
        assert_lines(&spinning, "Deep::spin", "deep.pl", &sub_lines(&source, "spin"));
        assert_lines(&spinning, "Deep::recurse", "deep.pl", &sub_lines(&source, "recurse"));
    });
}

/// `--off-cpu`: the blocked time of sleeps.pl is under the sub it blocked in, `main::nap`, from
/// `<main>`, through the C library's `select` down to the kernel.
#[test]
fn off_cpu_perl_stacks_name_the_waiting_sub() {
    if !e2e_enabled() {
        return;
    }
    const NAP: &str = "main::nap";
    on_every_perl("off-cpu", |perl, dir| {
        let run = record_script(dir, perl, "sleeps.pl", "2", &["--off-cpu"]);
        let stacks = run.thread("main");
        let waiting = |frames: &[String]| has_sub(frames, NAP, "sleeps.pl");
        let blocked = weight(&stacks, waiting);
        assert!(blocked >= 1_500_000, "{blocked} µs of the main thread blocked in {NAP}, for 2 s");
        assert_most(&stacks, 0.8, &format!("of the main thread's blocked time is in {NAP}"), waiting);
        let in_nap: Vec<(&[String], u64)> =
            stacks.iter().filter(|(frames, _)| waiting(frames)).copied().collect();
        assert_most(
            &in_nap,
            1.0 - SLACK,
            &format!("of {NAP}'s blocks are whole from {MAIN}, through select to the kernel"),
            |frames| {
                let names: Vec<&str> = perl_frames(frames).iter().map(|frame| frame.name).collect();
                // The C library's, by whichever of its names (`select`, `__select`, and
                // `__GI___select` in bookworm's debug info); not 5.36's `Perl_pp_sselect`.
                let selects = |frame: &String| {
                    frame
                        .split(" (")
                        .next()
                        .is_some_and(|name| name.ends_with("select") && !name.starts_with("Perl_"))
                };
                names == [MAIN, NAP]
                    && frames
                        .iter()
                        .skip_while(|frame| perl_frame(frame).is_none_or(|f| f.name != NAP))
                        .any(selects)
                    && frames.last().is_some_and(|leaf| leaf.ends_with("_[k]"))
            },
        );
        assert_lines(&in_nap, NAP, "sleeps.pl", &sub_lines(&script("sleeps.pl"), "nap"));
    });
}
