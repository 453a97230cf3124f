//! End to end, as root: `profiler top` watching split.c (60/30/10 between hot_a, hot_b and
//! hot_c): the plain table of `--once` when standard output is not a terminal, and the
//! full-screen view in a real terminal (tmux): the functions shown with their shares, keys that
//! sort, filter, switch to since the start, pause, split rows by thread and open a function's
//! call paths, a terminal too small, and `q` and SIGTERM giving the terminal back to the shell;
//! with `-o`, the whole session's profile written at the end, whichever way it ends; and with
//! `--off-cpu`, a wait that spans windows shared between them.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use crate::common::*;

const HOT: [(&str, f64); 3] = [("hot_a", 60.0), ("hot_b", 30.0), ("hot_c", 10.0)];

/// Shares may differ from the work's split by this many points.
const TOLERANCE: f64 = 5.0;

/// split.c's arguments: until killed, in two threads (more samples on a busy machine, where a
/// thread gets a fraction of a CPU).
const BURNERS: &[&str] = &["0", "2"];

/// Samples the full-screen view's shares are checked on (a window's may be too few for the
/// tolerance on a busy machine: since the start, they add up).
const SCREEN_SAMPLES: u64 = 600;

/// Of each leaf's samples, the share that must carry its whole chain in the profiles written.
const MIN_COMPLETE: f64 = 0.9;

fn split() -> PathBuf {
    build_workload("split.c", "split-top", "gcc", &["-O2", "-g", "-fno-omit-frame-pointer"])
}

/// The rows of a table as `profiler top` draws or prints them: self share, total share and the
/// function (the last word).
fn rows(text: &str) -> Vec<(f64, f64, String)> {
    text.lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let (own, total) = (words.first()?.parse().ok()?, words.get(1)?.parse().ok()?);
            Some((own, total, words.last()?.to_string()))
        })
        .collect()
}

/// The samples the view's or a plain table's title counts (`· 1234 samples`).
fn samples(screen: &str) -> u64 {
    let title = screen.lines().next().unwrap_or_default();
    let words: Vec<&str> = title.split_whitespace().collect();
    words.windows(2).find(|pair| pair[1] == "samples").and_then(|pair| pair[0].parse().ok()).unwrap_or(0)
}

/// The exit status the shell printed after the profiler (`top exited: [0]`; the command line
/// itself has `[$?]`), the last one on the screen.
fn exit_status(screen: &str) -> Option<String> {
    const SAID: &str = "top exited: [";
    let after = &screen[screen.rfind(SAID)? + SAID.len()..];
    let status = &after[..after.find(']')?];
    (!status.is_empty() && status.bytes().all(|b| b.is_ascii_digit())).then(|| status.to_owned())
}

/// The first rows are hot_a, hot_b and hot_c, in this order, with the work's shares.
fn assert_split(text: &str) {
    let rows = rows(text);
    assert!(rows.len() >= 3, "fewer than three rows in:\n{text}");
    for ((own, total, name), (hot, share)) in rows.iter().zip(HOT) {
        assert_eq!(name, hot, "rows out of order in:\n{text}");
        assert!((own - share).abs() <= TOLERANCE, "{hot} has {own}% self, not {share}%, in:\n{text}");
        assert!(total >= own, "{hot}'s total share is below its self share in:\n{text}");
    }
}

/// `-o DIR/top.folded -o DIR/top.pprof`: the outputs `profile_written` checks.
fn outputs(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("top.folded"), dir.join("top.pprof"))
}

/// The profile written to the [`outputs`] in `dir`: both there, with the work's split and whole
/// call chains, the pprof's samples the folded stacks'. Returns the folded stacks.
/// The shell command of `top` watching `pid` at 999 Hz, writing its [`outputs`] into `dir`.
fn top_command(pid: u32, dir: &Path) -> String {
    let (folded, pprof) = outputs(dir);
    format!(
        "{} top -p {pid} -F 999 -o {} -o {}",
        env!("CARGO_BIN_EXE_profiler"),
        folded.display(),
        pprof.display()
    )
}

