//! Perl on this machine for the Perl tests: Debian stable's 5.36 and Debian unstable's 5.42, the
//! workload scripts, runs of `profiler record` on them, and Perl frames in folded stacks.
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

/// Debian stable's Perl (the interpreter linked into the executable, which exports the
/// `Perl_pp_*` functions), in `perl-base`, with the rest of its standard library that `cargo
/// xtask setup` installs with apt.
const SYSTEM_PERL: &str = "/usr/bin/perl";

/// Debian unstable's Perl 5.42 (linked into the executable too, stripped, hiding the `Perl_pp_*`
/// functions), which `cargo xtask setup` unpacks there with its suite's C library, under the
/// repository's root.
const DEBIAN_PERL_DIR: &str = ".tools/debian-sid-perl5.42";

/// One installed Perl.
#[derive(Debug)]
pub struct Perl {
    /// How failures name it, and its scratch directories: `usr-bin-perl5.36`,
    /// `debian-sid-perl5.42`.
    pub label: String,
    pub path: PathBuf,
    /// N of 5.N.
    pub minor: u32,
    /// What it needs in its environment to run a script.
    pub env: Vec<(String, String)>,
}

impl Perl {
    /// The interpreter, in the environment it needs: the script and its arguments are to follow.
    pub fn command(&self) -> Command {
        self.runner().command()
    }

    /// How the tests run a script with it.
    pub fn runner(&self) -> ScriptRunner<'_> {
        ScriptRunner { program: &self.path, args: &[], env: &self.env }
    }

    /// Its `json_pp` (JSON::PP's command, packaged with it beside its `perl`).
    pub fn json_pp(&self) -> PathBuf {
        self.path.with_file_name("json_pp")
    }
}

/// The Perls the tests profile: Debian stable's 5.36 ([`SYSTEM_PERL`]) and Debian unstable's
/// 5.42 (under [`DEBIAN_PERL_DIR`]). Both must be installed and run as the version their place
/// says: a test never passes for want of one.
pub fn perls() -> &'static [Perl] {
    static INSTALLED: OnceLock<Vec<Perl>> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let unpacked = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DEBIAN_PERL_DIR);
        // Its built-in @INC is under /usr, where this machine has 5.36's: its own standard
        // library is named instead, by the links Debian's @INC names (`5.42` to `5.42.3`; see
        // `ensure_debian_perl` in xtask/src/setup.rs).
        let lib = [
            "usr/lib/x86_64-linux-gnu/perl/5.42",
            "usr/share/perl/5.42",
            "usr/lib/x86_64-linux-gnu/perl-base",
        ]
        .map(|sub| unpacked.join(sub).display().to_string())
        .join(":");
        let found = vec![
            Perl { label: "usr-bin-perl5.36".into(), path: SYSTEM_PERL.into(), minor: 36, env: Vec::new() },
            Perl {
                label: "debian-sid-perl5.42".into(),
                path: unpacked.join("usr/bin/perl"),
                minor: 42,
                env: vec![("PERL5LIB".into(), lib)],
            },
        ];
        for perl in &found {
            check_runs(perl);
        }
        found
    })
}

