//! Ruby on this machine for the Ruby tests: Debian stable's 3.1 and Debian unstable's 3.3, the
//! workload scripts, runs of `profiler record` on them, and Ruby frames in folded stacks.
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

/// Debian stable's Ruby (libruby shared, its symbols exported), which `cargo xtask setup`
/// installs with apt.
const SYSTEM_RUBY: &str = "/usr/bin/ruby3.1";

/// Debian unstable's Ruby 3.3 (libruby shared and stripped, hiding what 3.1 exports), which
/// `cargo xtask setup` unpacks there with its suite's C library, under the repository's root.
const DEBIAN_RUBY_DIR: &str = ".tools/debian-sid-ruby3.3";

/// One installed Ruby.
#[derive(Debug)]
pub struct Ruby {
    /// How failures name it, and its scratch directories: `usr-bin-ruby3.1`,
    /// `debian-sid-ruby3.3`.
    pub label: String,
    pub path: PathBuf,
    /// N of 3.N.
    pub minor: u32,
    /// What it needs in its environment to run a script.
    pub env: Vec<(String, String)>,
}

impl Ruby {
    /// The interpreter, in the environment it needs: the script and its arguments are to follow.
    pub fn command(&self) -> Command {
        self.runner().command()
    }

    /// How the tests run a script with it.
    pub fn runner(&self) -> ScriptRunner<'_> {
        ScriptRunner { program: &self.path, args: &[], env: &self.env }
    }

    /// Its rdoc's launcher (a RubyGems stub that `load`s rdoc's executable), and the standard
    /// library it ships, which rdoc documents for long enough to be attached to.
    pub fn rdoc(&self) -> (PathBuf, PathBuf) {
        let bin = self.path.parent().unwrap();
        let usr = bin.parent().unwrap();
        (bin.join(format!("rdoc3.{}", self.minor)), usr.join(format!("lib/ruby/3.{}.0", self.minor)))
    }
}

/// The Rubies the tests profile: Debian stable's 3.1 ([`SYSTEM_RUBY`]) and Debian unstable's
/// 3.3 (under [`DEBIAN_RUBY_DIR`]). Both must be installed and run as the version their place
/// says: a test never passes for want of one.
pub fn rubies() -> &'static [Ruby] {
    static INSTALLED: OnceLock<Vec<Ruby>> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let unpacked = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DEBIAN_RUBY_DIR);
        // Its built-in load path is under /usr/lib, where this machine has 3.1's: its own
        // standard library is named instead, and RubyGems stays off, which would load Debian's
        // `rubygems/defaults/operating_system.rb` for 3.1 (see `ensure_debian_ruby` in
        // xtask/src/setup.rs).
        let lib = ["usr/lib/ruby/3.3.0", "usr/lib/x86_64-linux-gnu/ruby/3.3.0"]
            .map(|sub| unpacked.join(sub).display().to_string())
            .join(":");
        let found = vec![
            Ruby { label: "usr-bin-ruby3.1".into(), path: SYSTEM_RUBY.into(), minor: 1, env: Vec::new() },
            Ruby {
                label: "debian-sid-ruby3.3".into(),
                path: unpacked.join("usr/bin/ruby3.3"),
                minor: 3,
                env: vec![("RUBYLIB".into(), lib), ("RUBYOPT".into(), "--disable-gems".into())],
            },
        ];
        for ruby in &found {
            check_runs(ruby);
        }
        found
    })
}

/// Fails unless `ruby` is there, runs, and is 3.N.
fn check_runs(ruby: &Ruby) {
    assert!(ruby.path.exists(), "{} is missing: run `cargo xtask setup`", ruby.path.display());
    let out = ruby
        .command()
        .args(["-e", "print RUBY_VERSION"])
        .output()
        .unwrap_or_else(|e| panic!("{} is installed but does not run: {e}", ruby.label));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.starts_with(&format!("3.{}.", ruby.minor)),
        "{} ({}) should be Ruby 3.{}, said {said:?} ({}): run `cargo xtask setup`\n{}",
        ruby.label,
        ruby.path.display(),
        ruby.minor,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `scenario` on every Ruby, each to its end whatever the others did, beside other tests'
/// recordings, and fails naming every Ruby it failed on (each failure's message is printed as it
/// happens).
pub fn on_every_ruby(scenario: &str, run: impl Fn(&Ruby, &Path)) {
    on_every("Ruby", rubies(), |ruby| (ruby.label.as_str(), ruby.path.as_path()), scenario, run);
}

/// A workload script of `tests/workloads/ruby`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/ruby").join(name)
}

