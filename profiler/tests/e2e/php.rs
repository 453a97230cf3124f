//! End to end, as root: PHP frames in `profiler record`, on Debian stable's PHP 8.2 CLI and Debian
//! unstable's 8.4 CLI (which `cargo xtask setup` installs), each scenario run on both and failing
//! with the list of those it failed on. The scripts are in tests/workloads/php.
//!
//! A frame of PHP code reads `NAME (PATH:LINE)`, NAME `Class::method` (`Outer\Worker::alpha`,
//! static or not), a function's name (`alpha`, `Outer\alpha`), a closure's name as PHP gives it,
//! qualified by its class (`Outer\Worker::Outer\{closure}` in 8.2,
//! `Outer\Worker::{closure:Outer\Worker::run():24}` in 8.4), or `{main}` for a script's top-level
//! code, and PATH as PHP was given it; an internal (C) function called from PHP reads its name
//! alone (`array_map`, `usleep`).

use std::{ops::RangeInclusive, os::unix::process::CommandExt as _};

use crate::common::{php::*, python::weight, *};

/// The internal function of shares.php, which calls the closure that calls
/// `Outer\Worker::beta`.
const ARRAY_MAP: &str = "array_map";

/// shares.php's class.
const WORKER: &str = r"Outer\Worker";

/// What shares.php's methods burn of its CPU time: the method, its frame's name, its share.
const SHARES: [(&str, &str, f64); 3] = [
    ("alpha", r"Outer\Worker::alpha", 60.0),
    ("beta", r"Outer\Worker::beta", 30.0),
    ("gamma", r"Outer\Worker::gamma", 10.0),
];

/// Share of a thread's samples allowed to miss what each test requires of them: a sample may
/// catch the process starting or ending, or PHP between pushing a frame and entering it.
const SLACK: f64 = 0.05;

/// Whether a stack has a frame of PHP code of the script called `file_name`.
fn runs_script(frames: &[String], file_name: &str) -> bool {
    php_frames(frames, &[]).iter().any(|frame| frame.in_script(file_name))
}

/// Whether a stack has a frame named `name` in the script called `file_name`.
fn has_function(frames: &[String], name: &str, file_name: &str) -> bool {
    php_frames(frames, &[]).iter().any(|frame| frame.name == name && frame.in_script(file_name))
}

/// The name of the innermost frame of PHP code of a stack.
fn innermost_php(frames: &[String]) -> Option<&str> {
    frames.iter().rev().find_map(|frame| php_frame(frame)).map(|frame| frame.name)
}

/// Fails unless every frame named `name` in `file_name` is at a line of `lines`.
fn assert_lines(stacks: &[(&[String], u64)], name: &str, file_name: &str, lines: &[RangeInclusive<u32>]) {
    for (frames, _) in stacks {
        for frame in php_frames(frames, &[]) {
            if frame.name == name && frame.in_script(file_name) {
                let line = frame.line.unwrap();
                assert!(
                    lines.iter().any(|lines| lines.contains(&line)),
                    "{name} at line {line}, outside {lines:?}"
                );
            }
        }
    }
}

/// Frames as the profiler writes them are read as PHP frames, internal functions and native
/// frames (no root needed).
#[test]
fn php_frames_are_read_from_folded_stacks() {
    let frames: Vec<String> = [
        "_start",
        "{main} (/work/tests/workloads/php/shares.php:59)",
        r"Outer\Worker::start (/work/tests/workloads/php/shares.php:16)",
        r"Outer\Worker::run (/work/tests/workloads/php/shares.php:24)",
        "array_map",
        r"Outer\Worker::{closure:Outer\Worker::run():24} (/work/tests/workloads/php/shares.php:24)",
        r"Outer\Worker::beta (/work/tests/workloads/php/shares.php:41)",
        "execute_ex",
        "usleep",
        "clock_nanosleep (/build/glibc/time/clock_nanosleep.c:48)",
        "hrtimer_nanosleep_[k]",
    ]
    .map(str::to_owned)
    .into();
    let names: Vec<&str> =
        php_frames(&frames, &[ARRAY_MAP, "usleep"]).iter().map(|frame| frame.name).collect();
    assert_eq!(
        names,
        [
            "{main}",
            r"Outer\Worker::start",
            r"Outer\Worker::run",
            "array_map",
            r"Outer\Worker::{closure:Outer\Worker::run():24}",
            r"Outer\Worker::beta",
            "usleep"
        ]
    );
    let beta = php_frame(&frames[6]).unwrap();
    assert_eq!((beta.file, beta.line), (Some("/work/tests/workloads/php/shares.php"), Some(41)));
    assert!(beta.in_script("shares.php") && !beta.in_script("deep.php"));
    assert_eq!(innermost_php(&frames), Some(r"Outer\Worker::beta"));
    let eval = php_frame("stepper (/work/ev.php(3) : eval()'d code:2)").unwrap();
    assert_eq!(
        (eval.name, eval.file, eval.line),
        ("stepper", Some("/work/ev.php(3) : eval()'d code"), Some(2))
    );
    assert_eq!(php_frame("array_map"), None);
    assert_eq!(php_frame("main (/src/main.c:12)"), None);
    let source = script("shares.php");
    for (method, _, _) in SHARES {
        let lines = function_lines(&source, method);
        assert!(lines.end() - lines.start() >= 6, "{method} at {lines:?}");
    }
    assert!(function_lines(&source, "run").contains(&line_of(&source, "function (")));
    assert!(
        function_lines(&script("deep.php"), "spin").contains(&line_of(&script("deep.php"), "$i * $i % 7"))
    );
    let php = |minor| Php {
        label: String::new(),
        path: "php".into(),
        fpm: "php-fpm".into(),
        minor,
        args: Vec::new(),
        env: Vec::new(),
    };
    assert_eq!(php(2).closure(WORKER, "run", 24), r"Outer\Worker::Outer\{closure}");
    assert_eq!(php(4).closure(WORKER, "run", 24), r"Outer\Worker::{closure:Outer\Worker::run():24}");
}

