//! PHP on this machine for the PHP tests: Debian stable's 8.2 CLI and Debian unstable's 8.4 CLI,
//! the workload scripts, runs of `profiler record` on them, and PHP frames in folded stacks.
use std::{
    ops::RangeInclusive,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use super::{
    ScriptRunner, block_lines, on_every, python::Recorded, record_attached_to_script,
    record_script_from_start,
};

/// Debian stable's PHP CLI, which `cargo xtask setup` installs with apt. It runs with Debian's
/// `/etc/php/8.2/cli/php.ini` and its extensions, OPcache among them (off in the CLI), as
/// installed.
const SYSTEM_PHP: &str = "/usr/bin/php8.2";

/// Debian unstable's PHP 8.4 CLI, which `cargo xtask setup` unpacks there with its suite's C
/// library (and libxml2, libsodium, PCRE2), under the repository's root.
const DEBIAN_PHP_DIR: &str = ".tools/debian-sid-php8.4";

/// One installed PHP.
#[derive(Debug)]
pub struct Php {
    /// How failures name it, and its scratch directories: `usr-bin-php8.2`,
    /// `debian-sid-php8.4`.
    pub label: String,
    pub path: PathBuf,
    /// Its PHP-FPM.
    pub fpm: PathBuf,
    /// N of 8.N.
    pub minor: u32,
    /// What goes before the script: `-n` (no php.ini) for 8.4.
    pub args: Vec<String>,
    /// What it needs in its environment to run a script.
    pub env: Vec<(String, String)>,
}

impl Php {
    /// The interpreter, with its arguments, in the environment it needs: the script and its
    /// arguments are to follow.
    pub fn command(&self) -> Command {
        self.runner().command()
    }

    /// How the tests run a script with it.
    pub fn runner(&self) -> ScriptRunner<'_> {
        ScriptRunner { program: &self.path, args: &self.args, env: &self.env }
    }

    /// The name PHP gives a closure created at line `line` of method `creator` of `class`
    /// (`Outer\Worker`), qualified by that class as frames are: `Outer\Worker::Outer\{closure}`
    /// (8.2: `{closure}` in the class's namespace), `Outer\Worker::{closure:Outer\Worker::run():24}`
    /// (8.4: its creator and line).
    pub fn closure(&self, class: &str, creator: &str, line: u32) -> String {
        if self.minor >= 4 {
            format!("{class}::{{closure:{class}::{creator}():{line}}}")
        } else {
            let namespace = class.rsplit_once('\\').map_or("", |(namespace, _)| namespace);
            let prefix = if namespace.is_empty() { String::new() } else { format!("{namespace}\\") };
            format!("{class}::{prefix}{{closure}}")
        }
    }
}

/// The PHPs the tests profile: Debian stable's 8.2 ([`SYSTEM_PHP`]) and Debian unstable's 8.4
/// (under [`DEBIAN_PHP_DIR`]). Both must be installed and run as the version their place says: a
/// test never passes for want of one.
pub fn phps() -> &'static [Php] {
    static INSTALLED: OnceLock<Vec<Php>> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let unpacked = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DEBIAN_PHP_DIR);
        let found = vec![
            Php {
                label: "usr-bin-php8.2".into(),
                path: SYSTEM_PHP.into(),
                fpm: "/usr/sbin/php-fpm8.2".into(),
                minor: 2,
                args: Vec::new(),
                env: Vec::new(),
            },
            // Its built-in ini and extension directories (`/etc/php/8.4`, `/usr/lib/php/20240924`)
            // are not on this machine: no php.ini, the extensions its CLI has built in (see
            // `ensure_debian_php` in xtask/src/setup.rs).
            Php {
                label: "debian-sid-php8.4".into(),
                path: unpacked.join("usr/bin/php8.4"),
                fpm: unpacked.join("usr/sbin/php-fpm8.4"),
                minor: 4,
                args: vec!["-n".into()],
                env: Vec::new(),
            },
        ];
        for php in &found {
            check_runs(php);
        }
        found
    })
}

/// Fails unless `php` is there, runs, and is 8.N.
fn check_runs(php: &Php) {
    for path in [&php.path, &php.fpm] {
        assert!(path.exists(), "{} is missing: run `cargo xtask setup`", path.display());
    }
    let out = php
        .command()
        .args(["-r", "echo PHP_VERSION;"])
        .output()
        .unwrap_or_else(|e| panic!("{} is installed but does not run: {e}", php.label));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.starts_with(&format!("8.{}.", php.minor)),
        "{} ({}) should be PHP 8.{}, said {said:?} ({}): run `cargo xtask setup`\n{}",
        php.label,
        php.path.display(),
        php.minor,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `scenario` on every PHP, each to its end whatever the others did, beside other tests'
/// recordings, and fails naming every PHP it failed on (each failure's message is printed as it
/// happens).
pub fn on_every_php(scenario: &str, run: impl Fn(&Php, &Path)) {
    on_every("PHP", phps(), |php| (php.label.as_str(), php.path.as_path()), scenario, run);
}

/// A workload script of `tests/workloads/php`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/php").join(name)
}