fn profile_written(dir: &Path) -> Folded {
    let (folded, pprof) = outputs(dir);
    let folded = Folded::read(&folded);
    crate::common::assert_split(&folded, "worker", TOLERANCE, MIN_COMPLETE);
    let pprof: i64 = read_pprof(&pprof).sample.iter().map(|sample| sample.value[0]).sum();
    assert_eq!(pprof as u64, folded.total(), "the pprof and the folded stacks differ");
    folded
}

#[test]
fn once_prints_one_plain_table() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split(), BURNERS);
    let pid = workload.pid().to_string();
    let dir = scratch_dir("top-once");
    let (folded, pprof) = outputs(&dir);
    let (folded, pprof) = (folded.to_str().unwrap(), pprof.to_str().unwrap());
    let started = Instant::now();
    let Output { status, stdout, stderr } =
        run_bounded(&["top", "-p", &pid, "-F", "999", "--once", "-i", "2", "-o", folded, "-o", pprof]);
    assert!(status.success(), "{}", String::from_utf8_lossy(&stderr));
    let text = String::from_utf8(stdout).unwrap();
    eprintln!("{text}");
    assert_eq!(text.matches("profiler top: ").count(), 1, "not one table:\n{text}");
    let title = text.lines().next().unwrap();
    assert!(title.starts_with(&format!("profiler top: PID {pid} · last ")), "{title}");
    assert!(title.ends_with(" samples"), "{title}");
    assert_eq!(
        text.lines().nth(1).unwrap().split_whitespace().collect::<Vec<_>>(),
        ["SELF%", "TOTAL%", "KIND", "PROCESS", "FUNCTION"]
    );
    assert_split(&text);
    let hot_a = text.lines().find(|line| line.ends_with(" hot_a")).unwrap();
    assert!(hot_a.contains(&format!("  native  split-top ({pid})  ")), "{hot_a}");
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
    // The session was that one interval: its profile has the table's samples.
    assert_eq!(profile_written(&dir).total(), samples(&text), "{text}");
    let said = String::from_utf8(stderr).unwrap();
    assert!(said.contains(&format!("profiler: top: wrote {folded} (folded), {pprof} (pprof)")), "{said}");
}

/// The thread time a plain table's title counts (`· 1.0 s of thread time`), in seconds.
fn thread_seconds(title: &str) -> Option<f64> {
    let words: Vec<&str> = title.strip_suffix(" s of thread time")?.split_whitespace().collect();
    words.last()?.parse().ok()
}