/// shares.php attached to while it runs, then started by the profiler (its PHP found from the
/// exec on): its methods' shares, lines and whole chains of callers.
#[test]
fn php_methods_get_their_shares_whole_from_main() {
    if !e2e_enabled() {
        return;
    }
    on_every_php("shares", |php, dir| {
        let (attached, started) = (dir.join("attached"), dir.join("started"));
        std::fs::create_dir_all(&attached).unwrap();
        std::fs::create_dir_all(&started).unwrap();
        let run = record_script(&attached, php, "shares.php", "4", &[]);
        assert_shares_whole_from_main(php, &run.thread("main"), "attached to with -p");
        let run = record_started(&started, php, "shares.php", "4", &[]);
        assert_shares_whole_from_main(php, &run.thread("main"), "started by the profiler");
    });
}

/// Fails unless the main thread of shares.php (recorded as `how` says) shows its methods with
/// their shares of its samples, at their lines, under the whole chain of PHP frames and internal
/// functions that calls them, from `{main}`.
fn assert_shares_whole_from_main(php: &Php, main: &[(&[String], u64)], how: &str) {
    let source = script("shares.php");
    assert_most(main, 1.0 - SLACK, &format!("samples ({how}) are in shares.php"), |frames| {
        runs_script(frames, "shares.php")
    });
    let of_script: Vec<(&[String], u64)> =
        main.iter().filter(|(frames, _)| runs_script(frames, "shares.php")).copied().collect();
    let in_script = weight(&of_script, |_| true);
    assert_most(
        &of_script,
        1.0 - SLACK,
        &format!("stacks ({how}) start at shares.php's {{main}}"),
        |frames| {
            php_frames(frames, &[])
                .first()
                .is_some_and(|outer| outer.name == "{main}" && outer.in_script("shares.php"))
        },
    );
    let run_lines = function_lines(&source, "run");
    let closure = php.closure(WORKER, "run", line_of(&source, "function ("));
    let outer = ["{main}", r"Outer\Worker::start", r"Outer\Worker::run"];
    for (method, name, share) in SHARES {
        let samples = weight(&of_script, |frames| has_function(frames, name, "shares.php"));
        let measured = 100.0 * samples as f64 / in_script as f64;
        eprintln!("{name} ({how}): {samples} samples, {measured:.1}%");
        assert!(
            (measured - share).abs() <= 5.0,
            "{name} ({how}): {measured:.1}% of the script's samples, expected {share}% ± 5"
        );
        assert_lines(&of_script, name, "shares.php", &[function_lines(&source, method)]);
        // beta is called from a closure of `run`, which array_map calls.
        let chain: Vec<&str> = match method {
            "beta" => [&outer[..], &[ARRAY_MAP, closure.as_str(), name]].concat(),
            _ => [&outer[..], &[name]].concat(),
        };
        let in_method: Vec<(&[String], u64)> =
            of_script.iter().filter(|(frames, _)| innermost_php(frames) == Some(name)).copied().collect();
        assert_most(
            &in_method,
            1.0 - SLACK,
            &format!("samples in {name} ({how}) hold {chain:?}"),
            |frames| {
                php_frames(frames, &[ARRAY_MAP]).iter().map(|frame| frame.name).eq(chain.iter().copied())
            },
        );
    }
    assert_lines(&of_script, r"Outer\Worker::start", "shares.php", &[function_lines(&source, "start")]);
    assert_lines(&of_script, r"Outer\Worker::run", "shares.php", std::slice::from_ref(&run_lines));
    assert_lines(&of_script, &closure, "shares.php", &[run_lines]);
    // Its top-level code: the constant's declaration (a statement run from the start), and
    // after the class, to the end.
    let constant = line_of(&source, "const UNIT");
    let class_end = *function_lines(&source, "gamma").end();
    let main_lines = [constant..=constant, class_end..=line_of(&source, "Worker::start((float)")];
    assert_lines(&of_script, "{main}", "shares.php", &main_lines);
}