/// The lines of function or method `name` in `script` (`alpha`), from its `function NAME(` to
/// the closing brace at the same indent: where its frames' line numbers must fall.
pub fn function_lines(script: &Path, name: &str) -> RangeInclusive<u32> {
    let declaration = format!("function {name}(");
    block_lines(script, &declaration, "}", |line| {
        line.find(&declaration).is_some_and(|at| at == 0 || line[..at].ends_with(' '))
    })
}

/// The first line of `script` that holds `text` (counted from 1): where a closure is created.
pub fn line_of(script: &Path, text: &str) -> u32 {
    let source = std::fs::read_to_string(script).unwrap();
    let at = source.lines().position(|line| line.contains(text));
    at.unwrap_or_else(|| panic!("no {text:?} in {}", script.display())) as u32 + 1
}

/// A PHP frame as folded stacks name it: `NAME (PATH:LINE)` for PHP code, an internal (C)
/// function's `NAME` alone.
#[derive(Debug, PartialEq, Eq)]
pub struct PhpFrame<'a> {
    /// `Outer\Worker::alpha` (a method, static or not), `alpha` or `Outer\alpha` (a function),
    /// a closure qualified by its class (`Outer\Worker::Outer\{closure}` in 8.2,
    /// `Outer\Worker::{closure:Outer\Worker::run():24}` in 8.4), `{main}` (a script's top-level
    /// code), `array_map` (an internal function).
    pub name: &'a str,
    /// The script's path as PHP was given it; none for an internal function.
    pub file: Option<&'a str>,
    /// None for an internal function.
    pub line: Option<u32>,
}

impl PhpFrame<'_> {
    /// Whether the frame runs code of the script called `file_name`.
    pub fn in_script(&self, file_name: &str) -> bool {
        self.file.is_some_and(|file| file.rsplit('/').next() == Some(file_name))
    }
}

/// `frame` read as a frame of PHP code; `None` for a native one or an internal function. The
/// file is a `.php` path or, for `eval`'d code, `PATH(LINE) : eval()'d code`.
pub fn php_frame(frame: &str) -> Option<PhpFrame<'_>> {
    // The name may hold parentheses (8.4's closures), the path not ` (`.
    let (name, place) = frame.strip_suffix(')')?.rsplit_once(" (")?;
    let (file, line) = place.rsplit_once(':')?;
    let is_source = file.ends_with(".php") || file.ends_with(" : eval()'d code");
    let line = line.parse().ok()?;
    (is_source && !name.is_empty()).then_some(PhpFrame { name, file: Some(file), line: Some(line) })
}

/// `frame` read as an internal function called from PHP, if it is one of `internal`
/// (`array_map`): nothing in its name tells it from a native function's (and the C library's
/// `usleep` reads as PHP's).
pub fn internal_frame<'a>(frame: &'a str, internal: &[&str]) -> Option<PhpFrame<'a>> {
    internal.contains(&frame).then_some(PhpFrame { name: frame, file: None, line: None })
}

/// The PHP frames of a stack and its internal functions of `internal`, outermost first.
pub fn php_frames<'a>(frames: &'a [String], internal: &[&str]) -> Vec<PhpFrame<'a>> {
    frames.iter().filter_map(|frame| php_frame(frame).or_else(|| internal_frame(frame, internal))).collect()
}

/// `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded -p PID` of
/// `PHP [ARGS] SCRIPT` started first and running longer than the recording (see
/// [`record_attached_to_script`]). The script prints `main PID` first.
pub fn record_script(dir: &Path, php: &Php, script_name: &str, seconds: &str, extra: &[&str]) -> Recorded {
    record_attached_to_script(dir, &php.runner(), &script(script_name), seconds, extra)
}

/// [`record_script`] with the script started by the profiler, from its first instruction:
/// `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded -- PHP [ARGS]
/// SCRIPT` (see [`record_script_from_start`]).
pub fn record_started(dir: &Path, php: &Php, script_name: &str, seconds: &str, extra: &[&str]) -> Recorded {
    record_script_from_start(dir, &php.runner(), &script(script_name), seconds, extra)
}