/// `top --off-cpu`, a table a window, watching a process that waits 5 s in one `nanosleep`: each
/// table counts the wait only for its window's part of it (the span is carried across the
/// windows' ends, as the agent's profiles carry it), the tables add up to the wait, and the
/// profile written at the end has it once.
#[test]
fn off_cpu_tables_share_a_long_wait_between_their_windows() {
    if !e2e_enabled() {
        return;
    }
    let mut shell = Command::new("sh")
        .args(["-c", "read go; exec sleep 5"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = shell.id().to_string();
    let dir = scratch_dir("top-off-cpu");
    let (folded, tables) = (dir.join("top.folded"), dir.join("tables.txt"));
    let top = start_profiler_writing(
        &["top", "-p", &pid, "--off-cpu", "-i", "1", "-o", folded.to_str().unwrap()],
        std::fs::File::create(&tables).unwrap(),
    );
    std::io::Write::write_all(shell.stdin.as_mut().unwrap(), b"go\n").unwrap();
    assert!(shell.wait().unwrap().success());
    // The target gone, top ends by itself.
    let (status, stderr) = top.wait();
    assert!(status.success(), "{stderr}");
    let text = std::fs::read_to_string(&tables).unwrap();
    let windows: Vec<f64> =
        text.lines().filter(|line| line.starts_with("profiler top: ")).filter_map(thread_seconds).collect();
    let total: f64 = windows.iter().sum();
    assert!((total - 5.0).abs() < 0.3, "{total:.1} s in all: {windows:?}\n{text}");
    assert!(windows.len() >= 4, "spread over {windows:?}");
    assert!(windows.iter().all(|&seconds| seconds < 1.5), "at most a window's length each: {windows:?}");
    // Folded stacks weigh thread time in microseconds.
    let written = Folded::read(&folded).total() as f64 / 1e6;
    assert!((written - total).abs() < 0.1, "{written:.2} s written, {total:.2} s in the tables");
    let sleeping = text.lines().any(|line| line.contains(&format!("sleep ({pid})")));
    assert!(sleeping, "the tables name the process sleeping:\n{text}");
}

/// A tmux server of its own (its own socket), killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// A server running a shell in a 150×40 terminal, its prompt `PROMPT`.
    fn start() -> Self {
        // One per test, tests running side by side.
        static SERVERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let server = SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmux = Self { socket: format!("profiler-top-{}-{server}", std::process::id()) };
        tmux.run(&[
            "new-session",
            "-d",
            "-x",
            "150",
            "-y",
            "40",
            "env",
            "PS1=PROMPT$ ",
            "bash",
            "--norc",
            "--noprofile",
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux (`cargo xtask setup` installs it)");
        assert!(output.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    }

    fn keys(&self, keys: &[&str]) {
        self.run(&[&["send-keys"][..], keys].concat());
    }

    /// The screen, as text.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p"])
    }

    /// A pane's variable (`alternate_on`, `cursor_flag`).
    fn variable(&self, name: &str) -> String {
        self.run(&["display-message", "-p", &format!("#{{{name}}}")]).trim().to_owned()
    }

    /// Waits (up to 10 s) for the screen to satisfy `ready`, and returns it.
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "no {what} on the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).status();
    }
}

#[test]
fn full_screen_in_a_terminal() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split(), BURNERS);
    let dir = scratch_dir("top-full-screen");
    let (folded, pprof) = outputs(&dir);
    let tmux = Tmux::start();
    tmux.wait_for("prompt", |screen| screen.contains("PROMPT$"));
    let command = format!("{}; echo \"top exited: [$?]\"", top_command(workload.pid(), &dir));
    tmux.keys(&[&command, "Enter"]);
    // The first interval's table, by self.
    let screen = tmux.wait_for("table", |screen| rows(screen).len() >= 3);
    eprintln!("{screen}");
    assert_eq!(tmux.variable("alternate_on"), "1", "not on the alternate screen");
    assert!(screen.contains(&format!("profiler top · PID {} · last ", workload.pid())), "{screen}");
    assert!(screen.contains(" · by self"), "{screen}");
    // Since the start, once enough samples add up.
    tmux.keys(&["c"]);
    let screen = tmux.wait_for("samples since the start", |screen| {
        screen.contains(" · since the start ") && samples(screen) >= SCREEN_SAMPLES
    });
    assert_split(&screen);
    // Paused: the figures stay.
    tmux.keys(&["Space"]);
    let paused = tmux.wait_for("pause", |screen| screen.contains(" · PAUSED"));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(tmux.screen(), paused, "the view changed while paused");
    tmux.keys(&["Space"]);
    tmux.wait_for("resumed", |screen| !screen.contains(" · PAUSED") && samples(screen) > samples(&paused));
    // Too small, then large enough again.
    tmux.run(&["resize-window", "-x", "40", "-y", "10"]);
    tmux.wait_for("too small", |screen| screen.contains("too small"));
    tmux.run(&["resize-window", "-x", "150", "-y", "40"]);
    tmux.wait_for("table again", |screen| rows(screen).len() >= 3);
    // Sorted by total: the callers of all three first.
    tmux.keys(&["t"]);
    let screen = tmux.wait_for("sort by total", |screen| screen.contains(" · by total"));
    let by_total = rows(&screen);
    assert!(by_total.iter().take(3).all(|(_, total, _)| *total > 90.0), "{screen}");
    assert!(by_total.windows(2).all(|pair| pair[0].1 >= pair[1].1), "not sorted by total:\n{screen}");
    // Filtered: only hot_b.
    tmux.keys(&["s", "/", "hot_b", "Enter"]);
    let screen = tmux.wait_for("filter", |screen| screen.contains("/ filter [hot_b]"));
    let filtered: Vec<String> = rows(&screen).into_iter().map(|(_, _, name)| name).collect();
    assert_eq!(filtered, ["hot_b"], "{screen}");
    tmux.keys(&["Escape"]);
    tmux.wait_for("no filter", |screen| !screen.contains("[hot_b]") && rows(screen).len() >= 3);
    assert_rows_by_thread(&tmux, workload.pid());
    assert_call_paths_of_hot_a(&tmux);
    // Nothing written before the end.
    assert!(!folded.exists() && !pprof.exists(), "outputs written before the end");
    let before_q = samples(&tmux.screen());
    // q: the profiler exits, the shell gets the terminal back as it was.
    tmux.keys(&["q"]);
    let screen = tmux.wait_for("exit", |screen| exit_status(screen).is_some());
    eprintln!("{screen}");
    assert_eq!(exit_status(&screen).as_deref(), Some("0"), "{screen}");
    assert!(screen.contains("profiler: top: wrote "), "{screen}");
    // The whole session: at least what the view counted since the start.
    let written = profile_written(&dir).total();
    assert!(written >= before_q, "{written} samples written, {before_q} counted on the screen");
    assert!(screen.trim_end().ends_with("PROMPT$"), "no prompt after the exit:\n{screen}");
    assert_eq!(tmux.variable("alternate_on"), "0", "still on the alternate screen");
    assert_eq!(tmux.variable("cursor_flag"), "1", "the cursor is hidden");
    // The line discipline is back: what is typed is echoed and run.
    tmux.keys(&["clear; echo typed-$((6*7))", "Enter"]);
    tmux.wait_for("echo", |screen| screen.contains("typed-42"));
    // SIGTERM gives the terminal back too, and writes the outputs.
    std::fs::remove_file(&folded).unwrap();
    std::fs::remove_file(&pprof).unwrap();
    tmux.keys(&[&command, "Enter"]);
    tmux.wait_for("table", |screen| rows(screen).len() >= 3);
    let shell = tmux.variable("pane_pid");
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let profiler: i32 = children.split_whitespace().next().expect("the profiler runs").parse().unwrap();
    // SAFETY: kill(2) on the profiler the shell runs.
    assert_eq!(unsafe { libc::kill(profiler, libc::SIGTERM) }, 0);
    let screen = tmux.wait_for("exit", |screen| exit_status(screen).is_some());
    assert_eq!(exit_status(&screen).as_deref(), Some("0"), "{screen}");
    assert!(screen.trim_end().ends_with("PROMPT$"), "no prompt after the exit:\n{screen}");
    assert_eq!(tmux.variable("alternate_on"), "0", "still on the alternate screen after SIGTERM");
    assert_eq!(tmux.variable("cursor_flag"), "1", "the cursor is hidden after SIGTERM");
    profile_written(&dir);
}