/// Fails unless `perl` is there, runs, and is 5.N.
fn check_runs(perl: &Perl) {
    assert!(perl.path.exists(), "{} is missing: run `cargo xtask setup`", perl.path.display());
    let out = perl
        .command()
        .args(["-MTime::HiRes", "-e", r#"printf "%vd", $^V"#])
        .output()
        .unwrap_or_else(|e| panic!("{} is installed but does not run: {e}", perl.label));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.starts_with(&format!("5.{}.", perl.minor)),
        "{} ({}) should be Perl 5.{} with Time::HiRes, said {said:?} ({}): run `cargo xtask setup`\n{}",
        perl.label,
        perl.path.display(),
        perl.minor,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `scenario` on every Perl, each to its end whatever the others did, beside other tests'
/// recordings, and fails naming every Perl it failed on (each failure's message is printed as it
/// happens).
pub fn on_every_perl(scenario: &str, run: impl Fn(&Perl, &Path)) {
    on_every("Perl", perls(), |perl| (perl.label.as_str(), perl.path.as_path()), scenario, run);
}

/// A workload script of `tests/workloads/perl`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/perl").join(name)
}

/// The lines of sub `name` in `script` (`alpha`), from its `sub NAME {` to the closing brace at
/// the same indent: where its frames' line numbers must fall.
pub fn sub_lines(script: &Path, name: &str) -> RangeInclusive<u32> {
    let declaration = format!("sub {name} {{");
    block_lines(script, &declaration, "}", |line| line.trim_start() == declaration)
}

/// The first line of `script` that holds `text` (counted from 1): where a sub is called from.
pub fn line_of(script: &Path, text: &str) -> u32 {
    let source = std::fs::read_to_string(script).unwrap();
    let at = source.lines().position(|line| line.contains(text));
    at.unwrap_or_else(|| panic!("no {text:?} in {}", script.display())) as u32 + 1
}

/// A Perl frame as folded stacks name it: `NAME (PATH:LINE)`.
#[derive(Debug, PartialEq, Eq)]
pub struct PerlFrame<'a> {
    /// As Perl's `caller` gives it: a sub's fully qualified name (`Outer::Worker::alpha`,
    /// `main::nap`, `Outer::Worker::__ANON__` for an anonymous sub), `(eval)` for an `eval {}`
    /// or `eval ""`, `require Foo/Bar.pm` for a run-time `require`; `<main>` for the main
    /// program's top-level code.
    pub name: &'a str,
    /// The file as Perl was given it, or `(eval N)` for the code of a string `eval`.
    pub file: &'a str,
    /// The line of the statement it runs.
    pub line: u32,
}

impl PerlFrame<'_> {
    /// Whether the frame runs code of the script called `file_name`.
    pub fn in_script(&self, file_name: &str) -> bool {
        self.file.rsplit('/').next() == Some(file_name)
    }
}

/// `frame` read as a frame of Perl code; `None` for a native one (`Perl_pp_sort`, the C
/// library's `select`). The file is a `.pl` or `.pm` path, for the code of a string `eval`
/// `(eval N)`, or any path for a frame named as only Perl's are (`<main>`, `(eval)`, `require …`,
/// `Package::sub`: a script such as `/usr/bin/json_pp` has no suffix).
pub fn perl_frame(frame: &str) -> Option<PerlFrame<'_>> {
    let (name, place) = frame.strip_suffix(')')?.rsplit_once(" (")?;
    let (file, line) = place.rsplit_once(':')?;
    let is_source = file.ends_with(".pl") || file.ends_with(".pm") || file.starts_with("(eval");
    let is_perl_name =
        name == "<main>" || name == "(eval)" || name.starts_with("require ") || name.contains("::");
    ((is_source || is_perl_name) && !name.is_empty()).then_some(PerlFrame {
        name,
        file,
        line: line.parse().ok()?,
    })
}

/// The Perl frames of a stack, outermost first.
pub fn perl_frames(frames: &[String]) -> Vec<PerlFrame<'_>> {
    frames.iter().filter_map(|frame| perl_frame(frame)).collect()
}

/// `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded -p PID` of
/// `PERL SCRIPT` started first and running longer than the recording (see
/// [`record_attached_to_script`]). The script prints `main PID` first.
pub fn record_script(dir: &Path, perl: &Perl, script_name: &str, seconds: &str, extra: &[&str]) -> Recorded {
    record_attached_to_script(dir, &perl.runner(), &script(script_name), seconds, extra)
}

/// [`record_script`] with the script started by the profiler, from its first instruction:
/// `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded -- PERL SCRIPT`
/// (see [`record_script_from_start`]).
pub fn record_started(dir: &Path, perl: &Perl, script_name: &str, seconds: &str, extra: &[&str]) -> Recorded {
    record_script_from_start(dir, &perl.runner(), &script(script_name), seconds, extra)
}