/// 300 PHP calls deep (which PHP's VM makes without a native call each), every PHP frame is
/// there, from `{main}`.
#[test]
fn php_stacks_300_deep_are_whole() {
    if !e2e_enabled() {
        return;
    }
    // recurse(300) down to recurse(0), which calls spin.
    const RECURSE_FRAMES: usize = 301;
    on_every_php("deep", |php, dir| {
        let run = record_script(dir, php, "deep.php", "2", &[]);
        let main = run.thread("main");
        let spins = |frames: &[String]| innermost_php(frames) == Some("spin");
        assert_most(&main, 1.0 - SLACK, "samples of the main thread are in spin", spins);
        let spinning: Vec<(&[String], u64)> =
            main.iter().filter(|(frames, _)| spins(frames)).copied().collect();
        let whole = |frames: &[String]| {
            let names: Vec<&str> = php_frames(frames, &[]).iter().map(|frame| frame.name).collect();
            names.len() == RECURSE_FRAMES + 2
                && names[0] == "{main}"
                && names[1..=RECURSE_FRAMES].iter().all(|name| *name == "recurse")
        };
        assert_most(&spinning, 1.0 - SLACK, "samples in spin hold {main}, 301 recurse, spin", whole);
        let source = script("deep.php");
        assert_lines(&spinning, "spin", "deep.php", &[function_lines(&source, "spin")]);
        assert_lines(&spinning, "recurse", "deep.php", &[function_lines(&source, "recurse")]);
    });
}

/// `--off-cpu`: the blocked time of blocked.php is under the PHP function it blocked in, `nap`,
/// through the internal function that blocked, `usleep`, down to the kernel, from `{main}`.
#[test]
fn off_cpu_php_stacks_name_the_waiting_function() {
    if !e2e_enabled() {
        return;
    }
    const NAP: &str = "nap";
    const USLEEP: &str = "usleep";
    on_every_php("off-cpu", |php, dir| {
        let run = record_script(dir, php, "blocked.php", "2", &["--off-cpu"]);
        let stacks = run.thread("main");
        let waiting = |frames: &[String]| has_function(frames, NAP, "blocked.php");
        let blocked = weight(&stacks, waiting);
        assert!(blocked >= 1_500_000, "{blocked} µs of the main thread blocked in {NAP}, for 2 s");
        assert_most(&stacks, 0.8, &format!("of the main thread's blocked time is in {NAP}"), waiting);
        let in_nap: Vec<(&[String], u64)> =
            stacks.iter().filter(|(frames, _)| waiting(frames)).copied().collect();
        assert_most(
            &in_nap,
            1.0 - SLACK,
            &format!("of {NAP}'s blocks are whole from {{main}}, through {USLEEP} to the kernel"),
            |frames| {
                // The C library's usleep, under PHP's, reads the same.
                let names: Vec<&str> = php_frames(frames, &[USLEEP]).iter().map(|frame| frame.name).collect();
                names.len() >= 3
                    && names[..3] == ["{main}", NAP, USLEEP]
                    && names[3..].iter().all(|name| *name == USLEEP)
                    && frames.last().is_some_and(|leaf| leaf.ends_with("_[k]"))
            },
        );
        assert_lines(&in_nap, NAP, "blocked.php", &[function_lines(&script("blocked.php"), NAP)]);
    });
}