/// The lines of method `name` in `script` (`alpha`, `self.start`), from its `def` to the `end`
/// at the same indent: where its frames' line numbers must fall.
pub fn method_lines(script: &Path, name: &str) -> RangeInclusive<u32> {
    block_lines(script, &format!("def {name}"), "end", |line| {
        line.trim_start()
            .strip_prefix("def ")
            .and_then(|def| def.strip_prefix(name))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['(', ' ']))
    })
}

/// A Ruby frame as folded stacks name it: `NAME (PATH:LINE)`, or a C method's `NAME` alone.
#[derive(Debug, PartialEq, Eq)]
pub struct RubyFrame<'a> {
    /// As Ruby's `rb_profile_frame_full_label` gives it: `Outer::Worker#alpha`,
    /// `Outer::Worker.start`, `block in Outer::Worker#run`, `<main>`, `Array#each`.
    pub name: &'a str,
    /// The script's path as Ruby was given it, or `<internal:kernel>` and the like for Ruby code
    /// built into 3.3; none for a C method.
    pub file: Option<&'a str>,
    /// None for a C method.
    pub line: Option<u32>,
}

impl RubyFrame<'_> {
    /// Whether the frame runs code of the script called `file_name`.
    pub fn in_script(&self, file_name: &str) -> bool {
        self.file.is_some_and(|file| file.rsplit('/').next() == Some(file_name))
    }
}

/// `frame` read as a frame of Ruby code; `None` for a native one or a C method. The file is an
/// `.rb` path or, for Ruby code built into the interpreter, `<internal:NAME>`.
pub fn ruby_frame(frame: &str) -> Option<RubyFrame<'_>> {
    let (name, place) = frame.strip_suffix(')')?.rsplit_once(" (")?;
    let (file, line) = place.rsplit_once(':')?;
    let is_source = file.ends_with(".rb") || (file.starts_with("<internal:") && file.ends_with('>'));
    let line = line.parse().ok()?;
    (is_source && !name.is_empty()).then_some(RubyFrame { name, file: Some(file), line: Some(line) })
}

/// `frame` read as a C method called from Ruby, if it is one of `c_methods` (`Array#each`):
/// nothing in its name tells it from a native function's.
pub fn c_method_frame<'a>(frame: &'a str, c_methods: &[&str]) -> Option<RubyFrame<'a>> {
    c_methods.contains(&frame).then_some(RubyFrame { name: frame, file: None, line: None })
}

/// The Ruby frames of a stack and its C methods of `c_methods`, outermost first.
pub fn ruby_frames<'a>(frames: &'a [String], c_methods: &[&str]) -> Vec<RubyFrame<'a>> {
    frames.iter().filter_map(|frame| ruby_frame(frame).or_else(|| c_method_frame(frame, c_methods))).collect()
}

/// `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded -p PID` of
/// `RUBY SCRIPT` started first and running longer than the recording: the profiler reads
/// instruction sequences from the live process as samples arrive (see
/// [`record_attached_to_script`]).
pub fn record_script(dir: &Path, ruby: &Ruby, script_name: &str, seconds: &str, extra: &[&str]) -> Recorded {
    record_attached_to_script(dir, &ruby.runner(), &script(script_name), seconds, extra)
}

/// [`record_script`] with the script started by the profiler, from its first instruction:
/// `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded -- RUBY SCRIPT`
/// (see [`record_script_from_start`]).
pub fn record_started(dir: &Path, ruby: &Ruby, script_name: &str, seconds: &str, extra: &[&str]) -> Recorded {
    record_script_from_start(dir, &ruby.runner(), &script(script_name), seconds, extra)
}