/// The threads (`pid/tid`) shown in the process column of `hot_a`'s rows.
fn threads_of_hot_a(screen: &str) -> Vec<String> {
    screen
        .lines()
        .filter(|line| line.trim_end().ends_with(" hot_a"))
        .filter_map(|line| Some(line[line.find('(')? + 1..line.find(')')?].to_owned()))
        .collect()
}

/// `h`: a row per function and thread, hot_a's in each burner thread (not the main thread, which
/// only waits), their self shares adding up to hot_a's; `h` again: a row per function.
fn assert_rows_by_thread(tmux: &Tmux, pid: u32) {
    tmux.keys(&["h"]);
    let screen = tmux
        .wait_for("threads", |screen| screen.contains(" · threads") && threads_of_hot_a(screen).len() == 2);
    eprintln!("{screen}");
    let tasks: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|task| format!("{pid}/{}", task.unwrap().file_name().to_string_lossy()))
        .collect();
    let threads = threads_of_hot_a(&screen);
    assert_ne!(threads[0], threads[1], "{screen}");
    for thread in &threads {
        assert!(
            tasks.contains(thread) && *thread != format!("{pid}/{pid}"),
            "{thread} is no burner of {tasks:?}"
        );
    }
    let shares: f64 =
        rows(&screen).iter().filter(|(_, _, name)| name == "hot_a").map(|(own, _, _)| own).sum();
    assert!((shares - HOT[0].1).abs() <= TOLERANCE, "hot_a's threads have {shares}%:\n{screen}");
    tmux.keys(&["h"]);
    let screen = tmux.wait_for("processes", |screen| !screen.contains(" · threads"));
    assert_eq!(threads_of_hot_a(&screen), [pid.to_string()], "{screen}");
}