/// A PHP-FPM pool, its workers forked before the recording, serving requests on a local socket,
/// recorded system-wide: the workers' samples are the request's, whole from its `{main}` down to
/// its handler function.
#[test]
fn a_php_fpm_pool_serving_requests_is_named() {
    if !e2e_enabled() {
        return;
    }
    on_every_php("fpm", |php, dir| {
        let socket = dir.join("fpm.sock");
        let _ = std::fs::remove_file(&socket);
        let config = dir.join("fpm.conf");
        std::fs::write(
            &config,
            format!(
                "[global]\nerror_log = {}\ndaemonize = no\n[pool]\nlisten = {}\nuser = root\ngroup = root\n\
                 pm = static\npm.max_children = 2\n",
                dir.join("fpm.log").display(),
                socket.display()
            ),
        )
        .unwrap();
        // Its workers go with it, in its process group.
        let _pool = GroupKilledOnDrop(
            std::process::Command::new(&php.fpm)
                .args(&php.args)
                .arg("--allow-to-run-as-root")
                .arg("--nodaemonize")
                .arg("--fpm-config")
                .arg(&config)
                .process_group(0)
                .spawn()
                .expect("start PHP-FPM"),
        );
        let started = std::time::Instant::now();
        while !socket.exists() {
            assert!(
                started.elapsed().as_secs() < 10,
                "PHP-FPM made no socket: {:?}",
                std::fs::read_to_string(dir.join("fpm.log"))
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let out = dir.join("out.folded");
        let recording =
            start_profiler(&["record", "-a", "--per-pid", "-F", "499", "-o", out.to_str().unwrap()]);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let handler = script("handler.php");
        // 100 requests of 20 ms each, two at a time: a second or so of the workers' CPU.
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for _ in 0..50 {
                        let answer = fastcgi_request(&socket, &handler);
                        assert!(answer.contains("\r\n\r\n"), "PHP-FPM answered {answer:?}");
                    }
                });
            }
        });
        recording.signal(libc::SIGINT);
        let (status, _) = recording.wait();
        assert!(status.success());
        let folded = Folded::read(&out);
        let comm = php.fpm.file_name().unwrap().to_string_lossy().chars().take(15).collect::<String>();
        let workers: Vec<(&[String], u64)> = folded
            .stacks
            .iter()
            .filter(|(frames, _)| frames[0].starts_with(&format!("{comm}-")))
            .map(|(frames, n)| (&frames[1..], *n))
            .collect();
        let serving: Vec<(&[String], u64)> =
            workers.iter().filter(|(frames, _)| !php_frames(frames, &[]).is_empty()).copied().collect();
        assert!(
            weight(&serving, |_| true) >= 200,
            "only {} samples of the pool's PHP",
            weight(&serving, |_| true)
        );
        assert_most(
            &serving,
            1.0 - SLACK,
            "samples of the pool's PHP are whole from the request's {main} to handle_request",
            |frames| {
                let names: Vec<&str> = php_frames(frames, &[]).iter().map(|frame| frame.name).collect();
                names.first() == Some(&"{main}") && names.contains(&"handle_request")
            },
        );
        assert_lines(
            &serving,
            "handle_request",
            "handler.php",
            &[function_lines(&handler, "handle_request")],
        );
    });
}

/// Sends one request for `script` to the FastCGI server at `socket`, and returns what it answered
/// on its standard output (the response's headers and body).
fn fastcgi_request(socket: &std::path::Path, script: &std::path::Path) -> String {
    use std::io::{Read as _, Write as _};
    fn record(kind: u8, content: &[u8]) -> Vec<u8> {
        let mut record = vec![1, kind, 0, 1];
        record.extend_from_slice(&(content.len() as u16).to_be_bytes());
        record.extend_from_slice(&[0, 0]);
        record.extend_from_slice(content);
        record
    }
    let script = script.to_str().unwrap();
    let mut params = Vec::new();
    for (name, value) in [
        ("SCRIPT_FILENAME", script),
        ("SCRIPT_NAME", "/handler.php"),
        ("REQUEST_METHOD", "GET"),
        ("SERVER_PROTOCOL", "HTTP/1.1"),
        ("GATEWAY_INTERFACE", "CGI/1.1"),
        ("QUERY_STRING", ""),
        ("CONTENT_LENGTH", "0"),
    ] {
        params.extend_from_slice(&[name.len() as u8, value.len() as u8]);
        params.extend_from_slice(name.as_bytes());
        params.extend_from_slice(value.as_bytes());
    }
    // A responder's request: its parameters, then an empty standard input.
    let mut request = record(1, &[0, 1, 0, 0, 0, 0, 0, 0]);
    request.extend(record(4, &params));
    request.extend(record(4, &[]));
    request.extend(record(5, &[]));
    let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("connect to PHP-FPM");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    stream.write_all(&request).unwrap();
    let mut stdout = Vec::new();
    loop {
        let mut header = [0u8; 8];
        stream.read_exact(&mut header).expect("a FastCGI record");
        let len = u16::from_be_bytes([header[4], header[5]]) as usize + header[6] as usize;
        let mut content = vec![0u8; len];
        stream.read_exact(&mut content).unwrap();
        match header[1] {
            // Standard output, until the end of the request.
            6 => stdout.extend_from_slice(&content[..len - header[6] as usize]),
            3 => return String::from_utf8_lossy(&stdout).into_owned(),
            _ => {}
        }
    }
}