/// ↓ ↑ Enter on the first row (hot_a, by self): the tree of its call paths, from the burner
/// threads' `worker` down to it, each a level deeper, with hot_a's share; Esc: the table.
fn assert_call_paths_of_hot_a(tmux: &Tmux) {
    tmux.keys(&["Down", "Up", "Enter"]);
    let screen = tmux.wait_for("call paths", |screen| screen.contains("call paths through hot_a (native)"));
    eprintln!("{screen}");
    let chain = ["worker", "burn", "run_round", "a_outer", "a_middle", "a_inner", "hot_a"];
    let lines: Vec<&str> = screen.lines().collect();
    let start =
        lines.iter().position(|line| line.trim_end().ends_with(" worker")).expect("worker in the tree");
    let path = &lines[start..start + chain.len()];
    let indent = |line: &str| line.find(char::is_alphabetic).unwrap();
    for (pair, names) in path.windows(2).zip(chain.windows(2)) {
        assert!(pair[0].trim_end().ends_with(&format!(" {}", names[0])), "no {} in:\n{screen}", names[0]);
        assert!(indent(pair[1]) > indent(pair[0]), "{} is not under {}:\n{screen}", names[1], names[0]);
    }
    let hot_a = path[chain.len() - 1];
    assert!(hot_a.contains("hot_a  ◀"), "the tree's function is not marked:\n{screen}");
    let share: f64 = hot_a.split_whitespace().next().unwrap().parse().unwrap();
    assert!((share - HOT[0].1).abs() <= TOLERANCE, "hot_a has {share}% in its tree:\n{screen}");
    tmux.keys(&["Escape"]);
    tmux.wait_for("the table again", |screen| {
        rows(screen).len() >= 3 && !screen.contains("call paths through")
    });
}

/// A terminal that goes away (its tmux server killed, as a closed window or a dropped SSH
/// session) ends `top` as `q` does: it exits, its outputs written. (crossterm's own wait spins
/// for ever on a terminal that hung up: the view waits on the terminal itself.)
#[test]
fn a_terminal_that_hangs_up_ends_top_with_its_outputs() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split(), BURNERS);
    let dir = scratch_dir("top-hang-up");
    let (folded, _) = outputs(&dir);
    let _ = std::fs::remove_file(&folded);
    let tmux = Tmux::start();
    let command = top_command(workload.pid(), &dir);
    tmux.keys(&[&command, "Enter"]);
    tmux.wait_for("the table", |screen| screen.contains(" hot_a"));
    let top = running_top(&folded).expect("top runs");
    drop(tmux);
    let started = Instant::now();
    while Path::new(&format!("/proc/{top}")).exists() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!Path::new(&format!("/proc/{top}")).exists(), "top still runs with its terminal gone");
    assert!(profile_written(&dir).total() > 0);
}

/// The pid of the `profiler top` writing `output`.
fn running_top(output: &Path) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        (cmdline.starts_with(env!("CARGO_BIN_EXE_profiler")) && cmdline.contains(output.to_str()?))
            .then_some(pid)
    })
}
